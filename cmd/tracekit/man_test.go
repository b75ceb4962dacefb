package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/run"
)

// seeAlso is a tool's SEE ALSO: the other tools, then the peers.
func seeAlso(name string) []string {
	var refs []string
	for _, t := range all {
		if t.name != name {
			refs = append(refs, t.name+"(8)")
		}
	}
	// bpftrace(8), the peer, is ours by name too.
	if name != "bpftrace" && !slices.Contains(refs, "bpftrace(8)") {
		refs = append(refs, "bpftrace(8)")
	}
	return append(refs, "perf(1)")
}

// TestManPages holds man/TOOL.8 to what the tool's --help says (the same
// option definitions and texts, written by run.ManPage): a page left
// stale by a change to the help fails here. make man (this test with
// -update) writes them. Each page renders through groff without a
// warning and through man -l, and its rendering carries every example.
func TestManPages(t *testing.T) {
	for _, tl := range all {
		var b bytes.Buffer
		if err := run.ManPage(tl.tool(), seeAlso(tl.name), &b); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join("..", "..", "man", tl.name+".8")
		golden.File(t, path, b.String())
		if golden.Updating() {
			continue
		}
		var warn bytes.Buffer
		groff := exec.Command("groff", "-man", "-Tutf8", "-ww", "-z", path)
		groff.Stderr = &warn
		if err := groff.Run(); err != nil || warn.Len() > 0 {
			t.Errorf("groff -man %s: %v\n%s", path, err, warn.String())
		}
		man := exec.Command("man", "-l", path)
		man.Env = append(os.Environ(), "MANWIDTH=200", "MAN_KEEP_FORMATTING=", "PAGER=cat")
		page, err := man.Output()
		if err != nil {
			t.Fatalf("man -l %s: %v", path, err)
		}
		text := string(page)
		for _, want := range []string{"NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXAMPLES", "OVERHEAD", "EXIT STATUS", "--version"} {
			if !strings.Contains(text, want) {
				t.Errorf("man -l %s has no %q", path, want)
			}
		}
		_, ex, _ := strings.Cut(tl.tool().Details, "\nExamples:\n")
		ex, _, _ = strings.Cut(ex, "\n\n")
		for _, line := range strings.Split(ex, "\n") {
			if line = strings.TrimSpace(line); line != "" && !strings.Contains(text, line) {
				t.Errorf("man -l %s does not show the example %q", path, line)
			}
		}
	}
}
