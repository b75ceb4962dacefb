package compile

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/internal/loadtest"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/proctree"
)

// callCases are the calls the goldens pin and the load test proves: the
// entry's program and the return's, for each.
var callCases = []struct {
	golden, target, expr, act string
}{
	// do_sys_openat2 failing: dfd judged at the entry, the filename stashed.
	{"kopen_ret", "kopen", `ret == -2 && dfd == -100`, "fields:filename,ret,duration"},
	// A disjunction with the return is judged at the return: skb->len stashed.
	{"kprobe_or", "kprobe", `ret != 0 || skb->len > 100`, "count-by:skb->dev->name,ret"},
	{"uprobe_hist", "uprobe", `arg0 < 5`, "hist:duration"},
	{"uprobe_str", "uprobe", `(char *)arg0 == "x" || ret == 1`, "count-by:str(arg0),comm"},
	{"uprobe_tree", "uprobe_tree", `ret > 0 && duration > 1000`, "count"},
	{"uprobe_emit", "uprobe", ``, "emit"},
	// ksnoop's ip_send_skb(skb, return!=0): the structure written at the
	// entry, into the stash (built in the per-CPU buffer), copied out at
	// the return; and one written at the return.
	{"kprobe_dump", "kprobe", `ret != 0`, "fields:*skb,ret,*skb->dev"},
	// fentry and fexit: the arguments and ret in the trampolines' slots.
	{"slots_kopen", "kopen_slots", `ret == -2 && dfd == -100`, "fields:filename,ret,duration"},
	// Stack mode: the entry checks the chain; the return finds the stash.
	{"uprobe_inside", "uprobe_inside", `ret > 4`, "hist:duration"},
	// Arithmetic of the return and the stashed entry: the entry's
	// operands stashed one by one, the arithmetic done at the return.
	{"kopen_arith", "kopen", `ret - dfd != 0 && duration / 1000 > 5`, "hist:duration / 1000 + dfd"},
}

// retArg is the return value of a case's function.
func retArg(target string) Arg {
	if strings.HasPrefix(target, "uprobe") {
		return UretprobeArgs(asm.AMD64)[0]
	}
	if target == "kopen_slots" { // do_sys_openat2's three arguments, then ret
		return Arg{Name: "ret", Type: &btf.Int{Name: "long", Size: 8, Encoding: btf.Signed}, RegOff: 24}
	}
	return Arg{Name: "ret", Type: &btf.Int{Name: "long", Size: 8, Encoding: btf.Signed}, RegOff: asm.AMD64.Ret}
}

func compileCall(t *testing.T, ts map[string]Target, i int) (*Call, Action) {
	t.Helper()
	tc := callCases[i]
	var root Node
	if tc.expr != "" {
		var err error
		if root, err = Parse(tc.expr); err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
	}
	act := caseAction(t, ts[tc.target], tc.act)
	if tc.act == "emit" {
		act.Columns = CallColumns(ts[tc.target].Event)
	}
	if !IsCall(root, act) {
		t.Fatalf("%s %s: not a call", tc.expr, tc.act)
	}
	call, err := CompileCall(tc.expr, root, ts[tc.target], retArg(tc.target), act)
	if err != nil {
		t.Fatalf("%s: %v", tc.expr, err)
	}
	return call, act
}

func TestCallGoldens(t *testing.T) {
	ts := targets(t)
	for i, tc := range callCases {
		call, _ := compileCall(t, ts, i)
		golden.Check(t, "call_"+tc.golden, fmt.Sprintf("%s\n--%s\nstash %d bytes\n\nentry:\n%s%v\nreturn:\n%s%v",
			tc.expr, tc.act, call.StashSize, layout(call.Entry), call.Entry.Insns, layout(call.Return), call.Return.Insns))
	}
}

