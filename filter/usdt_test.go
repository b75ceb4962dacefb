package filter

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/tracefs"
)

// fixtures is the directory of the built USDT fixtures: prebuilt in
// testdata/usdt/build (the kernel matrix ships them), else built here once
// with gcc and sys/sdt.h, installed when missing.
func fixtures(t *testing.T) string {
	t.Helper()
	return tooltest.USDTFixtures(t, "testdata/usdt")
}

// userCount is filter --count --json on a user-space probe, with env. A
// run in which the kernel said it skipped filter's programs (7.x: one
// preempted mid-run on a CPU another event then reached, see
// run.Session.FollowProcessTree), a probe's hit or the exec that starts
// the -c command's tracing, may have lost the count's own events: it is
// run again, up to three times, and the last run's count is returned.
func userCount(t *testing.T, env []string, args ...string) int {
	t.Helper()
	for try := 1; ; try++ {
		n, stderr := userCountOnce(t, env, args...)
		skipped := tooltest.SkippedRuns("filter", stderr) + tooltest.ForksNotSeen("filter", stderr)
		if skipped == 0 || try == 3 {
			return n
		}
		t.Logf("filter %q: counted %d, the kernel skipped %d runs: run again", args, n, skipped)
	}
}

func userCountOnce(t *testing.T, env []string, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(tooltest.Tool(t, "filter"), append([]string{"--count", "--json"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var rep struct {
		Count *int `json:"count"`
	}
	if jerr := json.Unmarshal(out, &rep); err != nil || jerr != nil || rep.Count == nil {
		t.Fatalf("filter %q: %v %v: %q %s", args, err, jerr, out, stderr.String())
	}
	return *rep.Count, stderr.String()
}

// Every argument form of sys/sdt.h, on a PIE at -O0 and -O2 and a non-PIE:
// each probe fires exactly n times with values known from the loop index,
// counted and printed exactly, through the uprobe PMU and (the -O2 PIE and
// the non-PIE) through uprobe_events.
func TestUSDTFixtures(t *testing.T) {
	privtest.Require(t)
	dir := fixtures(t)
	const n = 13
	for _, fx := range []string{"fx-pie-O0", "fx-pie-O2", "fx-nopie-O2"} {
		for _, path := range []string{"pmu", "legacy"} {
			// The legacy path on a PIE and a non-PIE: -O0's PIE differs
			// from -O2's in its operand forms only, which the path to
			// attach by does not touch (6 of the test's 60 runs).
			if path == "legacy" && fx == "fx-pie-O0" {
				continue
			}
			var env []string
			if path == "legacy" {
				env = []string{"TRACEKIT_LEGACY_PROBES=1"}
			}
			bin := filepath.Join(dir, fx)
			run := fmt.Sprintf("%s %d", bin, n)
			// The legacy path attaches the same programs another way
			// (uprobe_events, the semaphore as its reference counter): it
			// runs the cases that attach differently, not every operand form.
			for _, tc := range []struct {
				probe, where string
				want         int
				pmuOnly      bool
			}{
				{"tk:plain", "", n, false},
				{"plain", "", n, true}, // any provider
				{"tk:constant", "arg0 == 42", n, true},
				{"tk:global", "arg0 == -7", n, true}, // sym(%rip) at -O2
				{"tk:args", "arg0 < 0 && arg1 >= 0x100000000 && arg3 >= 200 && arg4 <= -300 && (char *)arg2 == \"tk-string\"", n, false},
				{"tk:args", "arg0 == -5 || arg4 == -301", 2, true},
				{"tk:indexed", "arg0 == -20", 3, true}, // (base,index,8) or sym(,index,8) at -O2
				{"tk:guarded", "", n, false},           // a semaphore, raised by the kernel
				{"tk:guarded", "arg0 >= 10", 3, true},
				{"tk:sites", "", n, false},        // ten call sites, all attached
				{"tk:sites", "arg0 < 3", 6, true}, // each with its own spec: $0 .. $9
			} {
				if tc.pmuOnly && path == "legacy" {
					continue
				}
				args := []string{"usdt:" + bin + ":" + tc.probe, "-c", run}
				if tc.where != "" {
					args = append(args, "--where", tc.where)
				}
				if got := userCount(t, env, args...); got != tc.want {
					t.Errorf("%s (%s) %s --where '%s': %d, want exactly %d", fx, path, tc.probe, tc.where, got, tc.want)
				}
			}
			// A uprobe and a uretprobe on tk_add(i, 1000).
			if got := userCount(t, env, "uprobe:"+bin+":tk_add", "--where", "arg1 == 1000 && arg0 < 5", "-c", run); got != 5 {
				t.Errorf("%s (%s) uprobe tk_add: %d, want 5", fx, path, got)
			}
			if got := userCount(t, env, "uretprobe:"+bin+":tk_add", "--where", "ret == 1007", "-c", run); got != 1 {
				t.Errorf("%s (%s) uretprobe tk_add ret == 1007: %d, want 1", fx, path, got)
			}
		}
		// Printed: the known values, arg by arg, in every form.
		bin := filepath.Join(dir, fx)
		r := filter(t, "--json", "--fields", "arg0,arg1,str(arg2),arg3,arg4", "usdt:"+bin+":tk:args", "-c", fmt.Sprintf("%s %d", bin, 3))
		ls := lines(r.Stdout)
		if len(ls) != 3 {
			t.Fatalf("%s: %d records, want 3: %s %s", fx, len(ls), r.Stdout, r.Stderr)
		}
		for i, l := range ls {
			var ev struct {
				Fields map[string]any `json:"fields"`
			}
			json.Unmarshal([]byte(l), &ev)
			want := map[string]any{"arg0": float64(-i - 1), "arg1": float64(int64(i+1) << 32), "str(arg2)": "tk-string", "arg3": float64(200 + i), "arg4": float64(-300 - i)}
			for k, v := range want {
				if ev.Fields[k] != v {
					t.Errorf("%s: record %d: %s = %v, want %v", fx, i, k, ev.Fields[k], v)
				}
			}
		}
	}
	if b, err := os.ReadFile("/sys/kernel/tracing/uprobe_events"); err == nil && strings.Contains(string(b), "tk_filter_") {
		t.Errorf("uprobe_events still holds our probes:\n%s", b)
	}
}

// A probe and a function in a shared library, attached by the library's
// path before the process loads it.
func TestUSDTSharedLibrary(t *testing.T) {
	privtest.Require(t)
	dir := fixtures(t)
	const n = 9
	run := fmt.Sprintf("%s %d", filepath.Join(dir, "fx-lib"), n)
	lib := filepath.Join(dir, "libtk.so")
	if got := userCount(t, nil, "usdt:"+lib+":tklib:hit", "-c", run); got != n {
		t.Errorf("usdt libtk.so hit: %d, want %d", got, n)
	}
	if got := userCount(t, nil, "uprobe:"+lib+":tk_lib_twice", "--where", "arg0 > 5", "-c", run); got != 3 {
		t.Errorf("uprobe libtk.so tk_lib_twice arg0 > 5: %d, want 3", got)
	}
}

// Refused before anything is attached, with one clear line and the status
// of whose mistake it is.
func TestUserProbeErrors(t *testing.T) {
	privtest.Require(t)
	dir := fixtures(t)
	bin := filepath.Join(dir, "fx-pie-O2")
	script := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(script, []byte("#!/bin/sh\necho hi\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args   []string
		status int
		want   string
	}{
		{[]string{"--count", "usdt:" + bin + ":tk:args", "--where", "arg7 == 1"}, 2, "arg7: this probe has 5 argument(s), arg0..arg4\n  arg7 == 1\n  ^"},
		{[]string{"--count", "usdt:" + bin + ":tk:args", "--where", `arg0 == "x"`}, 2, "arg0 is a number: compare it with a number"},
		{[]string{"--count", "usdt:" + bin + ":tk:nosuch"}, 2, "has no USDT probe tk:nosuch (probes: tk:args, tk:constant, tk:global, tk:guarded, tk:indexed, tk:many, tk:plain, tk:sites)"},
		{[]string{"--count", "uprobe:" + bin + ":tk_ad"}, 2, `has no function "tk_ad" (near: tk_add)`},
		// A name that matches nothing is the command line's mistake (2); a
		// file that is no ELF file is the file's (1), in --info as in a
		// trace (--info said 1, a trace 2).
		{[]string{"--count", "uprobe:" + script + ":main"}, 1, script + " is not an ELF file"},
		{[]string{"--info", "uprobe:" + script + ":*"}, 1, script + " is not an ELF file"},
		{[]string{"--info", "usdt:" + script}, 1, script + " is not an ELF file"},
		{[]string{"--count", "uprobe:/nonexistent/x:main"}, 2, "/nonexistent/x: no such file or directory"},
		{[]string{"--info", "uprobe:/nonexistent/x:*"}, 2, "/nonexistent/x: no such file or directory"},
		{[]string{"--count", "usdt:" + bin}, 2, "want usdt:PATH:[PROVIDER:]NAME"},
		{[]string{"--count", "uretprobe:" + bin + ":tk_add+4"}, 2, "a uretprobe goes on a function's entry"},
		// A glob, which kprobes take: the functions it matches are listed
		// by --info, not probed.
		{[]string{"--count", "uprobe:" + bin + ":tk_*"}, 2, "a uprobe probes one function, not a glob: filter --info 'uprobe:" + bin + ":tk_*' lists the functions"},
	} {
		r := filter(t, tc.args...)
		if r.Status != tc.status || !strings.Contains(r.Stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, r.Status, r.Stderr, tc.status, tc.want)
		}
	}
}

// --info lists a file's USDT probes with their sites and argument types,
// and its functions.
func TestUserInfo(t *testing.T) {
	privtest.Require(t)
	dir := fixtures(t)
	bin := filepath.Join(dir, "fx-nopie-O2")
	r := filter(t, "--info", "usdt:"+bin)
	// The specs gcc 12 writes at -O2 for tk:args and tk:indexed.
	specs := map[string][]string{
		"amd64": {"arg0 s32 (-4@%eax)", "arg0 s64 (-8@tk_table(,%rax,8))"},
		"arm64": {"arg0 s32 (-4@x1)", "arg1 s32 (-4@x27)"},
	}[runtime.GOARCH]
	for _, want := range append([]string{
		"usdt:" + bin + ":tk:args  1 site, semaphore none\n",
		"usdt:" + bin + ":tk:guarded  1 site, semaphore 0x",
		"usdt:" + bin + ":tk:plain  1 site, semaphore none\n    0x",
	}, specs...) {
		if !strings.Contains(r.Stdout, want) {
			t.Errorf("--info usdt: missing %q in:\n%s%s", want, r.Stdout, r.Stderr)
		}
	}
	r = filter(t, "--info", "uprobe:"+bin+":tk_*")
	if r.Status != 0 || r.Stdout != bin+":tk_add\n"+bin+":tk_fire_guarded\n"+bin+":tk_many\n"+bin+":tk_semaphore\n" {
		t.Errorf("--info uprobe glob: %d %q %q", r.Status, r.Stdout, r.Stderr)
	}
}

// Side by side with bpftrace on the fixtures: the same counts where
// bpftrace reads the argument right. bpftrace 0.17 misreads sym(%rip)
// arguments (REFERENCE.md): that probe is compared for its count only.
func TestUSDTSideBySide(t *testing.T) {
	privtest.Require(t)
	bt := tooltest.Peer(t, "bpftrace", "bpftrace")
	if bt == "" {
		t.Skip("bpftrace is compared on the host, not in the matrix's guests")
	}
	dir := fixtures(t)
	bin := filepath.Join(dir, "fx-pie-O2")
	const n = 11
	run := fmt.Sprintf("%s %d", bin, n)
	for _, tc := range []struct{ probe, where, pred string }{
		{"tk:plain", "", ""},
		{"tk:args", "arg0 == -3 || arg3 == 205", "/arg0 == -3 || arg3 == 205/"},
		{"tk:indexed", "arg0 == 30", "/arg0 == 30/"},
		{"tk:guarded", "arg0 > 6", "/arg0 > 6/"},
		{"tk:global", "", ""}, // bpftrace misreads the value: count only
	} {
		args := []string{"usdt:" + bin + ":" + tc.probe, "-c", run}
		if tc.where != "" {
			args = append(args, "--where", tc.where)
		}
		got := userCount(t, nil, args...)
		out, err := exec.Command(bt, "-e", fmt.Sprintf("usdt:%s:%s %s { @ = count(); }", bin, tc.probe, tc.pred), "-c", run).CombinedOutput()
		if err != nil {
			t.Fatalf("bpftrace: %v\n%s", err, out)
		}
		peer := 0
		if m := regexp.MustCompile(`(?m)^@: (\d+)$`).FindStringSubmatch(string(out)); m != nil {
			peer, _ = strconv.Atoi(m[1])
		}
		if got != peer {
			t.Errorf("%s --where '%s': filter %d, bpftrace %d", tc.probe, tc.where, got, peer)
		}
	}
}

// Debian's python3.11: sys.audit("tk.test", i) n times and gc.collect(1)
// m times (gc disabled), counted through the audit and gc__start probes,
// both behind semaphores. Never function__entry or line (broken in 3.11).
func TestPythonUSDT(t *testing.T) {
	privtest.Require(t)
	if os.Getenv("TRACEKIT_BIN") != "" {
		t.Skip("python3.11 runs on the host, not in the matrix's guests")
	}
	tooltest.Install(t, "python3.11", func() bool { _, err := os.Stat("/usr/bin/python3.11"); return err == nil })
	const n, m = 23, 7
	script := fmt.Sprintf("import gc, sys\ngc.disable()\nfor i in range(%d): sys.audit('tk.test', i)\nfor i in range(%d): gc.collect(1)\n", n, m)
	f := filepath.Join(t.TempDir(), "tk.py")
	if err := os.WriteFile(f, []byte(script), 0o644); err != nil {
		t.Fatal(err)
	}
	run := "/usr/bin/python3.11 " + f
	if got := userCount(t, nil, "usdt:/usr/bin/python3.11:python:audit", "--where", `(char *)arg0 == "tk.test"`, "-c", run); got != n {
		t.Errorf("python:audit tk.test: %d, want exactly %d", got, n)
	}
	if got := userCount(t, nil, "usdt:/usr/bin/python3.11:gc__start", "--where", "arg0 == 1", "-c", run); got != m {
		t.Errorf("python:gc__start arg0 == 1: %d, want exactly %d", got, m)
	}
}

// -c counts the command's process tree only, while the same probe fires in
// another process; -p counts one running process only (SIGINT ends the run
// and prints the report), and the semaphore the kernel raised for it is
// back to 0 once filter is gone.
func TestUserProbeProcesses(t *testing.T) {
	privtest.Require(t)
	dir := fixtures(t)
	bin := filepath.Join(dir, "fx-pie-O2")
	// Another process fires the probe all along.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				exec.Command(bin, "50").Run()
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()
	// The command's tree: sh, then the fixture.
	if got := userCount(t, nil, "usdt:"+bin+":tk:plain", "-c", bin+" 13"); got != 13 {
		t.Errorf("-c: %d, want exactly 13 (the command's own)", got)
	}
	if got := userCount(t, nil, "usdt:"+bin+":tk:guarded", "-c", "sh -c '"+bin+" 4; "+bin+" 3'"); got != 7 {
		t.Errorf("-c with children: %d, want exactly 7", got)
	}

	// -p: a fixture that waits for us.
	fx := exec.Command(bin, "17", "wait")
	in, _ := fx.StdinPipe()
	out, _ := fx.StdoutPipe()
	if err := fx.Start(); err != nil {
		t.Fatal(err)
	}
	defer fx.Process.Kill()
	cmd := exec.Command(tooltest.Tool(t, "filter"), "--count", "--json", "-p", strconv.Itoa(fx.Process.Pid), "usdt:"+bin+":tk:guarded")
	var stdout strings.Builder
	cmd.Stdout = &stdout
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	if n, _ := stderr.Read(buf); !strings.Contains(string(buf[:n]), "Tracing") {
		cmd.Process.Kill()
		t.Fatalf("filter -p did not start: %q", buf[:n])
	}
	in.Write([]byte("go\n"))
	if n, _ := out.Read(buf); string(buf[:n]) != "fired\n" {
		t.Fatalf("fixture: %q", buf[:n])
	}
	cmd.Process.Signal(os.Interrupt)
	cmd.Wait()
	var rep struct {
		Count int `json:"count"`
	}
	if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil || rep.Count != 17 {
		t.Errorf("-p: %q (%v), want a count of exactly 17", stdout.String(), err)
	}
	in.Write([]byte("go\n"))
	n, _ := out.Read(buf)
	if got := strings.TrimSpace(string(buf[:n])); got != "semaphore 0" {
		t.Errorf("after filter is gone: %q, want semaphore 0", got)
	}
	fx.Wait()
}

// A run killed with SIGKILL leaves its uprobe_events lines (legacy path):
// the next run of any tool sweeps them.
func TestKilledRunIsSwept(t *testing.T) {
	privtest.Require(t)
	dir := fixtures(t)
	bin := filepath.Join(dir, "fx-pie-O2")
	cmd := exec.Command(tooltest.Tool(t, "filter"), "--count", "usdt:"+bin+":tk:sites")
	cmd.Env = append(os.Environ(), "TRACEKIT_LEGACY_PROBES=1")
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 256)
	if n, _ := stderr.Read(buf); !strings.Contains(string(buf[:n]), "Tracing") {
		cmd.Process.Kill()
		t.Fatalf("filter did not start: %q", buf[:n])
	}
	ns, err := tracefs.PidNamespace()
	if err != nil {
		t.Fatal(err)
	}
	group := tracefs.Group("filter", ns, cmd.Process.Pid)
	cmd.Process.Kill()
	cmd.Wait()
	events := func() string {
		b, err := os.ReadFile("/sys/kernel/tracing/uprobe_events")
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if n := strings.Count(events(), group+"/"); n != 10 {
		t.Fatalf("after SIGKILL: %d lines of %s, want the 10 sites':\n%s", n, group, events())
	}
	// Any run sweeps them.
	if r := filter(t, "--count", "usdt:"+bin+":tk:plain", "-c", bin+" 1"); r.Status != 0 {
		t.Fatalf("the next run: exit %d: %s", r.Status, r.Stderr)
	}
	if strings.Contains(events(), group) {
		t.Errorf("the next run left %s in place:\n%s", group, events())
	}
}

// --info prints what a file says escaped: a note named "\x1b[2J" (clear
// the screen) or a symbol holding CR LF would drive the terminal or forge
// lines. The fixture's note tk:args and symbol tk_add are renamed in a
// copy, keeping their lengths.
func TestInfoEscapesHostileNames(t *testing.T) {
	privtest.Require(t)
	b, err := os.ReadFile(filepath.Join(fixtures(t), "fx-nopie-O2"))
	if err != nil {
		t.Fatal(err)
	}
	for from, to := range map[string]string{"\x00tk\x00args\x00": "\x00tk\x00\x1b[2J\x00", "\x00tk_add\x00": "\x00tk_\r\nA\x00"} {
		if !bytes.Contains(b, []byte(from)) {
			t.Fatalf("no %q in the fixture", from)
		}
		b = bytes.ReplaceAll(b, []byte(from), []byte(to))
	}
	bin := filepath.Join(t.TempDir(), "hostile")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	r := filter(t, "--info", "usdt:"+bin)
	if r.Status != 0 || strings.ContainsAny(r.Stdout, "\x1b\r") || !strings.Contains(r.Stdout, `:tk:\x1b[2J  1 site`) {
		t.Errorf("--info usdt: exit %d, stdout %q, stderr %q", r.Status, r.Stdout, r.Stderr)
	}
	r = filter(t, "--info", "uprobe:"+bin+":tk_*")
	if r.Status != 0 || strings.ContainsAny(r.Stdout, "\x1b\r") || !strings.Contains(r.Stdout, bin+`:tk_\x0d\x0aA`+"\n") {
		t.Errorf("--info uprobe: exit %d, stdout %q, stderr %q", r.Status, r.Stdout, r.Stderr)
	}
}

// A process's mappings name files the process controls: a FIFO put where a
// mapped file was deleted (under the mapping's name, " (deleted)" or not)
// is never opened, and --info usdt -p ends at once. It hung the old
// binary, which opened it for reading and waited for a writer.
func TestInfoNeverOpensAFIFO(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	// Named sleep: in the guests /bin/sleep is busybox, which runs the
	// applet its name says (as "x" it exited at once, and now and then
	// before the loop below saw it mapped).
	exe := filepath.Join(dir, "sleep")
	b, err := os.ReadFile("/bin/sleep")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, b, 0o755); err != nil {
		t.Fatal(err)
	}
	proc := exec.Command(exe, "30")
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { proc.Process.Kill(); proc.Wait() }()
	// Removed once the process maps it (its exec done).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if maps, _ := os.ReadFile(fmt.Sprintf("/proc/%d/maps", proc.Process.Pid)); strings.Contains(string(maps), exe) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is not mapped by pid %d after 10 s", exe, proc.Process.Pid)
		}
	}
	os.Remove(exe)
	for _, name := range []string{exe, exe + " (deleted)"} {
		if err := syscall.Mkfifo(name, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	out, err := exec.CommandContext(ctx, tooltest.Tool(t, "filter"), "--info", "usdt", "-p", strconv.Itoa(proc.Process.Pid)).CombinedOutput()
	var ee *exec.ExitError
	// A FIFO opened would hang the tool until the context's 10 s: 8 s
	// tell the two apart on a loaded machine (the guests' host).
	if took := time.Since(start); took > 8*time.Second || !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "maps no file with USDT probes") {
		t.Errorf("after %v: %v: %s", took, err, out)
	}
}

// fdKinds counts a process's BPF links and perf events by their fds.
func fdKinds(t *testing.T, pid int) (links, perfEvents int) {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		switch target, _ := os.Readlink(filepath.Join(dir, e.Name())); target {
		case "anon_inode:bpf_link":
			links++
		case "anon_inode:[perf_event]":
			perfEvents++
		}
	}
	return links, perfEvents
}

