// Command bench measures the added cost per event of the tools against
// their floor (an empty program on the same tracepoint) and their peers, in
// one interleaved run, and prints a Markdown table. Run it as root through
// `make bench`.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/tools"
)

var (
	rounds = flag.Int("rounds", 15, "interleaved rounds; each config is measured once per round")
	writes = flag.Int("writes", 300000, "write(2) calls per measurement (a third as many datagrams)")
	bin    = flag.String("bin", "bin", "directory of the built tools")
)

// tracer is one configuration: start attaches it, the returned func detaches.
type tracer struct {
	name  string
	start func() (stop func(), err error)
}

func main() {
	flag.Parse()
	// One thread for the workload: no migration between measurements.
	runtime.LockOSThread()
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// suite is one event source: a workload that makes exactly one event per
// operation, and the tracers to compare on it.
type suite struct {
	title   string
	unit    string // "write", "drop"
	ops     int
	setup   func() (op func(), done func(), err error)
	tracers []tracer
}

func run() error {
	if err := tools.CheckPrivileges("bench"); err != nil {
		return err
	}
	bpftrace, err := exec.LookPath("bpftrace")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: bpftrace not found: its rows are left out")
	}
	peer := func(name, script string) []tracer {
		if bpftrace == "" {
			return nil
		}
		return []tracer{{name, toolProcess(bpftrace, []string{"-e", script})}}
	}
	suites := []suite{
		{
			title: "write(2) of 64 bytes to /dev/null", unit: "write", ops: *writes, setup: devNullWrites,
			tracers: append([]tracer{
				{"untraced", untraced},
				{"empty program", emptyProgram("syscalls", "sys_enter_write")},
				{"writesize", toolProcess(*bin+"/writesize", nil)},
			}, peer("bpftrace hist()", "tracepoint:syscalls:sys_enter_write { @ = hist(args->count); }")...),
		},
		{
			title: "UDP datagram to a closed port on 127.0.0.1 (one kfree_skb each)", unit: "drop", ops: *writes / 3, setup: udpDrops,
			tracers: append([]tracer{
				{"untraced", untraced},
				{"empty program", emptyProgram("skb", "kfree_skb")},
				{"dropmon", toolProcess(*bin+"/dropmon", nil)},
			}, peer("bpftrace count()", "tracepoint:skb:kfree_skb { @[args->location] = count(); }")...),
		},
	}
	fmt.Printf("%d interleaved rounds, medians, %s\n", *rounds, time.Now().UTC().Format("2006-01-02"))
	for _, st := range suites {
		if err := measure(st); err != nil {
			return err
		}
	}
	return startup()
}

func untraced() (func(), error) { return func() {}, nil }

func measure(st suite) error {
	op, done, err := st.setup()
	if err != nil {
		return err
	}
	defer done()
	samples := make([][]float64, len(st.tracers))
	for r := 0; r < *rounds; r++ {
		// Rotate the order each round so that no config always runs first.
		for i := range st.tracers {
			k := (i + r) % len(st.tracers)
			stop, err := st.tracers[k].start()
			if err != nil {
				return fmt.Errorf("%s: %w", st.tracers[k].name, err)
			}
			start := time.Now()
			for n := 0; n < st.ops; n++ {
				op()
			}
			samples[k] = append(samples[k], float64(time.Since(start).Nanoseconds())/float64(st.ops))
			stop()
		}
	}
	// Each round's untraced run is the baseline of that round's others:
	// medians of paired differences cancel drift between rounds.
	added := func(k int) float64 {
		d := make([]float64, len(samples[k]))
		for r := range d {
			d[r] = samples[k][r] - samples[0][r]
		}
		return median(d)
	}
	floor := added(1)
	fmt.Printf("\n%s, %d per measurement\n\n", st.title, st.ops)
	fmt.Printf("| tracer | ns per %s | added ns per %s | added vs empty program |\n", st.unit, st.unit)
	fmt.Println("| --- | ---: | ---: | ---: |")
	for k, t := range st.tracers {
		if k == 0 {
			fmt.Printf("| %s | %.0f | - | - |\n", t.name, median(samples[k]))
			continue
		}
		fmt.Printf("| %s | %.0f | %.0f | %.2fx |\n", t.name, median(samples[k]), added(k), added(k)/floor)
	}
	return nil
}