// TestCallLoad hands both programs of every call to the verifier, with
// their maps.
func TestCallLoad(t *testing.T) {
	privtest.Require(t)
	ts := targets(t)
	for i, tc := range callCases {
		if !hostLoads(t, ts[tc.target]) {
			continue
		}
		call, act := compileCall(t, ts, i)
		m := Maps(act.Kind, call.Return)
		for k, v := range CallMaps(call) {
			m[k] = v
		}
		if ts[tc.target].Tree {
			m[proctree.PidsMap] = &ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 1}
		}
		if n := ts[tc.target].Inside; n > 0 {
			m[ChainMap] = ChainMapSpec(n)
		}
		progs := map[string]*ebpf.ProgramSpec{
			"entry":  {Name: "filter_entry", Type: ebpf.Kprobe, License: "GPL", Instructions: call.Entry.Insns},
			"return": {Name: "filter_return", Type: ebpf.Kprobe, License: "GPL", Instructions: call.Return.Insns},
		}
		if fn, ok := slotFuncs[tc.target]; ok {
			if !hook.HaveFentry(fn) {
				t.Logf("%s: this kernel has no BPF trampoline at %s: the matrix kernels that have one load it", tc.golden, fn)
				continue
			}
			progs["entry"].Type, progs["entry"].AttachType, progs["entry"].AttachTo = ebpf.Tracing, ebpf.AttachTraceFEntry, fn
			progs["return"].Type, progs["return"].AttachType, progs["return"].AttachTo = ebpf.Tracing, ebpf.AttachTraceFExit, fn
		}
		loadtest.Spec(t, tc.golden, &ebpf.CollectionSpec{Maps: m, Programs: progs})
	}
}

// What a call refuses, and what it splits.
func TestCallErrors(t *testing.T) {
	ts := targets(t)
	for _, tc := range []struct {
		target, expr, act, want string
	}{
		{"kopen", `ret == -2 && nosuch == 1`, "", `no argument or builtin "nosuch"`},
		{"kopen", `ret == -2`, "fields:filename,nosuch", "no argument or builtin \"nosuch\" (arguments: dfd, filename; builtins: pid, tid, comm, cpu, uid, gid, cpid, kstack, ustack; the call's: ret, duration)\n  filename,nosuch\n           ^"},
		{"kopen", `duration->x == 1`, "count", "duration is a number of nanoseconds: it has no members"},
		{"kopen", `ret == "x"`, "count", "ret is a number"},
	} {
		root, err := Parse(tc.expr)
		if err != nil {
			t.Fatal(err)
		}
		act := Action{Kind: Count}
		if tc.act != "" {
			act = caseAction(t, ts[tc.target], tc.act)
		}
		_, err = CompileCall(tc.expr, root, ts[tc.target], retArg(tc.target), act)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v, want %q", tc.expr, tc.act, err, tc.want)
		}
	}
}

// fuzzCall is FuzzCompile's case of a call: both programs compile, and
// load.
func fuzzCall(t *testing.T, seed int64, target Target, base, expr string, root Node, actText string) {
	act := caseAction(t, target, actText)
	if actText == "emit" {
		act.Columns = CallColumns(target.Event)
	}
	call, err := CompileCall(expr, root, target, retArg(base), act)
	if err != nil && strings.Contains(err.Error(), "never holds") {
		return
	}
	if err != nil {
		t.Fatalf("%s on %s (%s): %v", expr, base, actText, err)
	}
	if os.Geteuid() != 0 || !hostLoads(t, target) {
		return
	}
	m := Maps(act.Kind, call.Return)
	for k, v := range CallMaps(call) {
		m[k] = v
	}
	if target.Inside > 0 {
		m[ChainMap] = ChainMapSpec(target.Inside)
	}
	loadtest.Spec(t, fmt.Sprintf("seed %d: %s on %s call (%s)", seed, expr, base, actText), &ebpf.CollectionSpec{Maps: m, Programs: map[string]*ebpf.ProgramSpec{
		"entry":  {Name: "filter_entry", Type: ebpf.Kprobe, License: "GPL", Instructions: call.Entry.Insns},
		"return": {Name: "filter_return", Type: ebpf.Kprobe, License: "GPL", Instructions: call.Return.Insns},
	}})
}
