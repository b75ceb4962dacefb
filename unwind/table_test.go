package unwind

import (
	"math/rand"
	"sort"
	"testing"
)

func compiled(t testing.TB, name string) ([]FDE, []Entry) {
	fdes, err := Parse(section(t, name))
	if err != nil {
		t.Fatal(err)
	}
	entries, err := archOfName(name).Compile(fdes)
	if err != nil {
		t.Fatal(err)
	}
	return fdes, entries
}

// TestCompile checks the compiled table against the parsed rows: at every
// row's address and just before the next, the search finds that row's rule;
// past every FDE's end with no FDE after it, it finds StopNoRow.
func TestCompile(t *testing.T) {
	for _, name := range []string{"chain-pie", "libc", "chain-arm64", "libc-arm64"} {
		fdes, entries := compiled(t, name)
		encode := archOfName(name).encode
		if !sort.SliceIsSorted(entries, func(i, j int) bool { return entries[i].PC < entries[j].PC }) {
			t.Fatalf("%s: entries not sorted", name)
		}
		for i := 1; i < len(entries); i++ {
			if entries[i].PC == entries[i-1].PC || entries[i].Rule == entries[i-1].Rule {
				t.Fatalf("%s: entries %d and %d not merged: %+v %+v", name, i-1, i, entries[i-1], entries[i])
			}
		}
		layout := NewLayout(entries)
		rule := func(pc uint64) uint32 {
			i, ok := layout.Search(uint32(pc))
			if !ok {
				t.Fatalf("%s: no entry for 0x%x", name, pc)
			}
			return entries[i].Rule
		}
		for _, f := range fdes {
			for j, r := range f.Rows {
				end := f.End
				if j+1 < len(f.Rows) {
					end = f.Rows[j+1].PC
				}
				if got, want := rule(r.PC), encode(r); got != want {
					t.Fatalf("%s: 0x%x: rule 0x%x, want 0x%x", name, r.PC, got, want)
				}
				if got, want := rule(end-1), encode(r); got != want {
					t.Fatalf("%s: 0x%x: rule 0x%x, want 0x%x", name, end-1, got, want)
				}
			}
		}
		last := fdes[0]
		for _, f := range fdes {
			if f.End > last.End {
				last = f
			}
		}
		if got := rule(last.End); got != stop(StopNoRow) {
			t.Fatalf("%s: past the last FDE: rule 0x%x", name, got)
		}
		if _, ok := Search(entries, uint32(entries[0].PC-1)); ok {
			t.Fatalf("%s: an address below the first entry found one", name)
		}
		stops := map[Stop]int{}
		for _, e := range entries {
			if e.Rule&3 == BaseStop {
				stops[Stop(e.Rule>>offShift)]++
			}
		}
		t.Logf("%s: %d FDEs, %d entries, stops %v", name, len(fdes), len(entries), stops)
	}
}

// TestSearch compares the fixed-step search with sort.Search on random
// tables and addresses, sizes 1 to MaxRows.
func TestSearch(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for _, n := range []int{1, 2, 3, 5, 16, 17, 1000, 65537, MaxRows} {
		entries := make([]Entry, n)
		pc := uint32(rng.Intn(100))
		for i := range entries {
			pc += 1 + uint32(rng.Intn(50))
			entries[i] = Entry{PC: pc, Rule: uint32(i)}
		}
		layout := NewLayout(entries)
		for k := 0; k < 2000; k++ {
			q := uint32(rng.Int63n(int64(pc) + 100))
			if k < n {
				q = entries[k].PC - uint32(k%2) // every boundary and the address before it
			}
			// The reference: the first entry above q, less one.
			want := sort.Search(len(entries), func(i int) bool { return entries[i].PC > q }) - 1
			wok := want >= 0
			got, ok := layout.Search(q)
			if ok != wok || ok && got != want {
				t.Fatalf("n=%d pc=0x%x: %d %v, want %d %v", n, q, got, ok, want, wok)
			}
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, name := range []string{"chain-pie", "libc"} {
		s := section(f, name)
		f.Add(s.Data[:min(len(s.Data), 4096)], false)
	}
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0, 0, 0, 0, 0}, true)
	f.Fuzz(func(t *testing.T, data []byte, debug bool) {
		fdes, err := Parse(Section{Data: data, Addr: 0x1000, Debug: debug})
		if err != nil {
			return
		}
		if entries, err := Compile(fdes); err == nil && len(entries) > 0 {
			Search(entries, entries[len(entries)/2].PC)
		}
	})
}

