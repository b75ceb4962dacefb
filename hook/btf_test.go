package hook

import (
	"testing"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/kbtf"
)

// The btf_trace_ typedefs came with BTF tracepoints (5.5): where the
// kernel's BTF has one, the probe must say the tracepoint takes a program,
// or the tools' btf paths (and their tests) silently go missing.
func TestHaveBTFTracepoint(t *testing.T) {
	privtest.Require(t)
	privtest.NeedBTF(t)
	spec, err := kbtf.Kernel()
	privtest.Need(t, err == nil, "kernel BTF (/sys/kernel/btf/vmlinux)")
	_, typeErr := spec.ID("btf_trace_kfree_skb", kbtf.KindTypedef)
	want := typeErr == nil
	if got := HaveBTFTracepoint("kfree_skb"); got != want {
		t.Errorf("HaveBTFTracepoint(kfree_skb) = %v, want %v (btf_trace_kfree_skb: %v)", got, want, typeErr)
	}
	if HaveBTFTracepoint("no_such_tracepoint_tk") {
		t.Error("a tracepoint that does not exist has a BTF tracepoint")
	}
}
