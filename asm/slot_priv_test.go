package asm

import (
	"math/rand/v2"
	"testing"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/slots"
)

// runInKernel runs a slot snippet in the kernel for each value (a socket
// filter under BPF_PROG_TEST_RUN: tracepoint programs cannot be test-run)
// and compares it with the Go reference.
func runInKernel(t *testing.T, snippet bpf.Instructions, values []uint64, ref func(uint64) int) {
	t.Helper()
	privtest.Require(t)
	input, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer input.Close()
	insns := bpf.Instructions{
		bpf.StoreImm(bpf.RFP, -4, 0, bpf.Word).WithSource(bpf.Comment("r0 = slot of input[0]")),
		bpf.LoadMapPtr(bpf.R1, input.FD()),
		bpf.Mov.Reg(bpf.R2, bpf.RFP),
		bpf.Add.Imm(bpf.R2, -4),
		bpf.FnMapLookupElem.Call(),
		bpf.JEq.Imm(bpf.R0, 0, "exit"),
		bpf.LoadMem(bpf.R1, bpf.R0, 0, bpf.DWord),
	}
	insns = append(insns, snippet...)
	insns = append(insns, bpf.Mov.Reg(bpf.R0, bpf.R3), bpf.Return())
	insns = append(insns, Return("exit", 0)...)
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL", Instructions: insns})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	defer prog.Close()
	for _, v := range values {
		if err := input.Put(uint32(0), v); err != nil {
			t.Fatal(err)
		}
		got, err := prog.Run(&ebpf.RunOptions{Data: make([]byte, 14)})
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		if want := ref(v); int(got) != want {
			t.Errorf("slot(%d) = %d in the kernel, %d in Go", v, got, want)
		}
	}
}

func randomValues(n int) []uint64 {
	r := rand.New(rand.NewPCG(1, 2))
	var out []uint64
	for i := 0; i < n; i++ {
		out = append(out, r.Uint64()>>r.IntN(64))
	}
	return out
}

func TestLog2SlotInKernel(t *testing.T) {
	values := []uint64{0, 1, ^uint64(0), 1 << 63, 1<<63 - 1, 1<<32 - 1, 1 << 32}
	for b := 0; b < 64; b++ {
		values = append(values, 1<<b, 1<<b-1, 1<<b+1)
	}
	runInKernel(t, Log2Slot("slot", bpf.R1, bpf.R2, bpf.R3), append(values, randomValues(300)...), slots.Log2Of)
}

func TestDecadeSlotInKernel(t *testing.T) {
	values := []uint64{0, 1, 2, ^uint64(0), 1 << 63}
	for k := 0; k < slots.Decade; k++ {
		s := slots.DecadeStart(k)
		values = append(values, s, s-1, s+1)
	}
	runInKernel(t, DecadeSlot("heat", bpf.R1, bpf.R2, bpf.R3), append(values, randomValues(300)...), slots.DecadeOf)
}
