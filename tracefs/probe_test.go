package tracefs

import (
	"bufio"
	"fmt"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/golden"
)

var goodSymbols = []string{"ksys_write", "__x64_sys_write", "sys_write", "tcp_v4_rcv+0x10", "foo.isra.0", "bar.cold+12", "_x"}

var evilSymbols = []string{
	"", "ksys_write x", "ksys_write\n-:kprobes/other", "a\nb", "grp:ev", "a/b", "../x", "x+", "x+0xg",
	"x+-1", "9abc", " ksys_write", "ksys_write ", "ksys_write\x00", "ksys_write%", "$arg1", "x;y", "x`y`",
	strings.Repeat("a", 300),
}

func TestValidateSymbol(t *testing.T) {
	for _, s := range goodSymbols {
		if err := ValidateSymbol(s); err != nil {
			t.Errorf("%q rejected: %v", s, err)
		}
	}
	for _, s := range evilSymbols {
		if err := ValidateSymbol(s); err == nil {
			t.Errorf("%q accepted", s)
		}
	}
}

// FuzzValidateSymbol: whatever passes can never carry a second command,
// an argument, a group or a path into kprobe_events.
// FuzzValidateSymbol: whatever passes can never carry a second command,
// an argument, a group or a path into kprobe_events.
func FuzzValidateSymbol(f *testing.F) {
	for _, s := range append(goodSymbols, evilSymbols...) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidateSymbol(s) != nil {
			return
		}
		if strings.ContainsAny(s, " \t\n\r\x00:/=%$;`'\"\\") || s == "" {
			t.Fatalf("accepted %q", s)
		}
		line, err := Probe{Symbol: s}.Line("tk_fuzz_1_1", "p1")
		if err != nil || strings.Count(line, "\n") != 0 || strings.Count(line, " ") != 1 {
			t.Fatalf("line %q, %v", line, err)
		}
	})
}

var evilPaths = []string{"", "bin/true", "/bin/true x", "/bin/true\n-:g/e", "/a:0x10", "/a(0x1)", "/a%b", "/a\\b", "/a\x00", "/a\x7f", "/" + strings.Repeat("a", 5000)}

// FuzzValidatePath: whatever passes is one argument of one line, with
// nothing the kernel would read as an offset or a semaphore.
func FuzzValidatePath(f *testing.F) {
	for _, s := range append([]string{"/bin/true", "/usr/lib/x86_64-linux-gnu/libc.so.6", "/opt/a-b+c@1,2=3~"}, evilPaths...) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if ValidatePath(s) != nil {
			return
		}
		line, err := Probe{Type: Uprobe, Path: s, Offset: 16}.Line("tk_fuzz_1_1", "p1")
		if err != nil || strings.Count(line, "\n") != 0 || strings.Count(line, " ") != 1 || strings.Count(line, ":") != 2 || strings.ContainsAny(s, "()") {
			t.Fatalf("line %q, %v", line, err)
		}
	})
}

