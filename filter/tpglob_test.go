package filter

import (
	"fmt"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/tracefs"
)

// A tracepoint glob: syscalls:sys_enter_open* and sys_exit_open*, each
// tracepoint counted apart by probe, exactly; a tracepoint without the
// field --fields names is left out and said; printed lines are named after
// their tracepoint.
func TestTracepointGlob(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	a, missing := dir+"/a", dir+"/missing"
	openFiles(t, a)
	const na, nm = 5, 3
	work := tooltest.Opens(t, "tk-tpglob", tooltest.Open{Path: a, Times: na}, tooltest.Open{Path: missing, Times: nm, Missing: true})
	ours := `comm == "tk-tpglob"`
	rep, r := countByJSON(t, "probe", "syscalls:sys_enter_open*", "--where", ours, "-c", work)
	// Go opens with openat: the others of the glob see nothing of ours.
	if len(rep.Counts) != 1 || rep.Counts[0].Key["probe"] != "syscalls:sys_enter_openat" || rep.Counts[0].Count != na+nm {
		t.Errorf("--count-by probe: %+v, want syscalls:sys_enter_openat %d times\n%s", rep.Counts, na+nm, r.Stderr)
	}
	if !strings.Contains(r.Stderr, "tracepoints attached in") {
		t.Errorf("the run does not say how many tracepoints it attached: %s", r.Stderr)
	}
	rep, r = countByJSON(t, "probe,ret", "syscalls:sys_exit_open*", "--where", ours+" && ret == -2", "-c", work)
	if len(rep.Counts) != 1 || rep.Counts[0].Key["probe"] != "syscalls:sys_exit_openat" || rep.Counts[0].Count != nm {
		t.Errorf("--count-by probe,ret: %+v, want syscalls:sys_exit_openat -2 %d times\n%s", rep.Counts, nm, r.Stderr)
	}
	// Printed, with a field one of them lacks (open_by_handle_at).
	r = filter(t, "syscalls:sys_enter_open*", "--fields", "filename", "--where", ours, "-c", work)
	ls := lines(r.Stdout)
	if r.Status != 0 || len(ls) != na+nm || !strings.Contains(ls[0], ": syscalls:sys_enter_openat: filename="+a) {
		t.Errorf("printed: exit %d, %d lines, want %d named syscalls:sys_enter_openat:\n%s%s", r.Status, len(ls), na+nm, r.Stdout, r.Stderr)
	}
	if !strings.Contains(r.Stderr, "matching tracepoints left out: syscalls:sys_enter_open_by_handle_at") {
		t.Errorf("open_by_handle_at (no filename) not said to be left out: %s", r.Stderr)
	}
	// --info: each tracepoint's fields; a syscall's char * is a string.
	r = filter(t, "--info", "syscalls:sys_enter_openat*")
	format, err := tracefs.ReadFormat("syscalls", "sys_enter_openat")
	if err != nil {
		t.Fatal(err)
	}
	fn, err := format.MustField("filename") // offset 24, size 8 on 64-bit kernels
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != 0 || !strings.Contains(r.Stdout, "syscalls:sys_enter_openat\n") || !strings.Contains(r.Stdout, "syscalls:sys_enter_openat2\n") ||
		!strings.Contains(r.Stdout, fmt.Sprintf("filename   offset %3d, size %2d, string, read from the process's memory", fn.Offset, fn.Size)) {
		t.Errorf("--info syscalls:sys_enter_openat*: exit %d\n%s%s", r.Status, r.Stdout, r.Stderr)
	}
	r = filter(t, "--count", "nosuchgroup*:x*")
	if r.Status != 2 || !strings.Contains(r.Stderr, "nosuchgroup*:x*: no tracepoint matches") {
		t.Errorf("a glob that matches nothing: exit %d, %s", r.Status, r.Stderr)
	}
}
