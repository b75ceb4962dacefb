package prog

import (
	"fmt"

	"testing"

	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/internal/loadtest"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/tracefs"
)

func countField(t *testing.T) tracefs.Field {
	t.Helper()
	c, err := tooltest.Format(t, "sys_enter_write.6.18.format").MustField("count")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// variants are the program configurations the goldens pin and the load
// test proves: one line per variant.
func variants(t *testing.T) map[string]Config {
	count := countField(t)
	ns := &asm.PidNS{Dev: 4, Ino: 4026532417} // a pid namespace of unshare -fp
	return map[string]Config{
		"prog_ns_pid_per_process":        {Count: count, Pid: 3, PerProcess: true, NS: ns},
		"prog_ns_tree_per_process":       {Count: count, Tree: tooltest.Tree(t, 2, ns), PerProcess: true, NS: ns},
		"prog_ns_tree":                   {Count: count, Tree: tooltest.Tree(t, 2, ns), NS: ns},
		"prog_fentry":                    {Fentry: &Fentry{Symbol: "__x64_sys_write", Regs: asm.AMD64}},
		"prog_fentry_tree_arm64":         {Fentry: &Fentry{Symbol: "__arm64_sys_write", Regs: asm.ARM64}, Tree: tooltest.Tree(t, 1, nil)},
		"prog_fentry_ns_pid_per_process": {Fentry: &Fentry{Symbol: "__x64_sys_write", Regs: asm.AMD64}, Pid: 3, PerProcess: true, NS: ns},
		"prog_all":                       {Count: count},
		"prog_pid":                       {Count: count, Pid: 1234},
		"prog_tree":                      {Count: count, Tree: tooltest.Tree(t, 1, nil)},
		"prog_tree_raw":                  {Count: count, Tree: tooltest.RawTree(t, 1, nil)},
		"prog_per_process":               {Count: count, PerProcess: true},
		"prog_pid_per_process":           {Count: count, Pid: 1234, PerProcess: true},
		"prog_kprobe_wrapper":            {Kprobe: &Kprobe{Symbol: "__x64_sys_write", Wrapper: true, ProbeRead: bpf.FnProbeReadKernel, Regs: asm.AMD64}},
		"prog_kprobe_old_read":           {Kprobe: &Kprobe{Symbol: "__x64_sys_write", Wrapper: true, ProbeRead: bpf.FnProbeRead, Regs: asm.AMD64}},
		"prog_kprobe_ksys":               {Kprobe: &Kprobe{Symbol: "ksys_write", Regs: asm.AMD64}, Tree: tooltest.Tree(t, 1, nil)},
		"prog_raw":                       {Raw: &Raw{NR: 1, Regs: asm.AMD64, ProbeRead: bpf.FnProbeReadKernel}},
		"prog_raw_tree_arm64":            {Raw: &Raw{NR: 64, Regs: asm.ARM64, ProbeRead: bpf.FnProbeReadKernel}, Tree: tooltest.Tree(t, 1, nil)},
		"prog_kprobe_arm64":              {Kprobe: &Kprobe{Symbol: "__arm64_sys_write", Wrapper: true, ProbeRead: bpf.FnProbeReadKernel, Regs: asm.ARM64}},
		// 32-bit ARM: 4-byte registers, no wrappers, write is 4.
		"prog_kprobe_ksys_arm": {Kprobe: &Kprobe{Symbol: "ksys_write", Regs: asm.ARM}, Tree: tooltest.Tree(t, 1, nil)},
		"prog_raw_arm":         {Raw: &Raw{NR: 4, Regs: asm.ARM, ProbeRead: bpf.FnProbeReadKernel}},
	}
}

func TestProgramGoldens(t *testing.T) {
	for name, cfg := range variants(t) {
		insns, err := Program(cfg)
		if err != nil {
			t.Fatal(err)
		}
		golden.Check(t, name, fmt.Sprintf("%v", insns))
	}
}

// TestProgramsLoad hands every variant of this machine's architecture,
// with its maps, to the verifier: another architecture's registers prove
// nothing here (the arm64 variants load in the matrix's arm64 guest). The
// fentry variants load where the kernel attaches fentry programs (the
// matrix's kernels), against this kernel's own wrapper; this host's
// refuses them even to root.
func TestProgramsLoad(t *testing.T) {
	privtest.Require(t)
	host, err := asm.HostPtRegs()
	if err != nil {
		t.Fatal(err)
	}
	fentry := hook.HaveFentrySyscall("write")
	vs := variants(t)
	for name, cfg := range vs {
		if r := cfg.regs(); r != nil && r.Arch != host.Arch {
			delete(vs, name)
			continue
		}
		if cfg.Fentry == nil {
			continue
		}
		if !fentry {
			delete(vs, name)
			continue
		}
		f := *cfg.Fentry
		f.Symbol = host.SyscallPrefix + "write"
		cfg.Fentry = &f
		vs[name] = cfg
	}
	if len(vs) < 8 {
		t.Errorf("%d variants to load: the filter above dropped most of them", len(vs))
	}
	loadtest.Variants(t, vs, Collection)
}

// regs are the registers a variant reads, nil for the tracepoint's record.
func (c Config) regs() *asm.Regs {
	switch {
	case c.Fentry != nil:
		return c.Fentry.Regs
	case c.Raw != nil:
		return c.Raw.Regs
	case c.Kprobe != nil:
		return c.Kprobe.Regs
	}
	return nil
}

func TestProgramReadsOffsetFromFormat(t *testing.T) {
	// A layout where count moved: the program must follow it.
	moved := countField(t)
	moved.Offset = 48
	insns, err := Program(Config{Count: moved})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ins := range insns {
		if ins.OpCode.Class().IsLoad() && ins.Offset == 48 {
			found = true
		}
	}
	if !found {
		t.Errorf("no load at offset 48:\n%v", insns)
	}
}
