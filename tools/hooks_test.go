package tools

import (
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"
	"github.com/tracekit/tracekit/internal/privtest"
)

func TestValidateAttach(t *testing.T) {
	for _, ok := range []string{"", "auto", "perf", "raw", "btf", "fentry"} {
		if err := ValidateAttach(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"Raw", "perf ", "kprobe"} {
		if err := ValidateAttach(bad); err == nil || !strings.Contains(err.Error(), "want auto, perf, raw, btf or fentry") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// auto picks the cheapest hook the kernel has; a forced one it has is
// kept; a BTF tracepoint that does not exist is refused by name.
func TestPickHook(t *testing.T) {
	privtest.Require(t)
	want := HookPerf
	if HaveRawTracepoints() {
		want = HookRaw
	}
	t.Setenv(AttachEnv, "")
	if h, err := PickHook("auto", "kfree_skb", false); h != want || err != nil {
		t.Errorf("auto, no pointers read: %s, %v; want %s", h, err, want)
	}
	if HaveBTFTracepoint("kfree_skb") {
		want = HookBTF
	}
	if h, err := PickHook("auto", "kfree_skb", true); h != want || err != nil {
		t.Errorf("auto: %s, %v; want %s", h, err, want)
	}
	t.Setenv(AttachEnv, "perf")
	if h, err := PickHook("", "kfree_skb", true); h != HookPerf || err != nil {
		t.Errorf("TRACEKIT_ATTACH=perf: %s, %v", h, err)
	}
	if _, err := PickHook("fentry", "kfree_skb", true); err == nil || !strings.Contains(err.Error(), "reads the tracepoint kfree_skb") {
		t.Errorf("fentry for a tracepoint: %v", err)
	}
	t.Setenv(AttachEnv, "fentry") // a default for the tools that trace functions
	if h, err := PickHook("", "kfree_skb", false); h == "" || h == HookFentry || err != nil {
		t.Errorf("TRACEKIT_ATTACH=fentry for a tracepoint: %s, %v; want auto's pick", h, err)
	}
	if _, err := PickHook("btf", "no_such_tracepoint_tk", true); err == nil || !strings.Contains(err.Error(), "no BTF tracepoint no_such_tracepoint_tk") {
		t.Errorf("btf of a missing tracepoint: %v", err)
	}
}

// sk_buff's protocol is in an anonymous struct group from 5.17 on: found
// either way, at a 2-byte aligned offset past the list pointers.
func TestMemberOffset(t *testing.T) {
	privtest.Require(t)
	off, err := MemberOffset("sk_buff", "protocol")
	if err != nil || off < 16 || off%2 != 0 {
		t.Errorf("sk_buff.protocol at %d (%v)", off, err)
	}
	if _, err := MemberOffset("sk_buff", "no_such_member"); err == nil {
		t.Error("a missing member was found")
	}
}

// The block tracepoints pass the request: args[0] from 5.11 upstream
// (args[1] before, after the queue; Debian's 5.10.223 passes it alone);
// kfree_skb's skb is args[0] everywhere.
func TestTracepointArg(t *testing.T) {
	privtest.Require(t)
	if i, err := TracepointArg("kfree_skb", "sk_buff"); i != 0 || err != nil {
		t.Errorf("kfree_skb's sk_buff: args[%d], %v", i, err)
	}
	i, err := TracepointArg("block_rq_complete", "request")
	if i != 0 || err != nil {
		t.Errorf("block_rq_complete's request: args[%d], %v", i, err)
	}
	// Where it passes two arguments (before 5.11 upstream), the queue
	// comes first: BTF and the attach probe must agree.
	n, err := RawTracepointArgs("block_rq_issue", 4)
	if err != nil {
		t.Fatal(err)
	}
	if i, err := TracepointArg("block_rq_issue", "request"); err != nil || i != n-1 {
		t.Errorf("block_rq_issue's request: args[%d], %v; it passes %d arguments", i, err, n)
	}
	if _, err := TracepointArg("kfree_skb", "request"); err == nil {
		t.Error("kfree_skb has a request argument?")
	}
}

// Found by attaching, the argument counts agree with BTF's.
func TestRawTracepointArgs(t *testing.T) {
	privtest.Require(t)
	if !HaveRawTracepoints() {
		t.Skip("no raw tracepoints on this kernel")
	}
	for _, ev := range []string{"block_rq_issue", "block_rq_complete", "kfree_skb"} {
		n, err := RawTracepointArgs(ev, 6)
		if err != nil {
			t.Fatal(err)
		}
		kt, err := KernelBTF()
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
