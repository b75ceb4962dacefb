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
var (
	kernelRead = sync.OnceValue(func() bpf.BuiltinFunc {
		return newest(bpf.FnProbeReadKernel, bpf.FnProbeRead)
	})
	userRead = sync.OnceValue(func() bpf.BuiltinFunc {
		return newest(bpf.FnProbeReadUser, bpf.FnProbeRead)
	})
	userReadStr = sync.OnceValue(func() bpf.BuiltinFunc {
		return newest(bpf.FnProbeReadUserStr, bpf.FnProbeReadStr)
	})
	kernelReadStr = sync.OnceValue(func() bpf.BuiltinFunc {
		return newest(bpf.FnProbeReadKernelStr, bpf.FnProbeReadStr)
	})
)

func newest(want, fallback bpf.BuiltinFunc) bpf.BuiltinFunc {
	if features.HaveProgramHelper(ebpf.Kprobe, want) == nil {
		return want
	}
	return fallback
}

// KernelRead is the helper that reads kernel memory on this kernel.
func KernelRead() bpf.BuiltinFunc { return kernelRead() }

// UserRead is the helper that reads user memory on this kernel.
func UserRead() bpf.BuiltinFunc { return userRead() }

// UserReadStr is the helper that reads a user string on this kernel
// (bpf_probe_read_str: 4.11).
func UserReadStr() bpf.BuiltinFunc { return userReadStr() }

// Readers are the four reading helpers of this kernel.
func Readers() asm.Readers {
	return asm.Readers{Kernel: kernelRead(), User: userRead(), KernelStr: kernelReadStr(), UserStr: userReadStr()}
}
