package tools

import (
	"regexp"
	"strings"
	"testing"
)

const kallsyms = `ffffffffc0a01000 t udp_tunnel_xmit	[udp_tunnel]
ffffffff81000000 T _stext
ffffffff81e91000 T __udp4_lib_rcv
ffffffff81e90000 t udp_queue_rcv_skb
ffffffff82000000 D some_data
ffffffffc0a00000 T udp_tunnel_sock_release	[udp_tunnel]
ffffffff81e92000 W weak_fn
`

func TestSymbolize(t *testing.T) {
	s, err := ParseKallsyms(strings.NewReader(kallsyms))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr uint64
		want string
	}{
		{0xffffffff81e91234, "__udp4_lib_rcv+0x234"},
		{0xffffffff81e90010, "udp_queue_rcv_skb+0x10"}, // listed after a higher address
		{0xffffffff81e91000, "__udp4_lib_rcv+0x0"},
		{0xffffffff82000010, "weak_fn+0x16e010"}, // data symbols are not code
		{0xffffffffc0a01008, "udp_tunnel_xmit+0x8 [udp_tunnel]"},
		{0xffffffffc0a00100, "udp_tunnel_sock_release+0x100 [udp_tunnel]"},
		{0xffffffff80000000, ""}, // below the first symbol
	} {
		if got := s.Symbolize(tc.addr); got != tc.want {
			t.Errorf("Symbolize(%#x) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}

func TestSymbolizeHidden(t *testing.T) {
	zeroed := regexp.MustCompile(`(?m)^[0-9a-f]{16}`).ReplaceAllString(kallsyms, "0000000000000000")
	s, err := ParseKallsyms(strings.NewReader(zeroed))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Hidden || s.Symbolize(0xffffffff81e91234) != "" {
		t.Errorf("hidden %v, symbol %q", s.Hidden, s.Symbolize(0xffffffff81e91234))
	}
}
