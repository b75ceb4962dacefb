package iolat

import (
	"fmt"
	"testing"

	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/internal/loadtest"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/kernel"
	"github.com/tracekit/tracekit/loader"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/run"
)

func rq(t *testing.T, event string) rqFields {
	t.Helper()
	r, err := rqFieldsOf(tooltest.Format(t, event+".6.18.format"))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// variants are the program configurations the goldens pin and the load
// test proves: one line per variant.
func variants(t *testing.T) map[string]progConfig {
	issue, complete, insert := rq(t, "block_rq_issue"), rq(t, "block_rq_complete"), rq(t, "block_rq_insert")
	base := progConfig{Issue: issue, Complete: complete, Divisor: 1000}
	out := map[string]progConfig{}
	for name, set := range map[string]func(c *progConfig){
		"usecs":        func(c *progConfig) {},
		"msecs_disks":  func(c *progConfig) { c.Divisor, c.By = 1000000, byDisk },
		"flags":        func(c *progConfig) { c.By = byFlags },
		"one_disk":     func(c *progConfig) { c.Dev = procfs.MkDev(7, 0) },
		"heatmap":      func(c *progConfig) { c.Heatmap = true },
		"heatmap_disk": func(c *progConfig) { c.Heatmap, c.By = true, byDisk },
		"queued":       func(c *progConfig) { c.Insert = &insert },
		"slots":        func(c *progConfig) { c.Slots = nSlots },
		// The arguments' programs, at 6.18's offsets, and 5.10's (the
		// request after the queue in issue and insert; rq->rq_disk).
		"raw_slots_disks": func(c *progConfig) { c.Args, c.Slots, c.By = argsAt(hook.Raw, 0), nSlots, byDisk },
		"btf_flags_disk": func(c *progConfig) {
			c.Args, c.Slots, c.By, c.Dev = argsAt(hook.BTF, 0), nSlots, byFlags, procfs.MkDev(7, 0)
		},
		"btf_510_queued": func(c *progConfig) { c.Args, c.Insert, c.By = argsAt(hook.BTF, 1), &insert, byDisk },
		"slots_disk":     func(c *progConfig) { c.Slots, c.Heatmap, c.By, c.Dev = nSlots, true, byDisk, procfs.MkDev(7, 0) },
	} {
		cfg := base
		set(&cfg)
		out[name] = cfg
	}
	return out
}

// argsAt is rqArgs at 6.18's offsets, or 5.10's with issueArg 1.
func argsAt(h hook.Hook, issueArg int) *rqArgs {
	a := &rqArgs{Hook: h, IssueArg: issueArg, RqDisk: -1, QDisk: 104, FirstMinor: 4, CmdFlags: 24, ProbeRead: bpf.FnProbeReadKernel}
	if issueArg == 1 {
		a.InsertArg, a.RqDisk = 1, 160
	}
	return a
}

// argsVariants are the raw and BTF tracepoint programs as this kernel
// needs them (a BTF program is checked against the tracepoint's own
// arguments and the structures' layout when it loads), for every hook the
// kernel has.
func argsVariants(t *testing.T) map[string]progConfig {
	issue, complete, insert := rq(t, "block_rq_issue"), rq(t, "block_rq_complete"), rq(t, "block_rq_insert")
	out := map[string]progConfig{}
	for _, h := range []hook.Hook{hook.Raw, hook.BTF} {
		if h == hook.Raw && !hook.HaveRawTracepoints() || h == hook.BTF && !hook.HaveBTFTracepoint("block_rq_issue") {
			continue
		}
		for name, set := range map[string]func(c *progConfig){
			"slots":        func(c *progConfig) { c.Slots = slotsFor() },
			"disks":        func(c *progConfig) { c.By = byDisk },
			"flags_disk":   func(c *progConfig) { c.By, c.Dev = byFlags, procfs.MkDev(7, 0) },
			"queued":       func(c *progConfig) { c.Insert = &insert },
			"heatmap_disk": func(c *progConfig) { c.Heatmap, c.By, c.Slots = true, byDisk, slotsFor() },
		} {
			cfg := progConfig{Issue: issue, Complete: complete, Divisor: 1000}
			set(&cfg)
			a, err := rqArgsFor(h, cfg.Insert != nil, true)
			if err != nil {
				t.Fatalf("%s: %v", h, err)
			}
			cfg.Args = a
			out[string(h)+"_"+name] = cfg
			if h == hook.Raw && cfg.By == byNone && cfg.Dev == 0 {
				// Without BTF: the request's place found by attaching.
				if cfg.Args, err = rqArgsFor(h, cfg.Insert != nil, false); err != nil {
					t.Fatal(err)
				}
				out[string(h)+"_"+name+"_no_btf"] = cfg
			}
		}
	}
	return out
}

// TestProgramsLoad hands every variant, with its maps, to the verifier;
// the slots variants, which need BPF_ATOMIC compare-and-exchange, where
// the kernel has it, and where it has not, the verifier must refuse them
// (else the feature probe is wrong).
func TestProgramsLoad(t *testing.T) {
	all := variants(t)
	for name, cfg := range all {
		if cfg.Args != nil {
			delete(all, name) // pinned at another kernel's offsets
		}
	}
	privtest.Require(t)
	for name, cfg := range argsVariants(t) {
		all[name] = cfg
	}
	if !kernel.HaveAtomicCmpXchg() {
		for name, cfg := range all {
			if cfg.Slots == 0 {
				continue
			}
			delete(all, name)
			spec, err := collection(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if coll, err := loader.Load(spec, true); err == nil {
				coll.Close()
				t.Errorf("%s: loaded, but HaveAtomicCmpXchg says this kernel has no compare-and-exchange", name)
			}
		}
	}
	loadtest.Variants(t, all, collection)
}

func TestProgramGoldens(t *testing.T) {
	for name, cfg := range variants(t) {
		spec, err := collection(cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var out string
		for _, p := range []string{"issue", "insert", "complete"} {
			if ps, ok := spec.Programs[p]; ok {
				out += fmt.Sprintf("program %s:\n%v\n", p, ps.Instructions)
			}
		}
		golden.Check(t, "prog_"+name, out)
	}
}

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    options
		ok   bool
	}{
		{"plain", options{Scale: "row"}, true},
		{"D and F", options{Disks: true, Flags: true, Scale: "row"}, false},
		{"text without heatmap", options{Text: true, Scale: "row"}, false},
		{"full without heatmap", options{Full: true, Scale: "row"}, false},
		{"global without heatmap", options{Scale: "global"}, false},
		{"heatmap -F", options{Heatmap: true, Flags: true, Scale: "row"}, false},
		{"heatmap -m", options{Heatmap: true, Millis: true, Scale: "row"}, false},
		{"heatmap --cumulative", options{Common: run.Common{Cumulative: true}, Heatmap: true, Scale: "row"}, false},
		{"histogram --cumulative", options{Common: run.Common{Cumulative: true}, Scale: "row"}, true},
		{"heatmap -D", options{Heatmap: true, Disks: true, Scale: "global"}, true},
		{"unknown disk", options{Disk: "nosuchdisk0", Scale: "row"}, false},
		{"path disk", options{Disk: "../../etc", Scale: "row"}, false},
	} {
		o := tc.o
		if err := validate(&o); (err == nil) != tc.ok {
			t.Errorf("%s: err %v", tc.name, err)
		}
	}
	o := options{Heatmap: true, Scale: "row"}
	validate(&o)
	if o.Interval().Seconds() != 1 {
		t.Errorf("heatmap interval %v, want 1s", o.Interval())
	}
}

func TestStatusAndFormat(t *testing.T) {
	var row = heatRowFor(60, 5)
	if got := status(row, 1, 3); got != "5 IO/s   slowest >= 1.00ms   lost 3" {
		t.Errorf("status %q", got)
	}
	if formatNs(999) != "999ns" || formatNs(1500) != "1.50us" || formatNs(2e9) != "2.00s" {
		t.Error("formatNs")
	}
}
