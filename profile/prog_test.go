package profile

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/internal/loadtest"
	"github.com/tracekit/tracekit/kernel"
)

// variants are the program configurations the goldens pin and the load
// test proves.
func variants() map[string]progConfig {
	const kd, ud = kernelDepth, userDepth
	v := map[string]progConfig{
		"fp_all":          {Mode: unwindFP, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud},
		"fp_pid":          {Mode: unwindFP, Pid: 1234, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud},
		"eh_tree":         {Mode: unwindEH, Tree: true, Rows: 1 << 16, TaskRegs: true, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud},
		"auto_all":        {Mode: unwindAuto, Rows: 1 << 16, TaskRegs: true, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud},
		"auto_no_taskreg": {Mode: unwindAuto, Rows: 1 << 16, Readers: asm.OldReaders, KernelDepth: kd, UserDepth: ud},
		"eh_task_stack":   {Mode: unwindEH, Rows: 1 << 16, TaskStack: 24, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud},
		"auto_small_keys": {Mode: unwindAuto, Rows: 1 << 16, TaskStack: 24, Readers: asm.NewReaders, KernelDepth: smallKernelDepth, UserDepth: smallUserDepth},
		"eh_tree_ns":      {Mode: unwindEH, Tree: true, Root: 2, NS: &asm.PidNS{Dev: 4, Ino: 4026532417}, Rows: 1 << 16, TaskRegs: true, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud},
		"auto_lazy":       {Mode: unwindAuto, Rows: 1 << 16, TaskRegs: true, LazyHashes: true, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud},
	}
	return v
}

func TestProgramGoldens(t *testing.T) {
	for name, cfg := range variants() {
		spec, err := collection(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for n := range spec.Programs {
			names = append(names, n)
		}
		sort.Strings(names)
		var b strings.Builder
		for _, n := range names {
			if n == "follow_forks" || n == "forget_exits" || n == "seed_on_exec" {
				continue // the running kernel's formats; pinned by asm's goldens
			}
			insns := spec.Programs[n].Instructions
			if n == "unwind" && len(insns) > 4096 {
				t.Errorf("%s: the unwinder has %d instructions, more than 4096", name, len(insns))
			}
			fmt.Fprintf(&b, "program %s (%d instructions)\n%v\n", n, len(insns), insns)
		}
		golden.Check(t, name, b.String())
	}
}

// TestProgramsLoad hands every variant, with its maps, to the verifier.
func TestProgramsLoad(t *testing.T) {
	v := variants()
	if !haveBigKeys() {
		for name, cfg := range v {
			if cfg.UserDepth == userDepth {
				delete(v, name) // this kernel refuses 1.5 KiB hash keys: the small-key variant is what runs here
			}
		}
	}
	if !kernel.HaveTaskPtRegs() {
		for name, cfg := range v {
			if cfg.TaskRegs {
				delete(v, name)
			}
		}
	}
	if !kernel.HaveLazyHashes() {
		for name, cfg := range v {
			if cfg.LazyHashes {
				delete(v, name) // before 6.1: preallocated hashes only, which is what runs here
			}
		}
	}
	loadtest.Variants(t, v, collection)
}