func devNullWrites() (func(), func(), error) {
	fd, err := unix.Open("/dev/null", unix.O_WRONLY, 0)
	if err != nil {
		return nil, nil, err
	}
	buf := make([]byte, 64)
	return func() { unix.Write(fd, buf) }, func() { unix.Close(fd) }, nil
}

// udpDrops sends datagrams to the discard port of 127.0.0.1, where nothing
// listens: the kernel drops each one in __udp4_lib_rcv (NO_SOCKET).
func udpDrops() (func(), func(), error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		return nil, nil, err
	}
	to := &unix.SockaddrInet4{Port: 9, Addr: [4]byte{127, 0, 0, 1}}
	msg := []byte("bench")
	return func() { unix.Sendto(fd, msg, 0, to) }, func() { unix.Close(fd) }, nil
}

// emptyProgram attaches "return 0" to the same tracepoint: the floor that
// any program there costs.
func emptyProgram(group, name string) func() (func(), error) {
	return func() (func(), error) {
		spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{
			"empty": {Type: ebpf.TracePoint, License: "GPL", Instructions: asm.Return("exit", 0)},
		}}
		coll, err := tools.Load(spec)
		if err != nil {
			return nil, err
		}
		att, err := tools.AttachTracepoint(coll.Programs["empty"], group, name)
		if err != nil {
			coll.Close()
			return nil, err
		}
		return func() { att.Close(); coll.Close() }, nil
	}
}

// toolProcess starts a tracer process and waits until it has attached: the
// toolkit's tools say "Tracing" on stderr, bpftrace "Attaching".
func toolProcess(path string, args []string) func() (func(), error) {
	return func() (func(), error) {
		cmd := exec.Command(path, args...)
		stderr, err := cmd.StderrPipe()
		if err != nil {
			return nil, err
		}
		// bpftrace prints "Attaching" on stdout.
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		ready := make(chan struct{}, 2)
		watch := func(r io.Reader) {
			s := bufio.NewScanner(r)
			for s.Scan() {
				if strings.HasPrefix(s.Text(), "Tracing") || strings.HasPrefix(s.Text(), "Attaching") {
					ready <- struct{}{}
				}
			}
			// Drain until exit: a tracer blocked on a full pipe would stall.
		}
		go watch(stderr)
		go watch(stdout)
		select {
		case <-ready:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			return nil, fmt.Errorf("%s did not attach within 30 s", path)
		}
		// bpftrace says "Attaching" just before it attaches.
		time.Sleep(time.Second)
		return func() {
			// bpftrace 0.17 can miss a SIGINT that lands while it attaches:
			// ask again, then insist.
			exited := make(chan struct{})
			go func() { cmd.Wait(); close(exited) }()
			for i := 0; ; i++ {
				cmd.Process.Signal(syscall.SIGINT)
				select {
				case <-exited:
					return
				case <-time.After(2 * time.Second):
				}
				if i == 2 {
					fmt.Fprintf(os.Stderr, "bench: %s ignored SIGINT, killing it\n", path)
					cmd.Process.Kill()
					<-exited
					return
				}
			}
		}, nil
	}
}

// startup reports writesize's CPU time and peak RSS from its start to its
// first report (an interval of 10 ms, one report).
func startup() error {
	var cpu []float64
	var rss []int64
	for i := 0; i < 5; i++ {
		cmd := exec.Command(*bin+"/writesize", "0.01", "1")
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("writesize startup run: %w", err)
		}
		ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
		cpu = append(cpu, float64(time.Duration(ru.Utime.Nano()+ru.Stime.Nano()))/1e6)
		rss = append(rss, ru.Maxrss)
	}
	sort.Slice(rss, func(i, j int) bool { return rss[i] < rss[j] })
	fmt.Printf("\nwritesize from start to first report (median of 5): %.1f ms CPU, %.1f MiB peak RSS\n", median(cpu), float64(rss[len(rss)/2])/1024)
	return nil
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
