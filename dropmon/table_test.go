package dropmon

import (
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/procfs"
)

func TestTableGoldens(t *testing.T) {
	rows := []row{
		{site: site{0xffffffff81e91234, 3}, Count: 12345, Stacks: []stackCount{{7, 12000}, {-14, 345}}},
		{site: site{0xffffffffc0a00100, 2}, Count: 7},
	}
	reason := func(r uint32) string { return map[uint32]string{2: "NOT_SPECIFIED", 3: "NO_SOCKET"}[r] }
	frames := func(id int32) []string {
		if id < 0 {
			return []string{"[stack lost: error -14]"}
		}
		return []string{"sk_skb_reason_drop+0x90", "__udp4_lib_rcv+0x234"}
	}
	for name, syms := range map[string]string{
		"table_symbols": "ffffffff81e91000 T __udp4_lib_rcv\nffffffffc0a00000 t vxlan_rcv\t[vxlan]\n",
		"table_hidden":  "0000000000000000 T __udp4_lib_rcv\n",
	} {
		s, err := procfs.ParseKallsyms(strings.NewReader(syms))
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		writeTable(&b, rows, s, reason, frames)
		golden.Check(t, name, b.String())
	}
}
