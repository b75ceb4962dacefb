package loader

import (
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/internal/privtest"
)

// A rejected program shows the verifier log's last lines, not all of it,
// unless --verbose.
func TestRejectionShowsTheLogsEnd(t *testing.T) {
	privtest.Require(t)
	var insns bpf.Instructions
	for i := 0; i < 200; i++ {
		insns = append(insns, bpf.Mov.Imm(bpf.R1, int32(i)))
	}
	insns = append(insns, bpf.Return()) // R0 never set: refused
	spec := func() *ebpf.CollectionSpec {
		return &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{
			"bad": {Type: ebpf.TracePoint, License: "GPL", Instructions: insns},
		}}
	}
	_, short := Load(spec(), false)
	_, long := Load(spec(), true)
	if short == nil || long == nil {
		t.Fatal("the program was accepted")
	}
	ns, nl := strings.Count(short.Error(), "\n"), strings.Count(long.Error(), "\n")
	if ns > shortLog+3 || !strings.Contains(short.Error(), "R0") || !strings.Contains(short.Error(), "--verbose") {
		t.Errorf("without --verbose: %d lines:\n%s", ns, short)
	}
	if nl < 200 {
		t.Errorf("with --verbose: %d lines, want the whole log and the program", nl)
	}
}
