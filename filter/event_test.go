package filter

import (
	"reflect"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/tracefs"
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

// TestTracepointTypo: a tracepoint that does not exist is the command
// line's mistake, as a uprobe's missing function is: exit 2, with the
// group's nearest events, or the nearest groups (issue 62: it was exit 1,
// "event not found"). --info GROUP: lists the group's events, as this
// kernel's tracefs has them (it was 'invalid event name ""').
func TestTracepointTypo(t *testing.T) {
	privtest.Require(t)
	for _, tc := range []struct{ event, want string }{
		{"syscalls:sys_enter_opnat", "tracepoint syscalls:sys_enter_opnat: event not found (near: syscalls:sys_enter_openat"},
		{"shced:sched_switch", "tracepoint shced:sched_switch: event not found (near: sched:*)"},
	} {
		r := filter(t, "--count", tc.event, "-c", "true")
		if r.Status != 2 || !strings.Contains(r.Stderr, tc.want) || !strings.Contains(r.Stderr, "Try 'filter --help'") {
			t.Errorf("%s: exit %d, stderr %q; want exit 2 and %q", tc.event, r.Status, r.Stderr, tc.want)
		}
	}
	r := filter(t, "sched:", "--count")
	if want := "sched: names a group, not an event: sched:NAME, or sched:* for every event of it (--info sched: lists them)"; r.Status != 2 || !strings.Contains(r.Stderr, want) {
		t.Errorf("sched: exit %d, stderr %q; want exit 2 and %q", r.Status, r.Stderr, want)
	}
	tps, err := tracefs.Tracepoints("sched", "*")
	if err != nil || len(tps) == 0 {
		t.Fatalf("sched's tracepoints: %v %v", tps, err)
	}
	r = filter(t, "--info", "sched:")
	var listed []string
	for _, l := range strings.Split(r.Stdout, "\n") {
		if strings.HasPrefix(l, "sched:") {
			listed = append(listed, l)
		}
	}
	if r.Status != 0 || !reflect.DeepEqual(listed, tps) {
		t.Errorf("--info sched: exit %d, %d events listed, tracefs has %d: %q\n%s", r.Status, len(listed), len(tps), listed, r.Stderr)
	}
}
