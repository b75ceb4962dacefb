package bpftrace

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/bpftrace/compile"
	"github.com/tracekit/tracekit/bpftrace/list"
	"github.com/tracekit/tracekit/bpftrace/parse"
	"github.com/tracekit/tracekit/internal/usage"
	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/tracefs"
	"github.com/tracekit/tracekit/uprobe"
)

// maxTargets bounds the programs one attach point's globs make: each is
// a program loaded and a perf event opened.
const maxTargets = 512

// targets resolves an attach point against the kernel and the files: its
// globs expanded, each tracepoint's format read, each user function's
// file offset found (in pid's root with -p). A name that matches nothing
// is a usage error, with the nearest names where there are some.
func targets(ap *parse.AttachPoint, pid int64) ([]compile.Target, error) {
	var out []compile.Target
	var err error
	switch ap.Provider {
	case "tracepoint":
		out, err = tracepoints(ap)
	case "kprobe", "kretprobe":
		out, err = kprobes(ap)
	case "uprobe", "uretprobe":
		out, err = uprobes(ap, pid)
	case "usdt":
		out, err = usdts(ap, pid)
	case "profile", "software", "hardware":
		var t compile.Target
		t, err = perfTarget(ap)
		out = []compile.Target{t}
	default:
		return nil, usage.Errorf("%s: %s probes are not taken yet", ap.Raw, ap.Provider)
	}
	if err != nil {
		return nil, err
	}
	if len(out) > maxTargets {
		return nil, usage.Errorf("%s names %d probes, more than the %d taken: narrow its globs", ap.Raw, len(out), maxTargets)
	}
	return out, nil
}

// tracepoints resolves a tracepoint attach point.
func tracepoints(ap *parse.AttachPoint) ([]compile.Target, error) {
	// A name without a glob is its format file, where there is one: the
	// list of every event (thousands of lines) is read for globs, and
	// for ftrace's own events, which have format files and which
	// bpftrace does not take (they are not in available_events).
	if len(ap.Parts) == 2 && ap.Parts[0] != "ftrace" && !strings.ContainsAny(ap.Raw, "*?[") {
		if f, err := tracefs.ReadFormat(ap.Parts[0], ap.Parts[1]); err == nil {
			return []compile.Target{{Provider: "tracepoint", Group: ap.Parts[0], Name: ap.Parts[1], Format: f}}, nil
		}
	}
	probes, err := list.Match(ap, false)
	if err != nil {
		return nil, err
	}
	if len(probes) == 0 {
		if len(ap.Parts) == 2 && !strings.ContainsAny(ap.Raw, "*?") {
			// The nearest names, as filter gives them.
			if _, err := tracefs.EventDir(ap.Parts[0], ap.Parts[1]); err != nil {
				err = usage.Errorf("%s: %v", ap.Raw, err)
				if ap.Listed {
					// One of a list (opensnoop.bt's sys_enter_open and
					// sys_enter_openat: arm64 and riscv64 have no open):
					// skipped, as bpftrace skips it.
					return nil, &missingFunc{"the kernel", ap.Parts[0] + ":" + ap.Parts[1], err}
				}
				return nil, err
			}
		}
		return nil, usage.Errorf("%s names no tracepoint (bpftrace -l '%s' lists them)", ap.Raw, ap.Raw)
	}
	var tps []compile.Target
	for _, p := range probes {
		parts := strings.SplitN(strings.TrimPrefix(p.Name, "tracepoint:"), ":", 2)
		f, err := tracefs.ReadFormat(parts[0], parts[1])
		if err != nil {
			return nil, err
		}
		tps = append(tps, compile.Target{Provider: "tracepoint", Group: parts[0], Name: parts[1], Format: f})
	}
	return tps, nil
}

