// Package profile is the tool profile, a sampling CPU profiler: a hand-assembled perf_event
// program samples every CPU at a fixed frequency and counts, in the kernel,
// each (process, kernel stack, user stack). User stacks of code built
// without frame pointers are unwound in the kernel from the files'
// .eh_frame tables, with no copy of the stack to user space.
package profile

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/tracekit/tracekit/internal/usage"
	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/stacks"
)

type options struct {
	run.Common
	run.TreeOption
	Frequency  int      `short:"F" long:"frequency" value-name:"HZ" default:"49" description:"Samples per second on each CPU"`
	Pid        int64    `short:"p" long:"pid" value-name:"PID" description:"Sample only this process (its pid, the tgid)"`
	Unwind     string   `long:"unwind" value-name:"HOW" default:"auto" choice:"auto" choice:"eh" choice:"fp" description:"User stacks: eh (the in-kernel unwinder and the files' .eh_frame tables), fp (frame pointers), auto (eh where a file's table is loaded, frame pointers elsewhere)"`
	Folded     bool     `short:"f" long:"folded" description:"Print one line per stack, 'comm;root;...;leaf count', the input of flamegraph.pl and speedscope"`
	SVG        string   `long:"svg" value-name:"FILE" description:"Also write a flame graph of the whole run to FILE: one self-contained SVG (hover names a frame and its share, click zooms)"`
	SVGLabels  []string `long:"svg-label" value-name:"NAME=VALUE" description:"Draw --svg from the stacks that carry this label value only (repeatable: all must hold), e.g. ep=/alpha or http.route=/beta, the value as the report prints it, unquoted. Without it the graph splits each process by its labels, as --folded does"`
	Pprof      string   `long:"pprof" value-name:"FILE" description:"Also write the whole run to FILE as a gzipped pprof profile (go tool pprof, speedscope)"`
	Budget     int      `long:"table-mib" value-name:"MIB" default:"64" description:"The most kernel memory unwind tables may take, in MiB, 1 to 512: taken 4 MiB at a time as files are read, so above 4 rounded up to a multiple of 4 (8 bytes a row: python3.11 with libc and the loader takes 0.8, a process linking libLLVM-14 12)"`
	NoParams   bool     `long:"no-params" description:"Name C++ and Rust functions without their parameters and template arguments, as BCC does (std::vector::push_back), not as perf does (std::vector<int, std::allocator<int> >::push_back(int const&)): overloads then share one frame"`
	Idle       bool     `short:"I" long:"include-idle" description:"Also count the idle task's samples"`
	UserOnly   bool     `short:"U" long:"user-stacks-only" description:"Report user stacks only, without their kernel frames (BCC's profile -U)"`
	KernelOnly bool     `short:"K" long:"kernel-stacks-only" description:"Report kernel stacks only, without their user frames (BCC's profile -K)"`
	AllCPUs    bool     `short:"a" long:"all-cpus" description:"Every CPU, as perf's -a: what profile samples anyway"`
	CPUs       string   `short:"C" long:"cpu" value-name:"CPUS" description:"Sample only these CPUs: a number or a list as perf's -C takes it (0,2-3); BCC's profile -C"`
	Tid        int64    `short:"L" long:"tid" value-name:"TID" description:"Sample only this thread, on whichever CPU it runs (BCC's profile -L); its process's tables are read as -p's"`
	Labels     []string `long:"label" value-name:"NAME=SOURCE" description:"Read a value of the sampled thread at each sample and count stacks per value (repeatable, up to 8): SOURCE is tls:[FILE:]SYMBOL:TYPE (a thread-local) or var:[FILE:]SYMBOL:TYPE (a global); TYPE is int (8 bytes), int8..int64, uint8..uint64, str (a char *), chars (a char array), or strobemeta's strobe-int, strobe-str, strobe-map. See below"`
	NoContext  bool     `long:"no-context" description:"Do not read the context processes publish for profilers (the OpenTelemetry thread context, custom labels: see below)"`
	OffCPU     bool     `long:"off-cpu" description:"Where threads wait, not where they run: stacks taken as a thread leaves the CPU (sched_switch), weighted by the time until it runs again, in microseconds (pprof: nanoseconds). See below"`
	MinBlock   uint64   `short:"m" long:"min-block" value-name:"USECS" default:"1" description:"--off-cpu: count only waits of at least USECS microseconds (as offcputime -m)"`
	MaxBlock   uint64   `short:"M" long:"max-block" value-name:"USECS" description:"--off-cpu: count only waits of at most USECS microseconds (as offcputime -M; default: no bound)"`
	Missing    string   `long:"assume-missing" value-name:"FEATURE" description:"Work as on a kernel without FEATURE, to try an older kernel's way on this one: task_pt_regs (5.15+) makes a sample taken in the kernel find the user's registers at the top of the task's kernel stack, as before 5.15"`

	parsed stacks.Options // what validate made of the above
}

