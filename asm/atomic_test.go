package asm

import (
	"fmt"

	"bytes"
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/internal/privtest"
)

// The instruction as the kernel gets it: opcode STX|ATOMIC|DW, imm
// BPF_CMPXCHG (0xf0 | BPF_FETCH).
func TestCmpXchgEncoding(t *testing.T) {
	var b bytes.Buffer
	if _, err := CmpXchg(bpf.R7, bpf.R8, bpf.DWord, 16).Marshal(&b, binary.LittleEndian); err != nil {
		t.Fatal(err)
	}
	raw := b.Bytes()
	if raw[0] != 0xdb || raw[1] != 0x87 || binary.LittleEndian.Uint16(raw[2:]) != 16 || binary.LittleEndian.Uint32(raw[4:]) != 0xf1 {
		t.Errorf("encoded % x; want db 87 10 00 f1 00 00 00", raw)
	}
}

// On the kernel (5.12+): a compare that fails leaves the value and
// returns it; one that holds stores the new value.
func TestCmpXchgRuns(t *testing.T) {
	privtest.Require(t)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// r0 = cmpxchg(slot, expect, 101); return r0 == old ? 1 : 2
	prog := func(expect int32) bpf.Instructions {
		return bpf.Instructions{
			bpf.Mov.Imm(bpf.R1, 0), bpf.StoreMem(bpf.RFP, -4, bpf.R1, bpf.Word),
			bpf.LoadMapPtr(bpf.R1, m.FD()), bpf.Mov.Reg(bpf.R2, bpf.RFP), bpf.Add.Imm(bpf.R2, -4), bpf.FnMapLookupElem.Call(),
			bpf.JEq.Imm(bpf.R0, 0, "out"),
			bpf.Mov.Reg(bpf.R7, bpf.R0),
			bpf.Mov.Imm(bpf.R8, 101),
			bpf.Mov.Imm(bpf.R0, expect),
			CmpXchg(bpf.R7, bpf.R8, bpf.DWord, 0),
			bpf.JEq.Imm(bpf.R0, 7, "old"),
			bpf.Mov.Imm(bpf.R0, 2), bpf.Return(),
			bpf.Mov.Imm(bpf.R0, 1).WithSymbol("old"), bpf.Return(),
			bpf.Mov.Imm(bpf.R0, 3).WithSymbol("out"), bpf.Return(),
		}
	}
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var major, minor int
	fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor)
	if major < 5 || major == 5 && minor < 12 {
		// Before 5.12 the verifier must refuse it (HaveAtomicCmpXchg relies on that).
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL", Instructions: prog(5)})
		if err == nil {
			p.Close()
			t.Errorf("kernel %d.%d loaded a compare-and-exchange", major, minor)
		}
		return
	}
	for _, tc := range []struct {
		expect   int32
		want     uint64
		returned uint32
	}{{5, 7, 1}, {7, 101, 1}} {
		if err := m.Put(uint32(0), uint64(7)); err != nil {
			t.Fatal(err)
		}
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL", Instructions: prog(tc.expect)})
		if err != nil {
			t.Fatal(err)
		}
		ret, _, err := p.Test(make([]byte, 64))
		p.Close()
		var got uint64
		m.Lookup(uint32(0), &got)
		if err != nil || ret != tc.returned || got != tc.want {
			t.Errorf("expect %d on 7: returned %d (%v), value %d; want %d and %d", tc.expect, ret, err, got, tc.returned, tc.want)
		}
	}
}