// kprobes resolves a kprobe or kretprobe attach point to the kernel's
// functions it names.
func kprobes(ap *parse.AttachPoint) ([]compile.Target, error) {
	if !perfevent.KprobesAvailable() {
		return nil, fmt.Errorf("%s: %w", ap.Raw, perfevent.ErrNoKprobes)
	}
	if !strings.ContainsAny(ap.Parts[0], "*?") {
		if err := tracefs.ValidateSymbol(ap.Parts[0]); err != nil {
			return nil, usage.Errorf("%s: %v", ap.Raw, err)
		}
	}
	probes, err := list.Match(ap, false)
	if err != nil {
		return nil, err
	}
	if len(probes) == 0 {
		if ap.Listed {
			// One of a list (biolatency.bt's blk_account_io_start and
			// __blk_account_io_start: one kernel has the one, another the
			// other; dcsnoop.bt's lookup_fast and lookup_fast.constprop.*,
			// the compiler's copy some builds have): skipped, as bpftrace
			// skips it.
			return nil, &missingFunc{"the kernel", ap.Parts[0], usage.Errorf("%s names no kernel function that can be probed", ap.Raw)}
		}
		if near := tracefs.NearFunctions(ap.Parts[0]); len(near) > 0 && !strings.ContainsAny(ap.Parts[0], "*?") {
			return nil, usage.Errorf("%s names no kernel function that can be probed (near: %s)", ap.Raw, strings.Join(near, ", "))
		}
		return nil, usage.Errorf("%s names no kernel function that can be probed (bpftrace -l 'kprobe:*' lists those that can)", ap.Raw)
	}
	var out []compile.Target
	for _, p := range probes {
		fn := strings.TrimPrefix(p.Name, ap.Provider+":")
		out = append(out, compile.Target{Provider: ap.Provider, Func: fn, Probe: tracefs.Probe{Type: tracefs.Kprobe, Symbol: fn, Ret: ap.Provider == "kretprobe"}})
	}
	return out, nil
}

// uprobes resolves a uprobe or uretprobe attach point, PATH:FUNCTION
// (globs taken in FUNCTION), to its functions' file offsets.
func uprobes(ap *parse.AttachPoint, pid int64) ([]compile.Target, error) {
	if len(ap.Parts) != 2 {
		return nil, usage.Errorf("%s: a uprobe is written %s:PATH:FUNCTION here", ap.Raw, ap.Provider)
	}
	f, path, err := userFile(ap, pid)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var syms []uprobe.Sym
	if strings.ContainsAny(ap.Parts[1], "*?") {
		if syms, err = f.Glob(ap.Parts[1]); err != nil {
			return nil, usage.Errorf("%s: %v", ap.Raw, err)
		}
		if len(syms) == 0 {
			return nil, usage.Errorf("%s names no function of %s", ap.Raw, path)
		}
	} else {
		sym, err := f.Function(ap.Parts[1])
		if err != nil {
			if uprobe.Misnamed(err) {
				return nil, &missingFunc{path, ap.Parts[1], err}
			}
			return nil, err
		}
		syms = []uprobe.Sym{sym}
	}
	var out []compile.Target
	for _, sym := range syms {
		off, err := f.CodeOffset(sym.Value)
		if err != nil {
			return nil, fmt.Errorf("%s: %s: %w", ap.Raw, sym.Name, err)
		}
		out = append(out, compile.Target{Provider: ap.Provider, Func: sym.Name, Probe: tracefs.Probe{Type: tracefs.Uprobe, Path: path, Offset: off, Ret: ap.Provider == "uretprobe"}})
	}
	return out, nil
}

// perfEvent is a software or hardware event bpftrace names, and its
// default sample period.
type perfEvent struct {
	config uint32
	period uint64
}

