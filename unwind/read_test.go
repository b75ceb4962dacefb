package unwind

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// TestReadMatchesCompile reads the real sections through Read and compares
// the table with Compile's of Parse's FDEs.
func TestReadMatchesCompile(t *testing.T) {
	for _, name := range []string{"chain-pie", "libc", "chain-arm64", "libc-arm64", "chain-riscv64", "libc-riscv64"} {
		s := section(t, name)
		_, want := compiled(t, name)
		tab, err := s.Arch.Read(bytes.NewReader(s.Data), int64(len(s.Data)), s.Addr, false)
		if err != nil {
			t.Fatal(err)
		}
		if got := tab.Entries(); !slices.Equal(got, want) {
			t.Fatalf("%s: Read gives %d entries, Compile %d, or others", name, len(got), len(want))
		}
	}
}

// frames builds .eh_frame sections: CIEs, and FDEs of functions one after
// another, each with its number of rows (a CFA offset that changes at every
// byte, so that no row merges with its neighbour).
type frames struct {
	b   []byte
	cie int // the offset of the CIE new FDEs point at
	pc  uint32
}

const framesAddr = 0x1000

func (f *frames) entry(body []byte) {
	for len(body)%4 != 0 {
		body = append(body, 0) // DW_CFA_nop
	}
	f.b = binary.LittleEndian.AppendUint32(f.b, uint32(len(body)))
	f.b = append(f.b, body...)
}

// addCIE adds a CIE ("zR", pc-relative 4-byte pointers; CFA = rsp+8, the
// return address at CFA-8) with extra initial instructions (nops).
func (f *frames) addCIE(extra int) {
	f.cie = len(f.b)
	body := []byte{0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 16, 1, 0x1b, 0x0c, 7, 8, 0x90, 1}
	f.entry(append(body, make([]byte, extra)...))
}

func (f *frames) addFDE(rows int) {
	at := len(f.b) + 4 // the CIE pointer's offset
	body := binary.LittleEndian.AppendUint32(nil, uint32(at-f.cie))
	size := uint32(max(rows, 1))
	// The begin address, pc-relative: from the pointer's own address.
	body = binary.LittleEndian.AppendUint32(body, f.pc-uint32(framesAddr+at+4))
	body = binary.LittleEndian.AppendUint32(body, size)
	body = append(body, 0) // no augmentation data
	for i := 1; i < rows; i++ {
		body = append(body, 0x41, 0x0e, byte(16+8*(i%2))) // advance 1; CFA offset 16 or 24
	}
	f.entry(body)
	f.pc += size
}

func (f *frames) read() (*Table, error) {
	return Read(bytes.NewReader(f.b), int64(len(f.b)), framesAddr, false)
}

// TestReadBounded reads hostile sections: each is refused with its limit,
// holding no more than ParseMemory meanwhile (counted as every byte Read
// allocates, collected or not), and a section just under the limits is
// read whole.
func TestReadBounded(t *testing.T) {
	many := func(fdes, rows int) *frames {
		f := &frames{}
		f.addCIE(0)
		for i := 0; i < fdes; i++ {
			f.addFDE(rows)
		}
		return f
	}
	// FDEs of one address each: every one's rows are cut by the next's,
	// so the rows read grow and the table does not.
	overlapping := func(fdes, rows int) *frames {
		f := &frames{}
		f.addCIE(0)
		for i := 0; i < fdes; i++ {
			f.pc = 0x2000
			f.addFDE(rows)
		}
		return f
	}
	ciePairs := &frames{}
	for i := 0; i < maxCIEs+1; i++ {
		ciePairs.addCIE(0)
		ciePairs.addFDE(2)
	}
	bigCIE := &frames{}
	bigCIE.addCIE(maxInitial + 1)
	bigCIE.addFDE(2)
	bigEntry := &frames{}
	bigEntry.addCIE(0)
	bigEntry.entry(make([]byte, maxEntry+4))
	for _, c := range []struct {
		name string
		f    *frames
		err  string // "": read whole
		rows int
	}{
		// 64 MiB of FDEs, each a 1-byte function with one row.
		{"fdes", many(64<<20/20, 1), fmt.Sprintf("more than %d FDEs", MaxFDEs), 0},
		{"rows before merging", overlapping(maxRaw/(maxRowsPerFDE-1)+1, maxRowsPerFDE), fmt.Sprintf("more than %d unwind rows", maxRaw), 0},
		{"rows after merging", many(MaxRows/maxRowsPerFDE+1, maxRowsPerFDE), fmt.Sprintf("more than %d unwind rows, the most", MaxRows), 0},
		{"rows of an FDE", many(1, maxRowsPerFDE+2), fmt.Sprintf("more than %d rows", maxRowsPerFDE), 0},
		{"CIEs", ciePairs, fmt.Sprintf("more than %d CIEs", maxCIEs), 0},
		{"initial instructions", bigCIE, "initial instructions", 0},
		{"an entry", bigEntry, "more than the 1048576 an entry may have", 0},
		{"a section", &frames{b: make([]byte, MaxSection+1)}, "a section of 256 MiB, more than 256", 0},
		// Just under: every FDE's rows and its end's stop row.
		{"under", many(MaxRows/maxRowsPerFDE-1, maxRowsPerFDE), "", (MaxRows/maxRowsPerFDE - 1) * maxRowsPerFDE},
	} {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			tab, err := c.f.read()
			runtime.ReadMemStats(&after)
			alloc := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d bytes of section: %v; %.1f MiB allocated (the bound: %.1f)", len(c.f.b), err, float64(alloc)/(1<<20), float64(ParseMemory)/(1<<20))
			if alloc > uint64(ParseMemory) {
				t.Errorf("Read allocated %d bytes, more than ParseMemory (%d)", alloc, ParseMemory)
			}
			if c.err == "" {
				if err != nil || tab.Len() != c.rows+1 {
					t.Fatalf("%d entries, %v; want %d", tab.Len(), err, c.rows+1)
				}
				return
			}
			var limit *LimitError
			if err == nil || !strings.Contains(err.Error(), c.err) || !errors.As(err, &limit) {
				t.Fatalf("error %v, want a LimitError with %q", err, c.err)
			}
		})
	}
}

// FuzzRead feeds Read the fuzzer's sections, read as x86-64's, arm64's
// and riscv64's: it errs or gives what Compile gives for Parse's FDEs,
// never panics.
func FuzzRead(f *testing.F) {
	for _, name := range []string{"chain-pie", "libc", "chain-arm64-pac", "libc-arm64", "chain-riscv64"} {
		s := section(f, name)
		f.Add(s.Data[:min(len(s.Data), 4096)], false)
	}
	fr := &frames{}
	fr.addCIE(0)
	fr.addFDE(3)
	fr.addFDE(1)
	f.Add(fr.b, false)
	f.Fuzz(func(t *testing.T, data []byte, debug bool) {
		for _, arch := range []Arch{X86_64, ARM64, RISCV64} {
			tab, err := arch.Read(bytes.NewReader(data), int64(len(data)), framesAddr, debug)
			got := tab.Entries()
			fdes, perr := Parse(Section{Data: data, Addr: framesAddr, Debug: debug, Arch: arch})
			var want []Entry
			if perr == nil {
				want, perr = arch.Compile(fdes)
			}
			if (err == nil) != (perr == nil) || !slices.Equal(got, want) {
				t.Fatalf("%v: Read: %d entries, %v; Parse and Compile: %d, %v", arch.Machine, len(got), err, len(want), perr)
			}
		}
	})
}
