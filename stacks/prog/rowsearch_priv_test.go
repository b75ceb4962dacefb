package prog

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/asm"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/rlimit"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/unwind"
)

// libcRows compiles the copy of Debian libc's .eh_frame kept by the unwind
// package's tests.
func libcRows(t *testing.T) []unwind.Entry {
	dir := filepath.Join("..", "..", "unwind", "testdata")
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
// under BPF_PROG_TEST_RUN) over libc's real rows, laid out in blocks after
// another file's as in the shared table, and compares it with
// unwind.Search at every row boundary, the address before each, and random
// addresses.
func TestRowSearchInKernel(t *testing.T) {
	privtest.Require(t)
	if err := rlimit.RemoveMemlock(); err != nil { // 5.10 charges maps to RLIMIT_MEMLOCK
		t.Fatal(err)
	}
	rows := libcRows(t)
	for i := range rows {
		rows[i].Rule = 1<<30 | uint32(i) // the program returns the rule: here, the row's index
	}
	// A file of one block (no fence step), of a few (the steps end
	// early), and libc's.
	for _, n := range []int{unwind.BlockRows - 1, 5*unwind.BlockRows + 3, len(rows)} {
		t.Run(fmt.Sprint(n), func(t *testing.T) { searchInKernel(t, rows[:n]) })
	}
}

func searchInKernel(t *testing.T, rows []unwind.Entry) {
	const first = 16 * unwind.BlockRows // another file's blocks come first
	blocks, fences := unwind.Blocks(rows)
	nblocks := first/unwind.BlockRows + len(fences)
	fenceCap := 1
	for fenceCap < nblocks {
		fenceCap *= 2
	}
	// Chunks of 4 blocks: the file's blocks are spread over several, as
	// a big file's are over profile's 8192-block chunks. But on 32-bit
	// ARM, one chunk: its kernel (6.1's armmp guest) finds the wrong inner
	// map past the first, its inlined lookup in an array of maps stepping
	// 8 bytes an entry where it keeps 4-byte pointers (the CI of 248b7e2:
	// chunk 4 asked for, chunk 8 read). profile's table unwinder does not
	// run there (frame pointers only: prog.ArchOf), so no table of it is
	// ever chunked there.
	chunkShift := 2
	if runtime.GOARCH == "arm" {
		for 1<<chunkShift < nblocks {
			chunkShift++
		}
	}
	chunk := &ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8 * unwind.BlockRows, MaxEntries: 1 << chunkShift}
	table, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.ArrayOfMaps, KeySize: 4, ValueSize: 4, MaxEntries: uint32(nblocks>>chunkShift + 1), InnerMap: chunk})
	if err != nil {
		t.Fatal(err)
	}
	defer table.Close()
	chunks := map[int]*ebpf.Map{}
	for b := 0; b < len(fences); b++ {
		var block [unwind.BlockRows]unwind.Entry
		copy(block[:], blocks[b*unwind.BlockRows:])
		key := first/unwind.BlockRows + b
		c := chunks[key>>chunkShift]
		if c == nil {
			if c, err = ebpf.NewMap(chunk); err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := table.Put(uint32(key>>chunkShift), c); err != nil {
				t.Fatal(err)
			}
			chunks[key>>chunkShift] = c
		}
		if err := c.Put(uint32(key&(1<<chunkShift-1)), block); err != nil {
			t.Fatal(err)
		}
	}
	fenceMap, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: uint32(4 * fenceCap), MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer fenceMap.Close()
	all := make([]uint32, fenceCap)
	copy(all[first/unwind.BlockRows:], fences)
	if err := fenceMap.Put(uint32(0), all); err != nil {
		t.Fatal(err)
	}
	input, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer input.Close()
	insns := bpf.Instructions{
		bpf.StoreImm(bpf.RFP, -4, 0, bpf.Word).WithSource(bpf.Comment("r0 = the rule of the row for input[0]")),
		bpf.LoadMapPtr(bpf.R1, input.FD()),
		bpf.Mov.Reg(bpf.R2, bpf.RFP),
		bpf.Add.Imm(bpf.R2, -4),
		bpf.FnMapLookupElem.Call(),
		bpf.JEq.Imm(bpf.R0, 0, "fail"),
		bpf.LoadMem(bpf.R6, bpf.R0, 0, bpf.DWord),
		bpf.Mov.Imm(bpf.R7, first),
		bpf.Mov.Imm(bpf.R8, int32(len(rows))),
	}
	insns = append(insns, rowSearch("s", "rows", "fences", int32(fenceCap-1), chunkShift, bpf.R6, bpf.R7, bpf.R8, -8, "fail")...)
	insns = append(insns, bpf.LoadMem(bpf.R0, bpf.R0, 4, bpf.Word), bpf.Return())
	insns = append(insns, asm.Return("fail", -1)...)
	for i := range insns {
		m := map[string]*ebpf.Map{"rows": table, "fences": fenceMap}[insns[i].Reference()]
		if m != nil {
			if err := insns[i].AssociateMap(m); err != nil {
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
	layout := unwind.NewLayout(rows)
	for _, pc := range pcs {
		if err := input.Put(uint32(0), uint64(pc)); err != nil {
			t.Fatal(err)
		}
		got, err := prog.Run(&ebpf.RunOptions{Data: make([]byte, 14)})
		if err != nil {
			t.Fatalf("run: %v", err)
		}
		want, _ := layout.Search(pc)
		if got != 1<<30|uint32(want) {
			t.Fatalf("row of 0x%x: rule 0x%x in the kernel, row %d in Go", pc, got, want)
		}
	}
	t.Logf("%d rows in %d blocks, %d addresses, %d instructions", len(rows), len(fences), len(pcs), len(insns))
}