// softwareEvents and hardwareEvents are bpftrace 0.17's names (aliases
// too) and default periods (src/probe_matcher.h's tables).
var (
	softwareEvents = map[string]perfEvent{
		"cpu-clock": {unix.PERF_COUNT_SW_CPU_CLOCK, 1000000}, "cpu": {unix.PERF_COUNT_SW_CPU_CLOCK, 1000000},
		"task-clock":  {unix.PERF_COUNT_SW_TASK_CLOCK, 1000000},
		"page-faults": {unix.PERF_COUNT_SW_PAGE_FAULTS, 100}, "faults": {unix.PERF_COUNT_SW_PAGE_FAULTS, 100},
		"context-switches": {unix.PERF_COUNT_SW_CONTEXT_SWITCHES, 1000}, "cs": {unix.PERF_COUNT_SW_CONTEXT_SWITCHES, 1000},
		"cpu-migrations":   {unix.PERF_COUNT_SW_CPU_MIGRATIONS, 1},
		"minor-faults":     {unix.PERF_COUNT_SW_PAGE_FAULTS_MIN, 100},
		"major-faults":     {unix.PERF_COUNT_SW_PAGE_FAULTS_MAJ, 1},
		"alignment-faults": {unix.PERF_COUNT_SW_ALIGNMENT_FAULTS, 1},
		"emulation-faults": {unix.PERF_COUNT_SW_EMULATION_FAULTS, 1},
	}
	hardwareEvents = map[string]perfEvent{
		"cpu-cycles": {unix.PERF_COUNT_HW_CPU_CYCLES, 1000000}, "cycles": {unix.PERF_COUNT_HW_CPU_CYCLES, 1000000},
		"instructions":        {unix.PERF_COUNT_HW_INSTRUCTIONS, 1000000},
		"cache-references":    {unix.PERF_COUNT_HW_CACHE_REFERENCES, 1000000},
		"cache-misses":        {unix.PERF_COUNT_HW_CACHE_MISSES, 1000000},
		"branch-instructions": {unix.PERF_COUNT_HW_BRANCH_INSTRUCTIONS, 100000}, "branches": {unix.PERF_COUNT_HW_BRANCH_INSTRUCTIONS, 100000},
		"branch-misses":   {unix.PERF_COUNT_HW_BRANCH_MISSES, 100000},
		"bus-cycles":      {unix.PERF_COUNT_HW_BUS_CYCLES, 100000},
		"frontend-stalls": {unix.PERF_COUNT_HW_STALLED_CYCLES_FRONTEND, 1000000},
		"backend-stalls":  {unix.PERF_COUNT_HW_STALLED_CYCLES_BACKEND, 1000000},
		"ref-cycles":      {unix.PERF_COUNT_HW_REF_CPU_CYCLES, 1000000},
	}
)

// perfTarget is a sampling probe: profile:UNIT:N on the CPU clock (hz:
// N a second; s, ms, us: every N of them, per CPU), software:EVENT[:N]
// and hardware:EVENT[:N] every N events (bpftrace's default N without
// it).
func perfTarget(ap *parse.AttachPoint) (compile.Target, error) {
	t := compile.Target{Provider: ap.Provider, Raw: ap.Raw, PerfType: unix.PERF_TYPE_SOFTWARE, PerfConfig: unix.PERF_COUNT_SW_CPU_CLOCK}
	if ap.Provider == "profile" {
		n, err := strconv.ParseUint(ap.Parts[1], 10, 32)
		if err != nil || n == 0 {
			return t, usage.Errorf("%s: N is a positive number", ap.Raw)
		}
		switch ap.Parts[0] {
		case "hz":
			t.Period = uint64(time.Second) / n
		case "s":
			t.Period = n * uint64(time.Second)
		case "ms":
			t.Period = n * uint64(time.Millisecond)
		case "us":
			t.Period = n * uint64(time.Microsecond)
		}
		if t.Period < uint64(10*time.Microsecond) {
			return t, usage.Errorf("%s: a sample every %v per CPU is more than the toolkit takes (10 µs at least)", ap.Raw, time.Duration(t.Period))
		}
		return t, nil
	}
	events := softwareEvents
	if ap.Provider == "hardware" {
		events, t.PerfType = hardwareEvents, unix.PERF_TYPE_HARDWARE
	}
	ev, ok := events[ap.Parts[0]]
	if !ok {
		names := make([]string, 0, len(events))
		for name := range events {
			names = append(names, name)
		}
		slices.Sort(names)
		return t, usage.Errorf("%s: no %s event %q (there are %s)", ap.Raw, ap.Provider, ap.Parts[0], strings.Join(names, ", "))
	}
	t.PerfConfig, t.Period = ev.config, ev.period
	if len(ap.Parts) == 2 {
		n, err := strconv.ParseUint(ap.Parts[1], 10, 64)
		if err != nil || n == 0 {
			return t, usage.Errorf("%s: the count is a positive number", ap.Raw)
		}
		t.Period = n
	}
	return t, nil
}

// missingFunc is a uprobe whose library has no such function, or a
// kprobe or tracepoint of a list whose kernel has none: skipped, as bpftrace skips it
// (its tools probe functions that some versions of a library or of the
// kernel have and others not), unless nothing else is left to attach.
type missingFunc struct {
	path, name string
	err        error
}

func (m *missingFunc) Error() string { return m.err.Error() }

// userErr: a name that matches nothing is the command line's mistake
// (exit 2); a file that cannot be read is the file's (exit 1).
func userErr(err error) error {
	if uprobe.Misnamed(err) {
		return usage.Errorf("%v", err)
	}
	return err
}

