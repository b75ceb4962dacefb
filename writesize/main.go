// Package writesize is the tool writesize: it prints histograms of the sizes of write(2) calls,
// counted in the kernel by a hand-assembled BPF program at the write
// syscall's entry (a BPF trampoline) or on the syscalls:sys_enter_write
// tracepoint.
package writesize

import (
	"context"

	"github.com/tracekit/tracekit/run"
)

type options struct {
	run.Common
	run.ServeOption
	run.TreeOption
	Pid        int64  `short:"p" long:"pid" value-name:"PID" description:"Trace only this process (its pid, the tgid)"`
	PerProcess bool   `short:"P" long:"per-process" description:"Print one histogram per process, labelled '<comm> <pid>'"`
	All        bool   `short:"a" long:"all" description:"With -c, trace every process, not only the command"`
	Kprobe     string `long:"kprobe" optional:"yes" optional-value:"auto" value-name:"SYMBOL" description:"Use a kprobe on the kernel's write function instead of the tracepoint: __x64_sys_write (__arm64_sys_write on arm64), ksys_write or sys_write, whichever exists, or SYMBOL (a syscall wrapper, or a function whose third argument is the size)"`
	Attach     string `long:"attach" value-name:"HOOK" description:"How to reach the writes: auto (fentry where the kernel has BPF trampolines, else perf), perf (syscalls:sys_enter_write), raw (raw_syscalls:sys_enter, 4.17+, which runs for every syscall) or fentry (the write syscall's entry through a BPF trampoline, x86-64 5.5+, and arm64 kernels with ftrace direct calls (6.1 has none)). A named hook is forced: no fallback. Without the flag, TRACEKIT_ATTACH chooses the same way"`
	MaxComms   uint32 `long:"max-comms" default:"4096" value-name:"N" description:"With -P: how many process names the kernel keeps (up to 65536); a process beyond them that exits before a report prints as '?'"`
	MaxKeys    uint32 `long:"max-keys" default:"10240" value-name:"N" description:"With -P: the processes a report holds (per interval; per run without an interval or with --cumulative), up to 1048576, and the {process, size bucket} pairs the kernel counts between drains; writes past either are counted as lost. The kernel's counts move to user space every second, so it holds a second's processes, not the run's"`
	Legacy     bool   `long:"legacy" description:"With --kprobe: register the probe in kprobe_events even where the kprobe PMU (4.17+) exists; TRACEKIT_LEGACY_PROBES=1 does the same"`
}

const details = `writesize counts every write(2) by its size in the kernel: the program reads
the count argument at the write syscall's entry (through a BPF trampoline,
where the kernel has them) or on syscalls:sys_enter_write (at the offset
its format file gives), computes its log2 bucket and counts it there. User
space only reads the counts when it prints a report.

Examples:
  writesize                     # trace all writes until Ctrl-C, then print
  writesize 1 5                 # a report every second, five times
  writesize -P 5                # one histogram per process, every 5 s
  writesize -p 1234 --json      # only pid 1234, reports as JSON lines
  writesize -c 'dd if=/dev/zero of=/dev/null bs=4k count=100 status=none'
                                # trace only that command, report when it ends
  writesize --kprobe            # the same from a kprobe (the seed's tracex4)
  writesize -P --serve :9438    # Prometheus: tracekit_writesize_bytes{comm}

With -P, the kernel counts each process's writes in one of two hashes while
writesize drains the other every second: the kernel holds a second's
processes, not the run's. --max-keys bounds those and the processes of a
report; writes past either are counted as lost.

With --kprobe, probes are registered per process (group
tk_writesize_<pidns>_<pid>) and removed on every exit; one left by a run
killed with SIGKILL is removed by the next run of any of the toolkit's tools
in the same pid namespace.

In a container (a pid namespace of its own), -p, -c and the -P labels are
that namespace's pids, as ps shows them there; writes of processes outside
it are counted under "[outside this pid namespace]" with -P.

`

const overhead = `One program at the write syscall's entry (its fentry where the kernel has
BPF trampolines, else syscalls:sys_enter_write), which runs for writes only:
it reads the count, computes its log2 bucket and adds one to a per-CPU slot.
make bench measured it at 1.05x the BPF time of an empty program on the same
tracepoint and 0.30x of bpftrace's hist() (54 to 65 ns a write on the
project's 2-core VM). --attach=raw runs for every syscall: a getppid(2),
which writesize does not count, costs 174 ns more. With -P the counts sit in
a hash per process, drained every second. User space wakes only to print a
report (and once a second with -P).
`

// Summary is the tool's one-line description: the first line of its --help.
const Summary = "Summarize write(2) sizes as a log2 histogram."

// Tool is the tool's command line, help and run: run.Main runs it,
// run.ManPage writes its manual.
func Tool() run.Tool {
	var o options
	return run.Tool{
		Name:     "writesize",
		Summary:  Summary,
		Details:  details,
		Overhead: overhead,
		Options:  &o,
		Validate: func() error {
			return validate(&o)
		},
		Run: func(ctx context.Context, s *run.Session) error { return trace(ctx, s, &o) },
	}
}

// Main runs the tool with its command-line arguments (without the program
// name) and returns its exit status.
func Main(args []string) int { return run.Main(Tool(), args) }
