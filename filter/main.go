// Package filter is the tool filter: it attaches an in-kernel event filter, the seed's design: a
// program compiled from a --where expression runs before the event is
// stored and returns 0 to discard it; what passes is printed.
package filter

import (
	"context"

	"github.com/tracekit/tracekit/run"
)

type options struct {
	run.Common
	run.ServeOption
	run.TreeOption
	ServeTop    int    `long:"serve-top" value-name:"N" default:"100" description:"With --serve and --count-by: the N keys with the most events when first seen get series of their own; the others are summed under \"other\" (a series never moves, so counters only grow)"`
	Where       string `short:"w" long:"where" value-name:"EXPR" unquote:"false" description:"Keep only events for which EXPR holds: comparisons of fields, arguments, builtins and strings, joined by &&, || and !, with parentheses (see below)"`
	Fields      string `long:"fields" value-name:"LIST" unquote:"false" description:"Print only these comma-separated fields, arguments, builtins, paths or str() on each line; strings print as text"`
	Count       bool   `long:"count" description:"Count the passing events in the kernel and report the count per interval instead of printing them"`
	CountBy     string `long:"count-by" value-name:"KEYS" unquote:"false" description:"Count the passing events in the kernel by KEYS (comma-separated fields, builtins, paths or strings): a table per interval, largest first"`
	MaxKeys     uint32 `long:"max-keys" value-name:"N" default:"10240" description:"With --count-by: the distinct keys counted per interval report (per run without an interval, or with --cumulative), up to 1048576; the events of keys past it are counted as lost. With an interval or --serve, the kernel's counts move to the report every second, so the kernel holds a second's keys, not the run's"`
	Lhist       string `long:"lhist" value-name:"EXPR,MIN,MAX,STEP" unquote:"false" description:"A linear histogram of the integer EXPR, bpftrace's lhist(): a slot per STEP from MIN to MAX, one below MIN and one at MAX and above, printed in bpftrace's layout, per interval"`
	Sum         string `long:"sum" value-name:"EXPR" unquote:"false" description:"The sum of the integer EXPR over the passing events, per --count-by key when given (bpftrace's @[comm] = sum(len)), kept in the kernel per CPU; reports are cumulative. Past 64 bits it is told exactly from each CPU's count, least and greatest value where one number fits them, and said to have overflowed where none does"`
	Min         string `long:"min" value-name:"EXPR" unquote:"false" description:"The least EXPR, as --sum (bpftrace's min())"`
	Max         string `long:"max" value-name:"EXPR" unquote:"false" description:"The greatest EXPR, as --sum (bpftrace's max())"`
	Avg         string `long:"avg" value-name:"EXPR" unquote:"false" description:"The mean of EXPR, an integer (the sum divided by the count, rounded toward zero), as --sum (bpftrace's avg())"`
	Folded      bool   `long:"folded" description:"With --count-by kstack or ustack: one line per stack, its frames outermost first joined by ';', then the count: the input of flamegraph.pl (stackcollapse's form)"`
	Hist        string `long:"hist" value-name:"EXPR" unquote:"false" description:"A log2 histogram of the integer EXPR (a field, builtin or path) over the passing events, built in the kernel, per interval"`
	Pid         int64  `short:"p" long:"pid" value-name:"PID" description:"Only events in this process's context (its pid, the tgid); a user-space probe's file is looked up in its root (/proc/PID/root), as a container sees it"`
	All         bool   `short:"a" long:"all" description:"With -c, keep every process's events while the command runs, not only the command's (its tree, from its exec on)"`
	Self        bool   `long:"self" description:"Include filter's own events (left out by default: its writes would feed the stream)"`
	RingPages   int    `long:"ring-pages" value-name:"N" default:"64" description:"Ring buffer pages per CPU for printed events, a power of two: 64 (256 KiB) keeps up with 100,000 events a second (make bench); raise it for bursts (a loss says so). Events printed with ustack go through the stack pipeline's own ring, and each is unwound and named in user space: far fewer a second keep up"`
	BufferPages int    `long:"buffer-pages" value-name:"N" hidden:"true" description:"The old name of --ring-pages"`
	Attach      string `long:"attach" value-name:"HOOK" description:"How to reach a tracepoint or a kernel function: auto (a BPF trampoline where the kernel has them, x86-64 5.5+ and arm64 with ftrace direct calls: fentry at a kprobe's function, fexit for a kretprobe, and at the syscall's wrapper for syscalls:sys_enter_*; else perf), perf (the tracepoint's record; the kprobe) or fentry. A named hook is forced: no fallback. Without the flag, TRACEKIT_ATTACH chooses the same way"`
	Stack       bool   `short:"s" long:"stack" description:"Stack mode, ksnoop's -s: EVENT is a list of functions, kprobe:A,kprobe:B,...,kprobe:F (uprobe:PATH:FUNCTION too); only F's events pass, and only while the thread is inside a call of each of the others in that order (B called from within A, directly or not, and so on)"`
	Info        bool   `long:"info" description:"Print the event's fields (tracepoint), the function's signature from BTF (kprobe), a file's USDT probes (usdt:PATH) or functions (uprobe:PATH[:GLOB]), and exit"`
}

