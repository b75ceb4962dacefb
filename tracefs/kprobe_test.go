package tracefs

import (
	"bufio"
	"strings"
	"testing"
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
		line, err := ProbeLine("tk_fuzz_1", "p1", s, false)
		if err != nil || strings.Count(line, "\n") != 0 || strings.Count(line, " ") != 1 {
			t.Fatalf("line %q, %v", line, err)
		}
	})
}

func TestProbeLines(t *testing.T) {
	for _, tc := range []struct {
		group, event, sym string
		ret               bool
		want              string
	}{
		{"tk_writesize_42", "p1", "ksys_write", false, "p:tk_writesize_42/p1 ksys_write"},
		{"tk_writesize_42", "p2", "__x64_sys_write", true, "r:tk_writesize_42/p2 __x64_sys_write"},
		{"tk_filter_7", "p1", "ip_send_skb+0x10", false, "p:tk_filter_7/p1 ip_send_skb+0x10"},
	} {
		got, err := ProbeLine(tc.group, tc.event, tc.sym, tc.ret)
		if err != nil || got != tc.want {
			t.Errorf("ProbeLine(%q, %q, %q, %v) = %q, %v; want %q", tc.group, tc.event, tc.sym, tc.ret, got, err, tc.want)
		}
	}
	for _, bad := range [][2]string{{"tk/x", "p1"}, {"tk", "p 1"}, {"tk", ""}} {
		if _, err := ProbeLine(bad[0], bad[1], "ksys_write", false); err == nil {
			t.Errorf("group %q event %q accepted", bad[0], bad[1])
		}
	}
	if n, off := SplitSymbol("tcp_v4_rcv+0x10"); n != "tcp_v4_rcv" || off != 16 {
		t.Errorf("SplitSymbol: %q %d", n, off)
	}
}

func TestParseProbeListAndOwnership(t *testing.T) {
	in := `p:kprobes/myprobe do_sys_open dfd=%ax
p:tk_writesize_123/p1 ksys_write
r:tk_filter_77/p2 ip_send_skb
p:tk_notours/p1 x
`
	got := parseProbeList(bufio.NewScanner(strings.NewReader(in)))
	if len(got) != 4 || got[1] != (ProbeEvent{"tk_writesize_123", "p1"}) || got[0].Group != "kprobes" {
		t.Fatalf("got %+v", got)
	}
	for group, owned := range map[string]string{"tk_writesize_123": "123", "tk_filter_77": "77", "kprobes": "", "tk_notours": "", "tk_a_b_1x": ""} {
		m := ownedGroup.FindStringSubmatch(group)
		if (m == nil) != (owned == "") || m != nil && m[1] != owned {
			t.Errorf("%s: %v", group, m)
		}
	}
	if g := Group("writesize", 99); g != "tk_writesize_99" {
		t.Errorf("Group = %q", g)
	}
}
