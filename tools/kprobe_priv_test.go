package tools

import (
	"fmt"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/internal/privtest"
)

// A write of this size is ours: nothing else on the machine writes it.
const markerSize = 4321

// countMarker counts the runs where the register at regOff holds
// markerSize: the size argument on entry (dx), the return value (ax).
func countMarker(t *testing.T, regOff int16) (*ebpf.Collection, *ebpf.Map) {
	t.Helper()
	insns := asm.Prologue()
	insns = append(insns,
		bpf.LoadMem(bpf.R1, asm.RegCtx, regOff, bpf.DWord),
		bpf.JNE.Imm(bpf.R1, markerSize, "exit"),
		bpf.Mov.Imm(bpf.R1, 0),
		asm.StoreKey(-4, bpf.R1, bpf.Word),
	)
	insns = append(insns, asm.PerCPUArrayIncrement("n", "count", -4)...)
	insns = append(insns, asm.Return("exit", 0)...)
	coll, err := Load(&ebpf.CollectionSpec{
		Maps:     map[string]*ebpf.MapSpec{"count": {Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1}},
		Programs: map[string]*ebpf.ProgramSpec{"p": {Type: ebpf.Kprobe, License: "GPL", Instructions: insns}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return coll, coll.Maps["count"]
}

const ptRegsAX = 80

func TestKprobeAndKretprobeFire(t *testing.T) {
	privtest.RequireKprobes(t)
	const n = 31
	for _, legacy := range []bool{false, true} {
		for _, ret := range []bool{false, true} {
			name := fmt.Sprintf("legacy=%v ret=%v", legacy, ret)
			off := int16(asm.PtRegsDX)
			if ret {
				off = ptRegsAX
			}
			coll, m := countMarker(t, off)
			att, err := AttachKprobe(coll.Programs["p"], "ksys_write", ret, KprobeOptions{Legacy: legacy, Tool: "test"})
			if err != nil {
				coll.Close()
				t.Fatalf("%s: %v", name, err)
			}
			fd, _ := unix.Open("/dev/null", unix.O_WRONLY, 0)
			buf := make([]byte, markerSize)
			for i := 0; i < n; i++ {
				unix.Write(fd, buf)
			}
			unix.Close(fd)
			if err := att.Close(); err != nil {
				t.Errorf("%s: detach: %v", name, err)
			}
			got, err := ReadPerCPUCounter(m)
			coll.Close()
			if err != nil || got != n {
				t.Errorf("%s: counted %d (%v), want exactly %d", name, got, err, n)
			}
		}
	}
	b, _ := os.ReadFile("/sys/kernel/tracing/kprobe_events")
	if len(b) != 0 {
		t.Errorf("kprobe_events after detaching: %q", b)
	}
}

func TestKprobeBadSymbols(t *testing.T) {
	privtest.RequireKprobes(t)
	coll, _ := countMarker(t, asm.PtRegsDX)
	defer coll.Close()
	for _, legacy := range []bool{false, true} {
		if _, err := AttachKprobe(coll.Programs["p"], "no_such_function_tk", false, KprobeOptions{Legacy: legacy}); err == nil {
			t.Errorf("legacy=%v: attached to a function that does not exist", legacy)
		}
		if _, err := AttachKprobe(coll.Programs["p"], "ksys_write\n-:kprobes/x", false, KprobeOptions{Legacy: legacy}); err == nil {
			t.Errorf("legacy=%v: an injected line was accepted", legacy)
		}
	}
}
