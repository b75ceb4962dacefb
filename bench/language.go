package main

import (
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// program is a bpftrace program as its users write them, and the
// workload that makes its events: one per operation.
type program struct {
	name   string // the table's row
	script string
	title  string // the workload
	unit   string
	ops    int
	setup  func() (op func(), done func(), err error)
	events []string // the tracepoints, for the empty program
}

// languagePrograms are issue 61's three: a count() by comm on every
// syscall, a hist() of read latency kept from sys_enter_read to
// sys_exit_read, an opensnoop-like printf of every open.
func languagePrograms() []program {
	return []program{
		{
			name:   "@[comm] = count()",
			script: "tracepoint:raw_syscalls:sys_enter { @[comm] = count(); }",
			title:  "getppid(2), every syscall counted by comm (raw_syscalls:sys_enter)", unit: "syscall", ops: *writes,
			setup:  func() (func(), func(), error) { return func() { unix.Getppid() }, func() {}, nil },
			events: []string{"raw_syscalls:sys_enter"},
		},
		{
			name: "@ns = hist(nsecs - @start[tid])",
			script: "tracepoint:syscalls:sys_enter_read { @start[tid] = nsecs; } " +
				"tracepoint:syscalls:sys_exit_read /@start[tid]/ { @ns = hist(nsecs - @start[tid]); delete(@start[tid]); }",
			title: "read(2) of 1 byte of /dev/zero, timed from sys_enter_read to sys_exit_read", unit: "read", ops: *writes,
			setup: devZeroReads, events: []string{"syscalls:sys_enter_read", "syscalls:sys_exit_read"},
		},
		{
			name:   `printf("%d %s %s\n", pid, comm, str(args->filename))`,
			script: `tracepoint:syscalls:sys_enter_openat { printf("%d %s %s\n", pid, comm, str(args->filename)); }`,
			title:  "openat(2) and close(2) of a file, each open printed (opensnoop-like)", unit: "open", ops: *writes / 3,
			setup: opens, events: []string{"syscalls:sys_enter_openat"},
		},
	}
}

// devZeroReads reads one byte of /dev/zero an operation.
func devZeroReads() (func(), func(), error) {
	fd, err := unix.Open("/dev/zero", unix.O_RDONLY, 0)
	if err != nil {
		return nil, nil, err
	}
	buf := make([]byte, 1)
	return func() { unix.Read(fd, buf) }, func() { unix.Close(fd) }, nil
}

// languageSuite runs bpftrace's language through ours (bin/bpftrace)
// and through bpftrace itself, program by program: the BPF time per
// event, interleaved with an empty program as every suite is; then each
// program from its start to its first event (exit() added to the probe),
// its CPU time and peak RSS. Issue 61's targets: BPF time at most 0.8x
// bpftrace's, CPU and peak RSS to the first event at most 0.25x.
func languageSuite(bpftrace string) error {
	if bpftrace == "" {
		fmt.Fprintln(os.Stderr, "bench: bpftrace not found: the language suite is left out")
		return nil
	}
	ours := *bin + "/bpftrace"
	progs := languagePrograms()
	bpfNs := make([][2]float64, len(progs))
	for i, p := range progs {
		ns, err := measure(suite{
			title: p.title + ": bpftrace's language, ours and bpftrace", unit: p.unit, ops: p.ops, setup: p.setup,
			tracers: []tracer{
				{"untraced", untraced},
				{"empty program", emptyProgram(p.events...)},
				{"tracekit bpftrace " + p.name, toolProcess(ours, []string{"-e", p.script})},
				{"bpftrace " + p.name, toolProcess(bpftrace, []string{"-e", p.script})},
			},
		})
		if err != nil {
			return err
		}
		bpfNs[i] = [2]float64{ns[2], ns[3]}
	}
	const rounds = 5
	type peak struct{ cpu, rss [2][]float64 }
	peaks := make([]peak, len(progs))
	for r := 0; r < rounds; r++ {
		for i, p := range progs {
			for k, path := range []string{ours, bpftrace} {
				c, m, err := firstEvent(p, path)
				if err != nil {
					return fmt.Errorf("%s, first event: %w", path, err)
				}
				peaks[i].cpu[k], peaks[i].rss[k] = append(peaks[i].cpu[k], c), append(peaks[i].rss[k], m)
				result("Language", fmt.Sprintf("%s %s", path, p.name), 1, metric{c, "cpu-ms"}, metric{m, "peak-rss-MiB"})
			}
		}
	}
	fmt.Printf("\nbpftrace's language, tracekit's bpftrace beside bpftrace: BPF ns per event (the tables above), and from start to the first event (exit() in the probe; %d interleaved rounds, medians)\n\n", rounds)
	fmt.Println("| program | BPF ns, ours | BPF ns, bpftrace | ratio | CPU ms, ours | CPU ms, bpftrace | ratio | peak RSS MiB, ours | bpftrace | ratio |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
	for i, p := range progs {
		c0, c1 := median(peaks[i].cpu[0]), median(peaks[i].cpu[1])
		m0, m1 := median(peaks[i].rss[0]), median(peaks[i].rss[1])
		fmt.Printf("| `%s` | %.0f | %.0f | %.2fx | %.1f | %.1f | %.2fx | %.1f | %.1f | %.2fx |\n",
			p.name, bpfNs[i][0], bpfNs[i][1], bpfNs[i][0]/bpfNs[i][1], c0, c1, c0/c1, m0, m1, m0/m1)
	}
	return nil
}

// firstEvent runs a tracer of p's program with exit() added to its last
// probe, while this process makes p's events every millisecond: its CPU
// time and peak RSS from start to end (runPeak).
func firstEvent(p program, path string) (float64, float64, error) {
	op, done, err := p.setup()
	if err != nil {
		return 0, 0, err
	}
	defer done()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				op()
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	script := p.script[:len(p.script)-1] + " exit(); }"
	return runPeak(path, "-e", script)
}