const details = `profile samples the stacks that run on the CPUs: a software CPU-clock event
per CPU runs a BPF program -F times a second, which reads the kernel stack and
the user stack and counts them by (pid, kernel stack, user stack) in a BPF
hash, keyed by the addresses themselves. Every second (and at each report)
profile moves the counts to user space: the program counts in one of two
hashes of 4096 stacks while the other is read and emptied, so a long run
never fills them. A report holds at most 16384 stacks, and interval reports
start again each time (--cumulative: not); a sample past either bound is
counted as lost, and the report says so. User space names the frames when it
prints a report: kallsyms; the .symtab and .dynsym of each mapped file, and
its separate debug file by build id under /usr/lib/debug/.build-id (Debian's
-dbg packages); C++ and Rust names demangled as perf prints them, with their
parameters and template arguments (f(int) and f(double) are two frames;
--no-params: f).

User stacks. Most distribution binaries (python3.11, libc) are built without
frame pointers: a frame-pointer walk (bpftrace's ustack, BCC's profile) stops
after a frame or two. --unwind=eh walks them in the kernel: profile reads each
mapped file's .eh_frame into a table of rows (address -> where the caller's
frame and return address are), and the program looks up each frame's row and
steps to its caller, up to 256 frames (8 per program, then a tail call, 32
programs; 46 on kernels that take hash keys of 512 bytes at most, as 5.10). The tables of
the -p/-c processes are loaded when each is first seen (and again after an
exec), a -c command's executable and libraries before it is released;
tracing everything, a file's table is loaded when the unwinder first meets
an address in it. A sample that meets a file whose table is not read yet
is not cut short: a copy of the top of its stack (8 KiB at most) goes to
user space, which unwinds it once the table is read. auto (the default) uses
the tables where a file has one and frame pointers elsewhere (JIT code); fp
uses only frame pointers. The unwinder reads x86-64, arm64 and riscv64
frames (on arm64 and riscv64: the return address in x30 or ra where a frame
saved none, signal frames through the vdso's trampoline; arm64's pointer
authentication codes stripped); on other architectures (32-bit ARM) auto
means fp, and eh is refused.

--label reads the sampled thread's own memory at each sample (the idea of
strobemeta): a request id, the endpoint being served, a tenant. A stack
sampled under two values of a label is two stacks. The symbol is looked up
in FILE (a path, or a base name among the mapped files) or else in the
executable, then each library, of every sampled process (a symbol of the
other kind, a global asked as tls:, is refused before the run when it is
in FILE, the -c command's executable or a file the -p process maps). A
global (var:) is
read anywhere, a thread-local (tls:) in the executable or a library by any
access model (local-exec, initial-exec, general- and local-dynamic,
TLSDESC), on glibc and musl: a library's is found through what the loader
wrote in its GOT, an offset from the thread pointer or a module read
through the thread's DTV. Strings keep 63 bytes. A
value that cannot be read at that instant (a thread before its TLS is set
up, a library's thread-locals the thread never touched, a NULL string, a
page not present) is left out of that sample's labels. The strobe types
read strobemeta's layouts (an 8-byte header, then the value): strobe-int
is set while its header's len is not 0; a strobe-map becomes the labels
NAME.id, NAME.tag and NAME.KEY for its first 3 entries, their strings
kept to 31 bytes. The text report prints the labels above
each stack's "- comm (pid)" line, --folded as frames after the process
name ("comm;[req=101];[ep=/alpha];main;..."), --svg the same way
(--svg-label ep=/alpha draws only the stacks with that value), --json as
"labels", and --pprof as sample labels (numbers as numeric labels: go tool
pprof -tags).

Off-CPU (--off-cpu): where threads wait. At every context switch
(sched:sched_switch) the thread leaving the CPU has its kernel and user
stacks taken, the user stack by the same in-kernel unwinder (whole stacks
without frame pointers, which BCC's offcputime cannot give), and stashed
with the time by thread id; when the thread runs again, the time it was
away is added to that stack's total, in the kernel. Reports weigh stacks
in microseconds (text, --folded, --svg, --json "usecs"), --pprof in
nanoseconds ("off-cpu"). Waits shorter than --min-block (1 us) or longer
than --max-block are left out, as offcputime -m and -M. Waiting includes
being preempted (runnable, not running). A thread that goes to sleep in a
file whose table is not read yet has its stack deferred to user space as
a sample's is, its wait added when it runs again; a preempted one's ends
[unwind error: no table] there; the table is read for the next one.

The context a process publishes for profilers is read too, with no flag
(--no-context: not): its stacks carry it as labels.
  OpenTelemetry thread context, v1 (OTEP 4947): the thread-local
    otel_thread_ctx_v1 points at the thread's record; a valid one gives
    trace_id and span_id (hex, left out when zero) and its attributes, named
    by the threadlocal.attribute_key_map of the process context (OTEP 4719,
    version 2: a mapping named OTEL_CTX; schema tlsdesc_v1), attr.N where
    none names them; the first 100 bytes of attributes are kept.
  Custom labels, ABI v0 and v1 (github.com/polarsignals/custom-labels):
    custom_labels_abi_version says which; the thread's label set, through
    custom_labels_current_set (v1) or custom_labels_thread_local_data (v0),
    gives its first 4 labels as KEY=VALUE (keys cut at 16 bytes, values at
    40; the first of a key kept).
Each distinct context read has an id in a kernel table of 4096: a stack's
key grows by 8 bytes, whatever the context holds.

A stack that ends before _start is marked by why:
  [unwind error: no unwind row]  the address is in no FDE of its file (not
                                 at the loader's _start, the first call: there
                                 the stack is complete)
  [unwind error: no table]       the address is in no file with a loaded table
  [unwind error: read]           the stack could not be read (paged out)
  [unwind error: read after a frame-pointer step]
                                 auto stepped a frame of a file whose table is
                                 not loaded (yet: a process's first samples)
                                 by its frame pointer, and it was not one
  [unwind error: unsupported unwind rule]  a signal frame or hand-written CFI
  [truncated]                    256 frames, the most the walk keeps (fp:
                                 kernel.perf_event_max_stack, 127 unless raised)
  [no user registers]            a kernel thread
The report counts each.

In a container (a pid namespace of its own), pids are that namespace's, and
only its processes are sampled: the others' memory maps cannot be read there.

Examples:
  profile                        # all CPUs until Ctrl-C, hottest stacks last
  profile -F 99 -p 1234 10 1     # pid 1234 at 99 Hz, one report after 10 s
  profile -f -c './build.sh' > out.folded; flamegraph.pl out.folded > fg.svg
  profile --unwind=fp -p 1234    # frame pointers only (as bpftrace's ustack)
  profile --svg fg.svg --pprof cpu.pb.gz 10 1
                                 # 10 s: a flame graph and a pprof file
  go tool pprof -top cpu.pb.gz
  profile -c ./server --label req=tls:request_id:int --label ep=tls:endpoint:str
                                 # stacks per request id and endpoint
  profile -c ./server --label ep=tls:endpoint:str --svg alpha.svg --svg-label ep=/alpha
                                 # a flame graph of what /alpha runs
  profile --off-cpu -m 1000 -p 1234 10 1
                                 # where pid 1234 waited 1 ms or more, for 10 s
  profile --off-cpu -f -c ./server > off.folded
                                 # flamegraph.pl --countname=us off.folded

`

