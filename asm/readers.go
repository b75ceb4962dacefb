package asm

import bpf "github.com/cilium/ebpf/asm"

// Readers are the memory-reading helpers a program uses, as the running
// kernel offers them: bpf_probe_read_{kernel,user}[_str] (5.5+), or plain
// bpf_probe_read (4.1) and bpf_probe_read_str (4.11), which read either
// address space, before.
type Readers struct {
	Kernel, User       bpf.BuiltinFunc
	KernelStr, UserStr bpf.BuiltinFunc
}

// Split reports whether user and kernel memory take different helpers.
func (r Readers) Split() bool { return r.UserStr != r.KernelStr }

// NewReaders are the 5.5+ helpers; OldReaders the ones before.
var (
	NewReaders = Readers{bpf.FnProbeReadKernel, bpf.FnProbeReadUser, bpf.FnProbeReadKernelStr, bpf.FnProbeReadUserStr}
	OldReaders = Readers{bpf.FnProbeRead, bpf.FnProbeRead, bpf.FnProbeReadStr, bpf.FnProbeReadStr}
)
