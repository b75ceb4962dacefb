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
	rounds = flag.Int("rounds", 7, "interleaved rounds; each config is measured once per round")
	writes = flag.Int("writes", 300000, "write(2) calls per measurement")
	bin    = flag.String("bin", "bin", "directory of the built tools")
)

// tracer is one configuration: start attaches it, the returned func detaches.
type tracer struct {
	name  string
	start func() (stop func(), err error)
}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	if err := tools.CheckPrivileges("bench"); err != nil {
		return err
	}
	tracers := []tracer{
		{"untraced", func() (func(), error) { return func() {}, nil }},
		{"empty program", emptyProgram},
		{"writesize", toolProcess(*bin+"/writesize", nil)},
	}
	if path, err := exec.LookPath("bpftrace"); err == nil {
		tracers = append(tracers, tracer{"bpftrace hist()", toolProcess(path,
			[]string{"-e", "tracepoint:syscalls:sys_enter_write { @ = hist(args->count); }"})})
	} else {
		fmt.Fprintln(os.Stderr, "bench: bpftrace not found: its row is left out")
	}

	fd, err := unix.Open("/dev/null", unix.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	buf := make([]byte, 64)
	samples := make([][]float64, len(tracers))
	for r := 0; r < *rounds; r++ {
		// Rotate the order each round so that no config always runs first.
		for i := range tracers {
			k := (i + r) % len(tracers)
			stop, err := tracers[k].start()
			if err != nil {
				return fmt.Errorf("%s: %w", tracers[k].name, err)
			}
			start := time.Now()
			for n := 0; n < *writes; n++ {
				unix.Write(fd, buf)
			}
			samples[k] = append(samples[k], float64(time.Since(start).Nanoseconds())/float64(*writes))
			stop()
		}
	}
	base := median(samples[0])
	floor := median(samples[1]) - base
	fmt.Printf("write(2) of 64 bytes to /dev/null, %d rounds x %d writes, medians (%s)\n\n", *rounds, *writes, time.Now().UTC().Format("2006-01-02"))
	fmt.Println("| tracer | ns per write | added ns per write | added vs empty program |")
	fmt.Println("| --- | ---: | ---: | ---: |")
	for k, t := range tracers {
		m := median(samples[k])
		if k == 0 {
			fmt.Printf("| %s | %.0f | - | - |\n", t.name, m)
			continue
		}
		fmt.Printf("| %s | %.0f | %.0f | %.2fx |\n", t.name, m, m-base, (m-base)/floor)
	}
	return startup()
}

// emptyProgram attaches "return 0" to the same tracepoint: the floor that
// any program there costs.
func emptyProgram() (func(), error) {
	spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{
		"empty": {Type: ebpf.TracePoint, License: "GPL", Instructions: asm.Return("exit", 0)},
	}}
	coll, err := tools.Load(spec)
	if err != nil {
		return nil, err
	}
	att, err := tools.AttachTracepoint(coll.Programs["empty"], "syscalls", "sys_enter_write")
	if err != nil {
		coll.Close()
		return nil, err
	}
	return func() { att.Close(); coll.Close() }, nil
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
		time.Sleep(300 * time.Millisecond)
		return func() {
			cmd.Process.Signal(syscall.SIGINT)
			cmd.Wait()
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