const overhead = `A BPF program per CPU runs -F times a second (49 by default) on a software
CPU-clock event, whatever the system does: at 49 Hz on 2 CPUs that is 98
runs a second. The in-kernel unwinder costs about 56 ns a user frame on the
project's 2-core VM (bpftrace's frame-pointer ustack about 32, and it stops
where frame pointers do); a sample of a 10-frame stack about 5 us of BPF
time. A file's unwind tables are read once, on the first process that maps
it (python3.11's 8 files: 107,449 rows, 0.8 MiB of map memory, in 33 ms),
within --table-mib. Over 50 short-lived processes a run took 0.29x of the
CPU of perf record --call-graph dwarf with perf script.
`

// Summary is the tool's one-line description: the first line of its --help.
const Summary = "Sample on-CPU stacks, kernel and user, unwound in the kernel without frame pointers."

// Tool is the tool's command line, help and run: run.Main runs it,
// run.ManPage writes its manual.
func Tool() run.Tool {
	var o options
	return run.Tool{
		Name:     "profile",
		Summary:  Summary,
		Details:  details,
		Overhead: overhead,
		Options:  &o,
		Validate: func() error { return validate(&o) },
		Run:      func(ctx context.Context, s *run.Session) error { return stacks.Run(ctx, s, &o.parsed) },
	}
}

