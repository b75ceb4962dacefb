package terminal

import (
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/golden"
)

func render(t *testing.T, unit string, h *Log2Hist) string {
	t.Helper()
	var b strings.Builder
	if err := WriteLog2(&b, unit, h); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

func TestLog2Goldens(t *testing.T) {
	one := &Log2Hist{}
	one.Counts[10] = 7777 // 512 -> 1023
	zero := &Log2Hist{}
	zero.Counts[1] = 12 // writes of 0 bytes land in "0 -> 1"
	wide := &Log2Hist{}
	for k, c := range map[int]uint64{1: 3, 2: 1, 5: 40, 13: 1000, 21: 5, 33: 1} {
		wide.Counts[k] = c
	}
	spread := &Log2Hist{}
	for k, c := range map[int]uint64{3: 1, 4: 10, 5: 100, 6: 1000, 7: 999, 8: 41} {
		spread.Counts[k] = c
	}
	huge := &Log2Hist{}
	huge.Counts[64] = 2
	huge.Counts[63] = 1
	for name, h := range map[string]*Log2Hist{
		"hist_empty": {}, "hist_one_bucket": one, "hist_zero_size": zero,
		"hist_wide_range": wide, "hist_spread": spread, "hist_top_slot": huge,
	} {
		golden.Check(t, name, render(t, "bytes", h))
	}
}

func TestBucketsMatchBCCRanges(t *testing.T) {
	h := &Log2Hist{}
	h.Counts[3] = 1
	got := h.Buckets()
	want := []Bucket{{0, 1, 0}, {2, 3, 0}, {4, 7, 1}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d = %v, want %v", i, got[i], want[i])
		}
	}
	if lo, hi := SlotRange(64); lo != 1<<63 || hi != ^uint64(0) {
		t.Errorf("slot 64 = %d..%d", lo, hi)
	}
}

func TestStars(t *testing.T) {
	for _, tc := range []struct {
		c, max uint64
		want   int
	}{{0, 10, 0}, {1, 80, 0}, {2, 80, 1}, {10, 10, 40}, {39, 40, 39}, {^uint64(0), ^uint64(0), 40}} {
		if got := len(stars(tc.c, tc.max, 40)); got != tc.want {
			t.Errorf("stars(%d, %d) = %d, want %d", tc.c, tc.max, got, tc.want)
		}
	}
}

func TestWriteTable(t *testing.T) {
	var b strings.Builder
	WriteTable(&b, [][]string{{"comm", "pid", "count"}, {"bash", "12", "3"}, {"kworker/0:1", "7", "1024"}}, []bool{false, true, true})
	want := "comm         pid  count\n" +
		"bash          12      3\n" +
		"kworker/0:1    7   1024\n"
	if b.String() != want {
		t.Errorf("got:\n%swant:\n%s", b.String(), want)
	}
}

func TestPrintableLines(t *testing.T) {
	for in, want := range map[string]string{
		"bad\n  a == \"x\"\n       ^": "bad\n  a == \"x\"\n       ^",
		"note \x1b[2J\rFAKE\nnext":    "note \\x1b[2J\\x0dFAKE\nnext",
		`quoted "\x1b" stays`:         `quoted "\x1b" stays`,
		"tab\there \xff":              "tab\there \\xff",
		"\t258: (bf) r1 = r10":        "\t258: (bf) r1 = r10",
	} {
		if got := PrintableLines(in); got != want {
			t.Errorf("PrintableLines(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"bash":              "bash",
		"\x1b[31mX\nFAKE 1": `\x1b[31mX\x0aFAKE 1`,
		"tab\there":         `tab\x09here`,
		`back\slash`:        `back\\slash`,
		"caf\xc3\xa9":       "café",
		"bad\xff":           `bad\xff`,
		"del\x7f":           `del\x7f`,
		"c1\xc2\x85":        `c1\x85`,
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}
