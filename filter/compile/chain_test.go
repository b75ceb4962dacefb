package compile

import (
	"fmt"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/internal/loadtest"
	"github.com/tracekit/tracekit/internal/privtest"
)

// chainPrograms are stack mode's programs for three functions: the entry
// and the return of each of the two outer ones.
func chainPrograms() map[string]*ebpf.ProgramSpec {
	progs := map[string]*ebpf.ProgramSpec{}
	for i := range 2 {
		progs[fmt.Sprintf("entry%d", i)] = &ebpf.ProgramSpec{Name: "filter_outer", Type: ebpf.Kprobe, License: "GPL", Instructions: asm.StackEntry(ChainMap, i, 2)}
		progs[fmt.Sprintf("return%d", i)] = &ebpf.ProgramSpec{Name: "filter_outer", Type: ebpf.Kprobe, License: "GPL", Instructions: asm.StackReturn(ChainMap, i)}
	}
	return progs
}

func TestChainGoldens(t *testing.T) {
	progs := chainPrograms()
	golden.Check(t, "chain_outer", fmt.Sprintf("entry 0 of 2:\n%v\nentry 1 of 2:\n%v\nreturn 1:\n%v",
		progs["entry0"].Instructions, progs["entry1"].Instructions, progs["return1"].Instructions))
}

// TestChainLoad hands the outer functions' programs to the verifier, with
// their map.
func TestChainLoad(t *testing.T) {
	privtest.Require(t)
	loadtest.Spec(t, "chain", &ebpf.CollectionSpec{Maps: map[string]*ebpf.MapSpec{ChainMap: ChainMapSpec(2)}, Programs: chainPrograms()})
}
