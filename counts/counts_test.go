package counts

import (
	"testing"

	"github.com/tracekit/tracekit/terminal"
)

func TestDeltas(t *testing.T) {
	d := Deltas{}
	var a terminal.Log2Hist
	a.Counts[3] = 5
	if got := d.Hist(7, &a); got.Counts[3] != 5 {
		t.Errorf("first: %d", got.Counts[3])
	}
	a.Counts[3] = 8
	if got := d.Hist(7, &a); got.Counts[3] != 3 {
		t.Errorf("second: %d, want 3", got.Counts[3])
	}
	if d.Counter(4) != 4 || d.Counter(10) != 6 {
		t.Error("lost deltas")
	}
	c := Deltas{Cumulative: true}
	c.Hist(1, &a)
	if got := c.Hist(1, &a); got.Counts[3] != 8 {
		t.Errorf("cumulative: %d", got.Counts[3])
	}
}
