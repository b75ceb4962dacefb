package iolat

import (
	"testing"

	"github.com/tracekit/tracekit/run"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    options
		ok   bool
	}{
		{"plain", options{Scale: "row"}, true},
		{"D and F", options{Disks: true, Flags: true, Scale: "row"}, false},
		{"text without heatmap", options{Text: true, Scale: "row"}, false},
		{"full without heatmap", options{Full: true, Scale: "row"}, false},
		{"global without heatmap", options{Scale: "global"}, false},
		{"heatmap -F", options{Heatmap: true, Flags: true, Scale: "row"}, false},
		{"heatmap -m", options{Heatmap: true, Millis: true, Scale: "row"}, false},
		{"heatmap --cumulative", options{Common: run.Common{Cumulative: true}, Heatmap: true, Scale: "row"}, false},
		{"histogram --cumulative", options{Common: run.Common{Cumulative: true}, Scale: "row"}, true},
		{"heatmap -D", options{Heatmap: true, Disks: true, Scale: "global"}, true},
		{"unknown disk", options{Disk: "nosuchdisk0", Scale: "row"}, false},
		{"path disk", options{Disk: "../../etc", Scale: "row"}, false},
	} {
		o := tc.o
		if err := validate(&o); (err == nil) != tc.ok {
			t.Errorf("%s: err %v", tc.name, err)
		}
	}
	o := options{Heatmap: true, Scale: "row"}
	validate(&o)
	if o.Interval().Seconds() != 1 {
		t.Errorf("heatmap interval %v, want 1s", o.Interval())
	}
}

func TestStatusAndFormat(t *testing.T) {
	var row = heatRowFor(60, 5)
	if got := status(row, 1, 3); got != "5 IO/s   slowest >= 1.00ms   lost 3" {
		t.Errorf("status %q", got)
	}
	if formatNs(999) != "999ns" || formatNs(1500) != "1.50us" || formatNs(2e9) != "2.00s" {
		t.Error("formatNs")
	}
}
