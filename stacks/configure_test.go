package stacks

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/stacks/prog"
	"github.com/tracekit/tracekit/tracefs"
)

// kernelOf is a kernel of every feature (7.x), which a case then takes
// features from: configure reads nothing, so any kernel is a table row.
func kernelOf(t *testing.T) features {
	return features{
		readers: asm.NewReaders, raw: true, bigKeys: true, taskRegs: true, lazyHashes: true,
		threadPointer: func() (int, error) { return 8 * 330, nil },
		taskStack:     func() (int, error) { return 24, nil },
		startStack:    func() *prog.TaskStartStack { return &prog.TaskStartStack{MM: 8 * 116, StartStack: 8 * 47} },
		schedSwitch:   func() (*tracefs.Format, error) { return tooltest.Format(t, "sched_switch.6.18.format"), nil },
		exit:          func() (*prog.TaskExit, error) { return &prog.TaskExit{Signal: 8 * 342, Live: 4}, nil },
	}
}

// TestConfigure: the programs' configuration from the options and the
// kernel's features, without root: the depths on kernels of 512-byte
// keys, the ways to a kernel-mode sample's user registers, what is said.
func TestConfigure(t *testing.T) {
	str := LabelSpec{Label: prog.Label{Kind: prog.LabelStr}, TLS: true}
	for _, c := range []struct {
		name   string
		o      Options
		goarch string
		kernel func(*features)
		check  func(t *testing.T, cfg prog.Config)
		notes  []string // what each note says, in order
		err    string
	}{{
		name: "7.x, auto", o: Options{Unwind: prog.UnwindAuto, Budget: 64}, goarch: "amd64",
		check: func(t *testing.T, cfg prog.Config) {
			if cfg.KernelDepth != prog.KernelFrames || cfg.UserDepth != prog.UserFrames || !cfg.TaskRegs || cfg.TaskStack != 0 ||
				cfg.StartStack == nil || cfg.Exit == nil || !cfg.Context || cfg.Rows != 64<<20/8 || !cfg.RawEvents || cfg.Arch != prog.X86_64 {
				t.Errorf("%+v", cfg)
			}
		},
	}, {
		name: "5.10: 512-byte keys", o: Options{Unwind: prog.UnwindAuto, Budget: 64, NoContext: true}, goarch: "amd64",
		kernel: func(k *features) { k.bigKeys, k.taskRegs = false, false },
		check: func(t *testing.T, cfg prog.Config) {
			if cfg.KernelDepth != prog.SmallKernelFrames || cfg.UserDepth != prog.SmallUserFrames || cfg.TaskRegs || cfg.TaskStack != 24 || cfg.KeySize() > 512 {
				t.Errorf("depths %d/%d, task regs %v, task stack %d, key %d", cfg.KernelDepth, cfg.UserDepth, cfg.TaskRegs, cfg.TaskStack, cfg.KeySize())
			}
		},
		notes: []string{"stacks are cut at 16 kernel and 46 user frames"},
	}, {
		name: "5.10: labels take user frames' room", o: Options{Unwind: prog.UnwindEH, Budget: 64, Labels: []LabelSpec{str}}, goarch: "amd64",
		kernel: func(k *features) { k.bigKeys = false },
		check: func(t *testing.T, cfg prog.Config) {
			if cfg.KeySize() > 512 || cfg.UserDepth >= prog.SmallUserFrames || cfg.UserDepth < 8 || cfg.ThreadPointer != 8*330 {
				t.Errorf("key %d, user depth %d, thread pointer %d", cfg.KeySize(), cfg.UserDepth, cfg.ThreadPointer)
			}
		},
		notes: []string{"stacks are cut at 16 kernel and"},
	}, {
		name: "5.10: labels that fill the key", o: Options{Unwind: prog.UnwindEH, Budget: 64, Labels: slices.Repeat([]LabelSpec{str}, prog.MaxLabels)}, goarch: "amd64",
		kernel: func(k *features) { k.bigKeys = false },
		notes:  []string{"the OpenTelemetry context and custom labels are not read: these labels fill"},
		err:    "leave room for",
	}, {
		name: "an event without kstack: the kernel's room is the user's", o: Options{Unwind: prog.UnwindAuto, Budget: 64, NoContext: true, Event: &StackEvent{Name: "e"}}, goarch: "amd64",
		kernel: func(k *features) { k.bigKeys = false },
		check: func(t *testing.T, cfg prog.Config) {
			if cfg.KernelDepth != 0 || cfg.UserDepth != prog.SmallKernelFrames+prog.SmallUserFrames {
				t.Errorf("depths %d/%d", cfg.KernelDepth, cfg.UserDepth)
			}
		},
		notes: []string{"filter: this kernel takes hash keys of 512 bytes at most: stacks are cut at 0 kernel and 62 user frames"},
	}, {
		name: "--assume-missing task_pt_regs, no task_struct.stack", o: Options{Unwind: prog.UnwindEH, Budget: 64, NoContext: true, Missing: "task_pt_regs"}, goarch: "amd64",
		kernel: func(k *features) { k.taskStack = func() (int, error) { return 0, errors.New("no stack member") } },
		check: func(t *testing.T, cfg prog.Config) {
			if cfg.TaskRegs || cfg.TaskStack != 0 {
				t.Errorf("task regs %v, task stack %d", cfg.TaskRegs, cfg.TaskStack)
			}
		},
		notes: []string{"profile: samples taken in the kernel will have no user stack: no stack member"},
	}, {
		name: "riscv64: no context read", o: Options{Unwind: prog.UnwindAuto, Budget: 8}, goarch: "riscv64",
		check: func(t *testing.T, cfg prog.Config) {
			if cfg.Context || cfg.Arch != prog.RISCV64 || cfg.Rows != 8<<20/8 {
				t.Errorf("%+v", cfg)
			}
		},
	}, {
		name: "the thread pointer unknown: no context, said", o: Options{Unwind: prog.UnwindAuto, Budget: 64}, goarch: "arm64",
		kernel: func(k *features) { k.threadPointer = func() (int, error) { return 0, errors.New("no fsbase") } },
		check: func(t *testing.T, cfg prog.Config) {
			if cfg.Context {
				t.Error("context read without a thread pointer")
			}
		},
		notes: []string{"the OpenTelemetry context and custom labels are not read: no fsbase"},
	}, {
		name: "--off-cpu", o: Options{Unwind: prog.UnwindAuto, Budget: 64, NoContext: true, OffCPU: true, MinBlock: 10, MaxBlock: 20}, goarch: "amd64",
		check: func(t *testing.T, cfg prog.Config) {
			if cfg.OffCPU == nil || cfg.OffCPU.MinBlock != 10000 || cfg.OffCPU.MaxBlock != 20000 {
				t.Errorf("off-CPU %+v", cfg.OffCPU)
			}
		},
	}, {
		name: "--off-cpu without sched_switch", o: Options{Unwind: prog.UnwindAuto, Budget: 64, NoContext: true, OffCPU: true}, goarch: "amd64",
		kernel: func(k *features) {
			k.schedSwitch = func() (*tracefs.Format, error) { return nil, errors.New("no such event") }
		},
		err: "--off-cpu: no such event",
	}, {
		name: "no task_struct.signal: labels said to stick to a reused pid", o: Options{Unwind: prog.UnwindEH, Budget: 64, Labels: []LabelSpec{str}}, goarch: "amd64",
		kernel: func(k *features) { k.exit = func() (*prog.TaskExit, error) { return nil, errors.New("no signal") } },
		check: func(t *testing.T, cfg prog.Config) {
			if cfg.Exit != nil {
				t.Error("an exit program without its offsets")
			}
		},
		notes: []string{"keeps the first one's labels: no signal"},
	}} {
		t.Run(c.name, func(t *testing.T) {
			k := kernelOf(t)
			if c.kernel != nil {
				c.kernel(&k)
			}
			cfg, notes, err := configure(&c.o, c.goarch, k)
			if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
				t.Fatalf("error %v, want %q", err, c.err)
			}
			if len(notes) != len(c.notes) {
				t.Fatalf("notes %q, want %d like %q", notes, len(c.notes), c.notes)
			}
			for i, n := range c.notes {
				if !strings.Contains(notes[i], n) {
					t.Errorf("note %q, want it to say %q", notes[i], n)
				}
			}
			if c.check != nil && err == nil {
				c.check(t, cfg)
			}
		})
	}
}