// userFile opens the file of a uprobe's or usdt's attach point (a
// library by its short name, in pid's root with -p), where the kernel
// has uprobes.
func userFile(ap *parse.AttachPoint, pid int64) (*uprobe.File, string, error) {
	if !tracefs.Uprobe.Available() {
		return nil, "", fmt.Errorf("%s: %w", ap.Raw, tracefs.ErrNoUprobes)
	}
	root := ""
	if pid != 0 {
		root = fmt.Sprintf("/proc/%d/root", pid)
		if _, err := os.Stat(root + "/"); err != nil {
			return nil, "", procfs.Denied(int(pid), err)
		}
	}
	path, err := uprobe.Locate(ap.Parts[0], root)
	if err != nil {
		return nil, "", userErr(err)
	}
	f, err := uprobe.Open(path)
	if err != nil {
		return nil, "", userErr(err)
	}
	return f, path, nil
}

// usdts resolves a usdt attach point to every site of the probes it
// names (usdt:PATH:PROBE takes any provider; globs are taken in either
// name), each with its arguments' specs, in pid's root with -p.
func usdts(ap *parse.AttachPoint, pid int64) ([]compile.Target, error) {
	if len(ap.Parts) < 2 {
		return nil, usage.Errorf("%s: a usdt probe is written usdt:PATH:PROBE or usdt:PATH:PROVIDER:PROBE here", ap.Raw)
	}
	f, path, err := userFile(ap, pid)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	probes, err := f.USDT()
	if err != nil {
		return nil, err
	}
	provider, name := list.USDTGlobs(ap.Parts)
	var out []compile.Target
	for _, p := range probes {
		if !list.MatchUSDT(p, provider, name) {
			continue
		}
		for _, st := range p.Sites {
			if err := f.Probeable(st.Addr); err != nil {
				return nil, fmt.Errorf("%s: %s: %w", ap.Raw, p, err)
			}
			out = append(out, compile.Target{
				Provider: "usdt", Func: p.Provider + ":" + p.Name,
				Probe: tracefs.Probe{Type: tracefs.Uprobe, Path: path, Offset: st.Offset, RefCtrOffset: p.Semaphore},
				USDT:  &compile.USDTSite{Addr: st.Addr, Args: slices.Clone(st.Args)},
			})
		}
	}
	if len(out) == 0 {
		return nil, usage.Errorf("%s names no USDT probe of %s (bpftrace -l 'usdt:%s:*' lists them)", ap.Raw, path, path)
	}
	return out, nil
}

// attach attaches each program where it goes: tracepoints, kprobes (the
// kprobe PMU, or kprobe_events before 4.17), uprobes.
func attach(s *run.Session, coll *ebpf.Collection, res *compile.Result) error {
	var at []attachment
	for _, a := range res.Attach {
		at = append(at, attachment{coll.Programs[a.Program], a.Target})
	}
	return attachAll(s, at)
}

// attachment is a program and where it goes.
type attachment struct {
	prog *ebpf.Program
	t    compile.Target
}

// attachAll attaches each program to its target.
func attachAll(s *run.Session, at []attachment) error {
	var sets []run.ProbeSet
	for _, a := range at {
		prog, t := a.prog, a.t
		var err error
		switch t.Provider {
		case "tracepoint":
			err = s.AttachTracepoint(prog, t.Group, t.Name)
		case "kprobe", "kretprobe":
			err = s.AttachProbe(prog, t.Probe, false)
		case "profile", "software", "hardware":
			attr := unix.PerfEventAttr{Type: t.PerfType, Config: uint64(t.PerfConfig), Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})), Sample: t.Period}
			var events *perfevent.PerCPU
			if events, err = perfevent.OpenPerCPU(t.Raw, attr, prog, perfevent.AttachEach, nil); err == nil {
				s.OnDetach("", events.Close)
			}
		case "interval":
			attr := unix.PerfEventAttr{Type: t.PerfType, Config: uint64(t.PerfConfig), Size: uint32(unsafe.Sizeof(unix.PerfEventAttr{})), Sample: t.Period}
			var events *perfevent.PerCPU
			if events, err = perfevent.OpenFirstCPU(t.Raw, attr, prog); err == nil {
				s.OnDetach("", events.Close)
			}
		default:
			sets = append(sets, run.ProbeSet{Prog: prog, Probes: []tracefs.Probe{t.Probe}})
		}
		if err != nil {
			return err
		}
	}
	if len(sets) == 0 {
		return nil
	}
	return s.AttachUprobes(sets, false)
}
