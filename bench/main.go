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
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/kernel"
	"github.com/tracekit/tracekit/loader"
	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/tracefs"
	"github.com/tracekit/tracekit/uprobe"
)

var (
	rounds = flag.Int("rounds", 15, "interleaved rounds; each config is measured once per round")
	writes = flag.Int("writes", 300000, "write(2) calls per measurement (a third as many datagrams)")
	bin    = flag.String("bin", "bin", "directory of the built tools")
	fxDir  = flag.String("fixtures", ".cache/bench-fx", "directory of the built USDT fixtures (filter/testdata/usdt/build.sh)")
	only   = flag.String("only", "", "run only the suites whose unit is this: write, getppid, open, drop, IO, hit, call, kcall, stream, sample or switch; language (bpftrace's language: ours beside bpftrace), or depth (profile's cost per frame), tables (profile's tables of python3.11 and of a libLLVM process), fleet (50 processes), soak (profile's memory over minutes: only when asked), glob or startup")
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
	err := run()
	if err == nil {
		err = writeResults()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// suite is one event source: a workload that makes exactly one event per
// operation, and the tracers to compare on it.
type suite struct {
	title string
	unit  string // "write", "drop"
	ops   int
	setup func() (op func(), done func(), err error)
	// external, instead of setup, runs a process that makes ops events
	// and returns its CPU time in ns: for events only a program built for
	// them has (a USDT probe).
	external func() (int64, error)
	tracers  []tracer
}

func run() error {
	if err := kernel.CheckPrivileges("bench"); err != nil {
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
	// The kernel times every BPF program run while this is open (5.8+).
	if stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME); err == nil {
		defer stats.Close()
	} else {
		fmt.Fprintf(os.Stderr, "bench: no bpf_stats (%v): the BPF columns read 0\n", err)
	}
	suites := []suite{
		{
			title: "write(2) of 64 bytes to /dev/null", unit: "write", ops: *writes, setup: devNullWrites,
			tracers: append([]tracer{
				{"untraced", untraced},
				{"empty program", emptyProgram("syscalls:sys_enter_write")},
				{"empty raw tracepoint (sys_enter: every syscall)", emptyHook("raw", "sys_enter")},
				{"empty BTF tracepoint (sys_enter: every syscall)", emptyHook("btf", "sys_enter")},
				{"writesize (auto: perf)", toolProcess(*bin+"/writesize", nil)},
				{"writesize --attach=raw", toolProcess(*bin+"/writesize", []string{"--attach=raw"})},
				{"filter --hist count", toolProcess(*bin+"/filter", []string{"--hist", "count", "syscalls:sys_enter_write"})},
				{"bpf_get_stackid alone (perf)", stackidOnly("syscalls:sys_enter_write")},
				{"filter --count-by kstack (perf)", toolProcess(*bin+"/filter", []string{"--attach=perf", "--count-by", "kstack", "syscalls:sys_enter_write"})},
				{"filter --sum count --count-by comm (perf)", toolProcess(*bin+"/filter", []string{"--attach=perf", "--sum", "count", "--count-by", "comm", "syscalls:sys_enter_write"})},
				{"filter --hist 'count - 28' (perf)", toolProcess(*bin+"/filter", []string{"--attach=perf", "--hist", "count - 28", "syscalls:sys_enter_write"})},
			}, append(append(append(peer("bpftrace hist()", "tracepoint:syscalls:sys_enter_write { @ = hist(args->count); }"),
				peer("bpftrace @[kstack] = count()", "tracepoint:syscalls:sys_enter_write { @[kstack] = count(); }")...),
				peer("bpftrace @[comm] = sum(args->count)", "tracepoint:syscalls:sys_enter_write { @[comm] = sum(args->count); }")...),
				peer("bpftrace hist(args->count - 28)", "tracepoint:syscalls:sys_enter_write { @ = hist(args->count - 28); }")...)...),
		},
		{
			// What a hook on the write path costs the rest of the machine:
			// any syscall tracepoint puts every syscall on the traced path,
			// and a raw sys_enter program runs for every one.
			title: "getppid(2), a syscall writesize does not count", unit: "getppid", ops: *writes,
			setup: func() (func(), func(), error) { return func() { unix.Getppid() }, func() {}, nil },
			tracers: []tracer{
				{"untraced", untraced},
				{"empty program on sys_enter_write", emptyProgram("syscalls:sys_enter_write")},
				{"empty raw tracepoint on sys_enter", emptyHook("raw", "sys_enter")},
				{"writesize (auto: perf)", toolProcess(*bin+"/writesize", nil)},
				{"writesize --attach=raw", toolProcess(*bin+"/writesize", []string{"--attach=raw"})},
			},
		},
		{
			// Three comparisons, one of them a user string read from the
			// syscall's argument; every one holds, so all of them run.
			title: "openat(2) and close(2) of a file, a predicate of three comparisons (one a user string) that holds", unit: "open", ops: *writes / 3, setup: opens,
			tracers: append([]tracer{
				{"untraced", untraced},
				{"empty program", emptyProgram("syscalls:sys_enter_openat")},
				{"filter --count", toolProcess(*bin+"/filter", []string{"--count", "syscalls:sys_enter_openat", "--where",
					fmt.Sprintf(`filename == "%s" && flags == 0 && mode == 0`, openPath)})},
			}, peer("bpftrace count()", fmt.Sprintf(`tracepoint:syscalls:sys_enter_openat /str(args->filename) == "%s" && args->flags == 0 && args->mode == 0/ { @ = count(); }`, openPath))...),
		},
		{
			title: "UDP datagram to a closed port on 127.0.0.1 (one kfree_skb each)", unit: "drop", ops: *writes / 3, setup: udpDrops,
			tracers: append([]tracer{
				{"untraced", untraced},
				{"empty program", emptyProgram("skb:kfree_skb")},
				{"empty raw tracepoint", emptyHook("raw", "kfree_skb")},
				{"empty BTF tracepoint", emptyHook("btf", "kfree_skb")},
				{"dropmon (auto: raw; btf with --protocol)", toolProcess(*bin+"/dropmon", nil)},
				{"dropmon --attach=raw", toolProcess(*bin+"/dropmon", []string{"--attach=raw"})},
				{"dropmon --attach=perf", toolProcess(*bin+"/dropmon", []string{"--attach=perf"})},
			}, peer("bpftrace count()", "tracepoint:skb:kfree_skb { @[args->location] = count(); }")...),
		},
	}
	if dev, cleanup, err := loopDevice(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: no loop device (%v): the block IO suite is left out\n", err)
	} else {
		defer cleanup()
		block := []tracer{
			{"untraced", untraced},
			{"empty program", emptyProgram("block:block_rq_issue", "block:block_rq_complete")},
			{"empty raw tracepoint", emptyHook("raw", "block_rq_issue", "block_rq_complete")},
			{"empty BTF tracepoint", emptyHook("btf", "block_rq_issue", "block_rq_complete")},
			// All disks, as biolatency runs: auto is the raw tracepoint,
			// which needs no BTF for that.
			{"iolat (auto: raw)", toolProcess(*bin+"/iolat", nil)},
			{"iolat --attach=btf", toolProcess(*bin+"/iolat", []string{"--attach=btf"})},
			{"iolat --attach=perf", toolProcess(*bin+"/iolat", []string{"--attach=perf"})},
			// One disk: the device is read through the request (auto: btf).
			{"iolat -d DISK (auto: btf)", toolProcess(*bin+"/iolat", []string{"-d", filepath.Base(dev)})},
			{"iolat -d DISK --attach=raw", toolProcess(*bin+"/iolat", []string{"--attach=raw", "-d", filepath.Base(dev)})},
			{"iolat -d DISK --attach=perf", toolProcess(*bin+"/iolat", []string{"--attach=perf", "-d", filepath.Base(dev)})},
		}
		if p, err := exec.LookPath("biolatency"); err == nil {
			// It prints its "Tracing" line with stdio: line-buffer it through stdbuf.
			block = append(block, tracer{"biolatency (libbpf-tools)", toolProcess("stdbuf", []string{"-oL", p})})
		} else {
			fmt.Fprintln(os.Stderr, "bench: biolatency (libbpf-tools) not found: its row is left out")
		}
		suites = append(suites, suite{
			title: "direct 4 KiB write to a loop device (one block IO each)", unit: "IO", ops: *writes / 10,
			setup: func() (func(), func(), error) { return directIO(dev) }, tracers: block,
		})
	}
	fx, _ := filepath.Abs(filepath.Join(*fxDir, "fx-pie-O2")) // a uprobe's path is absolute
	if off, err := usdtOffset(fx, "tk", "plain"); err != nil {
		fmt.Fprintf(os.Stderr, "bench: no USDT fixture (%v): the USDT suite is left out\n", err)
	} else {
		const hits = 200000
		suites = append(suites, suite{
			title: "a USDT probe without arguments (a C fixture's loop; the process's own CPU time)", unit: "hit", ops: hits,
			external: func() (int64, error) { return childCPU(fx, strconv.Itoa(hits)) },
			tracers: append([]tracer{
				{"untraced", untraced},
				{"empty program", emptyUprobe(fx, off)},
				{"filter --count", toolProcess(*bin+"/filter", []string{"--count", "usdt:" + fx + ":tk:plain"})},
			}, peer("bpftrace count()", "usdt:"+fx+":tk:plain { @ = count(); }")...),
		})
	}
	if _, err := os.Stat(fx); err == nil {
		// A call timed from entry to return: tk_add, once per loop.
		const calls = 200000
		timed := append([]tracer{
			{"untraced", untraced},
			{"filter --hist duration", toolProcess(*bin+"/filter", []string{"--hist", "duration", "uprobe:" + fx + ":tk_add"})},
		}, peer("bpftrace hist(nsecs - @s[tid])", fmt.Sprintf("uprobe:%s:tk_add { @s[tid] = nsecs; } uretprobe:%s:tk_add { @ = hist(nsecs - @s[tid]); }", fx, fx))...)
		if p, err := exec.LookPath("funclatency"); err == nil {
			timed = append(timed, tracer{"funclatency (libbpf-tools)", toolProcess("stdbuf", []string{"-oL", p, fx + ":tk_add"})})
		} else {
			fmt.Fprintln(os.Stderr, "bench: funclatency (libbpf-tools) not found: its row is left out")
		}
		suites = append(suites, suite{
			title: "a C function's calls timed, uprobe and uretprobe (a fixture's loop; the process's own CPU time)", unit: "call", ops: calls,
			external: func() (int64, error) { return childCPU(fx, strconv.Itoa(calls)) },
			tracers:  timed,
		})
	}
	if perfevent.KprobesAvailable() {
		// A kernel function's calls timed (the matrix's guests: the host
		// has no kprobes): an open of a missing path is one call of
		// do_sys_openat2, which returns -2.
		const fn = "do_sys_openat2"
		timed := append([]tracer{
			{"untraced", untraced},
			{"filter --hist duration", toolProcess(*bin+"/filter", []string{"--hist", "duration", "kprobe:" + fn})},
		}, peer("bpftrace hist(nsecs - @s[tid])", fmt.Sprintf("kprobe:%s { @s[tid] = nsecs; } kretprobe:%s { @ = hist(nsecs - @s[tid]); }", fn, fn))...)
		if p, err := exec.LookPath("funclatency"); err == nil {
			timed = append(timed, tracer{"funclatency (libbpf-tools)", toolProcess("stdbuf", []string{"-oL", p, fn})})
		} else {
			fmt.Fprintln(os.Stderr, "bench: funclatency (libbpf-tools) not found: its row is left out")
		}
		suites = append(suites, suite{
			title: fmt.Sprintf("a kernel function's calls timed, %s (an open of a missing path)", fn), unit: "kcall", ops: *writes / 10,
			setup: func() (func(), func(), error) {
				return func() { unix.Open("/nonexistent/tk-bench", unix.O_RDONLY, 0) }, func() {}, nil
			},
			tracers: timed,
		})
	}
	fmt.Printf("%d interleaved rounds, medians, %s\n", *rounds, time.Now().UTC().Format("2006-01-02"))
	for _, st := range suites {
		if *only != "" && st.unit != *only {
			continue
		}
		if _, err := measure(st); err != nil {
			return err
		}
	}
	if *only == "" || *only == "language" {
		if err := languageSuite(bpftrace); err != nil {
			return err
		}
	}
	if (*only == "" || *only == "glob") && perfevent.KprobesAvailable() {
		if err := globSuite(); err != nil {
			return err
		}
	}
	if *only == "" || *only == "stream" {
		if err := streamSuite(bpftrace); err != nil {
			return err
		}
	}
	if *only == "" || *only == "sample" {
		if err := profileSuite(); err != nil {
			return err
		}
	}
	if *only == "tables" {
		return tablesSuite()
	}
	if *only == "" || *only == "depth" {
		if err := depthSuite(); err != nil {
			return err
		}
	}
	if *only == "soak" {
		return soakSuite() // minutes: only when asked
	}
	if *only == "" || *only == "fleet" {
		if err := fleetSuite(); err != nil {
			return err
		}
	}
	if *only == "" || *only == "switch" {
		if err := offCPUSuite(); err != nil {
			return err
		}
	}
	if *only != "" && *only != "startup" {
		return nil
	}
	return startup()
}

func untraced() (func(), error) { return func() {}, nil }

// threadCPU is this thread's CPU time in ns (CLOCK_THREAD_CPUTIME_ID): the
// workload's own cost, with whatever the kernel does in its context (the
// tracepoint, the BPF program, loopback softirqs), and without the time
// other processes or the hypervisor take from it, which made wall time too
// noisy on our VMs.
func threadCPU() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return ts.Nano()
}

// measure runs st's tracers round by round, prints its table, and
// returns each tracer's median BPF ns per operation.
func measure(st suite) ([]float64, error) {
	op, done := func() {}, func() {}
	if st.setup != nil {
		var err error
		if op, done, err = st.setup(); err != nil {
			return nil, err
		}
	}
	defer done()
	samples := make([][]float64, len(st.tracers))
	progNs := make([][]float64, len(st.tracers))
	for r := 0; r < *rounds; r++ {
		// Rotate the order each round so that no config always runs first.
		for i := range st.tracers {
			k := (i + r) % len(st.tracers)
			before := programIDs()
			stop, err := st.tracers[k].start()
			if err != nil {
				return nil, fmt.Errorf("%s: %w", st.tracers[k].name, err)
			}
			var cpu int64
			if st.external != nil {
				if cpu, err = st.external(); err != nil {
					stop()
					return nil, fmt.Errorf("%s: %w", st.title, err)
				}
			} else {
				start := threadCPU()
				for n := 0; n < st.ops; n++ {
					op()
				}
				cpu = threadCPU() - start
			}
			samples[k] = append(samples[k], float64(cpu)/float64(st.ops))
			progNs[k] = append(progNs[k], newProgramsCost(before, st.ops))
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
	if os.Getenv("BENCH_DEBUG") != "" {
		for k, t := range st.tracers {
			fmt.Fprintf(os.Stderr, "%-28s %v\n", t.name, samples[k])
		}
	}
	for r := range samples[0] {
		for k, t := range st.tracers {
			ms := []metric{{samples[k][r], "cpu-ns/" + st.unit}}
			if k > 0 {
				ms = append(ms, metric{samples[k][r] - samples[0][r], "added-ns/" + st.unit}, metric{progNs[k][r], "bpf-ns/" + st.unit})
			}
			result(strings.ToUpper(st.unit[:1])+st.unit[1:], t.name, st.ops, ms...)
		}
	}
	floor, progFloor := added(1), median(progNs[1])
	fmt.Printf("\n%s, %d per measurement\n\n", st.title, st.ops)
	fmt.Printf("| tracer | CPU ns per %s | added CPU ns per %s | added vs empty program | BPF ns per %s | BPF vs empty program |\n", st.unit, st.unit, st.unit)
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: |")
	bpfNs := make([]float64, len(st.tracers))
	for k, t := range st.tracers {
		if k == 0 {
			fmt.Printf("| %s | %.0f | - | - | - | - |\n", t.name, median(samples[k]))
			continue
		}
		p := median(progNs[k])
		bpfNs[k] = p
		ratio := "-" // the floor's programs do not run for this workload
		if progFloor > 0 {
			ratio = fmt.Sprintf("%.2fx", p/progFloor)
		}
		fmt.Printf("| %s | %.0f | %.0f | %.2fx | %.0f | %s |\n", t.name, median(samples[k]), added(k), added(k)/floor, p, ratio)
	}
	return bpfNs, nil
}

// programIDs lists the BPF programs loaded now.
func programIDs() map[ebpf.ProgramID]bool {
	ids := map[ebpf.ProgramID]bool{}
	for id := ebpf.ProgramID(0); ; {
		next, err := ebpf.ProgramGetNextID(id)
		if err != nil {
			return ids
		}
		ids[next], id = true, next
	}
}

// newProgramsCost is the run time (the kernel's bpf_stats, without the
// attach mechanism's own overhead) of the programs loaded since before, per
// operation of the workload: a program that runs once per event counts its
// time per run; one that runs for other events too (a raw sys_enter
// program for every syscall) counts that as well; one that ran a few times
// for something else hardly counts.
func newProgramsCost(before map[ebpf.ProgramID]bool, ops int) float64 {
	var ns float64
	newPrograms(before, func(st *ebpf.ProgramStats) { ns += float64(st.Runtime.Nanoseconds()) / float64(ops) })
	return ns
}

// newPrograms calls f with the kernel's statistics of each program loaded
// since before.
func newPrograms(before map[ebpf.ProgramID]bool, f func(*ebpf.ProgramStats)) {
	for id := range programIDs() {
		if before[id] {
			continue
		}
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue
		}
		st, err := p.Stats()
		p.Close()
		if err == nil {
			f(st)
		}
	}
}

func devNullWrites() (func(), func(), error) {
	fd, err := unix.Open("/dev/null", unix.O_WRONLY, 0)
	if err != nil {
		return nil, nil, err
	}
	buf := make([]byte, 64)
	return func() { unix.Write(fd, buf) }, func() { unix.Close(fd) }, nil
}

// loopDevice attaches a loop device to a 64 MiB file.
func loopDevice() (string, func(), error) {
	f, err := os.CreateTemp("", "bench-disk")
	if err != nil {
		return "", nil, err
	}
	f.Close()
	if err := os.Truncate(f.Name(), 64<<20); err != nil {
		return "", nil, err
	}
	out, err := exec.Command("losetup", "-f", "--show", f.Name()).Output()
	if err != nil {
		os.Remove(f.Name())
		return "", nil, fmt.Errorf("losetup: %w", err)
	}
	dev := strings.TrimSpace(string(out))
	return dev, func() { exec.Command("losetup", "-d", dev).Run(); os.Remove(f.Name()) }, nil
}

// directIO writes 4 KiB blocks with O_DIRECT round the device: every write
// is one block IO.
func directIO(dev string) (func(), func(), error) {
	fd, err := unix.Open(dev, unix.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		return nil, nil, err
	}
	// O_DIRECT wants an aligned buffer: mmap gives a page.
	buf, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		unix.Close(fd)
		return nil, nil, err
	}
	var off int64
	return func() {
			unix.Pwrite(fd, buf, off)
			off = (off + 4096) % (64 << 20)
		}, func() {
			unix.Munmap(buf)
			unix.Close(fd)
		}, nil
}

// openPath is the file the open suite opens.
const openPath = "/tmp/tracekit-bench-open"

// opens opens openPath read-only and closes it: one openat(2) each.
func opens() (func(), func(), error) {
	if err := os.WriteFile(openPath, nil, 0o644); err != nil {
		return nil, nil, err
	}
	return func() {
			if fd, err := unix.Open(openPath, unix.O_RDONLY, 0); err == nil {
				unix.Close(fd)
			}
		}, func() {
			os.Remove(openPath)
		}, nil
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

// usdtOffset is the file offset of a fixture's USDT probe with one site.
func usdtOffset(path, provider, name string) (uint64, error) {
	f, err := uprobe.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	p, err := f.FindUSDT(provider, name)
	if err != nil {
		return 0, err
	}
	return p.Sites[0].Offset, nil
}

// childCPU runs a program and returns its user and system CPU time.
func childCPU(path string, args ...string) (int64, error) {
	cmd := exec.Command(path, args...)
	if err := cmd.Run(); err != nil {
		return 0, err
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return ru.Utime.Nano() + ru.Stime.Nano(), nil
}

// emptyUprobe attaches "return 0" as a uprobe at a file offset: the floor
// of a user-space probe (the trap and the single-step around it).
func emptyUprobe(path string, off uint64) func() (func(), error) {
	return func() (func(), error) {
		spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{
			"empty": {Type: ebpf.Kprobe, License: "GPL", Instructions: asm.Return("exit", 0)},
		}}
		coll, err := loader.Load(spec, true)
		if err != nil {
			return nil, err
		}
		a, err := perfevent.AttachProbe(coll.Programs["empty"], tracefs.Probe{Type: tracefs.Uprobe, Path: path, Offset: off}, "bench", false)
		if err != nil {
			coll.Close()
			return nil, err
		}
		return func() { a.Close(); coll.Close() }, nil
	}
}

// emptyProgram attaches "return 0" to the same tracepoints: the floor
// that any program there costs. events are "group:name".
func emptyProgram(events ...string) func() (func(), error) {
	return onlyProgram(asm.Return("exit", 0), nil, events...)
}

// stackidOnly attaches a program that only takes the kernel stack's id
// (bpf_get_stackid into a stack map of 4096, as filter's kstack key and
// bpftrace's @[kstack] do) and returns: the floor of any kstack key.
func stackidOnly(events ...string) func() (func(), error) {
	insns := append(asm.Prologue(),
		bpf.Mov.Reg(bpf.R1, asm.RegCtx),
		bpf.LoadMapPtr(bpf.R2, 0).WithReference("stacks"),
		bpf.Mov.Imm(bpf.R3, 0),
		bpf.FnGetStackid.Call(),
	)
	insns = append(insns, asm.Return("exit", 0)...)
	maps := map[string]*ebpf.MapSpec{"stacks": {Type: ebpf.StackTrace, KeySize: 4, ValueSize: 8 * 127, MaxEntries: 4096}}
	return onlyProgram(insns, maps, events...)
}

// onlyProgram attaches insns, with maps, to the tracepoints events.
func onlyProgram(insns bpf.Instructions, maps map[string]*ebpf.MapSpec, events ...string) func() (func(), error) {
	return func() (func(), error) {
		spec := &ebpf.CollectionSpec{Maps: maps, Programs: map[string]*ebpf.ProgramSpec{
			"empty": {Type: ebpf.TracePoint, License: "GPL", Instructions: insns},
		}}
		coll, err := loader.Load(spec, true)
		if err != nil {
			return nil, err
		}
		var atts []*perfevent.Attachment
		stop := func() {
			for _, a := range atts {
				a.Close()
			}
			coll.Close()
		}
		for _, ev := range events {
			group, name, _ := strings.Cut(ev, ":")
			a, err := perfevent.AttachTracepoint(coll.Programs["empty"], group, name)
			if err != nil {
				stop()
				return nil, err
			}
			atts = append(atts, a)
		}
		return stop, nil
	}
}

// emptyHook attaches "return 0" to raw tracepoints ("raw", 4.17+) or BTF
// tracepoints ("btf", 5.5+): the floor of each cheaper hook. names are the
// tracepoints' own names (kfree_skb, sys_enter).
func emptyHook(kind string, names ...string) func() (func(), error) {
	return func() (func(), error) {
		var links []link.Link
		var progs []*ebpf.Program
		stop := func() {
			for _, l := range links {
				l.Close()
			}
			for _, p := range progs {
				p.Close()
			}
		}
		for _, name := range names {
			spec := &ebpf.ProgramSpec{Type: ebpf.RawTracepoint, License: "GPL", Instructions: asm.Return("exit", 0)}
			if kind == "btf" {
				spec.Type, spec.AttachType, spec.AttachTo = ebpf.Tracing, ebpf.AttachTraceRawTp, name
			}
			p, err := ebpf.NewProgram(spec)
			if err != nil {
				stop()
				return nil, err
			}
			progs = append(progs, p)
			var l link.Link
			if kind == "btf" {
				l, err = link.AttachTracing(link.TracingOptions{Program: p})
			} else {
				l, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: name, Program: p})
			}
			if err != nil {
				stop()
				return nil, err
			}
			links = append(links, l)
		}
		return stop, nil
	}
}

