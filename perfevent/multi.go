package perfevent

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"

	"github.com/tracekit/tracekit/tracefs"
)

// UprobeMulti reports whether user probes attach as one link per program
// (BPF_LINK_TYPE_UPROBE_MULTI, 6.6+), unless LegacyProbesEnv=1 forces the
// tracefs path. It matters at teardown: the kernel closes each perf event
// of a probe under one global mutex and waits out an RCU grace period
// while it holds it (about 100 ms on a 2-CPU 6.18, 30 ms on a 1-CPU 6.1),
// so N probes cost N grace periods; a link of any number of probes costs
// about one, and links closed at once share theirs. A program attached
// this way must be loaded with AttachType ebpf.AttachTraceUprobeMulti.
func UprobeMulti() bool {
	return !legacyForced() && features.HaveBPFLinkUprobeMulti() == nil
}

// AttachUprobeMulti attaches prog, loaded with ebpf.AttachTraceUprobeMulti,
// to every uprobe of ps as one link: ps are uprobes of one file, all entry
// or all return probes. Each is validated first. Closing the link detaches
// them all.
func AttachUprobeMulti(prog *ebpf.Program, ps []tracefs.Probe) (*Link, error) {
	if len(ps) == 0 {
		return nil, errors.New("attach: no probes")
	}
	first := ps[0]
	offsets := make([]uint64, len(ps))
	var refCtrs []uint64
	for i, p := range ps {
		if err := checkProbe(p); err != nil {
			return nil, fmt.Errorf("attach %w", err)
		}
		if p.Type != tracefs.Uprobe || p.Path != first.Path || p.Ret != first.Ret {
			return nil, fmt.Errorf("attach %s: one link holds uprobes of one file, all entry or all return (%s)", p, first)
		}
		offsets[i] = p.Offset
		if p.RefCtrOffset != 0 {
			if refCtrs == nil {
				refCtrs = make([]uint64, len(ps))
			}
			refCtrs[i] = p.RefCtrOffset
		}
	}
	what := first.String()
	if len(ps) > 1 {
		what = fmt.Sprintf("%s and %d more", first, len(ps)-1)
	}
	ex, err := link.OpenExecutable(first.Path)
	if err != nil {
		return nil, fmt.Errorf("attach %s: %w", what, err)
	}
	opts := &link.UprobeMultiOptions{Addresses: offsets, RefCtrOffsets: refCtrs}
	var l link.Link
	if first.Ret {
		l, err = ex.UretprobeMulti(nil, prog, opts)
	} else {
		l, err = ex.UprobeMulti(nil, prog, opts)
	}
	if err != nil {
		return nil, fmt.Errorf("attach %s: uprobe_multi link: %w%s", what, err, privilegeHint(err))
	}
	return &Link{what: what, l: l}, nil
}

// Link is a program attached through a BPF link. Close detaches it.
type Link struct {
	what string
	l    link.Link
}

// Close detaches the program; twice is harmless.
func (k *Link) Close() error {
	if k == nil || k.l == nil {
		return nil
	}
	err := k.l.Close()
	k.l = nil
	if err != nil {
		return fmt.Errorf("detach %s: %w", k.what, err)
	}
	return nil
}

// closeWidth bounds how many closes CloseAll runs at once: each blocks a
// thread in the kernel for a grace period.
const closeWidth = 64

// CloseAll closes every one of cs, up to 64 at a time, and joins the
// errors: links closed at once share the kernel's grace periods, where
// one after another each waits out its own. (Perf events of probes gain
// nothing: the kernel closes them one at a time whatever we do.)
func CloseAll(cs []func() error) error {
	if len(cs) == 1 {
		return cs[0]()
	}
	errs := make([]error, len(cs))
	var wg sync.WaitGroup
	sem := make(chan struct{}, closeWidth)
	for i, c := range cs {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = c()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// KprobeMulti reports whether kernel probes attach many functions as one
// link (BPF_LINK_TYPE_KPROBE_MULTI, 5.18+, through fprobe), unless
// LegacyProbesEnv=1 forces the tracefs path: attaching and detaching
// hundreds of functions then takes one ftrace update, not one per probe.
// A program attached this way must be loaded with AttachType
// ebpf.AttachTraceKprobeMulti.
func KprobeMulti() bool {
	return !legacyForced() && features.HaveBPFLinkKprobeMulti() == nil
}

// AttachKprobeMulti attaches prog, loaded with ebpf.AttachTraceKprobeMulti,
// to the entries (with ret, the returns) of the kernel functions symbols
// as one link, each with its cookie (bpf_get_attach_cookie). Each name is
// validated first.
func AttachKprobeMulti(prog *ebpf.Program, symbols []string, cookies []uint64, ret bool) (*Link, error) {
	if len(symbols) == 0 {
		return nil, errors.New("attach: no functions")
	}
	for _, s := range symbols {
		if err := tracefs.ValidateSymbol(s); err != nil {
			return nil, fmt.Errorf("attach %w", err)
		}
	}
	kind, attach := "kprobe:", link.KprobeMulti
	if ret {
		kind, attach = "kretprobe:", link.KretprobeMulti
	}
	what := kind + symbols[0]
	if len(symbols) > 1 {
		what = fmt.Sprintf("%s and %d more", what, len(symbols)-1)
	}
	l, err := attach(prog, link.KprobeMultiOptions{Symbols: symbols, Cookies: cookies})
	if err != nil {
		return nil, fmt.Errorf("attach %s: kprobe_multi link: %w%s", what, err, privilegeHint(err))
	}
	return &Link{what: what, l: l}, nil
}
