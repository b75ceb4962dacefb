package prog

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
)

func rq(t *testing.T, event string) Fields {
	t.Helper()
	r, err := FieldsOf(tooltest.Format(t, event+".6.18.format"))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// variants are the program configurations the goldens pin and the load
// test proves: one line per variant.
func variants(t *testing.T) map[string]Config {
	issue, complete, insert := rq(t, "block_rq_issue"), rq(t, "block_rq_complete"), rq(t, "block_rq_insert")
	base := Config{Issue: issue, Complete: complete, Divisor: 1000}
	out := map[string]Config{}
	for name, set := range map[string]func(c *Config){
		"usecs":        func(c *Config) {},
		"msecs_disks":  func(c *Config) { c.Divisor, c.By = 1000000, ByDisk },
		"flags":        func(c *Config) { c.By = ByFlags },
		"one_disk":     func(c *Config) { c.Dev = procfs.MkDev(7, 0) },
		"heatmap":      func(c *Config) { c.Heatmap = true },
		"heatmap_disk": func(c *Config) { c.Heatmap, c.By = true, ByDisk },
		"queued":       func(c *Config) { c.Insert = &insert },
		"slots":        func(c *Config) { c.Slots = NSlots },
		// The arguments' programs, at 6.18's offsets, and 5.10's (the
		// request after the queue in issue and insert; rq->rq_disk).
		"raw_slots_disks": func(c *Config) { c.Args, c.Slots, c.By = argsAt(hook.Raw, 0), NSlots, ByDisk },
		"btf_flags_disk": func(c *Config) {
			c.Args, c.Slots, c.By, c.Dev = argsAt(hook.BTF, 0), NSlots, ByFlags, procfs.MkDev(7, 0)
		},
		"btf_510_queued": func(c *Config) { c.Args, c.Insert, c.By = argsAt(hook.BTF, 1), &insert, ByDisk },
		"slots_disk":     func(c *Config) { c.Slots, c.Heatmap, c.By, c.Dev = NSlots, true, ByDisk, procfs.MkDev(7, 0) },
	} {
		cfg := base
		set(&cfg)
		out[name] = cfg
	}
	return out
}

// argsAt is Args at 6.18's offsets, or 5.10's with issueArg 1.
func argsAt(h hook.Hook, issueArg int) *Args {
	a := &Args{Hook: h, IssueArg: issueArg, RqDisk: -1, QDisk: 104, FirstMinor: 4, CmdFlags: 24, ProbeRead: bpf.FnProbeReadKernel}
	if issueArg == 1 {
		a.InsertArg, a.RqDisk = 1, 160
	}
	return a
}

// argsVariants are the raw and BTF tracepoint programs as this kernel
// needs them (a BTF program is checked against the tracepoint's own
// arguments and the structures' layout when it loads), for every hook the
// kernel has.
func argsVariants(t *testing.T) map[string]Config {
	issue, complete, insert := rq(t, "block_rq_issue"), rq(t, "block_rq_complete"), rq(t, "block_rq_insert")
	out := map[string]Config{}
	for _, h := range []hook.Hook{hook.Raw, hook.BTF} {
		if h == hook.Raw && !hook.HaveRawTracepoints() || h == hook.BTF && !hook.HaveBTFTracepoint("block_rq_issue") {
			continue
		}
		for name, set := range map[string]func(c *Config){
			"slots":        func(c *Config) { c.Slots = hostSlots() },
			"disks":        func(c *Config) { c.By = ByDisk },
			"flags_disk":   func(c *Config) { c.By, c.Dev = ByFlags, procfs.MkDev(7, 0) },
			"queued":       func(c *Config) { c.Insert = &insert },
			"heatmap_disk": func(c *Config) { c.Heatmap, c.By, c.Slots = true, ByDisk, hostSlots() },
		} {
			cfg := Config{Issue: issue, Complete: complete, Divisor: 1000}
			set(&cfg)
			a, err := ArgsFor(h, cfg.Insert != nil, true)
			if err != nil {
				t.Fatalf("%s: %v", h, err)
			}
			cfg.Args = a
			out[string(h)+"_"+name] = cfg
			if h == hook.Raw && cfg.By == ByNone && cfg.Dev == 0 {
				// Without BTF: the request's place found by attaching.
				if cfg.Args, err = ArgsFor(h, cfg.Insert != nil, false); err != nil {
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
	if !privtest.NoBTF(t) {
		for name, cfg := range argsVariants(t) {
			all[name] = cfg
		}
	}
	if !kernel.HaveAtomicCmpXchg() {
		for name, cfg := range all {
			if cfg.Slots == 0 {
				continue
			}
			delete(all, name)
			spec, err := Collection(cfg)
			if err != nil {
				t.Fatal(err)
			}
			if coll, err := loader.Load(spec, true); err == nil {
				coll.Close()
				t.Errorf("%s: loaded, but HaveAtomicCmpXchg says this kernel has no compare-and-exchange", name)
			}
		}
	}
	loadtest.Variants(t, all, Collection)
}

func TestProgramGoldens(t *testing.T) {
	for name, cfg := range variants(t) {
		spec, err := Collection(cfg)
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

// hostSlots is the slots iolat uses on this kernel: none without
// BPF_ATOMIC compare-and-exchange.
func hostSlots() uint32 {
	if !kernel.HaveAtomicCmpXchg() {
		return 0
	}
	return NSlots
}