const details = `EVENT is a tracepoint GROUP:NAME (net:netif_receive_skb,
syscalls:sys_enter_openat; a glob in either, syscalls:sys_enter_open*, for
every tracepoint it matches), kprobe:FUNCTION or kretprobe:FUNCTION,
kprobe:GLOB (every traceable kernel function it matches, '*' any run of
characters, '?' one: kprobe:tcp_*), a comma-separated list of those
(kprobe:ip_send_skb,kprobe:ip_rcv, as bpftrace writes it), or a
user-space probe: uprobe:PATH:FUNCTION[+OFFSET], uprobe:PATH:0xADDRESS,
uretprobe:PATH:FUNCTION, usdt:PATH:[PROVIDER:]NAME. bpftrace's names of
them work too: tracepoint:GROUP:NAME, t:, k:, kr:, u:, ur:, U:. PATH is
absolute, or a bare name looked up on $PATH and in the library directories. A user-space
probe is on the file: every process that runs it, now or later, a library
before any process has loaded it. A USDT probe is attached at every call
site, each with its own argument specs, and its semaphore is raised by the
kernel (ref_ctr_offset, 4.20+; refused on older kernels rather than written
into the processes). filter --info usdt:PATH lists a file's USDT probes,
filter --info uprobe:PATH:GLOB its functions. With -c, a user-space probe
counts only the command and its descendants; other events are
system-wide, as their context is often not the process that caused them
(a packet's softirq).

EXPR compares operands with == != < <= > >= and, for strings, ~ "PREFIX*"
(a prefix match: one trailing '*', nothing else is a pattern). Comparisons
join with && and ||, negate with !, group with parentheses; the precedence
is C's (! before comparisons before && before ||) and the right side of &&
or || runs only when the left side does not decide. An operand is:
  - a tracepoint field, named as its format file names it (filter --info
    GROUP:NAME lists them; args->NAME works too, as in bpftrace). An integer
    follows its C type: a syscall's "int dfd" is signed, dfd == -100 holds.
  - a kprobe argument, named as the kernel's BTF names it (filter --info
    kprobe:FUNCTION); a kretprobe's return value is ret.
  - a USDT argument arg0..arg11, decoded as its call site's spec says
    (registers, constants, memory, globals) and extended by its size and
    sign; a uprobe's arg0..arg5 from the calling convention's registers
    (unsigned 64-bit: nothing describes user-space types), a uretprobe's
    ret (signed 64-bit). (char *)arg0 reads a user string. Memory a process
    has not touched yet (a page not faulted in) reads as 0 or "".
  - a builtin: pid (the process id), tid, comm, cpu, uid, gid, and with -c
    cpid, the command's pid (pid == cpid: the command's own process). A field or
    argument of the same name wins. In a container (a pid namespace of its
    own), pid, tid and -p are that namespace's ids, 0 for a task outside it;
    fields such as a record's prev_pid stay the kernel's.
  - a path through pointers BTF knows: skb->dev->name, or a tracepoint
    field once cast: ((struct sk_buff *)skbaddr)->dev->name. Offsets come
    from BTF at run time, so the same command works across kernels.
  - a string: char arrays, __data_loc strings, comm, and char * fields and
    arguments (a syscall's filename, pathname: read from user memory);
    (char *)EXPR or str(EXPR) reads any address as a string. Strings compare
    over at most 127 bytes; a longer literal is an error. A string that
    cannot be read (a fault, a page not yet touched) reads as "".
  - an integer (decimal, 0x hex, negative) or a "string" literal; an enum
    field with a name table in its format takes the names: reason ==
    "NO_SOCKET". Two fields compare with each other: prev_pid == next_pid.
  - arithmetic on numbers, in --where and wherever an operand goes (--hist
    'len - 28', --count-by 'count / 4096'): + - * / % & | ^ << >>, unary -
    and parentheses, with C's precedence, in 64 bits, wrapping on overflow.
    It is signed when both sides are (a field narrower than 8 bytes counts
    as signed, as C widens it; a shift takes its left side's sign). / and %
    truncate toward zero; x / 0 is 0 and x % 0 is x (BPF's rule, where C
    has none); a shift counts modulo 64. & | ^ beside a comparison need
    parentheses: (flags & 4) != 0.
An expression compiles to at most 4096 instructions (the limit of kernels
before 5.2); a longer one is refused.

What passes is printed, one line per event, with the event's own fields
(the kernel's record of it), or with the operands --fields lists (a record
the program builds). In --fields, *PATH prints the whole kernel structure
PATH points to, from BTF, as ksnoop does (bpf_snprintf_btf, Linux 5.10+):
*skb, *skb->dev, or a tracepoint field cast, *((struct sk_buff
*)skbaddr). One line, members that are zero left out, at most 1023
bytes: a longer one is cut and ends in "...". kstack prints the event's
kernel stack under its line, innermost first, up to 127 frames (in JSON, a
list); ustack its user stack (see User stacks below). A char * field prints as text: an event that has one gets a record
of its own by default. Instead of printing, the kernel can
aggregate: --count (a count), --count-by KEYS (a table, largest first, as
bpftrace's @[comm] = count(); kstack keys by the kernel's stack, printed
as bpftrace prints @[kstack], or with --folded as a flame graph's input),
--hist EXPR (a log2 histogram in BCC's layout, as hist()), --lhist
EXPR,MIN,MAX,STEP (linear, in bpftrace's layout, as lhist()), --sum, --min,
--max or --avg EXPR (per --count-by key when given, as bpftrace's
@[comm] = sum(args->count); kept per CPU, merged when reported, cumulative
since the start). Keys and printed strings keep up to 63 bytes. Printed,
an enum field shows its name (reason=NO_SOCKET), a drop's or an
allocation's code address (location, call_site) its symbol+0xoff, and
ksym(EXPR) names any kernel code address in --fields and --count-by;
usym(EXPR) a user code address of the event's process by its function,
from the process's maps and files, read while it runs (a process gone
before its address is first named prints the address, as bpftrace's
usym() does then). Reports come per interval or at the end, as the other tools' do; a full map or
ring buffer is reported as lost, never dropped silently. filter's own
events are left out unless --self.

With -c, only the command's events are kept: those that run in one of
its processes, each from its exec on. A command line with shell syntax
runs in /bin/sh, which is not counted, nor are its builtins (cpid is
that shell); the processes it starts are, a subshell or a background
job too. An event that runs in no
process's context, a packet's receive or drop in a softirq, runs in
whatever task it interrupted: -c keeps it when that task is the
command's (a loopback packet's receive usually runs in its sender's).
-a keeps every process's events while the command runs.

Examples:
  filter syscalls:sys_enter_openat --where 'filename == "/etc/passwd"'
  filter --hist 'count / 1024' syscalls:sys_enter_write --where '(fd & 1) == 1'
  filter --fields comm,count,kstack syscalls:sys_enter_write --where 'count > 65536'
  filter syscalls:sys_enter_openat --where 'filename ~ "/etc/*" && !(comm == "cat")'
  filter sched:sched_switch --where 'prev_pid == 1 || next_pid == 1'
  filter net:netif_receive_skb --where '((struct sk_buff *)skbaddr)->dev->name == "lo"'
  filter --count skb:kfree_skb --where 'reason == "NO_SOCKET"' 1
  filter --count-by comm,filename syscalls:sys_enter_openat --where 'filename ~ "/etc/*"'
  filter --hist len net:netif_receive_skb --where 'name == "lo"' 5
  filter --count-by comm --serve :9437 syscalls:sys_enter_execve
  filter --fields comm,pid,filename syscalls:sys_enter_execve
  filter --count usdt:/usr/bin/python3.11:python:audit --where '(char *)arg0 == "os.system"'
  filter --hist arg0 uprobe:libc.so.6:malloc
  filter --info usdt:/usr/bin/python3.11
  filter kprobe:ip_send_skb --where 'skb->len > 100 && skb->protocol == 8'
  filter kretprobe:ksys_write --where 'ret < 0'
  filter --info kprobe:do_sys_openat2
  filter kprobe:do_sys_openat2 --fields 'filename,*how'

kprobe:GLOB traces each function the glob matches in the kernel's
available_filter_functions (at most 20000), with its own arguments from
BTF; func names the function (--count-by func, --fields func), and a
printed line is named after it. A function the expression or the fields
cannot be compiled for (it has no argument of that name) is left out, one
the kernel will not probe too; the run says how many, and how long
attaching took. Through kprobe_multi links where the kernel has them
(5.18+): hundreds of functions attach and detach in one step; elsewhere a
kprobe each, which the kernel attaches and detaches one at a time. A
list, kprobe:A,kprobe:B_*, is traced the same way over every function it
names or matches; each of its items must name or match at least one. Calls
(ret, duration) over a glob or a list are seen whole: filter --hist
duration 'kprobe:vfs_read*' is funclatency over a glob, --count-by func,ret
each function's outcomes.
  filter --count-by func 'kprobe:tcp_*' --where 'sk->__sk_common.skc_family == 2'
  filter --fields 'func,skb->len' 'kprobe:ip_send_skb,kprobe:ip_rcv'
  filter --info 'kprobe:vfs_*'

A tracepoint glob (syscalls:sys_enter_*) is traced the same way: each
tracepoint with its own fields; probe (or func) names it; a printed line
is named after it and shows the --fields, which a tracepoint must have to
be traced (the run says which were left out).
  filter --count-by probe 'syscalls:sys_enter_*' --where 'comm == "nginx"'

Stack mode, -s (ksnoop's -s): in a list kprobe:A,kprobe:B,...,kprobe:F,
only F's events pass, and only while the thread is inside a call of each
of the others in that order, each called from within the one before,
directly or not (recursion counted exactly to a depth of 64). A list item
may be a user-space function too, uprobe:PATH:FUNCTION. F's event may be a
call seen whole (ret, duration).
  filter -s --fields '*skb,ret' 'kprobe:udp_sendmsg,kprobe:ip_send_skb' --where 'ret != 0'
  filter -s --count-by comm 'uprobe:/usr/bin/python3:PyGC_Collect,kprobe:do_sys_openat2'

A call seen whole (ksnoop's "ip_send_skb(skb, return!=0)"): on
kprobe:FUNCTION or uprobe:PATH:FUNCTION, naming ret (the return value) or
duration (nanoseconds from the entry to the return) in --where, --fields,
--count-by or --hist pairs each call's entry with its return, in the
kernel: the parts of --where joined by && that need only the entry are
judged there; the values the rest and the output need are read at the
entry (a string, a structure printed whole, too) and stashed per thread
and depth, so recursion pairs exactly (to a depth of 64 per thread, the
kernel's own limit for uretprobes: deeper calls are not reported); the
return judges the rest and reports. Printed, a call shows its arguments, then ret and duration. Up to
10240 calls may be in progress at once; a call whose return never comes
(its thread exits in it) is pushed out by newer ones, and the run says at
the end how many had begun and not returned. A kernel function is
reached through fentry and fexit where BPF trampolines attach (--attach
as for kprobe:), else its kprobe and kretprobe; a user-space one through
its uprobe and uretprobe.
  filter kprobe:do_sys_openat2 --where 'ret == -2 && filename ~ "/etc/*"'
  filter --hist duration kprobe:vfs_read --where 'comm == "cat"'
  filter --count-by 'str(arg0),ret' uprobe:libc.so.6:getenv --where 'ret == 0'
  filter kprobe:ip_send_skb --where 'ret != 0' --fields '*skb,ret'

User stacks: --count-by ustack counts the passing events by the stack of
user code that led to them, kstack beside it or not (--count-by
ustack,kstack), and --fields ...,ustack prints each event with its user
stack under its line (numbers and strings beside it, not *PATH; kstack
too, both in the order named), unwound in the kernel by profile's
unwinder: from each
mapped file's .eh_frame table where it has one, by frame pointers
elsewhere, so that code built without frame pointers (most distributions'
libraries and programs) gives whole stacks, where bpftrace's ustack stops
after a frame or two. A user address means something in its process only:
stacks are counted per process, and the report is profile's (each stack
with its comm and pid, innermost frame first; --folded for a flame graph;
--json), with how many stacks were whole and how the others ended (see
profile --help). A file's table is read when its process first passes
(before the run, for the -c command's executable and libraries): an event
in a file not read yet goes to user space with a copy of its stack and is
unwound there, as many as that ring holds; past that it ends [unwind
error: no table]; printed, such an event comes once unwound, after
events that came later. ustack reaches a tracepoint through its record,
a kernel function through its kprobe (not fentry), a user-space probe
through its uprobe; one event, no glob or list.
  filter --count-by ustack uprobe:libc.so.6:malloc -c ./server
  filter --fields comm,count,ustack syscalls:sys_enter_write --where 'count > 65536'
  filter --count-by ustack,kstack --folded syscalls:sys_enter_fsync > fsync.folded

A bad --where is a usage error; the message points at the offending part.
`

