package stacks

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tracekit/tracekit/internal/stacktest"

	"github.com/google/pprof/profile"

	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/stacks/prog"
)

// fixedStacks is a report's worth of stacks, hottest last as reported.
var fixedStacks = []stack{
	{Pid: 42, Comm: "chain", Count: 1, User: []string{"c"}, End: "[unwind error: no table]"},
	{Pid: 42, Comm: "chain", Count: 3, User: []string{"read", "c", "b", "a", "main", "__libc_start_main", "_start"}, Kernel: []string{"read_zero", "vfs_read", "ksys_read"}},
	{Pid: 7, Comm: "odd;name x", Count: 4, User: []string{"f<int>", "g\nh"}, End: "[truncated]"},
	{Pid: 42, Comm: "chain", Count: 90, User: []string{"c", "b", "a", "main", "__libc_start_main", "_start"}},
}

func TestTextAndFoldedGoldens(t *testing.T) {
	var text, folded strings.Builder
	writeStacks(&text, fixedStacks)
	writeFolded(&folded, fixedStacks)
	golden.Check(t, "report_text", text.String())
	golden.Check(t, "report_folded", folded.String())
}

// TestPprofFromStacks writes a pprof profile and reads it back with the
// pprof package: every sample, its count and CPU time, frames leaf first.
func TestPprofFromStacks(t *testing.T) {
	var b bytes.Buffer
	if err := writePprof(&b, fixedStacks, nil, 100, false, time.Unix(1700000000, 0), 2*time.Second); err != nil {
		t.Fatal(err)
	}
	p, err := profile.Parse(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Sample) != len(fixedStacks) || p.Period != 10_000_000 {
		t.Fatalf("%d samples, period %d", len(p.Sample), p.Period)
	}
	var total int64
	for _, s := range p.Sample {
		total += s.Value[0]
		if s.Value[1] != s.Value[0]*10_000_000 {
			t.Errorf("sample %v: CPU time %d", s.Value, s.Value[1])
		}
	}
	if total != 98 {
		t.Errorf("%d samples counted, want 98", total)
	}
	hot := p.Sample[3]
	var names []string
	for _, l := range hot.Location {
		names = append(names, l.Line[0].Function.Name)
	}
	if got := strings.Join(names, ";"); got != "c;b;a;main;__libc_start_main;_start" {
		t.Errorf("hottest sample's frames: %s", got)
	}
	if got := p.Sample[1].Location[0].Line[0].Function.Name; got != "read_zero [kernel]" {
		t.Errorf("kernel leaf: %q", got)
	}
	// What the pprof package wrote before this package wrote the format
	// itself: the header, labels, one function per frame name.
	if err := p.CheckValid(); err != nil {
		t.Error(err)
	}
	vt := func(v *profile.ValueType) string { return v.Type + "/" + v.Unit }
	if got := fmt.Sprint(vt(p.SampleType[0]), " ", vt(p.SampleType[1]), " ", vt(p.PeriodType)); len(p.SampleType) != 2 || got != "samples/count cpu/nanoseconds cpu/nanoseconds" {
		t.Errorf("types %s", got)
	}
	if p.TimeNanos != 1700000000e9 || p.DurationNanos != 2e9 {
		t.Errorf("time %d, duration %d", p.TimeNanos, p.DurationNanos)
	}
	odd := p.Sample[2]
	if fmt.Sprint(odd.Label, odd.NumLabel) != "map[comm:[odd;name x]] map[pid:[7]]" {
		t.Errorf("labels %v %v", odd.Label, odd.NumLabel)
	}
	if got := odd.Location[1].Line[0].Function; got.Name != "g\nh" || got.SystemName != got.Name {
		t.Errorf("frame %q (%q)", got.Name, got.SystemName)
	}
	names = nil
	for _, f := range p.Function {
		names = append(names, f.Name)
	}
	if len(p.Function) != len(p.Location) || len(p.Function) != 14 {
		t.Errorf("%d functions, %d locations, want one of each for the 14 frame names: %q", len(p.Function), len(p.Location), names)
	}
}

// TestSVGFromStacks: the flame graph is well-formed XML, every frame has a
// box whose title gives its share, and a parent is as wide as its children.
func TestSVGFromStacks(t *testing.T) {
	var b bytes.Buffer
	if err := writeSVG(&b, fixedStacks, "test <&>", "samples"); err != nil {
		t.Fatal(err)
	}
	titles := stacktest.SVGTitles(t, b.Bytes())
	for _, want := range []string{"all (98 samples, 100.00%)", "chain (94 samples, 95.92%)", "c (93 samples, 94.90%)", "read_zero [k] (3 samples, 3.06%)", "g\nh (4 samples, 4.08%)", "[truncated] (4 samples, 4.08%)"} {
		if !titles[want] {
			t.Errorf("no frame titled %q", want)
		}
	}
}