// TestDerefRule: gcc's realigned frame (DRAP), as its FDE says it
// (DW_CFA_def_cfa_expression: DW_OP_breg6 -8; DW_OP_deref; DW_CFA_expression
// rbp: DW_OP_breg6 0), is one rule word the unwinder follows: CFA =
// *(rbp - 8), rbp = *(rbp + 0). Other expressions stay unsupported.
func TestDerefRule(t *testing.T) {
	cfa := cfaExpression([]byte{0x76, 0x78, 0x06}, X86_64)
	if cfa.Kind != CFADeref || cfa.Offset != -8 {
		t.Fatalf("DW_OP_breg6 -8; DW_OP_deref: %+v", cfa)
	}
	at, ok := bregRBP([]byte{0x76, 0x00}, false)
	if !ok || at != 0 {
		t.Fatalf("DW_OP_breg6 0: %d %v", at, ok)
	}
	row := Row{CFA: cfa, RBP: Rule{Kind: RuleAtRBP, Offset: at}, RA: Rule{Kind: RuleOffset, Offset: -8}}
	d := Decode(encode(row))
	if !d.Deref || d.CFAAt != -8 || d.RBPAt != 0 || d.Base != BaseStop || d.RBPSaved {
		t.Errorf("decoded %+v, want a deref rule: CFA at rbp-8, rbp at rbp+0", d)
	}
	row.CFA.Offset, row.RBP.Offset = -1024, 1016 // the most the word holds
	if d := Decode(encode(row)); !d.Deref || d.CFAAt != -1024 || d.RBPAt != 1016 {
		t.Errorf("decoded %+v, want CFA at rbp-1024, rbp at rbp+1016", d)
	}
	for _, bad := range []Row{
		{CFA: CFA{Kind: CFADeref, Reg: RegRBP, Offset: -8}, RBP: Rule{Kind: RuleSame}, RA: row.RA},                               // rbp not found
		{CFA: CFA{Kind: CFADeref, Reg: RegRBP, Offset: -1032}, RBP: Rule{Kind: RuleAtRBP}, RA: row.RA},                           // too far
		{CFA: CFA{Kind: CFADeref, Reg: RegRBP, Offset: -4}, RBP: Rule{Kind: RuleAtRBP}, RA: row.RA},                              // not a word
		{CFA: CFA{Kind: CFAReg, Reg: RegRSP, Offset: 16}, RBP: Rule{Kind: RuleAtRBP}, RA: row.RA},                                // rbp where the CFA is not from it
		{CFA: CFA{Kind: CFADeref, Reg: RegRBP, Offset: -8}, RBP: Rule{Kind: RuleAtRBP}, RA: Rule{Kind: RuleOffset, Offset: -16}}, // return address elsewhere
	} {
		if w := encode(bad); w != stop(StopUnsupported) {
			t.Errorf("%+v: rule %#x, want unsupported", bad, w)
		}
	}
	for _, e := range [][]byte{
		{0x76, 0x78},             // no deref
		{0x77, 0x78, 0x06},       // rsp, not rbp (the signal trampoline's is read by its code)
		{0x76, 0x78, 0x06, 0x06}, // two derefs
		{0x76, 0xf8},             // an unended LEB128
	} {
		if c := cfaExpression(e, X86_64); c.Kind != CFAExpression {
			t.Errorf("% x: %+v, want a CFA expression not followed", e, c)
		}
	}
}

