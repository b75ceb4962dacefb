package check

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/bpftrace/parse"
)

// consts stands in for the kernel's BTF and the headers' macros.
func consts(name string) bool {
	switch name {
	case "AF_INET", "AF_INET6", "TCP_CLOSE", "TASK_RUNNING":
		return true
	}
	return false
}

func checkSrc(src string, opt Options) error {
	p, err := parse.Parse("stdin", src, []string{"BPFTRACE_HAVE_BTF"})
	if err != nil {
		return err
	}
	if opt.Const == nil {
		opt.Const = consts
	}
	return Check("stdin", p, opt)
}

// TestTaken: programs bpftrace takes pass, whatever order their maps are
// assigned and read in.
func TestTaken(t *testing.T) {
	for _, src := range []string{
		`BEGIN { printf("%-8s %6d %s\n", comm, pid, "x"); exit(); }`,
		`tracepoint:syscalls:sys_exit_read /args->ret > 0/ { @bytes[comm] = hist(args->ret); @n = count(); @s[pid, tid] = sum(args->ret); }`,
		`kprobe:vfs_read { @start[tid] = nsecs; } kretprobe:vfs_read /@start[tid]/ { @ns = lhist(nsecs - @start[tid], 0, 1000, 100); delete(@start[tid]); } END { clear(@start); print(@ns); }`,
		// A map read in an earlier probe than the one that assigns it.
		`tracepoint:a:b /@on/ { @[kstack(perf, 5), ustack] = count(); } BEGIN { @on = 1; }`,
		`uprobe:/bin/sh:f { $a = arg0; $a += 2; $a++; if ($a > 3) { @x = $a ? 1 : 2; } else { @x = 3; } printf("%s %s\n", func, probe); }`,
		`kretprobe:f { @[retval] = count(); @t = (1, "a"); $s = str(retval, 16); if ($s == "x") { print(@t); } }`,
		`kprobe:tcp_connect { $f = AF_INET; @[ntop($f, arg1)] = count(); }`,
		`profile:hz:99 { @[cpu] = count(); } interval:ms:100 { print(@); zero(@); } software:cpu-clock:1000 { } hardware:cache-misses { }`,
		`BEGIN { system("echo %d", 1); signal(9); }`,
	} {
		opt := Options{Unsafe: true}
		if err := checkSrc(src, opt); err != nil {
			t.Errorf("%q: %v", src, err)
		}
	}
}