// toolProcess starts a tracer process and waits until it has attached: the
// toolkit's tools say "Tracing" on stderr, bpftrace "Attaching".
func toolProcess(path string, args []string) func() (func(), error) {
	return process(path, args, false)
}

// quietProcess is toolProcess for a tracer that says nothing when it has
// attached (libbpf-tools' offcputime): it is taken as ready a second after
// it has loaded a BPF program.
func quietProcess(path string, args []string) func() (func(), error) {
	return process(path, args, true)
}

func process(path string, args []string, quiet bool) func() (func(), error) {
	return func() (func(), error) {
		before := programIDs()
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
		ready := make(chan struct{}, 3)
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
		if quiet {
			go func() {
				for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
					for id := range programIDs() {
						if !before[id] {
							ready <- struct{}{}
							return
						}
					}
				}
			}()
		}
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

// startup reports each tool's CPU time and peak RSS from its start to its
// first report (an interval of 10 ms, one report), with the runs that read
// the kernel's BTF as rows of their own.
func startup() error {
	const rounds = 9
	fmt.Printf("\nfrom start to the first report, 10 ms in (%d interleaved rounds, medians):\n\n", rounds)
	fmt.Println("| tool | CPU ms | peak RSS MiB |")
	fmt.Println("| --- | ---: | ---: |")
	tools := []struct {
		name string
		args []string
	}{
		{"writesize", []string{"0.01", "1"}},
		{"dropmon", []string{"0.01", "1"}},
		{"dropmon --protocol ip (btf)", []string{"--protocol", "ip", "0.01", "1"}},
		{"iolat", []string{"0.01", "1"}},
		{"iolat --attach=btf", []string{"--attach=btf", "0.01", "1"}},
		{"filter --count", []string{"--count", "syscalls:sys_enter_write", "0.01", "1"}},
		{"filter --count, a BTF walk", []string{"--count", "net:netif_receive_skb", "--where", "((struct sk_buff *)skbaddr)->dev->name == \"lo\"", "0.01", "1"}},
		{"profile", []string{"0.01", "1"}},
	}
	// Round by round, every tool once a round: the machine's drift over
	// the minute this takes falls on all of them alike.
	cpu, rss := make([][]float64, len(tools)), make([][]float64, len(tools))
	for r := 0; r < rounds; r++ {
		for i, t := range tools {
			tool, _, _ := strings.Cut(t.name, " ")
			c, m, err := runPeak(*bin+"/"+tool, t.args...)
			if err != nil {
				return fmt.Errorf("%s startup run: %w", t.name, err)
			}
			cpu[i], rss[i] = append(cpu[i], c), append(rss[i], m)
			result("Startup", t.name, 1, metric{c, "cpu-ms"}, metric{m, "peak-rss-MiB"})
		}
	}
	for i, t := range tools {
		fmt.Printf("| %s | %.1f | %.1f |\n", t.name, median(cpu[i]), median(rss[i]))
	}
	fmt.Println()
	fx, _ := filepath.Abs(filepath.Join(*fxDir, "fx-pie-O2"))
	if _, err := os.Stat(fx); err != nil {
		return nil
	}
	var one, ten []float64
	for i := 0; i < 5; i++ {
		for _, m := range []struct {
			probe string
			into  *[]float64
		}{{"tk:plain", &one}, {"tk:sites", &ten}} {
			d, err := attachTime(*bin+"/filter", "--count", "usdt:"+fx+":"+m.probe)
			if err != nil {
				return err
			}
			*m.into = append(*m.into, d)
		}
	}
	fmt.Printf("filter from start to attached, wall time (median of 5): a USDT probe of 1 site %.1f ms, of 10 sites %.1f ms\n", median(one), median(ten))
	return nil
}

// attachTime is the wall time from starting a tool to its "Tracing" line,
// which it prints once everything is attached.
// runPeak runs a tool to its end: its CPU time in ms (rusage) and its
// peak RSS in MiB, the VmHWM of its /proc status read every millisecond
// until it exits. rusage's maxrss cannot serve: Go starts children with
// vfork, and a vfork child's maxrss is its parent's, the bench's own.
func runPeak(path string, args ...string) (float64, float64, error) {
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		return 0, 0, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	status := fmt.Sprintf("/proc/%d/status", cmd.Process.Pid)
	// The file the process runs once it has exec'd: before, /proc shows
	// the bench's own memory.
	want, err := filepath.EvalSymlinks(cmd.Path)
	if err == nil {
		want, err = filepath.Abs(want)
	}
	if err != nil {
		return 0, 0, err
	}
	var hwm int64
	for {
		select {
		case err := <-done:
			if err != nil {
				return 0, 0, err
			}
			ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
			return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e6, float64(hwm) / 1024, nil
		case <-time.After(time.Millisecond):
			b, err := os.ReadFile(status)
			if err != nil {
				continue
			}
			exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", cmd.Process.Pid))
			if exe != want {
				continue // not exec'd yet: the bench's own memory
			}
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
					var kb int64
					fmt.Sscan(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), &kb)
					hwm = max(hwm, kb)
				}
			}
		}
	}
}

func attachTime(path string, args ...string) (float64, error) {
	cmd := exec.Command(path, args...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return 0, err
	}
	cmd.Stdout = io.Discard
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	defer func() { cmd.Process.Signal(syscall.SIGINT); cmd.Wait() }()
	s := bufio.NewScanner(stderr)
	for s.Scan() {
		if strings.HasPrefix(s.Text(), "Tracing") {
			d := float64(time.Since(start)) / 1e6
			go io.Copy(io.Discard, stderr)
			return d, nil
		}
	}
	return 0, fmt.Errorf("%s %v: no Tracing line", path, args)
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}
