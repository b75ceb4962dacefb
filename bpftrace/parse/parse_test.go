package parse

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sexp writes a tree compactly, with every node's kind and operator, so
// that a test states the shape it wants in one line.
func sexp(n any) string {
	switch n := n.(type) {
	case nil:
		return "-"
	case *Probe:
		var pts []string
		for _, ap := range n.Points {
			pts = append(pts, ap.Provider+":"+strings.Join(ap.Parts, ":"))
		}
		return fmt.Sprintf("(probe [%s] %s %s)", strings.Join(pts, " "), sexp(n.Pred), stmts(n.Body))
	case *ExprStmt:
		return sexp(n.X)
	case *Assign:
		return fmt.Sprintf("(%s %s %s)", n.Op, sexp(n.Target), sexp(n.Value))
	case *If:
		return fmt.Sprintf("(if %s %s %s)", sexp(n.Cond), stmts(n.Then), stmts(n.Else))
	case *Unroll:
		return fmt.Sprintf("(unroll %s %s)", sexp(n.N), stmts(n.Body))
	case *While:
		return fmt.Sprintf("(while %s %s)", sexp(n.Cond), stmts(n.Body))
	case *Jump:
		return n.Kind
	case *Int:
		return fmt.Sprint(n.Value)
	case *Str:
		return fmt.Sprintf("%q", n.Value)
	case *Ident:
		return n.Name
	case *Var:
		return "$" + n.Name
	case *Param:
		return fmt.Sprintf("$%d", n.N)
	case *Map:
		if n.Keys == nil {
			return "@" + n.Name
		}
		return fmt.Sprintf("@%s%s", n.Name, exprs(n.Keys))
	case *Call:
		return fmt.Sprintf("%s%s", n.Name, exprs(n.Args))
	case *Unary:
		return fmt.Sprintf("(%s %s)", n.Op, sexp(n.X))
	case *Binary:
		return fmt.Sprintf("(%s %s %s)", n.Op, sexp(n.L), sexp(n.R))
	case *Ternary:
		return fmt.Sprintf("(? %s %s %s)", sexp(n.Cond), sexp(n.Then), sexp(n.Else))
	case *IncDec:
		if n.Post {
			return fmt.Sprintf("(post%s %s)", n.Op, sexp(n.X))
		}
		return fmt.Sprintf("(pre%s %s)", n.Op, sexp(n.X))
	case *Cast:
		return fmt.Sprintf("(cast %q %s)", n.Type, sexp(n.X))
	case *Field:
		op := "."
		if n.Arrow {
			op = "->"
		}
		return fmt.Sprintf("(%s %s %s)", op, sexp(n.X), n.Name)
	case *Index:
		return fmt.Sprintf("(index %s %s)", sexp(n.X), sexp(n.I))
	case *Tuple:
		return "(tuple " + strings.Trim(exprs(n.Elems), "[]") + ")"
	case *Sizeof:
		if n.Type != nil {
			return fmt.Sprintf("(sizeof %q)", *n.Type)
		}
		return fmt.Sprintf("(sizeof %s)", sexp(n.X))
	}
	return fmt.Sprintf("?%T", n)
}

func stmts(ss []Stmt) string {
	var out []string
	for _, s := range ss {
		out = append(out, sexp(s))
	}
	return "{" + strings.Join(out, "; ") + "}"
}

func exprs(xs []Expr) string {
	var out []string
	for _, x := range xs {
		out = append(out, sexp(x))
	}
	return "[" + strings.Join(out, " ") + "]"
}

func parseSexp(t *testing.T, src string) string {
	t.Helper()
	p, err := Parse("stdin", src, []string{"BPFTRACE_HAVE_BTF"})
	if err != nil {
		t.Fatalf("%q: %v", src, err)
	}
	var out []string
	for _, pr := range p.Probes {
		out = append(out, sexp(pr))
	}
	return strings.Join(out, "\n")
}

