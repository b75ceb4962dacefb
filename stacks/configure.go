package stacks

import (
	"fmt"
	"runtime"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/internal/usage"
	"github.com/tracekit/tracekit/kbtf"
	"github.com/tracekit/tracekit/kernel"
	"github.com/tracekit/tracekit/stacks/prog"
	"github.com/tracekit/tracekit/tracefs"
)

// features is what a run's programs depend on in the kernel at hand:
// readFeatures reads this kernel's, a test gives any kernel's. What costs
// a read of the kernel's BTF is asked for only when needed.
type features struct {
	readers              asm.Readers
	ns                   *asm.PidNS
	raw                  bool // raw tracepoints (4.17+)
	bigKeys              bool // hash keys of a whole stack (5.11+; 512 bytes before)
	taskRegs, lazyHashes bool
	threadPointer        func() (int, error) // task_struct's thread pointer
	taskStack            func() (int, error) // task_struct.stack
	startStack           func() *prog.TaskStartStack
	schedSwitch          func() (*tracefs.Format, error)
	exit                 func() (*prog.TaskExit, error)
}

func readFeatures(ns *asm.PidNS) features {
	return features{
		readers: kernel.Readers(), ns: ns, raw: hook.HaveRawTracepoints(), bigKeys: haveBigKeys(),
		taskRegs: kernel.HaveTaskPtRegs(), lazyHashes: kernel.HaveLazyHashes(),
		threadPointer: threadPointer,
		taskStack:     func() (int, error) { return kbtf.MemberOffset("task_struct", "stack") },
		startStack: func() *prog.TaskStartStack {
			mm, err1 := kbtf.MemberOffset("task_struct", "mm")
			start, err2 := kbtf.MemberOffset("mm_struct", "start_stack")
			if err1 != nil || err2 != nil {
				return nil
			}
			return &prog.TaskStartStack{MM: mm, StartStack: start}
		},
		schedSwitch: func() (*tracefs.Format, error) { return tracefs.ReadFormat("sched", "sched_switch") },
		exit:        taskExit,
	}
}

