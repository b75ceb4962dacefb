// Package golden compares test output with files under testdata/. Run the
// tests with -update to rewrite the files instead (then nothing is compared).
package golden

import (
	"flag"

	"github.com/cilium/ebpf/asm"

	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files instead of comparing")

// Updating says whether the tests were run with -update.
func Updating() bool { return *update }

// Check compares got with testdata/<name>.golden, printing a line diff.
func Check(t *testing.T, name, got string) {
	t.Helper()
	File(t, filepath.Join("testdata", name+".golden"), got)
}

// File compares got with the file at path, or writes it with -update.
func File(t *testing.T, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs (run with -update to accept):\n%s", path, Diff(string(want), got))
	}
}

// Diff lists the lines that differ, "-" from want, "+" from got, each
// run of changes headed by its line numbers and with a line of context
// either side: an inserted line shows as one line, not as every line
// after it changed.
func Diff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	ops := edits(w, g)
	var b strings.Builder
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		j := i
		for j < len(ops) && ops[j].kind != ' ' {
			j++
		}
		lo, hi := max(i-1, 0), min(j+1, len(ops))
		fmt.Fprintf(&b, "@@ want line %d, got line %d\n", ops[lo].wi+1, ops[lo].gi+1)
		for _, op := range ops[lo:hi] {
			b.WriteString(string(op.kind) + op.line + "\n")
		}
		i = j
	}
	return b.String()
}

type edit struct {
	kind   byte // ' ' the same, '-' only in want, '+' only in got
	line   string
	wi, gi int // the line's index in want and got (where it would be)
}

// edits is a shortest edit script of w into g: the common head and tail
// taken off, then a longest common subsequence of what is left when that
// fits in 32M cells, else the rest as removed and added.
func edits(w, g []string) []edit {
	head := 0
	for head < len(w) && head < len(g) && w[head] == g[head] {
		head++
	}
	tail := 0
	for tail < len(w)-head && tail < len(g)-head && w[len(w)-1-tail] == g[len(g)-1-tail] {
		tail++
	}
	var ops []edit
	for i := 0; i < head; i++ {
		ops = append(ops, edit{' ', w[i], i, i})
	}
	mw, mg := w[head:len(w)-tail], g[head:len(g)-tail]
	// 32M cells of 2 bytes: two 5,000-line programs diff in 50 MB.
	if n := (len(mw) + 1) * (len(mg) + 1); n <= 32<<20 && min(len(mw), len(mg)) < 1<<16 {
		// lcs[i][j]: the longest common subsequence of mw[i:] and mg[j:].
		cols := len(mg) + 1
		lcs := make([]uint16, (len(mw)+1)*cols)
		for i := len(mw) - 1; i >= 0; i-- {
			for j := len(mg) - 1; j >= 0; j-- {
				if mw[i] == mg[j] {
					lcs[i*cols+j] = lcs[(i+1)*cols+j+1] + 1
				} else {
					lcs[i*cols+j] = max(lcs[(i+1)*cols+j], lcs[i*cols+j+1])
				}
			}
		}
		i, j := 0, 0
		for i < len(mw) || j < len(mg) {
			switch {
			case i < len(mw) && j < len(mg) && mw[i] == mg[j]:
				ops = append(ops, edit{' ', mw[i], head + i, head + j})
				i, j = i+1, j+1
			case i < len(mw) && (j == len(mg) || lcs[(i+1)*cols+j] >= lcs[i*cols+j+1]):
				ops = append(ops, edit{'-', mw[i], head + i, head + j})
				i++
			default:
				ops = append(ops, edit{'+', mg[j], head + i, head + j})
				j++
			}
		}
	} else {
		for i, l := range mw {
			ops = append(ops, edit{'-', l, head + i, head})
		}
		for j, l := range mg {
			ops = append(ops, edit{'+', l, head + len(mw), head + j})
		}
	}
	for k := 0; k < tail; k++ {
		ops = append(ops, edit{' ', w[len(w)-tail+k], len(w) - tail + k, len(g) - tail + k})
	}
	return ops
}

// Program is a program's text for a golden: each instruction with its
// label and comment, as cilium/ebpf prints them, but without the
// instruction's index, so that an instruction added shows in a diff as
// one line, not as every index after it changed.
func Program(insns asm.Instructions) string {
	var b strings.Builder
	for _, ins := range insns {
		if sym := ins.Symbol(); sym != "" {
			fmt.Fprintf(&b, "%s:\n", sym)
		}
		if src := ins.Source(); src != nil {
			fmt.Fprintf(&b, "\t; %s\n", src)
		}
		fmt.Fprintf(&b, "\t%v\n", ins)
	}
	return b.String()
}