// TestEncodeARM64: every row of the arm64 sections that saves nothing
// yet, x30 alone or the pair x29, x30, from a CFA of sp or x29, is one
// rule word that gives back its CFA, and where x29 and x30 were saved:
// all of the chain fixture's, and all of Debian's arm64 libc's but the 3
// rows whose CFA is another register (x0: setcontext's, and the like).
// The same of riscv64's sections, with s0 and ra, and s0 alone (SavesFP).
func TestEncodeARM64(t *testing.T) {
	// riscv64's libc: 27 rows whose CFA is t0's (hand-written code) or
	// that save ra and s0 apart.
	for name, wantUnsupported := range map[string]int{"chain-arm64": 0, "chain-arm64-pac": 0, "libc-arm64": 3, "chain-riscv64": 0, "libc-riscv64": 27} {
		arch := archOfName(name)
		fdes, err := Parse(section(t, name))
		if err != nil {
			t.Fatal(err)
		}
		unsupported, rows := 0, 0
		for _, f := range fdes {
			for _, r := range f.Rows {
				rows++
				d := DecodeARM64(arch.encode(r))
				if r.RA.Kind == RuleUndefined {
					if d.Base != BaseStop || Stop(d.Offset) != StopEnd {
						t.Errorf("%s 0x%x: %+v, want the end of the stack", name, r.PC, d)
					}
					continue
				}
				if d.Base == BaseStop {
					unsupported++
					continue
				}
				reg := map[uint32]uint64{BaseRSP: arch.SP, BaseRBP: arch.FP}[d.Base]
				fp, ra := Rule{Kind: RuleSame}, Rule{Kind: RuleSame}
				switch d.Saves {
				case SavesRA:
					ra = Rule{Kind: RuleOffset, Offset: d.Slot}
				case SavesPair:
					fp, ra = Rule{Kind: RuleOffset, Offset: d.Slot}, Rule{Kind: RuleOffset, Offset: d.Slot + 8}
				case SavesFP:
					if arch != RISCV64 {
						t.Errorf("%s 0x%x: SavesFP outside riscv64", name, r.PC)
					}
					fp = Rule{Kind: RuleOffset, Offset: d.Slot}
				}
				if reg != r.CFA.Reg || int64(d.Offset) != r.CFA.Offset || fp != r.RBP || ra != r.RA {
					t.Errorf("%s 0x%x: %+v decoded as CFA r%d+%d, x29 %+v, x30 %+v", name, r.PC, r, reg, d.Offset, fp, ra)
				}
			}
		}
		t.Logf("%s: %d rows, %d unsupported", name, rows, unsupported)
		if unsupported != wantUnsupported {
			t.Errorf("%s: %d rows unsupported, want %d", name, unsupported, wantUnsupported)
		}
	}
	// The fields' bounds.
	for _, c := range []struct {
		row Row
		ok  bool
	}{
		{Row{CFA: CFA{Kind: CFAReg, Reg: RegSP, Offset: 8 * maxCFA8}, RBP: Rule{Kind: RuleOffset, Offset: -8 * maxSlot}, RA: Rule{Kind: RuleOffset, Offset: -8*maxSlot + 8}}, true},
		{Row{CFA: CFA{Kind: CFAReg, Reg: RegSP, Offset: 8*maxCFA8 + 8}}, false},
		{Row{CFA: CFA{Kind: CFAReg, Reg: RegSP, Offset: 16}, RA: Rule{Kind: RuleOffset, Offset: -8*maxSlot - 8}}, false},
		{Row{CFA: CFA{Kind: CFAReg, Reg: RegSP, Offset: 12}}, false},
		{Row{CFA: CFA{Kind: CFAReg, Reg: RegSP, Offset: 16}, RBP: Rule{Kind: RuleOffset, Offset: -16}}, false},                                         // x29 alone
		{Row{CFA: CFA{Kind: CFAReg, Reg: RegSP, Offset: 32}, RBP: Rule{Kind: RuleOffset, Offset: -8}, RA: Rule{Kind: RuleOffset, Offset: -32}}, false}, // not a pair
		{Row{CFA: CFA{Kind: CFAReg, Reg: RegSP, Offset: 16}, RA: Rule{Kind: RuleOffset, Offset: 8}}, false},                                            // above the CFA
		{Row{CFA: CFA{Kind: CFAReg, Reg: 0, Offset: 16}}, false},
	} {
		if w := ARM64.encode(c.row); (DecodeARM64(w).Base != BaseStop) != c.ok {
			t.Errorf("%+v: rule %#x, want encodable %v", c.row, w, c.ok)
		}
	}
	// s0 saved, ra back in its register: riscv64's epilogue, not arm64's.
	fpOnly := Row{CFA: CFA{Kind: CFAReg, Reg: RegRVSP, Offset: 16}, RBP: Rule{Kind: RuleOffset, Offset: -16}}
	if d := DecodeARM64(RISCV64.encode(fpOnly)); d.Base != BaseRSP || d.Saves != SavesFP || d.Slot != -16 || d.Offset != 16 {
		t.Errorf("riscv64 %+v: %+v", fpOnly, d)
	}
	fpOnly.CFA.Reg = RegSP
	if d := DecodeARM64(ARM64.encode(fpOnly)); d.Base != BaseStop {
		t.Errorf("arm64 %+v: %+v, want unsupported", fpOnly, d)
	}
}

