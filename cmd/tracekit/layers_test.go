package main

import (
	"go/build"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const module = "github.com/tracekit/tracekit/"

// layer ranks the packages as docs/design/architecture.md draws them: a
// package imports only packages of a lower layer; leaves import leaves,
// and test helpers each other.
func layer(pkg string) int {
	switch pkg {
	case "counts", "procfs", "loader", "perfevent":
		return 1
	case "kernel", "proctree", "hook":
		return 2
	case "run", "writesize/prog", "dropmon/prog", "iolat/prog", "filter/compile", "stacks/prog", "bpftrace/compile":
		return 3 // the run, and beside it the bytecode builders, which never import it
	case "stacks":
		return 4 // the stack pipeline, which belongs to no tool
	case "writesize", "dropmon", "iolat", "filter", "profile", "bpftrace":
		return 5
	case "internal/tooltest", "internal/promtest", "internal/loadtest", "internal/privtest", "internal/golden", "internal/pgroup", "internal/stacktest":
		return 6 // test helpers: they drive the tools
	case "cmd/tracekit", "bench":
		return 7
	}
	return 0 // asm, tracefs, kbtf, uprobe, unwind, terminal, metrics, internal/…
}

// TestLayers holds the import graph to docs/design/architecture.md's picture: no room
// imports the run, no leaf imports a room, nothing imports upwards.
func TestLayers(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	err = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if n := d.Name(); path != root && (strings.HasPrefix(n, ".") || n == "testdata") {
			return filepath.SkipDir
		}
		p, err := build.ImportDir(path, 0)
		if err != nil {
			return nil // no Go files here
		}
		rel, _ := filepath.Rel(root, path)
		seen++
		for _, imp := range p.Imports {
			dep, ok := strings.CutPrefix(imp, module)
			if !ok {
				continue
			}
			if l, dl := layer(rel), layer(dep); dl > l || dl == l && l != 0 && l != 6 {
				t.Errorf("%s (layer %d) imports %s (layer %d)", rel, l, dep, dl)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 20 {
		t.Errorf("read %d packages: the walk missed the tree", seen)
	}
}
