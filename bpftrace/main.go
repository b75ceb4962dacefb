// Package bpftrace is the tool bpftrace: bpftrace's language (one-liners
// with -e, .bt scripts) compiled by our assembler, without LLVM or clang.
// It is a compatible implementation of the language, not bpftrace: what
// it does not take yet it refuses by name, before anything loads.
package bpftrace

import (
	"context"

	"github.com/tracekit/tracekit/run"
)

type options struct {
	run.Common
	Expr    string `short:"e" value-name:"PROGRAM" description:"The program to run, as bpftrace -e takes it; without it, the script file named by the first argument"`
	List    bool   `short:"l" description:"List the probes the program's attach points (or the first argument, a search with '*' and '?') name, as bpftrace -l does, and exit"`
	Pid     int64  `short:"p" value-name:"PID" description:"Run the probes for this process only (its pid, the tgid)"`
	Format  string `short:"f" value-name:"FORMAT" default:"text" choice:"text" choice:"json" description:"Output format: text, or json (one object per line, as bpftrace -f json writes)"`
	Output  string `short:"o" value-name:"FILE" description:"Write the program's output to FILE instead of stdout"`
	Quiet   bool   `short:"q" description:"Leave out the 'Attaching N probes...' line"`
	Listing bool   `short:"v" description:"With -l, each tracepoint's fields; else print the BPF programs built, before they load"`
	Unsafe  bool   `long:"unsafe" description:"Take system() and signal(), which act on the system"`

	loaded *loaded // the script, once validate has read it
}

const details = `bpftrace runs programs in bpftrace's language, compiled into BPF by the
toolkit's own assembler: no LLVM, no clang, no kernel headers. Probes run in
the kernel and keep their state in BPF maps; at the end (Ctrl-C, exit(), or
the -c command's end) every map is printed as bpftrace prints it.

Examples:
  bpftrace -e 'tracepoint:syscalls:sys_enter_openat { @[comm] = count(); }'
                              # opens by process name, until Ctrl-C
  bpftrace -e 't:syscalls:sys_exit_read /args->ret > 0/ { @bytes = hist(args->ret); }'
                              # the sizes reads return, as a log2 histogram
  bpftrace -e 't:syscalls:sys_enter_read { @s[tid] = nsecs; } t:syscalls:sys_exit_read /@s[tid]/ { @ns[comm] = hist(nsecs - @s[tid]); delete(@s[tid]); }'
                              # read latency per process, without kprobes
  bpftrace -e 't:syscalls:sys_enter_execve { printf("%-6d %s\n", pid, str(args->filename)); }'
                              # each program started, as it starts
  bpftrace -q -c 'ls /' -e 't:raw_syscalls:sys_enter /comm == "ls"/ { @[args->id] = count(); }'
                              # the syscalls of one command, by number
  bpftrace -l 'tracepoint:sched:*'
                              # list probes; -v adds each tracepoint's fields

A script file is run as bpftrace runs it (bpftrace biolatency.bt, or by its
#!/usr/bin/env bpftrace line with bin/ first in PATH); the arguments after it
are $1, $2, ... and their count $#.

What it takes: BEGIN and END (run in user space: printf, cat, system,
print, clear, zero, time, exit, and in BEGIN constants assigned to maps'
elements),
interval:s:N and interval:ms:N (in user space where they take only those,
else in the kernel on the first CPU's clock, as bpftrace runs them);
tracepoint (t:), kprobe and kretprobe (an event or function of a
probe's list that the kernel lacks, or a glob of it that matches none,
is skipped, as bpftrace skips it, and said on stderr, unless no probe is
left), uprobe and uretprobe (a library by its
short name: uprobe:libc:getaddrinfo; a function the file lacks is
skipped the same way), usdt (usdt:PATH:PROBE or
usdt:PATH:PROVIDER:PROBE, globs taken; every site, arg0.. read as each
site's note says, unsigned as bpftrace types them), profile,
software and hardware probes, with globs; predicates; maps with keys of
integers and strings, @start[tid] = nsecs and delete(); $variables;
if/else, unroll, ternaries, C's arithmetic and comparisons (strings with ==
and !=); count, sum, avg, min, max, stats, hist and lhist; the builtins
pid, tid, uid, gid, comm, cpu, nsecs, elapsed, cgroup, curtask, cpid, probe,
func, args->field, arg0.., retval and $1...; the headers' usual macros
(AF_INET, TASK_RUNNING, O_CREAT, ...) and the kernel's enumerators from its
BTF; casts to the kernel's types and -> and . walks through its BTF
((struct sock *)arg0, curtask->real_parent->comm, args->rqtp->tv_sec in
the process's memory), casts to integer sizes; kstack and kstack(N) as
keys and in printf; ustack and ustack(N), whole (the stack pipeline's
unwinder: .eh_frame tables, frame pointers where a file has none), as a
key of a map an aggregation is assigned or a printf's argument, in one
statement of one probe, its last (each event goes to user space with
its stacks, which aggregates the map); ksym, usym (named by the
process's symbols when printed: a process gone by then is its address),
kaddr and *x (8 bytes at an address, or what a pointer points at), ntop,
bswap, buf (printed by printf's %r), strftime; printf, cat, time, join,
str(), exit(), and print, clear and zero of a whole map (in a kernel
probe done by user space when its record comes, as bpftrace does them);
with --unsafe, system() (the command run by /bin/sh when its record
comes, its output printed) and signal("SIGUSR1"), signal("usr1") or
signal(10) (to the process of the thread the probe fires in). Anything
else is refused by name, with its place, before anything loads.

Unlike bpftrace: min() and max() start from the first value (bpftrace's
start from 0); hist's [2G, 4G) bucket is printed with its true bounds in
-f json; ustack's frames are functions' names without their offsets (as
profile names them), a walk cut short says why on a last line, and the
whole stack costs a record an event where bpftrace counts a stack's id in
the kernel.

`

const overhead = `One program per tracepoint, which runs the probe's statements for each event
on the CPU where it happens: a map update costs a hash lookup, an
aggregation a per-CPU add, printf a record in a per-CPU ring that user
space reads in batches. User space wakes for printf records and exit()
only; maps are read once, at the end.
`

// Summary is the tool's one-line description.
const Summary = "Run bpftrace programs, compiled without LLVM."

// Tool is the tool's command line, help and run.
func Tool() run.Tool {
	var o options
	return run.Tool{
		Name:     "bpftrace",
		Summary:  Summary,
		Details:  details,
		Overhead: overhead,
		Options:  &o,
		Script:   true,
		Usage:    "[options] [-e PROGRAM | script.bt] [arguments...]",
		Validate: func() error { return validate(&o) },
		Run:      func(ctx context.Context, s *run.Session) error { return trace(ctx, s, &o) },
	}
}

// Main runs the tool with its command-line arguments.
func Main(args []string) int { return run.Main(Tool(), args) }
