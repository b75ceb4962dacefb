// Package loadtest hands programs to the running kernel's verifier. A
// golden pins a program's bytecode, not that the kernel takes it: every
// variant a golden pins is also loaded here, on the host and in every
// kernel of the matrix, so a variant an older kernel refuses fails there.
package loadtest

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/loader"
)

// Spec loads a copy of spec (loading mutates instructions) and unloads it;
// a rejection fails the test with the verifier's log and the program.
func Spec(t *testing.T, name string, spec *ebpf.CollectionSpec) {
	t.Helper()
	privtest.Require(t)
	coll, err := loader.Load(spec.Copy(), true)
	if err != nil {
		t.Errorf("%s: the kernel refuses it: %v", name, err)
		return
	}
	coll.Close()
}

// Program is Spec for one program of type typ and the maps it uses.
func Program(t *testing.T, name string, typ ebpf.ProgramType, prog *ebpf.ProgramSpec, maps map[string]*ebpf.MapSpec) {
	t.Helper()
	if maps == nil {
		maps = map[string]*ebpf.MapSpec{}
	}
	p := prog.Copy()
	p.Type, p.License = typ, "GPL"
	Spec(t, name, &ebpf.CollectionSpec{Maps: maps, Programs: map[string]*ebpf.ProgramSpec{name: p}})
}

// Variants builds the collection of every named configuration with build
// and loads it: a tool's whole table of program variants in one call.
func Variants[C any](t *testing.T, variants map[string]C, build func(C) (*ebpf.CollectionSpec, error)) {
	t.Helper()
	privtest.Require(t)
	for name, cfg := range variants {
		spec, err := build(cfg)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		Spec(t, name, spec)
	}
}