// TestOneLiners: programs as bpftrace users write them, each to the tree
// it must give: aliases resolved, C's precedence and associativity, a
// predicate's '/' against division, casts against parentheses.
func TestOneLiners(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{`BEGIN { printf("hello\n"); }`,
			`(probe [BEGIN:] - {printf["hello\n"]})`},
		{`t:syscalls:sys_enter_openat { printf("%s %s\n", comm, str(args->filename)); }`,
			`(probe [tracepoint:syscalls:sys_enter_openat] - {printf["%s %s\n" comm str[(-> args filename)]]})`},
		{`tracepoint:raw_syscalls:sys_enter { @[comm] = count(); }`,
			`(probe [tracepoint:raw_syscalls:sys_enter] - {(= @[comm] count[])})`},
		{`tracepoint:syscalls:sys_exit_read /args->ret/ { @[comm] = sum(args->ret); }`,
			`(probe [tracepoint:syscalls:sys_exit_read] (-> args ret) {(= @[comm] sum[(-> args ret)])})`},
		{`tracepoint:syscalls:sys_exit_read { @bytes = hist(args.ret); }`,
			`(probe [tracepoint:syscalls:sys_exit_read] - {(= @bytes hist[(. args ret)])})`},
		{`kprobe:vfs_read { @start[tid] = nsecs; } kretprobe:vfs_read /@start[tid]/ { @ns[comm] = hist(nsecs - @start[tid]); delete(@start[tid]); }`,
			"(probe [kprobe:vfs_read] - {(= @start[tid] nsecs)})\n(probe [kretprobe:vfs_read] @start[tid] {(= @ns[comm] hist[(- nsecs @start[tid])]); delete[@start[tid]]})"},
		{`profile:hz:99 /pid == 189/ { @[ustack] = count(); }`,
			`(probe [profile:hz:99] (== pid 189) {(= @[ustack] count[])})`},
		{`interval:s:1 { print(@x); clear(@x); } END { exit(); }`,
			"(probe [interval:s:1] - {print[@x]; clear[@x]})\n(probe [END:] - {exit[]})"},
		{`U:/usr/lib/libc.so.6:libc:setjmp, u:/bin/bash:readline, ur:"/odd path/x":f { @[probe, func] = count() }`,
			`(probe [usdt:/usr/lib/libc.so.6:libc:setjmp uprobe:/bin/bash:readline uretprobe:/odd path/x:f] - {(= @[probe func] count[])})`},
		{"kprobe:lookup_fast,\n kprobe:lookup_fast.constprop.* { @x++; ++@y; $a += 2 << 1; }",
			`(probe [kprobe:lookup_fast kprobe:lookup_fast.constprop.*] - {(post++ @x); (pre++ @y); (+= $a (<< 2 1))})`},
		// Precedence: * over +, + over <<, << over <, < over ==, == over &,
		// & over ^ over |, && over ||, then ?:, right to left.
		{`BEGIN { $x = 1 + 2 * 3 << 1 < 5 == 1 & 3 ^ 4 | 5 && 6 || 7 ? 8 : 9 ? 10 : 11; }`,
			`(probe [BEGIN:] - {(= $x (? (|| (&& (| (^ (& (== (< (<< (+ 1 (* 2 3)) 1) 5) 1) 3) 4) 5) 6) 7) 8 (? 9 10 11)))})`},
		{`BEGIN { $x = 10 - 4 - 3; $y = -$x * ~1; $z = !(1 - 1); }`,
			`(probe [BEGIN:] - {(= $x (- (- 10 4) 3)); (= $y (* (- $x) (~ 1))); (= $z (! (- 1 1)))})`},
		// A predicate ends at a '/' outside brackets; inside, it divides.
		{`t:a:b /(nsecs / 1000) > 5 && $1 != 0/ { @ = count(); }`,
			`(probe [tracepoint:a:b] (&& (> (/ nsecs 1000) 5) (!= $1 0)) {(= @ count[])})`},
		{`t:a:b /@s[tid] ? (nsecs - @s[tid]) / 1000 > 1 : 0/ { }`,
			`(probe [tracepoint:a:b] (? @s[tid] (> (/ (- nsecs @s[tid]) 1000) 1) 0) {})`},
		// Casts against parentheses.
		{`kprobe:tcp_connect { $sk = ((struct sock *) arg0); $f = $sk->__sk_common.skc_family; $u = (uint32)$f; $p = (sock **)arg1; $q = (pid) * 2; $c = (unsigned long)$u; }`,
			`(probe [kprobe:tcp_connect] - {(= $sk (cast "struct sock *" arg0)); (= $f (. (-> $sk __sk_common) skc_family)); (= $u (cast "uint32" $f)); (= $p (cast "sock **" arg1)); (= $q (* pid 2)); (= $c (cast "unsigned long" $u))})`},
		{`BEGIN { if (1) { $a = 1 } else if ($b) { $a = 2; } else { $a = 3 } unroll(2) { $a++ } while ($a < 5) { $a++; if ($a == 4) { break } } }`,
			`(probe [BEGIN:] - {(if 1 {(= $a 1)} {(if $b {(= $a 2)} {(= $a 3)})}); (unroll 2 {(post++ $a)}); (while (< $a 5) {(post++ $a); (if (== $a 4) {break} {})})})`},
		{`BEGIN { @t = (1, "a"); $v = @t.0; $s = sizeof(struct task_struct); $n = sizeof($v); $i = $arr[2]; $d = *$p; $m = 1e6 + 0x10 + 010; }`,
			`(probe [BEGIN:] - {(= @t (tuple 1 "a")); (= $v (. @t 0)); (= $s (sizeof "struct task_struct")); (= $n (sizeof $v)); (= $i (index $arr 2)); (= $d (* $p)); (= $m (+ (+ 1000000 16) 8))})`},
		{`BEGIN { printf("%s\t\"%d\"\x41\101\\", "x", 1) }`,
			`(probe [BEGIN:] - {printf["%s\t\"%d\"AA\\" "x" 1]})`},
		// Comments anywhere, #define and #ifdef, #include recorded.
		{"#!/usr/bin/env bpftrace\n/* a # in a comment\n# is no directive */\n#include <linux/sched.h>\n#define LIMIT 10\n#ifndef BPFTRACE_HAVE_BTF\nstruct x { int y; };\n#else\n#define LOW 2 // two\n#endif\nBEGIN // the start\n{ @ = LIMIT * LOW; /* inline */ }",
			`(probe [BEGIN:] - {(= @ (* 10 2))})`},
	} {
		if got := parseSexp(t, tc.src); got != tc.want {
			t.Errorf("%q:\n got %s\nwant %s", tc.src, got, tc.want)
		}
	}
}

