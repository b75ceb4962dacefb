package hook

import (
	"testing"

	"github.com/cilium/ebpf/btf"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/kbtf"
)

// The block tracepoints pass the request: args[0] from 5.11 upstream
// (args[1] before, after the queue; Debian's 5.10.223 passes it alone);
// kfree_skb's skb is args[0] everywhere.
func TestTracepointArg(t *testing.T) {
	privtest.Require(t)
	privtest.NeedBTF(t)
	if i, err := kbtf.TracepointArg("kfree_skb", "sk_buff"); i != 0 || err != nil {
		t.Errorf("kfree_skb's sk_buff: args[%d], %v", i, err)
	}
	i, err := kbtf.TracepointArg("block_rq_complete", "request")
	if i != 0 || err != nil {
		t.Errorf("block_rq_complete's request: args[%d], %v", i, err)
	}
	// Where it passes two arguments (before 5.11 upstream), the queue
	// comes first: BTF and the attach probe must agree.
	n, err := RawTracepointArgs("block_rq_issue", 4)
	if err != nil {
		t.Fatal(err)
	}
	if i, err := kbtf.TracepointArg("block_rq_issue", "request"); err != nil || i != n-1 {
		t.Errorf("block_rq_issue's request: args[%d], %v; it passes %d arguments", i, err, n)
	}
	if _, err := kbtf.TracepointArg("kfree_skb", "request"); err == nil {
		t.Error("kfree_skb has a request argument?")
	}
}

// Found by attaching, the argument counts agree with BTF's.
func TestRawTracepointArgs(t *testing.T) {
	privtest.Require(t)
	privtest.Need(t, HaveRawTracepoints(), "raw tracepoints")
	privtest.NeedBTF(t)
	for _, ev := range []string{"block_rq_issue", "block_rq_complete", "kfree_skb"} {
		n, err := RawTracepointArgs(ev, 6)
		if err != nil {
			t.Fatal(err)
		}
		kt, err := kbtf.Kernel()
		if err != nil {
			t.Fatal(err)
		}
		var td *btf.Typedef
		if err := kt.TypeByName("btf_trace_"+ev, &td); err != nil {
			t.Fatal(err)
		}
		want := len(btf.UnderlyingType(td.Type).(*btf.Pointer).Target.(*btf.FuncProto).Params) - 1
		if n != want {
			t.Errorf("%s: %d arguments, BTF says %d", ev, n, want)
		}
	}
}
