package main

import (
	"debug/elf"
	"debug/gosym"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

func dispatchArgs(argv ...string) (int, string, string) {
	var out, errs strings.Builder
	status := dispatch(argv, &out, &errs)
	return status, out.String(), errs.String()
}

func TestDispatch(t *testing.T) {
	status, out, _ := dispatchArgs("/usr/local/bin/tracekit", "--help")
	if status != 0 {
		t.Fatalf("--help: status %d", status)
	}
	for _, tool := range all {
		if !strings.Contains(out, "\n  "+tool.name+" ") || !strings.Contains(out, tool.tool().Summary) {
			t.Errorf("--help does not list %s with its summary:\n%s", tool.name, out)
		}
	}
	if status, _, errs := dispatchArgs("tracekit"); status != 2 || !strings.Contains(errs, "Usage: tracekit TOOL") {
		t.Errorf("no tool: status %d, stderr %q; want 2 and the usage", status, errs)
	}
	if status, _, errs := dispatchArgs("tracekit", "writesiz"); status != 2 || errs != "tracekit: no tool named \"writesiz\"\nTry 'tracekit --help' for the list.\n" {
		t.Errorf("unknown tool: status %d, stderr %q", status, errs)
	}
	if status, out, _ := dispatchArgs("./tracekit", "--version"); status != 0 || !strings.HasPrefix(out, "tracekit ") {
		t.Errorf("--version: status %d, %q", status, out)
	}
}

// TestTools runs each tool both ways, by its link's name and as the first
// argument, through the built binary: --version names the tool.
func TestTools(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tracekit")
	if out, err := exec.Command("bash", "../../scripts/build.sh", bin).CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	for _, tool := range all {
		link := filepath.Join(dir, tool.name)
		if err := os.Symlink("tracekit", link); err != nil {
			t.Fatal(err)
		}
		for _, argv := range [][]string{{link, "--version"}, {bin, tool.name, "--version"}} {
			out, err := exec.Command(argv[0], argv[1:]...).Output()
			if err != nil || !strings.HasPrefix(string(out), tool.name+" (tracekit) ") {
				t.Errorf("%q: %v, %q; want it to start %q", argv, err, out, tool.name+" (tracekit) ")
			}
		}
		out, _ := exec.Command(link, "--no-such-option").CombinedOutput()
		if !strings.HasPrefix(string(out), tool.name+": ") {
			t.Errorf("%s --no-such-option: %q; want the tool's own error line", tool.name, out)
		}
	}
}

// TestSize holds the one binary, built and stripped by make build, to
// the budget of a copy-one-file tool: 16 MiB, what ls -lh shows as 16M.
// It logs the packages whose code takes the most of it, read from the
// binary's own line table (a stripped Go binary keeps it), so a reviewer
// sees what grew. Size is won by cutting dependencies nobody needs, never
// by making the compiler do less: the tests run this very build.
func TestSize(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "tracekit")
	cmd := exec.Command("make", "-C", "../..", "build", "BIN="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	shares, text, err := packageShares(bin)
	if err != nil {
		t.Fatal(err)
	}
	const budget = 16 << 20
	t.Logf("tracekit, stripped: %d bytes (budget %d); code %d bytes, the largest packages:", st.Size(), budget, text)
	for i, s := range shares {
		if i == 15 {
			break
		}
		t.Logf("  %8d  %4.1f%%  %s", s.size, 100*float64(s.size)/float64(text), s.pkg)
	}
	if st.Size() > budget {
		t.Errorf("tracekit is %d bytes stripped, over the %d budget", st.Size(), budget)
	}
}

type share struct {
	pkg  string
	size uint64
}

// packageShares sums the size of every function in a Go binary by
// package, largest first, from its .gopclntab.
func packageShares(bin string) ([]share, uint64, error) {
	f, err := elf.Open(bin)
	if err != nil {
		return nil, 0, err
	}
	defer f.Close()
	pcln, text := f.Section(".gopclntab"), f.Section(".text")
	if pcln == nil || text == nil {
		return nil, 0, fmt.Errorf("%s has no .gopclntab or .text", bin)
	}
	data, err := pcln.Data()
	if err != nil {
		return nil, 0, err
	}
	tab, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		return nil, 0, err
	}
	by := map[string]uint64{}
	var total uint64
	for _, fn := range tab.Funcs {
		pkg := fn.PackageName()
		if pkg == "" {
			pkg = "(runtime's own)"
		}
		by[pkg] += fn.End - fn.Entry
		total += fn.End - fn.Entry
	}
	var shares []share
	for p, n := range by {
		shares = append(shares, share{p, n})
	}
	sort.Slice(shares, func(i, j int) bool { return shares[i].size > shares[j].size })
	return shares, total, nil
}