// TestErrors: what bpftrace users mistype gets one line with the place
// and what was wanted, never a panic.
func TestErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{``, `stdin:1:1: no probes: a program is probes with actions, as in: tracepoint:syscalls:sys_enter_read { @[comm] = count(); }`},
		{`tracepoint:syscalls:sys_enter_read`, `stdin:1:35: expected '{' to open the probe's action, found the end of the script`},
		{`kprobs:vfs_read { }`, `stdin:1:1: unknown probe type "kprobs" in "kprobs:vfs_read" (tracepoint, kprobe, uprobe, usdt, profile, interval, ...)`},
		{`BEGIN:x { }`, `stdin:1:1: BEGIN takes nothing after it`},
		{`kprobe { }`, `stdin:1:1: kprobe needs more: such as kprobe:...`},
		{"BEGIN {\n  printf(\"%d\\n\", pid)\n  exit();\n}", `stdin:3:3: expected ';' or '}' after the statement, found 'exit'`},
		{`BEGIN { @x = count( }`, `stdin:1:21: expected an expression, found '}'`},
		{`BEGIN { $x = (1 + 2; }`, `stdin:1:20: expected ',' or ')' in the parentheses, found ';'`},
		{`BEGIN { printf("a) }`, `stdin:1:16: a string opened here is not closed on its line`},
		{`BEGIN { /* }`, `stdin:1:9: a comment opened here is never closed (*/)`},
		{`BEGIN { $x = 1 }}`, `stdin:1:17: expected a probe (such as tracepoint:syscalls:sys_enter_read), found "}"`},
		{`BEGIN { $x = 1`, `stdin:1:7: a block opened here is never closed ('}')`},
		{`BEGIN { pid = 1; }`, `stdin:1:13: only a map (@name) or a variable ($name) takes '='`},
		{`BEGIN { @x[] = 1; }`, `stdin:1:9: @x[]: a key goes between the brackets`},
		{`BEGIN { $x = 99999999999999999999; }`, `stdin:1:14: 99999999999999999999 is more than 64 bits`},
		{`BEGIN { $x = 1e30; }`, `stdin:1:14: 1e30 is more than 64 bits`},
		{`BEGIN { $x = 12ab; }`, `stdin:1:14: bad number "12ab"`},
		{`BEGIN { $x = $0; }`, `stdin:1:14: bad positional parameter $0: $1 to $1024`},
		{`BEGIN { $x = "\q"; }`, `stdin:1:15: unknown escape \q`},
		{`BEGIN { $x = 1 # 2; }`, `stdin:1:16: unexpected character "#"`},
		{`t:a:b /pid == 1 { }`, `stdin:1:17: expected '/' to end the predicate, found '{'`},
		{"#if 1\n#endif\nBEGIN {}", `stdin:1:1: #if is not taken (no expressions in the preprocessor here): use #ifdef or #ifndef`},
		{"#define MAX(a, b) a\nBEGIN {}", `stdin:1:1: #define MAX: macros with arguments are not taken, only #define NAME value`},
		{"#ifdef X\nBEGIN {}", `stdin:1:1: #ifdef without its #endif`},
		{"#endif\nBEGIN {}", `stdin:1:1: #endif without its #ifdef`},
		{"#pragma once\nBEGIN {}", `stdin:1:1: unknown directive #pragma`},
		{"#define A A\nBEGIN { $x = A; }", `stdin:2:14: macro A expands too deep (a macro that names itself?)`},
		{`BEGIN { $x = ` + strings.Repeat("(", 200) + `1` + strings.Repeat(")", 200) + `; }`, `stdin:1:63: nested more than 100 deep`},
	} {
		_, err := Parse("stdin", tc.src, []string{"BPFTRACE_HAVE_BTF"})
		if err == nil || err.Error() != tc.want {
			t.Errorf("%q:\n got %v\nwant %s", tc.src, err, tc.want)
		}
	}
}

