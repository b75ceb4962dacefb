package prog

import (
	"crypto/sha256"
	"fmt"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/internal/loadtest"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/kbtf"
	"github.com/tracekit/tracekit/kernel"
	"github.com/tracekit/tracekit/tracefs"
)

// variants are the program configurations the goldens pin and the load
// test proves.
func variants(t *testing.T) map[string]Config {
	const kd, ud = KernelFrames, UserFrames
	ns := &asm.PidNS{Dev: 4, Ino: 4026532417}
	exit := &TaskExit{Signal: 8 * 342, Live: 4} // any offsets: the reads are probe-reads
	ss := &TaskStartStack{MM: 8 * 116, StartStack: 8 * 47}
	sw := tooltest.Format(t, "sched_switch.6.18.format")
	offCPU, err := NewOffCPU(sw, 1000, 0)
	if err != nil {
		t.Fatal(err)
	}
	offCPUBounded, err := NewOffCPU(sw, 10000, 5e9)
	if err != nil {
		t.Fatal(err)
	}
	v := map[string]Config{
		"fp_all":          {Mode: UnwindFP, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud},
		"fp_idle":         {Mode: UnwindFP, Idle: true, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud},
		"fp_pid":          {Mode: UnwindFP, Pid: 1234, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud},
		"eh_tree":         {Mode: UnwindEH, Tree: tooltest.Tree(t, 1, nil), Rows: 1 << 16, TaskRegs: true, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud},
		"auto_all":        {Mode: UnwindAuto, Rows: 64 << 20 / 8, TaskRegs: true, StartStack: ss, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud},
		"auto_no_taskreg": {Mode: UnwindAuto, Rows: 1 << 16, Readers: asm.OldReaders, KernelDepth: kd, UserDepth: ud},
		"eh_task_stack":   {Mode: UnwindEH, Rows: 1 << 16, TaskStack: 24, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud},
		"auto_small_keys": {Mode: UnwindAuto, Rows: 1 << 16, TaskStack: 24, StartStack: ss, Readers: asm.NewReaders, KernelDepth: SmallKernelFrames, UserDepth: SmallUserFrames, Exit: exit},
		"eh_tree_ns":      {Mode: UnwindEH, Tree: tooltest.Tree(t, 2, ns), NS: ns, Rows: 1 << 16, TaskRegs: true, StartStack: ss, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud, Exit: exit},
		// Raw tracepoints' exec and exit, and the tree's programs.
		"eh_tree_raw": {Mode: UnwindEH, Tree: tooltest.RawTree(t, 2, ns), NS: ns, RawEvents: true, Rows: 1 << 16, TaskRegs: true, StartStack: ss, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud, Exit: exit},
		"auto_lazy":   {Mode: UnwindAuto, Rows: 1 << 16, TaskRegs: true, LazyHashes: true, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud},
		// One label of each kind, and the most labels, each a string.
		"fp_labels":  {Mode: UnwindFP, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud, ThreadPointer: 8 * 330, Labels: everyKind},
		"eh_labels8": {Mode: UnwindEH, Rows: 1 << 16, TaskRegs: true, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud, ThreadPointer: 8 * 330, Labels: mostLabels},
		"auto_labels_small_keys": {Mode: UnwindAuto, Rows: 1 << 16, TaskStack: 24, Readers: asm.OldReaders, KernelDepth: SmallKernelFrames,
			UserDepth: SmallUserFrames - (8+8+64+64)/8, ThreadPointer: 8 * 330, Labels: everyKind},
		// The seed's strobe layouts; the most of the largest (the longest
		// program); and on a kernel of small keys.
		"fp_labels_strobe":  {Mode: UnwindFP, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud, ThreadPointer: 8 * 330, Labels: strobeKinds},
		"eh_strobe_maps8":   {Mode: UnwindEH, Rows: 1 << 16, TaskRegs: true, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud, ThreadPointer: 8 * 330, Labels: slices.Repeat([]Label{{Kind: LabelStrobeMap}}, MaxLabels)},
		"auto_strobe_small": {Mode: UnwindAuto, Rows: 1 << 16, TaskStack: 24, Readers: asm.OldReaders, KernelDepth: SmallKernelFrames, UserDepth: SmallUserFrames - (8+64+StrobeMapSlot)/8, ThreadPointer: 8 * 330, Labels: strobeKinds},
		// The OpenTelemetry thread context and custom labels, alone (the
		// default), with labels, and on a kernel of small keys.
		"fp_context":         {Mode: UnwindFP, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud, ThreadPointer: 8 * 330, Context: true, Exit: exit},
		"eh_labels8_context": {Mode: UnwindEH, Rows: 1 << 16, TaskRegs: true, StartStack: ss, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud, ThreadPointer: 8 * 330, Labels: mostLabels, Context: true},
		"auto_context_small": {Mode: UnwindAuto, Rows: 1 << 16, TaskStack: 24, Readers: asm.OldReaders, KernelDepth: SmallKernelFrames, UserDepth: SmallUserFrames - 1, ThreadPointer: 8 * 330, Context: true, Exit: exit},
		"auto_context_lazy":  {Mode: UnwindAuto, Rows: 1 << 16, TaskRegs: true, LazyHashes: true, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud, ThreadPointer: 8 * 330, Context: true},
		// Off-CPU: sched_switch's fields as 6.18 places them (the load
		// test reads the running kernel's), with and without bounds.
		"offcpu_fp":         {Mode: UnwindFP, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud, OffCPU: offCPU},
		"offcpu_auto":       {Mode: UnwindAuto, Rows: 1 << 16, TaskRegs: true, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud, Exit: exit, OffCPU: offCPUBounded},
		"offcpu_eh_small":   {Mode: UnwindEH, Rows: 1 << 16, TaskStack: 24, Readers: asm.OldReaders, KernelDepth: SmallKernelFrames, UserDepth: SmallUserFrames, OffCPU: offCPU},
		"offcpu_auto_lazy":  {Mode: UnwindAuto, Rows: 1 << 16, TaskRegs: true, LazyHashes: true, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud, Tree: tooltest.Tree(t, 3, nil), OffCPU: offCPU},
		"offcpu_eh_context": {Mode: UnwindEH, Rows: 1 << 16, TaskRegs: true, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud, ThreadPointer: 8 * 330, Labels: everyKind, Context: true, OffCPU: offCPU},
		// arm64's unwinder: from the sample's registers or the task's, on
		// small keys with the old readers (no kernel-mode registers before
		// 5.15 there), and off-CPU.
		"arm64_eh":          {Arch: ARM64, Mode: UnwindEH, Rows: 1 << 16, TaskRegs: true, StartStack: ss, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud, Exit: exit},
		"arm64_auto_small":  {Arch: ARM64, Mode: UnwindAuto, Rows: 1 << 16, Readers: asm.OldReaders, KernelDepth: SmallKernelFrames, UserDepth: SmallUserFrames},
		"arm64_offcpu_auto": {Arch: ARM64, Mode: UnwindAuto, Rows: 1 << 16, TaskRegs: true, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud, OffCPU: offCPU},
		"arm64_eh_context":  {Arch: ARM64, Mode: UnwindEH, Rows: 1 << 16, TaskRegs: true, LazyHashes: true, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud, ThreadPointer: 8 * 330, Labels: everyKind, Context: true},
		// riscv64's: arm64's words with SavesFP, its own registers and
		// signal frame, frame records below s0.
		"riscv64_eh":          {Arch: RISCV64, Mode: UnwindEH, Rows: 1 << 16, TaskRegs: true, StartStack: ss, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud, Exit: exit},
		"riscv64_auto_small":  {Arch: RISCV64, Mode: UnwindAuto, Rows: 1 << 16, Readers: asm.OldReaders, KernelDepth: SmallKernelFrames, UserDepth: SmallUserFrames},
		"riscv64_offcpu_auto": {Arch: RISCV64, Mode: UnwindAuto, Rows: 1 << 16, TaskRegs: true, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud, OffCPU: offCPU},
		// At an event (filter's --count-by ustack): a tracepoint's record
		// (the task's registers), a probe's registers (a uprobe's are the
		// user's, a kprobe's the kernel's), the kernel stack kept or not.
		"event_tracepoint":    {Event: gateEvent(ebpf.TracePoint, false), Idle: true, Mode: UnwindAuto, Rows: 1 << 16, TaskRegs: true, StartStack: ss, Readers: asm.NewReaders, UserDepth: ud, Tree: tooltest.Tree(t, 4, nil)},
		"event_kprobe_kstack": {Event: gateEvent(ebpf.Kprobe, true), Idle: true, Mode: UnwindAuto, Rows: 1 << 16, TaskRegs: true, StartStack: ss, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud, Exit: exit},
		"event_uprobe_small":  {Event: gateEvent(ebpf.Kprobe, true), Idle: true, Mode: UnwindAuto, Rows: 1 << 16, TaskStack: 24, Readers: asm.OldReaders, UserDepth: SmallKernelFrames + SmallUserFrames},
		"arm64_event_uprobe":  {Arch: ARM64, Event: gateEvent(ebpf.Kprobe, true), Idle: true, Mode: UnwindAuto, Rows: 1 << 16, TaskRegs: true, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud},
		"riscv64_event_tp":    {Arch: RISCV64, Event: gateEvent(ebpf.TracePoint, false), Idle: true, Mode: UnwindAuto, Rows: 1 << 16, TaskRegs: true, Readers: asm.NewReaders, UserDepth: ud},
		// Printed (--fields ustack): a record of 21 bytes copied into the
		// scratch value, the event sent instead of counted; and none.
		"event_emit_uprobe":    {Event: emitEvent(ebpf.Kprobe, true, 21), Idle: true, Mode: UnwindAuto, Rows: 1 << 16, TaskRegs: true, StartStack: ss, Readers: asm.NewReaders, UserDepth: ud},
		"event_emit_tp_kstack": {Event: emitEvent(ebpf.TracePoint, false, 0), Idle: true, Mode: UnwindAuto, Rows: 1 << 16, TaskStack: 24, Readers: asm.OldReaders, KernelDepth: SmallKernelFrames, UserDepth: SmallUserFrames},
		"arm64_event_emit":     {Arch: ARM64, Event: emitEvent(ebpf.Kprobe, true, 64), Idle: true, Mode: UnwindAuto, Rows: 1 << 16, TaskRegs: true, Readers: asm.NewReaders, KernelDepth: kd, UserDepth: ud},
	}
	return v
}

