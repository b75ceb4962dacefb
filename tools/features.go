package tools

import (
	"sync"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"

	"github.com/tracekit/tracekit/asm"
)

// Memory-reading helpers by kernel: bpf_probe_read (4.1) reads kernel and
// user memory alike; 5.5 split it into _kernel and _user, and plain
// bpf_probe_read is refused under lockdown and on architectures where the
// two address spaces overlap. Each is probed once, from a kprobe program
// (the probe loads a tiny program; it needs the privileges the tools need).
var readers = sync.OnceValue(func() asm.Readers {
	return asm.Readers{
		Kernel:    newest(bpf.FnProbeReadKernel, bpf.FnProbeRead),
		User:      newest(bpf.FnProbeReadUser, bpf.FnProbeRead),
		KernelStr: newest(bpf.FnProbeReadKernelStr, bpf.FnProbeReadStr),
		UserStr:   newest(bpf.FnProbeReadUserStr, bpf.FnProbeReadStr),
	}
})

func newest(want, fallback bpf.BuiltinFunc) bpf.BuiltinFunc {
	if features.HaveProgramHelper(ebpf.Kprobe, want) == nil {
		return want
	}
	return fallback
}

// Readers are the reading helpers of this kernel, probed once.
func Readers() asm.Readers { return readers() }