// TestTools: each of the tools Debian's bpftrace ships (/usr/sbin/*.bt)
// parses, unmodified, with BTF's branch of their #ifndef; a few are
// checked for their shape. CI (CI=true, on the host, where make test
// installs bpftrace) fails without them; elsewhere they may be missing.
func TestTools(t *testing.T) {
	files, _ := filepath.Glob("/usr/sbin/*.bt")
	if len(files) == 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("no /usr/sbin/*.bt: make test installs Debian's bpftrace, whose tools these are")
		}
		t.Skip("no /usr/sbin/*.bt (Debian's bpftrace is not installed)")
	}
	probes := map[string]int{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		p, err := Parse(filepath.Base(f), string(b), []string{"BPFTRACE_HAVE_BTF"})
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		probes[filepath.Base(f)] = len(p.Probes)
	}
	t.Logf("%d tools parsed", len(probes))
	if b, err := os.ReadFile("/usr/sbin/biolatency.bt"); err == nil {
		if got, want := parseSexp(t, string(b)), strings.Join([]string{
			`(probe [BEGIN:] - {printf["Tracing block device I/O... Hit Ctrl-C to end.\n"]})`,
			`(probe [kprobe:blk_account_io_start kprobe:__blk_account_io_start] - {(= @start[arg0] nsecs)})`,
			`(probe [kprobe:blk_account_io_done kprobe:__blk_account_io_done] @start[arg0] {(= @usecs hist[(/ (- nsecs @start[arg0]) 1000)]); delete[@start[arg0]]})`,
			`(probe [END:] - {clear[@start]})`,
		}, "\n"); got != want {
			t.Errorf("biolatency.bt:\n got %s\nwant %s", got, want)
		}
	}
}

// FuzzParse: any input parses or is refused with a message, in bounded
// time, never a panic.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		`BEGIN { printf("%d\n", 1 + 2 * 3); exit(); }`,
		`t:a:b /args->x > 1/ { @[comm, pid] = hist(args.y); }`,
		"#ifdef X\n#define Y 1\n#else\n#endif\nk:f { $a = (struct s *)arg0; $b = $a->c.d[1]++; }",
		`u:/bin/sh:f, ur:"/a b":g { if ($1) { @x = count() } else { unroll(3) { @y++ } } }`,
		`BEGIN { $x = sizeof(int); $t = (1, "2"); $v = $t.1 ? -1 : ~2; }`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		start := time.Now()
		p, err := Parse("fuzz", src, []string{"BPFTRACE_HAVE_BTF"})
		if err == nil && len(p.Probes) == 0 {
			t.Fatal("a program without probes taken")
		}
		if err != nil && (err.Error() == "" || strings.Contains(err.Error(), "\n")) {
			t.Fatalf("not one line: %q", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("%v for %d bytes", d, len(src))
		}
	})
}