// tk:many has 300 call sites: every one fires (300 events a loop), and the
// run attaches them as the kernel allows. Where it has uprobe_multi (6.6+)
// a program is one link for all its sites: one link for the plain count,
// 300 for a --where that compares each site's own constant ($100 ..
// $399), and no perf event for any site; those links are closed at once,
// so SIGINT ends the run within seconds (one perf event per site took 30 s
// on a 2-CPU 6.18: the kernel closes those one at a time, each waiting out
// a grace period). Elsewhere, one perf event per site. A one-site probe
// (tk:plain) is the baseline for the fds every run has.
func TestManySitesAttachAsTheKernelAllows(t *testing.T) {
	privtest.Require(t)
	bin := filepath.Join(fixtures(t), "fx-pie-O2")
	multi := perfevent.UprobeMulti()
	type run struct{ count, links, perfEvents int }
	traced := func(probe, where string) run {
		t.Helper()
		const n = 3
		fx := exec.Command(bin, strconv.Itoa(n), "wait")
		in, _ := fx.StdinPipe()
		out, _ := fx.StdoutPipe()
		if err := fx.Start(); err != nil {
			t.Fatal(err)
		}
		defer fx.Wait()
		defer fx.Process.Kill()
		args := []string{"--count", "--json", "-p", strconv.Itoa(fx.Process.Pid), "usdt:" + bin + ":" + probe}
		if where != "" {
			args = append(args, "--where", where)
		}
		cmd := exec.Command(tooltest.Tool(t, "filter"), args...)
		var stdout strings.Builder
		cmd.Stdout = &stdout
		stderr, _ := cmd.StderrPipe()
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill()
		buf := make([]byte, 256)
		if n, _ := stderr.Read(buf); !strings.Contains(string(buf[:n]), "Tracing") {
			t.Fatalf("filter %q did not start: %q", args, buf[:n])
		}
		var r run
		r.links, r.perfEvents = fdKinds(t, cmd.Process.Pid)
		in.Write([]byte("go\n"))
		if n, _ := out.Read(buf); string(buf[:n]) != "fired\n" {
			t.Fatalf("fixture: %q", buf[:n])
		}
		start := time.Now()
		cmd.Process.Signal(os.Interrupt)
		rest, _ := io.ReadAll(stderr)
		cmd.Wait()
		took := time.Since(start)
		t.Logf("%s --where %q: %+v, SIGINT to exit %v", probe, where, r, took.Round(time.Millisecond))
		if multi && took > 5*time.Second {
			t.Errorf("%s --where %q: SIGINT to exit took %v with uprobe_multi, want seconds at most", probe, where, took)
		}
		var rep struct {
			Count *int `json:"count"`
		}
		if err := json.Unmarshal([]byte(stdout.String()), &rep); err != nil || rep.Count == nil {
			t.Fatalf("filter %q: %q (%v), stderr %q", args, stdout.String(), err, rest)
		}
		r.count = *rep.Count
		return r
	}
	base := traced("tk:plain", "")
	if base.count != 3 {
		t.Fatalf("tk:plain: %d events, want 3", base.count)
	}
	for _, tc := range []struct {
		where           string
		count, programs int
	}{
		{"", 900, 1},             // one program reads no argument
		{"arg0 >= 390", 30, 300}, // each site's program holds its constant
	} {
		got := traced("tk:many", tc.where)
		wantLinks, wantPerf := base.links+tc.programs-1, base.perfEvents
		if !multi {
			wantLinks, wantPerf = base.links, base.perfEvents+299
		}
		if got.count != tc.count || got.links != wantLinks || got.perfEvents != wantPerf {
			t.Errorf("tk:many --where %q (uprobe_multi %v): %d events, %d links, %d perf events; want %d, %d, %d (tk:plain's run: %+v)",
				tc.where, multi, got.count, got.links, got.perfEvents, tc.count, wantLinks, wantPerf, base)
		}
	}
}
