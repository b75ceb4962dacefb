package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/run"
)

// examples are the command lines a tool's help shows: every line of its
// details that starts with two spaces and its name.
func examples(tl tool) []string {
	var out []string
	for _, line := range strings.Split(tl.tool().Details, "\n") {
		if strings.HasPrefix(line, "  "+tl.name+" ") {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return out
}

// TestHelpExamples: every example in every tool's --help (and so its man
// page, made of the same text) is a command line a shell takes as it is
// written, and its arguments, as the shell splits them, pass the tool's
// own parsing and checks (run.Check: a usage error would end it with
// exit 2). Issue 62: filter's --count-by str(arg0),ret was a shell
// syntax error.
func TestHelpExamples(t *testing.T) {
	dir := t.TempDir()
	disk := ""
	if disks, _ := os.ReadDir("/sys/class/block"); len(disks) > 0 {
		for _, d := range disks {
			if n := d.Name(); !strings.HasPrefix(n, "loop") && !strings.HasPrefix(n, "ram") && !strings.HasPrefix(n, "zram") {
				disk = n
				break
			}
		}
	}
	// The programs the examples run with -c, which are the example
	// writer's ("./server", "ping"): stand-ins here, where the tools look
	// (the working directory, $PATH), so that a -c line is refused only
	// when a program it names could not start anywhere.
	stubs := filepath.Join(dir, "stubs")
	for _, p := range []string{filepath.Join(dir, "server"), filepath.Join(dir, "build.sh"), filepath.Join(stubs, "ping")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Chdir(dir)
	t.Setenv("PATH", stubs+string(os.PathListSeparator)+os.Getenv("PATH"))
	n := 0
	for _, tl := range all {
		for _, ex := range examples(tl) {
			n++
			if out, err := exec.Command("sh", "-n", "-c", ex).CombinedOutput(); err != nil {
				t.Errorf("%s: the shell refuses it: %v %s", ex, err, out)
				continue
			}
			// The tool as a shell function that writes its arguments to fd
			// 3, NUL-separated; what is piped or redirected goes nowhere.
			argsFile := filepath.Join(dir, "args")
			script := tl.name + `() { printf '%s\0' "$@" >&3; }; ` + ex
			cmd := exec.Command("sh", "-c", script)
			cmd.Dir = dir
			f, err := os.Create(argsFile)
			if err != nil {
				t.Fatal(err)
			}
			cmd.ExtraFiles = []*os.File{nil, nil, nil, f}[3:] // fd 3
			cmd.Env = append(os.Environ(), "PATH=/nonexistent")
			_ = cmd.Run() // a pipe's reader may not exist: only the arguments matter
			f.Close()
			b, err := os.ReadFile(argsFile)
			if err != nil || len(b) == 0 {
				t.Errorf("%s: no arguments reached the tool (%v)", ex, err)
				continue
			}
			args := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
			// What an example names on its writer's machine is this one's:
			// a process (-p 1234) is this test's, a disk (-d nvme0n1) the
			// first this machine has.
			for i := 1; i < len(args); i++ {
				switch args[i-1] {
				case "-p":
					args[i] = strconv.Itoa(os.Getpid())
				case "-d":
					if disk == "" {
						t.Logf("%s: left out, this machine has no disk", ex)
						goto next
					}
					args[i] = disk
				}
			}
			if err := run.Check(tl.tool(), args); err != nil {
				t.Errorf("%s: %v", ex, err)
			}
		next:
		}
	}
	if n < 20 {
		t.Fatalf("%d examples found in the tools' help: the pattern no longer finds them", n)
	}
	t.Logf("%d examples", n)
}
