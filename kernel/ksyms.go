package kernel

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// symbolBatch is how many addresses one run of the naming program names,
// symbolLen the room for one name ("name [module]", cut past it).
const (
	symbolBatch = 32
	symbolLen   = 256
)

// SymbolNames names kernel code addresses as /proc/kallsyms would, "func"
// or "func [module]" ("" for an address in no symbol), by asking the
// kernel: a socket filter run by BPF_PROG_TEST_RUN formats each address
// with bpf_snprintf's %ps (5.13+), symbolBatch addresses a run. The
// kernel looks each one up by a binary search; reading kallsyms formats
// all of its 200,000 lines, 50 to 100 ms of CPU for one report. An error
// (an older kernel) says to read kallsyms instead.
func SymbolNames(addrs []uint64) (map[uint64]string, error) {
	in, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8 * symbolBatch, MaxEntries: 1})
	if err != nil {
		return nil, err
	}
	defer in.Close()
	out, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: symbolLen * symbolBatch, MaxEntries: 1})
	if err != nil {
		return nil, err
	}
	defer out.Close()
	// bpf_snprintf takes its format from a frozen read-only map only.
	fmtMap, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1, Flags: unix.BPF_F_RDONLY_PROG,
		Contents: []ebpf.MapKV{{Key: uint32(0), Value: []byte("%ps\x00")}}})
	if err != nil {
		return nil, err
	}
	defer fmtMap.Close()
	if err := fmtMap.Freeze(); err != nil {
		return nil, err
	}
	insns := symbolProgram(in.FD(), out.FD(), fmtMap.FD())
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL", Instructions: insns})
	if err != nil {
		return nil, fmt.Errorf("load the program that names kernel addresses: %w", err)
	}
	defer prog.Close()
	names := make(map[uint64]string, len(addrs))
	batch := make([]byte, 8*symbolBatch)
	res := make([]byte, symbolLen*symbolBatch)
	for start := 0; start < len(addrs); start += symbolBatch {
		part := addrs[start:min(start+symbolBatch, len(addrs))]
		clear(batch)
		for i, a := range part {
			binary.LittleEndian.PutUint64(batch[8*i:], a)
		}
		if err := in.Put(uint32(0), batch); err != nil {
			return nil, err
		}
		if _, err := prog.Run(&ebpf.RunOptions{Data: make([]byte, 14)}); err != nil {
			return nil, fmt.Errorf("name kernel addresses: %w", err)
		}
		if err := out.Lookup(uint32(0), &res); err != nil {
			return nil, err
		}
		for i, a := range part {
			name, _, _ := bytes.Cut(res[i*symbolLen:(i+1)*symbolLen], []byte{0})
			s := string(name)
			if strings.HasPrefix(s, "0x") {
				s = "" // in no symbol: %ps prints the address
			}
			names[a] = s
		}
	}
	return names, nil
}

// symbolProgram is SymbolNames' socket filter: %ps of each of the
// symbolBatch addresses in the map in's value into out's, the format
// from the frozen map format. The maps by their file descriptors.
func symbolProgram(in, out, format int) bpf.Instructions {
	// R6 and R7: in's and out's one value (the key, 0, at fp-4).
	lookup := func(fd int, to bpf.Register) bpf.Instructions {
		return bpf.Instructions{
			bpf.LoadMapPtr(bpf.R1, fd),
			bpf.Mov.Reg(bpf.R2, bpf.RFP),
			bpf.Add.Imm(bpf.R2, -4),
			bpf.FnMapLookupElem.Call(),
			bpf.JEq.Imm(bpf.R0, 0, "out"),
			bpf.Mov.Reg(to, bpf.R0),
		}
	}
	insns := append(bpf.Instructions{bpf.StoreImm(bpf.RFP, -4, 0, bpf.Word)}, lookup(in, bpf.R6)...)
	insns = append(insns, lookup(out, bpf.R7)...)
	for i := int32(0); i < symbolBatch; i++ {
		insns = append(insns,
			bpf.Mov.Reg(bpf.R1, bpf.R7),
			bpf.Add.Imm(bpf.R1, i*symbolLen),
			bpf.Mov.Imm(bpf.R2, symbolLen),
			bpf.LoadMapValue(bpf.R3, format, 0),
			bpf.Mov.Reg(bpf.R4, bpf.R6),
			bpf.Add.Imm(bpf.R4, i*8),
			bpf.Mov.Imm(bpf.R5, 8),
			bpf.FnSnprintf.Call(),
		)
	}
	return append(insns, bpf.Mov.Imm(bpf.R0, 0).WithSymbol("out"), bpf.Return())
}