// TestSVGLabels: a stack's labels are frames between its process and its
// root, and --svg-label keeps the stacks that carry every value asked.
func TestSVGLabels(t *testing.T) {
	n101 := int64(101)
	stacks := []stack{
		{Pid: 1, Comm: "srv", Count: 5, User: []string{"f", "main"}, Labels: []LabelValue{{Name: "req", Value: "101", Num: &n101}, {Name: "ep", Value: "/alpha"}}},
		{Pid: 1, Comm: "srv", Count: 7, User: []string{"g", "main"}, Labels: []LabelValue{{Name: "ep", Value: "/beta"}}},
		{Pid: 1, Comm: "srv", Count: 2, User: []string{"h", "main"}},
	}
	var b bytes.Buffer
	if err := writeSVG(&b, stacks, "all", "samples"); err != nil {
		t.Fatal(err)
	}
	titles := stacktest.SVGTitles(t, b.Bytes())
	for _, want := range []string{"srv (14 samples, 100.00%)", "[req=101] (5 samples, 35.71%)", "[ep=/alpha] (5 samples, 35.71%)", "[ep=/beta] (7 samples, 50.00%)", "main (7 samples, 50.00%)", "h (2 samples, 14.29%)"} {
		if !titles[want] {
			t.Errorf("no frame titled %q", want)
		}
	}
	for _, c := range []struct {
		want []LabelValue
		n    int
	}{
		{[]LabelValue{{Name: "ep", Value: "/alpha"}}, 1},
		{[]LabelValue{{Name: "ep", Value: "/alpha"}, {Name: "req", Value: "101"}}, 1},
		{[]LabelValue{{Name: "ep", Value: "/alpha"}, {Name: "req", Value: "102"}}, 0},
		{[]LabelValue{{Name: "ep", Value: "/gamma"}}, 0},
		{[]LabelValue{{Name: "req", Value: ""}}, 0},
	} {
		if got := withLabels(stacks, c.want); len(got) != c.n {
			t.Errorf("withLabels(%v): %d stacks, want %d", c.want, len(got), c.n)
		}
	}
}

// The tables drains fill are bounded: a sample of a new stack past the
// bound is counted as left out. Reports that start again each interval
// take the table and leave a new one; --cumulative reports take a copy;
// a report not printed gives its counts back to the next.
func TestHeldCounts(t *testing.T) {
	h := &held{keys: map[stackKey]uint64{}, maxStack: 2}
	for _, k := range []string{"a", "b", "a", "c", "c", "b"} {
		h.add(stackKey(k), 10)
	}
	if h.keys["a"] != 20 || h.keys["b"] != 20 || len(h.keys) != 2 || h.leftOut != 20 {
		t.Errorf("held %v, %d left out; want a and b 20 each, c's 20 left out", h.keys, h.leftOut)
	}

	r := &reporter{o: &Options{}, cur: newHeld()}
	r.o.Cumulative = false
	r.hold("x", 5)
	got := r.take(false)
	if got.keys["x"] != 5 || len(r.cur.keys) != 0 {
		t.Errorf("took %v, %v left; want x 5, nothing left", got.keys, r.cur.keys)
	}
	r.hold("y", 1)
	r.putBack(got)
	if r.cur.keys["x"] != 5 || r.cur.keys["y"] != 1 {
		t.Errorf("after a report not printed: %v; want x 5 and y 1", r.cur.keys)
	}
	if fin := r.take(true); fin != r.cur {
		t.Error("the final report took a copy, not the table drains fill")
	}

	r = &reporter{o: &Options{}, cur: newHeld()}
	r.o.Cumulative = true
	r.hold("x", 5)
	got = r.take(false)
	r.hold("x", 1)
	r.putBack(got)
	if got.keys["x"] != 5 || r.cur.keys["x"] != 6 {
		t.Errorf("--cumulative: took %v, holds %v; want x 5, then x 6", got.keys, r.cur.keys)
	}
}

// TestStackEnds: how a walk ended, as the report names it; in auto mode
// a read that failed after a frame-pointer step is told apart from one of
// a table's step (a stack paged out).
func TestStackEnds(t *testing.T) {
	r := &reporter{ps: &processes{files: map[fileKey]*file{}, procs: map[uint32]*process{}}}
	for _, c := range []struct {
		stop int32
		fp   bool
		want string
	}{
		{prog.StopEnd, false, ""},
		{prog.StopEnd, true, "[frame pointers]"},
		{prog.StopRead, false, "[unwind error: read]"},
		{prog.StopRead, true, "[unwind error: read after a frame-pointer step]"},
		{prog.StopNoTable, true, "[unwind error: no table]"},
		{prog.StopTruncated, false, "[truncated]"},
	} {
		_, end := r.userFrames(decodedKey{Pid: 1, Stop: uint8(c.stop), FP: c.fp, User: []uint64{0x1000, 0x2000}})
		if end != c.want {
			t.Errorf("stop %d, fp %v: %q, want %q", c.stop, c.fp, end, c.want)
		}
	}
}

// TestLabelsText: a string label's value is quoted once (its backslash
// and newline escaped once, not twice), a name that is not a plain word
// (a context's key, from the process) quoted too, integers as they are.
func TestLabelsText(t *testing.T) {
	n := int64(-7)
	got := labelsText([]LabelValue{{Name: "req", Value: "-7", Num: &n}, {Name: "ep", Value: "x\ny\\z\x1b[2J"}, {Name: "a b=c", Value: "v"}, {Name: "otel.trace_id", Value: "ab"}})
	want := `req=-7 ep="x\ny\\z\x1b[2J" "a b=c"="v" otel.trace_id="ab"`
	if got != want {
		t.Errorf("labelsText = %s\nwant         %s", got, want)
	}
}