// configure is the programs' configuration for o on a kernel of features
// and an architecture, goarch; notes are what the run says of it on
// stderr, in order. It reads nothing itself: tests hand it any kernel.
func configure(o *Options, goarch string, k features) (cfg prog.Config, notes []string, err error) {
	note := func(format string, args ...any) { notes = append(notes, fmt.Sprintf(format, args...)) }
	cfg = prog.Config{Mode: o.Unwind, Pid: int(o.Pid), Idle: o.Idle, Rows: o.Budget << 20 / 8, Readers: k.readers,
		KernelDepth: prog.KernelFrames, UserDepth: prog.UserFrames, NS: k.ns, RawEvents: k.raw}
	cfg.Arch, _ = prog.ArchOf(goarch)
	if o.Event != nil {
		cfg.Event = &o.Event.Event
		if !o.Event.Kernel {
			cfg.KernelDepth = 0
		}
	}
	if o.fpOnly {
		note("%s: on %s user stacks are walked by frame pointers only (the in-kernel unwinder reads x86-64, arm64 and riscv64 frames): code built without them gives partial stacks", o.tool(), goarch)
	}
	for _, l := range o.Labels {
		cfg.Labels = append(cfg.Labels, l.Label)
		if l.TLS && cfg.ThreadPointer == 0 {
			if cfg.ThreadPointer, err = k.threadPointer(); err != nil {
				return cfg, notes, err
			}
		}
	}
	if !o.NoContext && (goarch == "amd64" || goarch == "arm64") {
		if cfg.ThreadPointer == 0 {
			var err error
			if cfg.ThreadPointer, err = k.threadPointer(); err != nil {
				note("profile: the OpenTelemetry context and custom labels are not read: %v", err)
			}
		}
		cfg.Context = cfg.ThreadPointer != 0
	}
	if !k.bigKeys {
		// Older kernels (5.10 here) take hash keys of MAX_BPF_STACK, 512
		// bytes, at most; labels take user frames' room.
		small := prog.Config{KernelDepth: prog.SmallKernelFrames, UserDepth: prog.SmallUserFrames}
		if cfg.KernelDepth == 0 {
			// No kernel stack: its room is the user stack's.
			small.KernelDepth, small.UserDepth = 0, prog.SmallKernelFrames+prog.SmallUserFrames
		}
		depth := func() int {
			c := cfg
			c.KernelDepth, c.UserDepth = small.KernelDepth, small.UserDepth
			return small.UserDepth - (c.KeySize()-small.KeySize()+7)/8
		}
		if depth() < 8 && cfg.Context {
			// The labels asked for come first: the context's id takes 8 bytes.
			cfg.Context = false
			note("profile: the OpenTelemetry context and custom labels are not read: these labels fill this kernel's 512-byte hash keys")
		}
		cfg.KernelDepth, cfg.UserDepth = small.KernelDepth, depth()
		if cfg.UserDepth < 8 {
			return cfg, notes, usage.Errorf("this kernel takes hash keys of 512 bytes at most, and these labels leave room for %d user frames: use fewer string labels", cfg.UserDepth)
		}
		note("%s: this kernel takes hash keys of 512 bytes at most: stacks are cut at %d kernel and %d user frames", o.tool(), cfg.KernelDepth, cfg.UserDepth)
	}
	cfg.TaskRegs, cfg.LazyHashes = k.taskRegs && !o.assumeMissing("task_pt_regs"), k.lazyHashes
	if !cfg.TaskRegs && cfg.Mode != prog.UnwindFP {
		if off, err := k.taskStack(); err == nil {
			cfg.TaskStack = off
		} else {
			note("%s: %s taken in the kernel will have no user stack: %v", o.tool(), o.unit(), err)
		}
	}
	if cfg.Mode != prog.UnwindFP {
		cfg.StartStack = k.startStack()
	}
	if o.OffCPU {
		f, err := k.schedSwitch()
		if err != nil {
			return cfg, notes, fmt.Errorf("--off-cpu: %w", err)
		}
		if cfg.OffCPU, err = prog.NewOffCPU(f, o.MinBlock*1000, o.MaxBlock*1000); err != nil {
			return cfg, notes, fmt.Errorf("--off-cpu: %w", err)
		}
	}
	if exit, err := k.exit(); err == nil {
		cfg.Exit = exit
	} else if len(cfg.Labels) > 0 || cfg.Context {
		note("profile: a pid that another process gets again keeps the first one's labels: %v", err)
	}
	return cfg, notes, nil
}

// haveBigKeys reports whether a hash map takes the full key (6.1 does;
// 5.10 limits hash keys to MAX_BPF_STACK, 512 bytes).
func haveBigKeys() bool {
	return kernel.HashKeyFits(prog.Config{KernelDepth: prog.KernelFrames, UserDepth: prog.UserFrames}.KeySize())
}

// taskExit places the count of a process's live threads: task_struct.signal,
// signal_struct.live (BTF).
func taskExit() (*prog.TaskExit, error) {
	signal, err := kbtf.MemberOffset("task_struct", "signal")
	if err != nil {
		return nil, fmt.Errorf("task_struct.signal: %w", err)
	}
	live, err := kbtf.MemberOffset("signal_struct", "live")
	if err != nil {
		return nil, fmt.Errorf("signal_struct.live: %w", err)
	}
	return &prog.TaskExit{Signal: signal, Live: live}, nil
}

// threadPointer is the offset of the thread pointer in task_struct, from
// the kernel's BTF: the base of the thread-locals.
func threadPointer() (int, error) {
	path := prog.ThreadPointerMember[runtime.GOARCH]
	if path == "" {
		return 0, fmt.Errorf("--label tls: thread-locals are read on x86-64 and arm64 only")
	}
	off, err := kbtf.MemberPathOffset("task_struct", path)
	if err != nil {
		return 0, fmt.Errorf("--label tls: the thread pointer's place in task_struct: %w", err)
	}
	return off, nil
}