// TestRefused: each fault, in one line at its place. The first group is
// what bpftrace 0.17 itself refuses (its words differ: "Undefined map",
// "Type mismatch for @x", "should be directly assigned to a map", ...).
func TestRefused(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{`BEGIN { @x = count(); if (@x > 1) { exit(); } }`, `stdin:1:27: @x holds count(), which is printed, not read`},
		{`BEGIN { @x = 1; @x = "a"; }`, `stdin:1:17: @x holds an integer, and is assigned a string here`},
		{`BEGIN { @x[1] = 1; @x[1, 2] = 2; }`, `stdin:1:20: @x has 2 keys here, 1 key at 1:9`},
		{`BEGIN { printf("%d %d\n", 1); }`, `stdin:1:9: printf(): the format has 2 conversions and 1 arguments follow it`},
		{`BEGIN { $x = $y + 1; }`, `stdin:1:14: $y is used before it is assigned`},
		{`BEGIN { @y = @x + 1; }`, `stdin:1:14: @x is read but never assigned`},
		{`BEGIN { count(); }`, `stdin:1:9: count() is a map's value: write @name = count(...)`},
		{`BEGIN { $x = args->foo; }`, `stdin:1:14: args is not in BEGIN probes (BEGIN): only tracepoint, kfunc, kretfunc, rawtracepoint`},
		{`BEGIN { $x = retval; }`, `stdin:1:14: retval is not in BEGIN probes (BEGIN): only kretprobe, uretprobe, kretfunc`},
		{`BEGIN { $x = FOO; }`, `stdin:1:14: unknown name "FOO": not a builtin (pid, comm, args, ...), nor a constant of the kernel's`},
		{`BEGIN { system("ls"); }`, `stdin:1:9: system() acts on the system: it is taken only with --unsafe`},
		{`BEGIN { $x = 1; $x = "s"; }`, `stdin:1:17: $x holds an integer, and is assigned a string here`},
		{`BEGIN { @x[1] = 1; $n = 2; print(@x, $n); }`, `stdin:1:38: print()'s top and div are integer literals`},
		// And what the tree alone shows is wrong.
		{`tracepoint:sys_enter_read { }`, `stdin:1:1: tracepoint:sys_enter_read: tracepoint probes are written tracepoint:CATEGORY:EVENT`},
		{`profile:99 { }`, `stdin:1:1: profile:99: profile probes are written profile:UNIT:N, UNIT hz, s, ms or us and N a positive number`},
		{`interval:m:1 { }`, `stdin:1:1: interval:m:1: interval probes are written interval:UNIT:N, UNIT hz, s, ms or us and N a positive number`},
		{`watchpoint:0x10:8:w { }`, `stdin:1:1: watchpoint:0x10:8:w: watchpoint probes are not taken`},
		{`kprobe:f, tracepoint:a:b { @[arg0] = count(); }`, `stdin:1:30: arg0 is not in tracepoint probes (tracepoint:a:b): only kprobe, uprobe, usdt`},
		{`kprobe:f { @[arg6] = count(); }`, `stdin:1:14: arg6: the arguments in registers are arg0 to arg5`},
		{`BEGIN { @x = hist(); }`, `stdin:1:14: hist() takes 1 argument, not 0`},
		{`BEGIN { @x = lhist(1, 2); }`, `stdin:1:14: lhist() takes 4 arguments, not 2`},
		{`BEGIN { $x = count(); }`, `stdin:1:14: count() is a map's value: write @name = count(...)`},
		{`BEGIN { @x += count(); }`, `stdin:1:15: count() is a map's value: write @name = count(...)`},
		{`BEGIN { @x = count(); @x = sum(1); }`, `stdin:1:23: @x holds count(), and is assigned sum() here`},
		{`BEGIN { frobnicate(1); }`, `stdin:1:9: unknown function frobnicate()`},
		{`BEGIN { printf("%d\n", comm); }`, `stdin:1:24: printf(): %d takes an integer, not a string`},
		{`BEGIN { printf("%y %i\n", 1); }`, `stdin:1:9: printf(): the format has 0 conversions and 1 arguments follow it`}, // text to bpftrace
		{`BEGIN { printf("%s\n", pid); }`, `stdin:1:24: printf(): %s takes a string, not an integer`},
		{`BEGIN { printf("%-8lld %5.2s %p\n", comm, comm, 1); }`, `stdin:1:37: printf(): %d takes an integer, not a string`},
		{`BEGIN { printf(comm); }`, `stdin:1:16: printf()'s first argument is its format, a string in quotes`},
		{`BEGIN { @x[1] = 1; clear(@x[1]); }`, `stdin:1:26: clear() takes a whole map: @x, not one of its elements`},
		{`BEGIN { @x[1] = 1; delete(@x); }`, `stdin:1:27: delete() takes one element of @x: @x[key]`},
		{`BEGIN { delete(1); }`, `stdin:1:16: delete() takes a map (@name)`},
		{`BEGIN { @x = kstack(foo); }`, `stdin:1:21: kstack() takes a mode (perf, bpftrace, raw) and a number of frames (1 to 1024)`},
		{`BEGIN { unroll(0) { } }`, `stdin:1:9: unroll takes a number from 1 to 100`},
		{`BEGIN { if (comm) { } }`, `stdin:1:13: a condition is an integer, not a string`},
		{`BEGIN { $x = comm + 1; }`, `stdin:1:14: '+' takes integers, not a string`},
		{`BEGIN { $x = 1 ? comm : 2; }`, `stdin:1:14: the branches of '?' are a string and an integer: one kind, both`},
		{`BEGIN { @x = "a"; @x++; }`, `stdin:1:19: '++' takes an integer, and @x holds a string`},
		{`BEGIN { $t = (1, count()); }`, `stdin:1:18: count() is a map's value: write @name = count(...)`},
		{`BEGIN { @[count()] = 1; }`, `stdin:1:11: count() is a map's value: write @name = count(...)`},
	} {
		err := checkSrc(tc.src, Options{})
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n got %v\nwant %s", tc.src, err, tc.want)
		}
	}
}

// TestTools: Debian's 38 tools pass (the constants they name: AF_INET
// and the like, the kernel's enums), but for the tree-level facts the
// kernel decides later.
func TestTools(t *testing.T) {
	files, _ := filepath.Glob("/usr/sbin/*.bt")
	if len(files) == 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("no /usr/sbin/*.bt: make test installs Debian's bpftrace, whose tools these are")
		}
		t.Skip("no /usr/sbin/*.bt (Debian's bpftrace is not installed)")
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p, err := parse.Parse(filepath.Base(f), string(b), []string{"BPFTRACE_HAVE_BTF"})
		if err == nil {
			err = Check(filepath.Base(f), p, Options{Const: func(string) bool { return true }})
		}
		if err != nil {
			t.Errorf("%v", err)
		}
	}
}

// FuzzCheck: any program that parses is checked or refused in one line,
// never a panic.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{
		`BEGIN { @x[1] = count(); print(@x); clear(@x); delete(@x[1]); }`,
		`kprobe:f /arg0/ { $a = arg1; $a += 1; @[kstack(perf, 3)] = hist($a); printf("%d %s\n", $a, comm); }`,
		`t:a:b { @m = args->x ? str(args->y) : "z"; if (@m == "z") { @n++ } }`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		p, err := parse.Parse("fuzz", src, nil)
		if err != nil {
			return
		}
		if err := Check("fuzz", p, Options{Const: consts}); err != nil && (err.Error() == "" || strings.ContainsRune(err.Error(), '\n')) {
			t.Fatalf("not one line: %q", err)
		}
	})
}