// TestPLTLinkRegister: the rows profile writes for a .plt the linker gives
// none: arm64's header pushes x16 and x30, then stubs whose return address
// is in x30; riscv64's is one row, its return address in ra throughout
// (the header and the stubs touch neither sp nor ra).
func TestPLTLinkRegister(t *testing.T) {
	type row struct {
		pc uint32
		d  DecodedARM64
	}
	for _, c := range []struct {
		name string
		arch Arch
		fde  FDE
		want []row
	}{
		{"arm64", ARM64, PLTARM64(0x1000, 0x60), []row{
			{0x1000, DecodedARM64{Base: BaseRSP, Saves: SavesNone}},
			{0x1004, DecodedARM64{Base: BaseRSP, Offset: 16, Saves: SavesRA, Slot: -8}},
			{0x1020, DecodedARM64{Base: BaseRSP, Saves: SavesNone}},
			{0x1060, DecodedARM64{Base: BaseStop, Offset: uint32(StopNoRow)}},
		}},
		{"riscv64", RISCV64, PLTRISCV64(0x1000, 0x60), []row{
			{0x1000, DecodedARM64{Base: BaseRSP, Saves: SavesNone}},
			{0x1060, DecodedARM64{Base: BaseStop, Offset: uint32(StopNoRow)}},
		}},
	} {
		entries, err := c.arch.Compile([]FDE{c.fde})
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != len(c.want) {
			t.Fatalf("%s: %d entries %+v, want %d", c.name, len(entries), entries, len(c.want))
		}
		for i, w := range c.want {
			if d := DecodeARM64(entries[i].Rule); entries[i].PC != w.pc || d != w.d {
				t.Errorf("%s: entry %d: 0x%x %+v, want 0x%x %+v", c.name, i, entries[i].PC, d, w.pc, w.d)
			}
		}
	}
}

// A Table of more than one chunk gives its rows back in order, whole
// blocks of them, the last one padded.
func TestTableBlocks(t *testing.T) {
	tab := &Table{}
	const n = rawChunk + BlockRows + 5
	for i := range n {
		tab.push(Entry{PC: uint32(i), Rule: uint32(i) * 3})
	}
	if tab.Len() != n || tab.Blocks() != n/BlockRows+1 || len(tab.chunks) != 2 {
		t.Fatalf("%d rows in %d blocks, %d chunks", tab.Len(), tab.Blocks(), len(tab.chunks))
	}
	all := tab.Entries()
	for b := range tab.Blocks() {
		block := tab.Block(b)
		for i, e := range block {
			r := b*BlockRows + i
			if want := Pad; r < n {
				want = all[r]
				if e != want || tab.At(r) != want || want.PC != uint32(r) {
					t.Fatalf("row %d: %v, At %v, Entries %v", r, e, tab.At(r), want)
				}
			} else if e != want {
				t.Fatalf("row %d past the end: %v, want Pad", r, e)
			}
		}
	}
}
