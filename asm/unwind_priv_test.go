package asm

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/rlimit"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/unwind"
)

// libcRows compiles the copy of Debian libc's .eh_frame kept by the unwind
// package's tests.
func libcRows(t *testing.T) []unwind.Entry {
	dir := filepath.Join("..", "unwind", "testdata")
	data, err := os.ReadFile(filepath.Join(dir, "libc.eh_frame"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := os.ReadFile(filepath.Join(dir, "libc.eh_frame.addr"))
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := strconv.ParseUint(strings.TrimSpace(string(a)), 0, 64)
	fdes, err := unwind.Parse(unwind.Section{Data: data, Addr: addr})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := unwind.Compile(fdes)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// TestRowSearchInKernel runs the search in the kernel (a socket filter
// under BPF_PROG_TEST_RUN) over libc's real rows, placed after unrelated
// rows as in the shared table, and compares it with unwind.Search at every
// row boundary, the address before each, and random addresses.
func TestRowSearchInKernel(t *testing.T) {
	privtest.Require(t)
	if err := rlimit.RemoveMemlock(); err != nil { // 5.10 charges maps to RLIMIT_MEMLOCK
		t.Fatal(err)
	}
	rows := libcRows(t)
	const first = 1000 // another file's rows come first
	table, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: uint32(first + len(rows))})
	if err != nil {
		t.Fatal(err)
	}
	defer table.Close()
	keys := make([]uint32, len(rows))
	for i := range keys {
		keys[i] = uint32(first + i)
	}
	if _, err := table.BatchUpdate(keys, rows, nil); err != nil {
		t.Fatal(err)
	}
	input, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer input.Close()
	insns := bpf.Instructions{
		bpf.StoreImm(bpf.RFP, -4, 0, bpf.Word).WithSource(bpf.Comment("r0 = index of the row for input[0]")),
		bpf.LoadMapPtr(bpf.R1, input.FD()),
		bpf.Mov.Reg(bpf.R2, bpf.RFP),
		bpf.Add.Imm(bpf.R2, -4),
		bpf.FnMapLookupElem.Call(),
		bpf.JEq.Imm(bpf.R0, 0, "fail"),
		bpf.LoadMem(bpf.R6, bpf.R0, 0, bpf.DWord),
		bpf.Mov.Imm(bpf.R7, first),
		bpf.Mov.Imm(bpf.R8, int32(len(rows))),
	}
	insns = append(insns, RowSearch("s", "rows", bpf.R6, bpf.R7, bpf.R8, unwind.SearchSteps, -8, "fail")...)
	insns = append(insns, bpf.Mov.Reg(bpf.R0, bpf.R7), bpf.Return())
	insns = append(insns, Return("fail", -1)...)
	for i := range insns {
		if insns[i].Reference() == "rows" {
			if err := insns[i].AssociateMap(table); err != nil {
				t.Fatal(err)
			}
		}
	}
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SocketFilter, License: "GPL", Instructions: insns})
	if err != nil {
		t.Fatalf("load: %+v", err)
	}
	defer prog.Close()
	var pcs []uint32
	for _, r := range rows {
		pcs = append(pcs, r.PC, r.PC-1)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 2000; i++ {
		pcs = append(pcs, rows[0].PC+uint32(rng.IntN(int(rows[len(rows)-1].PC-rows[0].PC+64))))
	}
	for _, pc := range pcs {
		if err := input.Put(uint32(0), uint64(pc)); err != nil {
			t.Fatal(err)
		}
		got, err := prog.Run(&ebpf.RunOptions{Data: make([]byte, 14)})
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		want, _ := unwind.Search(rows, pc)
		if int(got) != first+want {
			t.Fatalf("row of 0x%x: %d in the kernel, %d in Go", pc, int32(got), first+want)
		}
	}
	t.Logf("%d rows, %d addresses, %d instructions", len(rows), len(pcs), len(insns))
}
