package output

import (
	"bytes"
	"math/bits"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// hist counts values into bpftrace's hist buckets.
func hist(vs ...int64) Value {
	b := make([]uint64, 66)
	for _, v := range vs {
		switch {
		case v < 0:
			b[0]++
		case v == 0:
			b[1]++
		default:
			b[bits.Len64(uint64(v))+1]++
		}
	}
	return Value{Buckets: b}
}

// lhist counts values into lhist(v, lo, hi, step)'s buckets.
func lhist(lo, hi, step int64, vs ...int64) Value {
	n := (hi - lo) / step
	b := make([]uint64, n+2)
	for _, v := range vs {
		switch {
		case v < lo:
			b[0]++
		case v >= hi:
			b[n+1]++
		default:
			b[1+(v-lo)/step]++
		}
	}
	return Value{Buckets: b}
}

func ints(vs ...int64) []Value {
	var out []Value
	for _, v := range vs {
		out = append(out, Value{Int: v})
	}
	return out
}

func str(s string) Value { return Value{Str: s, IsStr: true} }

// mapsBT are testdata/maps.bt's maps as its BEGIN leaves them.
func mapsBT() []*Map {
	return []*Map{
		{Name: "@int", Kind: Int, Elems: []Elem{{ints(1), Value{Int: 5}}, {ints(2), Value{Int: -3}}, {ints(10), Value{Int: 7}}, {ints(-1), Value{Int: 100}}}},
		{Name: "@cnt", Kind: Count, Elems: []Elem{{[]Value{str("b"), {Int: 2}}, Value{Count: 2}}, {[]Value{str("a"), {Int: 7}}, Value{Count: 3}}, {[]Value{str("zz"), {Int: 1}}, Value{Count: 1}}}},
		{Name: "@sum", Kind: Sum, Elems: []Elem{{ints(5), Value{Int: -15}}, {ints(6), Value{Int: 3}}}},
		{Name: "@mn", Kind: Min, Elems: []Elem{{nil, Value{Int: -4}}}},
		{Name: "@mx", Kind: Max, Elems: []Elem{{ints(2), Value{Int: 200}}, {ints(1), Value{Int: 2}}}},
		{Name: "@avg", Kind: Avg, Elems: []Elem{{ints(1), Value{Count: 3, Total: 12}}, {ints(2), Value{Count: 1, Total: -10}}}},
		{Name: "@st", Kind: Stats, Elems: []Elem{{nil, Value{Count: 2, Total: 31}}}},
		{Name: "@h", Kind: Hist, Elems: []Elem{
			{[]Value{str("x")}, hist(-5, 0, 1, 3, 3000, 3000, 2000000)},
			{[]Value{str("y")}, hist(7, 3000000000)},
		}},
		{Name: "@l", Kind: Lhist, Min: 0, Max: 3072, Step: 1024, Elems: []Elem{{nil, lhist(0, 3072, 1024, -5, 1500, 1600, 5000)}}},
		{Name: "@lm", Kind: Lhist, Min: 0, Max: 2097152, Step: 1048576, Elems: []Elem{{nil, lhist(0, 2097152, 1048576, 1048576, 20)}}},
		{Name: "@s", Kind: Str, Elems: []Elem{{ints(3), str("three")}, {ints(1), str("one")}, {ints(2), str("two")}}},
		{Name: "@t", Kind: Tuple, Elems: []Elem{
			{[]Value{str("k")}, Value{Elems: []Value{{Int: 1}, str("x"), {Int: -2}}}},
			{[]Value{str("a")}, Value{Elems: []Value{{Int: 5}, str("y"), {Int: 0}}}},
		}},
		{Name: "@", Kind: Count, Elems: []Elem{{nil, Value{Count: 1}}}},
	}
}

// TestMapsAsBpftrace: testdata/maps.bt's maps print as bpftrace 0.17
// printed them at that script's end (testdata/maps.txt, its output less
// the "Attaching" line and the two empty lines before the maps):
// orders by value, by total, by average and by key; negative values;
// hist's and lhist's labels (K, M, G; the ends), bars and trimming;
// stats, tuples, strings; the empty lines after histograms and stats.
func TestMapsAsBpftrace(t *testing.T) {
	want, err := os.ReadFile("testdata/maps.txt")
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	if err := WriteMaps(&got, mapsBT()); err != nil {
		t.Fatal(err)
	}
	if got.String() != string(want) {
		gl, wl := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
		for i := range max(len(gl), len(wl)) {
			g, w := "", ""
			if i < len(gl) {
				g = gl[i]
			}
			if i < len(wl) {
				w = wl[i]
			}
			if g != w {
				t.Fatalf("line %d:\n got %q\nwant %q", i+1, g, w)
			}
		}
	}
}

// TestMapsTxtIsBpftraces: testdata/maps.txt and maps.json.txt are what
// bpftrace prints for testdata/maps.bt here (text and -f json), where bpftrace runs (root, Debian's bpftrace:
// make test installs it; CI fails without it).
func TestMapsTxtIsBpftraces(t *testing.T) {
	path, err := exec.LookPath("bpftrace")
	if err != nil || os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bpftrace as root is needed here (make test installs Debian's bpftrace): %v", err)
		}
		t.Skip("needs bpftrace, as root")
	}
	for _, tc := range []struct {
		flags      []string
		head, file string
	}{
		{nil, "Attaching 1 probe...\n\n\n", "testdata/maps.txt"},
		{[]string{"-f", "json"}, "{\"type\": \"attached_probes\", \"data\": {\"probes\": 1}}\n\n\n", "testdata/maps.json.txt"},
	} {
		out, err := exec.Command(path, append(tc.flags, "testdata/maps.bt")...).Output()
		if err != nil {
			t.Fatalf("bpftrace: %v", err)
		}
		maps, ok := strings.CutPrefix(string(out), tc.head)
		want, _ := os.ReadFile(tc.file)
		if !ok || maps != string(want) {
			t.Errorf("bpftrace %q printed:\n%s\n%s has:\n%s", tc.flags, out, tc.file, want)
		}
	}
}

// TestMapsJSONAsBpftrace: the same maps in -f json, as bpftrace printed
// them (testdata/maps.json.txt, less the attached_probes line and the
// two empty lines), but for the one divergence WriteMapJSON names: the
// [2G, 4G) bucket's bounds, which bpftrace wraps in 32 bits.
func TestMapsJSONAsBpftrace(t *testing.T) {
	b, err := os.ReadFile("testdata/maps.json.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Replace(string(b), `{"min": -2147483648, "max": 0, "count": 1}`, `{"min": 2147483648, "max": 4294967295, "count": 1}`, 1)
	if want == string(b) {
		t.Fatal("testdata/maps.json.txt has no wrapped [2G, 4G) bucket: is it bpftrace 0.17's?")
	}
	var got bytes.Buffer
	if err := WriteMapsJSON(&got, mapsBT()); err != nil {
		t.Fatal(err)
	}
	gl, wl := strings.Split(got.String(), "\n"), strings.Split(want, "\n")
	for i := range max(len(gl), len(wl)) {
		if i >= len(gl) || i >= len(wl) || gl[i] != wl[i] {
			t.Fatalf("line %d:\n got %q\nwant %q", i+1, at(gl, i), at(wl, i))
		}
	}
}

func at(ls []string, i int) string {
	if i < len(ls) {
		return ls[i]
	}
	return "(none)"
}
