package list

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/bpftrace/parse"
)

// listed is what Match lists for a search, one line per probe and field,
// as bpftrace -l (-v) prints it.
func listed(t *testing.T, search string, verbose bool) string {
	t.Helper()
	prog, err := parse.Parse("stdin", search+" {}", nil)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, ap := range prog.Probes[0].Points {
		ps, err := Match(ap, verbose)
		if err != nil {
			t.Fatalf("%s: %v", search, err)
		}
		for _, p := range ps {
			b.WriteString(p.Name + "\n")
			for _, f := range p.Fields {
				b.WriteString("    " + f + "\n")
			}
		}
	}
	return b.String()
}

// TestListAsBpftrace: what bpftrace -l lists here, this machine's
// tracepoints, a file's functions and USDT probes, is what Match lists,
// line for line: sorted, tracepoints' fields with -v as their format
// files declare them, aliases written out. It needs root (tracefs) and
// bpftrace (CI fails without them; make test installs bpftrace).
func TestListAsBpftrace(t *testing.T) {
	path, err := exec.LookPath("bpftrace")
	if err != nil || os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bpftrace as root is needed here (make test installs Debian's bpftrace): %v", err)
		}
		t.Skip("needs bpftrace, as root")
	}
	searches := []struct {
		search  string
		verbose bool
	}{
		{"tracepoint:sched:*", false},
		{"t:syscalls:sys_e*_read", false},
		{"tracepoint:syscalls:sys_e*_rea*", false},
		{"tracepoint:sched:sched_wak*", true},
		{"tracepoint:syscalls:sys_enter_openat", true},
		{"tracepoint:*:*", false},
		{"uprobe:/bin/bash:readline*", false},
		{"uprobe:/bin/bash:*", false},
	}
	if _, err := os.Stat("/usr/bin/python3.11"); err == nil {
		searches = append(searches, struct {
			search  string
			verbose bool
		}{"usdt:/usr/bin/python3.11:*", false}, struct {
			search  string
			verbose bool
		}{"usdt:/usr/bin/python3.11:python:gc__*", false})
	}
	for _, s := range searches {
		args := []string{"-l", s.search}
		if s.verbose {
			args = append(args, "-v")
		}
		out, err := exec.Command(path, args...).Output()
		if err != nil {
			t.Fatalf("bpftrace %q: %v", args, err)
		}
		got := listed(t, s.search, s.verbose)
		if got != string(out) {
			gl, wl := strings.Split(got, "\n"), strings.Split(string(out), "\n")
			for i := range max(len(gl), len(wl)) {
				if i >= len(gl) || i >= len(wl) || gl[i] != wl[i] {
					t.Errorf("%q: %d lines, bpftrace %d; line %d: %q, bpftrace %q", args, len(gl), len(wl), i+1, at(gl, i), at(wl, i))
					break
				}
			}
		}
	}
}

func at(ls []string, i int) string {
	if i < len(ls) {
		return ls[i]
	}
	return "(none)"
}