// TestEventWithoutUserRegs: a tracepoint on a kernel that gives its
// program no way to the task's user registers (arm64 before 5.15) is
// refused with what to do, not left to the verifier (frame pointers need
// none: bpf_get_stack reads the task's registers itself).
func TestEventWithoutUserRegs(t *testing.T) {
	for _, cfg := range []Config{
		{Arch: ARM64, Event: gateEvent(ebpf.TracePoint, false), Mode: UnwindAuto, Rows: 1 << 16, Readers: asm.OldReaders, UserDepth: 62},
		{Arch: RISCV64, Event: gateEvent(ebpf.TracePoint, false), Mode: UnwindAuto, Rows: 1 << 16, Readers: asm.OldReaders, UserDepth: 62},
		{Event: gateEvent(ebpf.TracePoint, false), Mode: UnwindEH, Rows: 1 << 16, Readers: asm.OldReaders, UserDepth: 62},
	} {
		if _, err := Collection(cfg); err != ErrNoUserRegs {
			t.Errorf("arch %d, task stack %d: %v, want ErrNoUserRegs", cfg.Arch, cfg.TaskStack, err)
		}
	}
}

// gateEvent is an event whose gate keeps events whose context's second
// word is not 0 (a record's first field, a register), as filter's gates
// read the context.
func gateEvent(typ ebpf.ProgramType, regs bool) *Event {
	gate := append(asm.Prologue(),
		bpf.LoadMem(bpf.R1, asm.RegCtx, 8, bpf.Word),
		bpf.JEq.Imm(bpf.R1, 0, "exit"),
	)
	return &Event{Type: typ, Regs: regs, Gate: gate}
}