// TestProbeLines pins the lines written to kprobe_events and uprobe_events.
func TestProbeLines(t *testing.T) {
	var b strings.Builder
	for _, tc := range []struct {
		group, event string
		p            Probe
	}{
		{"tk_writesize_4026531836_42", "p1", Probe{Symbol: "ksys_write"}},
		{"tk_writesize_4026531836_42", "p2", Probe{Symbol: "__x64_sys_write", Ret: true}},
		{"tk_filter_4026531836_7", "p1", Probe{Symbol: "ip_send_skb+0x10", Args: []string{"skb=%si:x64", "len=%dx:u32"}}},
		{"tk_filter_4026531836_7", "p2", Probe{Symbol: "ksys_write", Ret: true, Args: []string{"ret=$retval:s64"}}},
		{"tk_filter_4026531836_7", "p3", Probe{Type: Uprobe, Path: "/usr/bin/python3.11", Offset: 0x1a2b}},
		{"tk_filter_4026531836_7", "p4", Probe{Type: Uprobe, Path: "/bin/bash", Offset: 0x4f2a0, Ret: true}},
		{"tk_filter_4026531836_7", "p5", Probe{Type: Uprobe, Path: "/usr/lib/libx.so", Offset: 0x10, RefCtrOffset: 0x2040}},
		{"tk_filter_4026531836_7", "p6", Probe{Symbol: "ip_send_skb", Args: []string{"net=%x0:x64", "skb=%x1:x64"}}}, // arm64
		{"tk_filter_4026531836_7", "p7", Probe{Symbol: "ip_send_skb", Args: []string{"net=%a0:x64", "skb=%a1:x64"}}}, // riscv64
		{"tk_filter_4026531836_7", "p8", Probe{Symbol: "ip_send_skb", Args: []string{"net=%r0:x32", "skb=%r1:x32"}}}, // 32-bit ARM
	} {
		line, err := tc.p.Line(tc.group, tc.event)
		if err != nil {
			t.Fatalf("%v: %v", tc.p, err)
		}
		fmt.Fprintf(&b, "%-36s %s\n", tc.p, line)
	}
	golden.Check(t, "probe_lines", b.String())

	for _, bad := range [][2]string{{"tk/x", "p1"}, {"tk", "p 1"}, {"tk", ""}} {
		if _, err := (Probe{Symbol: "ksys_write"}).Line(bad[0], bad[1]); err == nil {
			t.Errorf("group %q event %q accepted", bad[0], bad[1])
		}
	}
	for _, bad := range []Probe{
		{Symbol: "ksys_write", Args: []string{"x=%di:x64 y"}},
		{Symbol: "ksys_write", Args: []string{"x=%x8:x64"}},
		{Symbol: "ksys_write", Args: []string{"x=%a8:x64"}},
		{Symbol: "ksys_write", Args: []string{"x=%r4:x32"}},
		{Symbol: "ksys_write", Args: []string{"x=%s0:x64"}},
		{Symbol: "ksys_write", Args: []string{"x=%x1:x64\n-:kprobes/other"}},
		{Type: Uprobe, Symbol: "main", Path: "/bin/true"},
		{Path: "/bin/true", Symbol: "x"},
		{Type: 7, Symbol: "x"},
	} {
		if line, err := bad.Line("tk", "p1"); err == nil {
			t.Errorf("%+v accepted: %q", bad, line)
		}
	}
	for _, p := range evilPaths {
		if err := ValidatePath(p); err == nil {
			t.Errorf("path %q accepted", p)
		}
	}
	if n, off := SplitSymbol("tcp_v4_rcv+0x10"); n != "tcp_v4_rcv" || off != 16 {
		t.Errorf("SplitSymbol: %q %d", n, off)
	}
}

func TestParseProbeListAndOwnership(t *testing.T) {
	in := `p:kprobes/myprobe do_sys_open dfd=%ax
p:tk_writesize_4026531836_123/p1 ksys_write
r:tk_filter_4026531836_77/p2 ip_send_skb
p:tk_notours/p1 x
`
	got := parseProbeList(Kprobe, bufio.NewScanner(strings.NewReader(in)))
	if len(got) != 4 || got[1] != (ProbeEvent{Kprobe, "tk_writesize_4026531836_123", "p1"}) || got[0].Group != "kprobes" {
		t.Fatalf("got %+v", got)
	}
	const ns = 4026531836
	dead := func(int) bool { return false }
	for group, want := range map[string]bool{
		"tk_writesize_4026531836_123": true,
		"tk_filter_4026531836_77":     true,
		"tk_filter_4026532999_77":     false, // another pid namespace: cannot be judged
		"tk_writesize_123":            false, // no namespace in the name: cannot be judged
		"kprobes":                     false,
		"tk_notours":                  false,
		"tk_a_b_1_2":                  false,
	} {
		if got := stale(group, ns, dead); got != want {
			t.Errorf("stale(%s) = %v, want %v", group, got, want)
		}
	}
	if stale("tk_writesize_4026531836_123", ns, func(pid int) bool { return pid == 123 }) {
		t.Error("a live owner's group was judged stale")
	}
	if g := Group("writesize", ns, 99); g != "tk_writesize_4026531836_99" {
		t.Errorf("Group = %q", g)
	}
}