// Main runs the tool with its command-line arguments (without the program
// name) and returns its exit status.
func Main(args []string) int { return run.Main(Tool(), args) }

// validate checks the options and makes them the pipeline's.
func validate(o *options) error {
	if err := o.CheckTree(); err != nil {
		return err
	}
	// Checked here, not by a choice tag: go-flags lists a single choice as
	// "Allowed values are: " and nothing.
	if o.Missing != "" && o.Missing != "task_pt_regs" {
		return usage.Errorf("--assume-missing %q: the kernel feature profile can do without is task_pt_regs", o.Missing)
	}
	if o.Frequency < 1 || o.Frequency > 10000 {
		return usage.Errorf("invalid -F %d: want samples per second, 1 to 10000", o.Frequency)
	}
	p := &o.parsed
	*p = stacks.Options{Common: o.Common, TreeOption: o.TreeOption, Frequency: o.Frequency, Pid: o.Pid, Unwind: o.Unwind,
		Folded: o.Folded, SVG: o.SVG, Pprof: o.Pprof, Budget: o.Budget, NoParams: o.NoParams, Idle: o.Idle,
		NoContext: o.NoContext, OffCPU: o.OffCPU, MinBlock: o.MinBlock, MaxBlock: o.MaxBlock, Missing: o.Missing,
		UserOnly: o.UserOnly, KernelOnly: o.KernelOnly}
	if o.UserOnly && o.KernelOnly {
		return usage.Errorf("-U and -K cannot be used together: -U leaves out the kernel's frames, -K the user's")
	}
	if err := p.ArchUnwind(); err != nil {
		return err
	}
	if o.OffCPU {
		if o.Idle {
			return usage.Errorf("--off-cpu and -I cannot be used together: the idle task never waits")
		}
		if o.MaxBlock > 0 && o.MaxBlock < o.MinBlock {
			return usage.Errorf("--max-block %d is below --min-block %d: no wait would be counted", o.MaxBlock, o.MinBlock)
		}
		if o.MaxBlock > 1<<63/1000 || o.MinBlock > 1<<63/1000 {
			return usage.Errorf("--min-block and --max-block take microseconds, up to %d", uint64(1<<63/1000))
		}
	} else if o.MinBlock != 1 || o.MaxBlock != 0 {
		return usage.Errorf("--min-block and --max-block bound the waits of --off-cpu: give --off-cpu too")
	}
	if o.Folded && o.JSON {
		return usage.Errorf("--folded and --json cannot be used together: pick one report format")
	}
	if o.Folded && o.Timestamp {
		return usage.Errorf("--folded and -T cannot be used together: folded lines are for flame graph tools, which a time line would break")
	}
	if o.Budget < 1 || o.Budget > stacks.MaxBudget {
		return usage.Errorf("invalid --table-mib %d: want 1 to %d", o.Budget, stacks.MaxBudget)
	}
	labels, err := stacks.ParseLabels(o.Labels)
	if err != nil {
		return err
	}
	for _, l := range o.SVGLabels {
		name, value, ok := strings.Cut(l, "=")
		if !ok || name == "" {
			return usage.Errorf("--svg-label %q: want NAME=VALUE, a label's name and value as the report prints them (ep=/alpha)", l)
		}
		p.SVGLabels = append(p.SVGLabels, stacks.LabelValue{Name: name, Value: value})
	}
	if len(p.SVGLabels) > 0 && o.SVG == "" {
		return usage.Errorf("--svg-label chooses what --svg draws: give --svg FILE too")
	}
	if err := stacks.CheckLabelFiles(labels); err != nil {
		return err
	}
	p.Labels = labels
	if o.CPUs != "" || o.Tid != 0 {
		if o.OffCPU {
			return usage.Errorf("-C and -L pick where on-CPU samples are taken: --off-cpu takes its stacks at every switch, on every CPU")
		}
		if o.CPUs != "" && o.Tid != 0 {
			return usage.Errorf("-C and -L cannot be used together: -L follows its thread on every CPU")
		}
	}
	if o.CPUs != "" {
		cpus, err := perfevent.ParseCPUList(o.CPUs)
		if err != nil {
			return usage.Errorf("invalid -C %q: want a CPU or a list of them, as 0,2-3", o.CPUs)
		}
		online, err := perfevent.OnlineCPUs()
		if err != nil {
			return err
		}
		for _, c := range cpus {
			if !slices.Contains(online, c) {
				return usage.Errorf("-C %s: CPU %d is not online (online: %s)", o.CPUs, c, cpuList(online))
			}
		}
		slices.Sort(cpus)
		p.CPUs = slices.Compact(cpus)
	}
	if o.Tid != 0 {
		if o.Command != "" {
			return usage.Errorf("-L and -c cannot be used together: -c samples the command and its children")
		}
		tgid, err := procfs.ThreadGroup(o.Tid)
		if err != nil {
			return err
		}
		if o.Pid != 0 && o.Pid != tgid {
			return usage.Errorf("-L %d is a thread of process %d, not of -p %d", o.Tid, tgid, o.Pid)
		}
		o.Pid, p.Pid, p.Tid = tgid, tgid, int(o.Tid)
	}
	if o.Pid != 0 {
		if o.Command != "" {
			return usage.Errorf("-p and -c cannot be used together: -c samples the command and its children")
		}
		if err := procfs.CheckPid(o.Pid); err != nil {
			return err
		}
	}
	return stacks.CheckLabelKinds(labels, int(o.Pid), o.Command)
}

// cpuList writes CPUs as the kernel lists them: 0-3,8.
func cpuList(cpus []int) string {
	var parts []string
	for i := 0; i < len(cpus); {
		j := i
		for j+1 < len(cpus) && cpus[j+1] == cpus[j]+1 {
			j++
		}
		if j > i {
			parts = append(parts, fmt.Sprintf("%d-%d", cpus[i], cpus[j]))
		} else {
			parts = append(parts, strconv.Itoa(cpus[i]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}
