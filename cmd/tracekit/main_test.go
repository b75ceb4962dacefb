package main

import (
	"os"
	"os/exec"
	"path/filepath"
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
		if !strings.Contains(out, "\n  "+tool.name+" ") || !strings.Contains(out, tool.summary) {
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
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
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

// TestSize holds the one binary, built and stripped as make build does it
// (without net/http's HTTP/2, which --serve never speaks), to the budget
// of a copy-one-file tool: 12 MiB, what ls -lh shows as 12M. It was 7 MB,
// and kept a hand-written HTTP server that anyone on the network could
// starve; net/http and client_golang (with protobuf) cost 5.2 MB and are
// worth it. It is built by make build itself, with its flags (the BPF
// program builders and the demangler without inlining: the Makefile's
// NOINLINE says why).
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
	const budget = 12 << 20
	t.Logf("tracekit, stripped: %d bytes (budget %d)", st.Size(), budget)
	if st.Size() > budget {
		t.Errorf("tracekit is %d bytes stripped, over the %d budget", st.Size(), budget)
	}
}
