package writesize

import (
	"fmt"

	"testing"

	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/internal/loadtest"
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
func variants(t *testing.T) map[string]progConfig {
	count := countField(t)
	ns := &asm.PidNS{Dev: 4, Ino: 4026532417} // a pid namespace of unshare -fp
	return map[string]progConfig{
		"prog_ns_pid_per_process":        {Count: count, Pid: 3, PerProcess: true, NS: ns},
		"prog_ns_tree_per_process":       {Count: count, Tree: true, Root: 2, PerProcess: true, NS: ns},
		"prog_ns_tree":                   {Count: count, Tree: true, Root: 2, NS: ns},
		"prog_fentry":                    {Fentry: &fentryConfig{Symbol: "__x64_sys_write", Regs: asm.AMD64}},
		"prog_fentry_tree_arm64":         {Fentry: &fentryConfig{Symbol: "__arm64_sys_write", Regs: asm.ARM64}, Tree: true},
		"prog_fentry_ns_pid_per_process": {Fentry: &fentryConfig{Symbol: "__x64_sys_write", Regs: asm.AMD64}, Pid: 3, PerProcess: true, NS: ns},
		"prog_all":                       {Count: count},
		"prog_pid":                       {Count: count, Pid: 1234},
		"prog_tree":                      {Count: count, Tree: true},
		"prog_per_process":               {Count: count, PerProcess: true},
		"prog_pid_per_process":           {Count: count, Pid: 1234, PerProcess: true},
		"prog_kprobe_wrapper":            {Kprobe: &kprobeConfig{Symbol: "__x64_sys_write", Wrapper: true, ProbeRead: bpf.FnProbeReadKernel, Regs: asm.AMD64}},
		"prog_kprobe_old_read":           {Kprobe: &kprobeConfig{Symbol: "__x64_sys_write", Wrapper: true, ProbeRead: bpf.FnProbeRead, Regs: asm.AMD64}},
		"prog_kprobe_ksys":               {Kprobe: &kprobeConfig{Symbol: "ksys_write", Regs: asm.AMD64}, Tree: true},
		"prog_raw":                       {Raw: &rawConfig{NR: 1, Regs: asm.AMD64, ProbeRead: bpf.FnProbeReadKernel}},
		"prog_raw_tree_arm64":            {Raw: &rawConfig{NR: 64, Regs: asm.ARM64, ProbeRead: bpf.FnProbeReadKernel}, Tree: true},
		"prog_kprobe_arm64":              {Kprobe: &kprobeConfig{Symbol: "__arm64_sys_write", Wrapper: true, ProbeRead: bpf.FnProbeReadKernel, Regs: asm.ARM64}},
	}
}

func TestProgramGoldens(t *testing.T) {
	for name, cfg := range variants(t) {
		insns, err := program(cfg)
		if err != nil {
			t.Fatal(err)
		}
		golden.Check(t, name, fmt.Sprintf("%v", insns))
	}
}

// TestProgramsLoad hands every variant, with its maps, to the verifier.
// The fentry variants load where the kernel attaches fentry programs (the
// matrix's kernels); this host's refuses them even to root.
func TestProgramsLoad(t *testing.T) {
	vs := variants(t)
	fentry := hook.HaveFentrySyscall("write")
	if !fentry {
		t.Log("no fentry on this kernel: the prog_fentry variants load in the matrix's x86-64 kernels")
	}
	for name, cfg := range vs {
		switch {
		case cfg.Fentry == nil:
		case !fentry:
			delete(vs, name)
		default:
			// Loaded against this kernel's own wrapper, whichever
			// registers the program reads.
			regs, _ := asm.HostPtRegs() // known good: fentry attached
			f := *cfg.Fentry
			f.Symbol = regs.SyscallPrefix + "write"
			cfg.Fentry = &f
			vs[name] = cfg
		}
	}
	loadtest.Variants(t, vs, collection)
}

func TestProgramReadsOffsetFromFormat(t *testing.T) {
	// A layout where count moved: the program must follow it.
	moved := countField(t)
	moved.Offset = 48
	insns, err := program(progConfig{Count: moved})
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
