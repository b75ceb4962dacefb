package tracefs_test

import (
	"os"
	"os/exec"
	"strconv"
	"testing"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/tracefs"
)

// The sweep removes our namespace's dead groups and never a group it
// cannot judge: one named for another pid namespace (a tool in a container
// sharing the host's tracefs), or one whose owner lives. Uprobes, which
// every kernel we test has; kprobe groups go through the same code.
func TestSweepJudgesOnlyItsOwnNamespace(t *testing.T) {
	privtest.Require(t)
	if !tracefs.Uprobe.Available() {
		t.Fatal("this kernel has no uprobe_events")
	}
	ns, err := tracefs.PidNamespace()
	if err != nil {
		t.Fatal(err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPid := dead.Process.Pid
	groups := map[string]bool{ // group -> swept
		tracefs.Group("sweeptest", ns, deadPid):     true,
		tracefs.Group("sweeptest", ns+1, deadPid):   false,
		tracefs.Group("sweeptest", ns, os.Getpid()): false,
		"tk_sweeptest_" + strconv.Itoa(deadPid):     false, // no namespace: cannot be judged
	}
	probe := tracefs.Probe{Type: tracefs.Uprobe, Path: "/bin/true", Offset: 0}
	for g := range groups {
		if _, err := tracefs.AddProbe(g, "p1", probe); err != nil {
			t.Fatal(err)
		}
		defer tracefs.RemoveProbe(tracefs.Uprobe, g, "p1")
	}
	// Only the pid this test let die counts as dead: the groups of other
	// packages' tests, running alongside, are not this test's to sweep (a
	// filter test that kills its tool counts the lines left behind).
	alive := func(pid int) bool { return pid != deadPid }
	if err := tracefs.SweepStale(ns, alive); err != nil {
		t.Fatal(err)
	}
	left := map[string]bool{}
	events, err := tracefs.ListProbes(tracefs.Uprobe)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events {
		left[e.Group] = true
	}
	for g, swept := range groups {
		if left[g] == swept {
			t.Errorf("%s: swept %v, want %v", g, !left[g], swept)
		}
	}
}

// NearFunctions finds what a kprobe's typo meant among the kernel's
// traceable functions: vfs_write for vfs_wirte, where this kernel lists
// vfs_write (every kernel the matrix boots does).
func TestNearFunctions(t *testing.T) {
	privtest.Require(t)
	fns, err := tracefs.Functions("vfs_write")
	if err != nil || len(fns) == 0 {
		t.Skipf("this kernel lists no vfs_write among its traceable functions (%v)", err)
	}
	if near := tracefs.NearFunctions("vfs_wirte"); len(near) == 0 || near[0] != "vfs_write" {
		t.Errorf("NearFunctions(vfs_wirte) = %v, want vfs_write first", near)
	}
}