// emitEvent is gateEvent printing its events, with a record of size
// bytes the gate writes on the stack from -160 down, as filter's does.
func emitEvent(typ ebpf.ProgramType, regs bool, size int) *Event {
	ev := gateEvent(typ, regs)
	ev.Emit, ev.Record, ev.RecordAt = true, size, int16(-160-(size+7)&^7)
	for i := 0; i < size; i++ {
		ev.Gate = append(ev.Gate, bpf.StoreImm(bpf.RFP, ev.RecordAt+int16(i), int64(i), bpf.Byte))
	}
	return ev
}

var (
	everyKind   = []Label{{Kind: LabelInt, Size: 8}, {Kind: LabelInt, Size: 4}, {Kind: LabelStr}, {Kind: LabelChars}}
	strobeKinds = []Label{{Kind: LabelStrobeInt, Size: 8}, {Kind: LabelStrobeStr}, {Kind: LabelStrobeMap}}
	mostLabels  = func() []Label {
		l := make([]Label, MaxLabels)
		for i := range l {
			l[i].Kind = LabelStr
		}
		return l
	}()
)

// TestNewOffCPU reads this kernel's sched_switch: the fields the program
// reads, and the exiting states its print fmt names X and Z.
func TestNewOffCPU(t *testing.T) {
	privtest.Require(t)
	f, err := tracefs.ReadFormat("sched", "sched_switch")
	if err != nil {
		t.Fatal(err)
	}
	oc, err := NewOffCPU(f, 1, 2)
	if err != nil {
		t.Fatal(err)
	}
	next, _ := f.Field("next_pid")
	state, _ := f.Field("prev_state")
	if oc.NextPid != next.Offset || oc.PrevState != state.Offset || oc.PrevStateSize != state.Size || oc.MinBlock != 1 || oc.MaxBlock != 2 {
		t.Errorf("NewOffCPU = %+v, format next_pid %+v prev_state %+v", oc, next, state)
	}
	// EXIT_DEAD and EXIT_ZOMBIE, 0x10 and 0x20 since 4.14; the flags
	// S D T t X Z P I (5.10 to 7.2) below TASK_REPORT_MAX, preemption.
	if oc.Dead != 0x30 || oc.Asleep != 0xff {
		t.Errorf("exiting states %#x, asleep %#x; want 0x30 (X and Z) and 0xff from %q", oc.Dead, oc.Asleep, f.PrintFmt)
	}
}

