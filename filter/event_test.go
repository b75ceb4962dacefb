package filter

import (
	"reflect"
	"testing"
)

// TestBpftraceProbeNames: an event written as bpftrace writes its probe
// (tracepoint:, t:, k:, kr:, u:, ur:, U:) is the event filter names
// without the prefix or by its full name (issue 62: "tracepoint:" was
// refused as an invalid event name).
func TestBpftraceProbeNames(t *testing.T) {
	for _, tc := range [][2]string{
		{"tracepoint:syscalls:sys_enter_write", "syscalls:sys_enter_write"},
		{"t:syscalls:sys_enter_write", "syscalls:sys_enter_write"},
		{"tracepoint:sched:sched_*", "sched:sched_*"},
		{"k:vfs_read", "kprobe:vfs_read"},
		{"kr:vfs_read", "kretprobe:vfs_read"},
		{"k:vfs_*", "kprobe:vfs_*"},
		{"u:/bin/sh:main", "uprobe:/bin/sh:main"},
		{"ur:/bin/sh:main", "uretprobe:/bin/sh:main"},
		{"U:/bin/sh:prov:name", "usdt:/bin/sh:prov:name"},
	} {
		got, err := parseEvent(tc[0], false)
		if err != nil {
			t.Errorf("%s: %v", tc[0], err)
			continue
		}
		want, err := parseEvent(tc[1], false)
		if err != nil {
			t.Fatalf("%s: %v", tc[1], err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: %+v, want %s's %+v", tc[0], got, tc[1], want)
		}
	}
	// A probe type filter has no event of is still refused, by name.
	if _, err := parseEvent("profile:hz:99", false); err == nil {
		t.Error("profile:hz:99 taken as an event")
	}
}
