package bpftrace

import (
	"fmt"
	"os"
	"strings"

	"github.com/cilium/ebpf"

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
	probes, err := list.Match(ap, false)
	if err != nil {
		return nil, err
	}
	if len(probes) == 0 {
		if len(ap.Parts) == 2 && !strings.ContainsAny(ap.Raw, "*?") {
			// The nearest names, as filter gives them.
			if _, err := tracefs.EventDir(ap.Parts[0], ap.Parts[1]); err != nil {
				return nil, usage.Errorf("%s: %v", ap.Raw, err)
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
		return nil, usage.Errorf("%s names no kernel function that can be probed (bpftrace -l 'kprobe:%s' lists them)", ap.Raw, ap.Parts[0])
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
	if !tracefs.Uprobe.Available() {
		return nil, fmt.Errorf("%s: %w", ap.Raw, tracefs.ErrNoUprobes)
	}
	root := ""
	if pid != 0 {
		root = fmt.Sprintf("/proc/%d/root", pid)
		if _, err := os.Stat(root + "/"); err != nil {
			return nil, procfs.Denied(int(pid), err)
		}
	}
	path, err := uprobe.Locate(ap.Parts[0], root)
	if err != nil {
		return nil, userErr(err)
	}
	f, err := uprobe.Open(path)
	if err != nil {
		return nil, userErr(err)
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
			return nil, userErr(err)
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

// userErr: a name that matches nothing is the command line's mistake
// (exit 2); a file that cannot be read is the file's (exit 1).
func userErr(err error) error {
	if uprobe.Misnamed(err) {
		return usage.Errorf("%v", err)
	}
	return err
}

// attach attaches each program where it goes: tracepoints, kprobes (the
// kprobe PMU, or kprobe_events before 4.17), uprobes.
func attach(s *run.Session, coll *ebpf.Collection, res *compile.Result) error {
	var sets []run.ProbeSet
	for _, a := range res.Attach {
		prog, t := coll.Programs[a.Program], a.Target
		var err error
		switch t.Provider {
		case "tracepoint":
			err = s.AttachTracepoint(prog, t.Group, t.Name)
		case "kprobe", "kretprobe":
			err = s.AttachProbe(prog, t.Probe, false)
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