// wholeGoldens are the variants whose programs are pinned in full, one
// golden each: the in-kernel unwinder of each architecture (auto on
// x86-64, eh on arm64 and riscv64), and frame pointers alone, with
// labels, with the context, off-CPU. Every other variant is pinned by
// its programs' sizes and hashes in variants.golden: a change to one
// shows there, and its text in the whole golden of its kind.
var wholeGoldens = map[string]bool{
	"auto_all": true, "arm64_eh": true, "riscv64_eh": true,
	"fp_all": true, "fp_labels": true, "fp_context": true, "offcpu_fp": true,
}

func TestProgramGoldens(t *testing.T) {
	var summary []string
	for name, cfg := range variants(t) {
		spec, err := Collection(cfg)
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
			if n == "follow_forks" || n == "forget_exits" || n == "tree_on_exec" {
				continue // pinned by asm's goldens
			}
			insns := spec.Programs[n].Instructions
			if n == "unwind" && len(insns) > 4096 {
				t.Errorf("%s: the unwinder has %d instructions, more than 4096", name, len(insns))
			}
			text := golden.Program(insns)
			if wholeGoldens[name] {
				fmt.Fprintf(&b, "program %s (%d instructions)\n%s\n", n, len(insns), text)
			}
			sum := sha256.Sum256([]byte(text))
			summary = append(summary, fmt.Sprintf("%-24s %-12s %5d instructions  sha256 %x", name, n, len(insns), sum[:8]))
		}
		if wholeGoldens[name] {
			golden.Check(t, name, b.String())
		}
	}
	sort.Strings(summary)
	golden.Check(t, "variants", strings.Join(summary, "\n")+"\n")
}

// TestProgramsLoad hands every variant, with its maps, to the verifier.
func TestProgramsLoad(t *testing.T) {
	v := variants(t)
	if !kernel.HashKeyFits(Config{KernelDepth: KernelFrames, UserDepth: UserFrames}.KeySize()) {
		for name, cfg := range v {
			if cfg.UserDepth == UserFrames {
				delete(v, name) // this kernel refuses 2.5 KiB hash keys: the small-key variant is what runs here
			}
		}
	}
	for name, cfg := range v {
		if cfg.Arch == ARM64 && runtime.GOARCH != "arm64" {
			delete(v, name) // arm64's registers are past the end of another architecture's context
		}
		if runtime.GOARCH == "arm" && cfg.Mode != UnwindFP {
			// 32-bit ARM walks frame pointers only, and the unwinder's
			// programs read x86-64's registers, past ARM's 72-byte pt_regs.
			delete(v, name)
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
	// With TaskRegs the thread pointer is a load from the BTF task, which
	// the verifier allows only at a member: this kernel's, not the
	// goldens' offset.
	path := ThreadPointerMember[runtime.GOARCH]
	tp, err := kbtf.MemberPathOffset("task_struct", path)
	if path == "" {
		// riscv64 keeps the user's thread pointer in its pt_regs (tp), not
		// in task_struct: profile refuses --label tls there (see
		// profile's TestLabelsRefusedWithoutThreadPointer).
		t.Logf("%s: no thread pointer in task_struct: the labels' variants are not loaded", runtime.GOARCH)
		for name, cfg := range v {
			if cfg.ThreadPointer != 0 {
				delete(v, name)
			}
		}
	} else if err != nil {
		t.Fatalf("the thread pointer's place in task_struct (%s): %v", path, err)
	}
	for name, cfg := range v {
		if cfg.ThreadPointer != 0 {
			cfg.ThreadPointer = tp
			v[name] = cfg
		}
	}
	// The off-CPU variants read the running kernel's sched_switch.
	privtest.Require(t)
	f, err := tracefs.ReadFormat("sched", "sched_switch")
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range v {
		if cfg.OffCPU != nil {
			oc, err := NewOffCPU(f, cfg.OffCPU.MinBlock, cfg.OffCPU.MaxBlock)
			if err != nil {
				t.Fatal(err)
			}
			cfg.OffCPU = oc
			v[name] = cfg
		}
	}
	loadtest.Variants(t, v, Collection)
}
