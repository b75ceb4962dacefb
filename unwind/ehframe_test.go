package unwind

import (
	"bufio"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

func section(t testing.TB, name string) Section {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", name+".eh_frame"))
	if err != nil {
		t.Fatal(err)
	}
	a, err := os.ReadFile(filepath.Join("testdata", name+".eh_frame.addr"))
	if err != nil {
		t.Fatal(err)
	}
	addr, err := strconv.ParseUint(strings.TrimSpace(string(a)), 0, 64)
	if err != nil {
		t.Fatal(err)
	}
	return Section{Data: data, Addr: addr, Arch: archOfName(name)}
}

// archOfName is the architecture of a testdata section: arm64 or
// riscv64 by its name, else x86-64.
func archOfName(name string) Arch {
	switch {
	case strings.Contains(name, "arm64"):
		return ARM64
	case strings.Contains(name, "riscv64"):
		return RISCV64
	}
	return X86_64
}

// readelfFDE is one FDE as readelf --debug-dump=frames-interp prints it.
type readelfFDE struct {
	begin, end uint64
	rows       []readelfRow
}

type readelfRow struct {
	pc           uint64
	cfa, rbp, ra string
}

var regRule = regexp.MustCompile(`r\d+ \((\w+)\)`)

func readelfFrames(t *testing.T, name string) []readelfFDE {
	f, err := os.Open(filepath.Join("testdata", name+".frames-interp.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	z, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var fdes []readelfFDE
	var cols []string
	inFDE := false
	sc := bufio.NewScanner(z)
	for sc.Scan() {
		// "r9 (r9)": a register rule, one column.
		fields := strings.Fields(regRule.ReplaceAllString(sc.Text(), "reg:$1"))
		switch {
		case len(fields) == 0:
			inFDE = false
		case len(fields) >= 6 && fields[3] == "FDE":
			r := strings.TrimPrefix(fields[5], "pc=")
			lo, hi, _ := strings.Cut(r, "..")
			b, err1 := strconv.ParseUint(lo, 16, 64)
			e, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("readelf line %q", sc.Text())
			}
			fdes = append(fdes, readelfFDE{begin: b, end: e})
			inFDE = true
		case fields[0] == "LOC":
			cols = fields
		case inFDE && len(fields) == len(cols):
			pc, err := strconv.ParseUint(fields[0], 16, 64)
			if err != nil {
				t.Fatalf("readelf line %q", sc.Text())
			}
			row := readelfRow{pc: pc, cfa: fields[1], rbp: "u", ra: "u"}
			for i, c := range cols {
				switch c {
				case "rbp", "x29", "s0":
					row.rbp = fields[i]
				case "ra":
					row.ra = fields[i]
				}
			}
			fd := &fdes[len(fdes)-1]
			fd.rows = append(fd.rows, row)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return fdes
}

// readelfText renders a row as readelf does.
func readelfText(r Row, arch Arch) (cfa, rbp, ra string) {
	switch r.CFA.Kind {
	case CFAReg:
		name := fmt.Sprintf("r%d", r.CFA.Reg)
		switch {
		case arch == ARM64 && r.CFA.Reg == RegSP:
			name = "sp"
		case arch == ARM64 && r.CFA.Reg < RegSP:
			name = fmt.Sprintf("x%d", r.CFA.Reg)
		case arch == RISCV64 && r.CFA.Reg < 32:
			name = strings.Fields("zero ra sp gp tp t0 t1 t2 s0 s1 a0 a1 a2 a3 a4 a5 a6 a7 s2 s3 s4 s5 s6 s7 s8 s9 s10 s11 t3 t4 t5 t6")[r.CFA.Reg]
		case arch == X86_64 && r.CFA.Reg < 8:
			name = []string{"rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp"}[r.CFA.Reg]
		}
		cfa = fmt.Sprintf("%s%+d", name, r.CFA.Offset)
	case CFAPLT, CFAExpression:
		cfa = "exp"
	}
	rule := func(r Rule) string {
		switch r.Kind {
		case RuleOffset:
			return fmt.Sprintf("c%+d", r.Offset)
		case RuleOther:
			return "other"
		}
		return "u"
	}
	return cfa, rule(r.RBP), rule(r.RA)
}

// same compares a rule with readelf's: a register or an expression rule is
// "other" here (the unwinder does not follow it); an explicit same_value
// (readelf's "s") is the default's RuleSame ("u").
func same(got, readelf string) bool {
	if got == "u" && readelf == "s" {
		return true
	}
	if got == "other" {
		return strings.HasPrefix(readelf, "reg:") || readelf == "exp" || readelf == "vexp" || strings.HasPrefix(readelf, "v")
	}
	return got == readelf
}

func at(rows []Row, pc uint64) (Row, bool) {
	var found Row
	ok := false
	for _, r := range rows {
		if r.PC > pc {
			break
		}
		found, ok = r, true
	}
	return found, ok
}

// TestParseAgainstReadelf compares every FDE of real sections (a gcc -O2
// -fomit-frame-pointer binary, Debian's libc; x86-64 and arm64, where
// one built with -mbranch-protection=pac-ret signs its return addresses)
// with readelf's interpretation of the same bytes: the same ranges, and at
// every row start of either side the same CFA, frame pointer (rbp, x29)
// and return address rules.
func TestParseAgainstReadelf(t *testing.T) {
	for _, name := range []string{"chain-pie", "libc", "chain-arm64", "chain-arm64-pac", "libc-arm64", "chain-riscv64", "libc-riscv64"} {
		t.Run(name, func(t *testing.T) {
			arch := archOfName(name)
			fdes, err := Parse(section(t, name))
			if err != nil {
				t.Fatal(err)
			}
			want := readelfFrames(t, name)
			if len(fdes) != len(want) {
				t.Fatalf("%d FDEs, readelf has %d", len(fdes), len(want))
			}
			rows, plt, signed := 0, 0, 0
			for i, w := range want {
				f := fdes[i]
				if f.Begin != w.begin || f.End != w.end {
					t.Fatalf("FDE %d: 0x%x..0x%x, readelf 0x%x..0x%x", i, f.Begin, f.End, w.begin, w.end)
				}
				if len(w.rows) == 0 {
					continue // readelf prints no rows for an FDE without instructions
				}
				check := func(pc uint64) {
					r, ok := at(f.Rows, pc)
					wr := w.rows[0]
					for _, x := range w.rows {
						if x.pc <= pc {
							wr = x
						}
					}
					cfa, rbp, ra := readelfText(r, arch)
					if !ok || cfa != wr.cfa || !same(rbp, wr.rbp) || !same(ra, wr.ra) {
						t.Errorf("FDE 0x%x at 0x%x: CFA %s rbp %s ra %s, readelf %s %s %s", f.Begin, pc, cfa, rbp, ra, wr.cfa, wr.rbp, wr.ra)
					}
				}
				for _, r := range f.Rows {
					check(r.PC)
					if r.CFA.Kind == CFAPLT {
						plt++
					}
					if r.RASigned {
						signed++
					}
				}
				for _, r := range w.rows {
					check(r.pc)
				}
				rows += len(f.Rows)
			}
			t.Logf("%d FDEs, %d rows, %d PLT rows, %d signing the return address", len(fdes), rows, plt, signed)
			if strings.HasSuffix(name, "-pac") != (signed > 0) {
				t.Errorf("%d rows sign the return address: want some in the pac-ret build only", signed)
			}
		})
	}
}
