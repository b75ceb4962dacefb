package main

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/internal/loadtest"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
)

// A small BTF of our own: struct layouts fixed for the goldens, whatever
// kernel the tests run on.
func testBTF(t *testing.T) (*btf.Spec, *btf.Pointer) {
	t.Helper()
	u8 := &btf.Int{Name: "char", Size: 1, Encoding: btf.Signed}
	u16 := &btf.Int{Name: "unsigned short", Size: 2}
	u32 := &btf.Int{Name: "unsigned int", Size: 4}
	s32 := &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}
	dev := &btf.Struct{Name: "net_device", Size: 64, Members: []btf.Member{
		{Name: "name", Type: &btf.Array{Type: u8, Index: u32, Nelems: 16}, Offset: 0},
		{Name: "ifindex", Type: s32, Offset: 8 * 16},
	}}
	skb := &btf.Struct{Name: "sk_buff", Size: 256, Members: []btf.Member{
		{Name: "", Type: &btf.Union{Size: 8, Members: []btf.Member{{Name: "dev", Type: &btf.Pointer{Target: dev}}}}, Offset: 8 * 16},
		{Name: "len", Type: u32, Offset: 8 * 112},
		{Name: "protocol", Type: u16, Offset: 8 * 180},
	}}
	b, err := btf.NewBuilder([]btf.Type{skb, dev}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := b.Marshal(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := btf.LoadSpecFromReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	return spec, &btf.Pointer{Target: skb}
}

func targets(t *testing.T) map[string]Target {
	spec, skbPtr := testBTF(t)
	return map[string]Target{
		"netif":  {Format: tooltest.Format(t, "netif_receive_skb.6.18.format"), BTF: spec, ProbeRead: bpf.FnProbeReadKernel},
		"kfree":  {Format: tooltest.Format(t, "kfree_skb.6.18.format"), ProbeRead: bpf.FnProbeReadKernel},
		"sched":  {Format: tooltest.Format(t, "sched_kthread_stop.2.6.format"), ProbeRead: bpf.FnProbeRead},
		"kprobe": {Args: []Arg{{Name: "net", Type: &btf.Pointer{}, RegOff: asm.AMD64.Args[0]}, {Name: "skb", Type: skbPtr, RegOff: asm.AMD64.Args[1]}}, BTF: spec, ProbeRead: bpf.FnProbeReadKernel},
		"kret":   {Args: []Arg{{Name: "ret", Type: &btf.Int{Name: "long", Size: 8, Encoding: btf.Signed}, RegOff: asm.AMD64.Ret}}, ProbeRead: bpf.FnProbeReadKernel},
	}
}

// compileCases are the expressions the goldens pin and the load test
// proves: one line per variant.
var compileCases = []struct {
	golden, target, expr string
	count                bool
}{
	{"netif_name", "netif", `name == "lo"`, false},
	{"netif_name_ne_len", "netif", `name != "lo" && len >= 1028`, false},
	{"netif_cast_walk", "netif", `((struct sk_buff *)skbaddr)->dev->name == "lo"`, false},
	{"kfree_reason_count", "kfree", `reason == "NO_SOCKET" && 0x800 == protocol`, true},
	{"sched_comm_pid", "sched", `comm == "kworker/0:1" && pid > -100 && 1000 >= pid`, false},
	{"kprobe_skb_len", "kprobe", `skb->len > 100 && skb->protocol == 8`, false},
	{"kprobe_skb_dev", "kprobe", `skb->dev->ifindex != 1`, true},
	{"kret_ret", "kret", `ret < 0`, false},
	{"no_where", "netif", ``, false},
	{"no_where_count", "netif", ``, true},
	{"sched_comm_ne_long", "sched", `comm != "abcdefghijklmnopqrstuvwxyz"`, false},
}

// compileCase compiles one case of compileCases.
func compileCase(t *testing.T, ts map[string]Target, i int) bpf.Instructions {
	t.Helper()
	tc := compileCases[i]
	var cmps []Cmp
	if tc.expr != "" {
		var err error
		if cmps, err = Parse(tc.expr); err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
	}
	insns, err := Compile(tc.expr, cmps, ts[tc.target], tc.count)
	if err != nil {
		t.Fatalf("%s: %v", tc.expr, err)
	}
	return insns
}

func TestCompileGoldens(t *testing.T) {
	ts := targets(t)
	for i, tc := range compileCases {
		golden.Check(t, "compile_"+tc.golden, fmt.Sprintf("%s\n%v", tc.expr, compileCase(t, ts, i)))
	}
}

// TestCompiledLoad hands every compiled expression to the verifier, as a
// tracepoint or kprobe program as its target says.
func TestCompiledLoad(t *testing.T) {
	privtest.Require(t)
	ts := targets(t)
	for i, tc := range compileCases {
		typ := ebpf.TracePoint
		if ts[tc.target].Format == nil {
			typ = ebpf.Kprobe
		}
		maps := map[string]*ebpf.MapSpec{"count": {Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1}}
		loadtest.Program(t, tc.golden, typ, &ebpf.ProgramSpec{Name: "filter", Instructions: compileCase(t, ts, i)}, maps)
	}
}

func TestBadExpressions(t *testing.T) {
	ts := targets(t)
	for _, tc := range []struct {
		target, expr, want string
	}{
		{"netif", `nme == "lo"`, "event netif_receive_skb has no field \"nme\" (fields: skbaddr, len, name)\n  nme == \"lo\"\n  ^"},
		{"netif", `len == "lo"`, "len is a number: compare it with a number\n  len == \"lo\"\n         ^"},
		{"netif", `name < "lo"`, "strings compare only with == and !=\n  name < \"lo\"\n       ^"},
		{"netif", `name == 3`, "name is a string: compare it with a string literal\n  name == 3\n          ^"},
		{"netif", `len = 3`, "'=' is not an operator: use '==' to compare\n  len = 3\n      ^"},
		{"netif", `len == 3 || len == 4`, "only && joins comparisons (all must hold)\n  len == 3 || len == 4\n           ^"},
		{"netif", `len == 3 &&`, "expected a field, a number or a string\n  len == 3 &&\n             ^"},
		{"netif", `len 3`, "expected a comparison (== != < <= > >=)\n  len 3\n      ^"},
		{"netif", `skbaddr->len == 3`, "field skbaddr is not a struct pointer that can be walked: cast it, as in ((struct sk_buff *)skbaddr)->len\n  skbaddr->len == 3\n         ^"},
		{"netif", `((struct sk_buff *)len)->len == 3`, "field len (unsigned int) is not a pointer: it cannot be cast to struct sk_buff *\n  ((struct sk_buff *)len)->len == 3\n  ^"},
		{"netif", `((struct nosuch *)skbaddr)->len == 3`, "no struct nosuch in the kernel's BTF\n  ((struct nosuch *)skbaddr)->len == 3\n  ^"},
		{"netif", `((struct sk_buff *)skbaddr)->lenn == 3`, "((struct sk_buff *)skbaddr): struct sk_buff has no member \"lenn\" (members: len, protocol)\n  ((struct sk_buff *)skbaddr)->lenn == 3\n                               ^"},
		{"netif", `((struct sk_buff *)skbaddr)->len->x == 3`, "((struct sk_buff *)skbaddr)->len is unsigned int, not a pointer: use '.' instead of '->'\n  ((struct sk_buff *)skbaddr)->len->x == 3\n                                  ^"},
		{"netif", `len == -1`, "len is unsigned: it is never negative\n  len == -1\n         ^"},
		{"netif", `len == 0x100000000`, "4294967296 does not fit in len (4 bytes)\n  len == 0x100000000\n         ^"},
		{"netif", `len == skbaddr`, "comparing two fields is not supported: compare a field with a number or a string\n  len == skbaddr\n         ^"},
		{"netif", `1 == 1`, "compare a field with a constant: both sides are constants\n  1 == 1\n  ^"},
		{"kprobe", `sk->len > 1`, "no argument \"sk\" (arguments: net, skb)\n  sk->len > 1\n  ^"},
		{"kprobe", `skb.len > 1`, "skb is a pointer: use '->'\n  skb.len > 1\n     ^"},
		{"kfree", `reason == "NO_SUCH"`, "reason is a number: compare it with a number, or one of its names: ARP_PVLAN_DISABLE, BPF_CGROUP_EGRESS, BRIDGE_INGRESS_STP_STATE, CAKE_FLOOD, CANFD_RX_INVALID_FRAME, CANXL_RX_INVALID_FRAME, ...\n  reason == \"NO_SUCH\"\n            ^"},
		{"netif", `name == "unterminated`, "unterminated string\n  name == \"unterminated\n          ^"},
		{"netif", `len == 12abc`, "bad number \"12abc\"\n  len == 12abc\n         ^"},
		{"sched", `comm == "abcdefghijklmnopqrstuvwxyz"`, "\"abcdefghijklmnopqrstuvwxyz\" is longer than comm (16 bytes): they are never equal\n  comm == \"abcdefghijklmnopqrstuvwxyz\"\n          ^"},
	} {
		cmps, err := Parse(tc.expr)
		if err == nil {
			_, err = Compile(tc.expr, cmps, ts[tc.target], false)
		}
		if err == nil {
			t.Errorf("%s: accepted", tc.expr)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("%s:\ngot:\n%s\nwant:\n%s", tc.expr, err, tc.want)
		}
	}
}

// FuzzParse: the parser never panics, and an error always points inside
// the expression (or just past its end).
func FuzzParse(f *testing.F) {
	for _, s := range []string{`name == "lo"`, `((struct sk_buff *)skbaddr)->dev->name == "lo"`, `a->b.c >= -0x10 && d != "x\"y"`, `((`, `"`, `&&`, `a -> `} {
		f.Add(s)
	}
	ts := targets(&testing.T{})
	f.Fuzz(func(t *testing.T, s string) {
		cmps, err := Parse(s)
		if err != nil {
			ee, ok := err.(*ExprError)
			if !ok || ee.Pos < 0 || ee.Pos > len(s) {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		if len(cmps) == 0 {
			t.Fatalf("%q: no comparisons and no error", s)
		}
		_, _ = Compile(s, cmps, ts["netif"], false)
	})
}