const overhead = `One program per event (two for a call seen whole: its entry and its return).
Counting or a histogram costs what the expression reads: make bench measured
--hist count on sys_enter_write at 0.39x of bpftrace's hist() in BPF time
(62 to 84 ns a write on the project's 2-core VM), and a --count behind a
predicate that reads a user string at 0.84x of bpftrace's count() (220 ns).
Printing every event: records go to per-CPU rings, read when a quarter full;
at 500,000 events a second filter delivered 491,000, bpftrace's printf()
127,000. kstack is the kernel's bpf_get_stackid (about 1.2 us a stack);
ustack is profile's in-kernel unwinder (tens of ns a frame). A uprobe's trap
costs the traced process about 0.7 us a hit before any program runs; a
uprobe and uretprobe pair (ret, duration) about 17 us.
`

// Summary is the tool's one-line description: the first line of its --help.
const Summary = "Print (or count) the events that pass an in-kernel filter."

// Tool is the tool's command line, help and run: run.Main runs it,
// run.ManPage writes its manual.
func Tool() run.Tool {
	var o options
	return run.Tool{
		Name:     "filter",
		Lead:     "EVENT",
		Summary:  Summary,
		Details:  details,
		Overhead: overhead,
		Options:  &o,
		Validate: func() error { return validate(&o) },
		Run:      func(ctx context.Context, s *run.Session) error { return trace(ctx, s, &o) },
	}
}

// Main runs the tool with its command-line arguments (without the program
// name) and returns its exit status.
func Main(args []string) int { return run.Main(Tool(), args) }
