package compile

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/internal/loadtest"
	"github.com/tracekit/tracekit/internal/privtest"
)

// gateCases are --where expressions compiled as the gate of profile's
// sampler (--count-by ustack): the goldens pin them, the load test proves
// them, each followed by its "exit" as the sampler's program has it.
var gateCases = []struct{ golden, target, expr, fields string }{
	{"netif_or", "netif_self", `name == "lo" || len > 100`, ""},
	{"openat_prefix", "openat", `(filename ~ "/etc/*" || filename == "/tmp/x") && !(dfd == -100)`, ""},
	{"kprobe_walk", "kprobe", `skb->dev->ifindex != 1 && skb->len / 4 > 10`, ""},
	{"uprobe_args", "uprobe", `arg0 > 3 || arg1 == 0`, ""},
	{"usdt_self", "usdt_none", ``, ""},
	// With a record (--fields beside ustack): numbers, strings, a walk.
	{"openat_fields", "openat", `dfd == -100`, "comm,filename,flags"},
	{"uprobe_fields", "uprobe", ``, "arg0,arg1 * 2,(char *)arg2"},
	{"kprobe_fields", "kprobe", `skb->len > 1`, "skb->dev->name,skb->len"},
}

func gateCase(t *testing.T, ts map[string]Target, i int) bpf.Instructions {
	t.Helper()
	tc := gateCases[i]
	var root Node
	if tc.expr != "" {
		var err error
		if root, err = Parse(tc.expr); err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
	}
	var act Action
	if tc.fields != "" {
		cols, err := ParseOperands(tc.fields, 0)
		if err != nil {
			t.Fatalf("%s: %v", tc.fields, err)
		}
		act = Action{Kind: Emit, Columns: cols, Option: "--fields", Source: tc.fields}
	}
	g, p, at, err := GateRecord(tc.expr, root, ts[tc.target], act, "exit")
	if err != nil {
		t.Fatalf("%s: %v", tc.expr, err)
	}
	if tc.fields != "" && (p.Size == 0 || int(at)+p.Size > valOff) {
		t.Errorf("%s: a record of %d bytes at fp%d: want it below fp%d", tc.golden, p.Size, at, valOff)
	}
	return append(g, asm.Return("exit", 0)...)
}

// TestGateGoldens pins the gates, and checks that every label of theirs
// is apart from the program they go into: "gate_" and their own jumps.
func TestGateGoldens(t *testing.T) {
	ts := targets(t)
	for i, tc := range gateCases {
		insns := gateCase(t, ts, i)
		for _, ins := range insns {
			if s := ins.Symbol(); s != "" && s != "exit" && !strings.HasPrefix(s, "gate_") {
				t.Errorf("%s: label %q is not the gate's own", tc.golden, s)
			}
			if r := ins.Reference(); r != "" && ins.OpCode.JumpOp() != bpf.InvalidJumpOp && r != "exit" && !strings.HasPrefix(r, "gate_") {
				t.Errorf("%s: a jump to %q, not the gate's own label", tc.golden, r)
			}
		}
		golden.Check(t, "gate_"+tc.golden, fmt.Sprintf("%s\n%s\n%v", tc.expr, tc.fields, insns))
	}
}

// TestGatesLoad hands each gate to the verifier as a program of its
// event's type.
func TestGatesLoad(t *testing.T) {
	privtest.Require(t)
	ts := targets(t)
	for i, tc := range gateCases {
		if !hostLoads(t, ts[tc.target]) {
			continue
		}
		typ := ebpf.Kprobe
		if _, ok := ts[tc.target].Event.(*Record); ok {
			typ = ebpf.TracePoint
		}
		loadtest.Program(t, "gate_"+tc.golden, typ, &ebpf.ProgramSpec{Name: "gate", Instructions: gateCase(t, ts, i)}, nil)
	}
}
