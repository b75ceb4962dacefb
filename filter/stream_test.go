package filter

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/terminal"
)

// referenceLine is the event line as fmt printed it before the printer
// built lines by hand: the printer must print the same bytes.
func referenceLine(p *printer, smp perfevent.Sample) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%16s-%-7d [%03d] %.6f: %s:", terminal.Printable(p.comm(smp.Pid)), smp.Tid, smp.CPU, float64(smp.Time)/1e9, p.ev.shortName())
	for _, f := range p.format.Fields {
		if f.Common || strings.HasPrefix(f.Name, "__probe") {
			continue
		}
		if !f.DataLoc && f.ArrayLen == 0 && f.Size <= 8 && f.Offset+f.Size <= len(smp.Raw) {
			u, _, _ := intField(f, smp.Raw[f.Offset:f.Offset+f.Size])
			name := ""
			if names := p.format.Symbolic[f.Name]; names != nil {
				name = names[u]
			} else if textFields[f.Name] && f.Size == 8 && u >= 1<<63 {
				name = p.syms.Symbolize(u)
			}
			if name != "" {
				fmt.Fprintf(&b, " %s=%s", f.Name, terminal.Printable(name))
				continue
			}
		}
		_, text := fieldValue(f, smp.Raw, p.pointers[f.Name])
		str := f.DataLoc || f.ArrayLen > 0 && strings.HasPrefix(f.Type, "char")
		switch {
		case str && text == "" && f.Offset+f.Size <= len(smp.Raw):
			fmt.Fprintf(&b, " %s=\"\"", f.Name)
		case text != "":
			fmt.Fprintf(&b, " %s=%s", f.Name, terminal.Printable(text))
		}
	}
	return b.String() + "\n"
}

// testKallsyms are a few kernel symbols, for the fields printed by symbol.
const testKallsyms = `ffffffff81000000 T _stext
ffffffff81c00000 T kfree_skb_reason
ffffffff81c01000 t udp_queue_rcv_one_skb
ffffffffc0000000 t nf_hook_slow	[nf_tables]
`

// TestTextLineMatchesFmt prints random records of several formats (numbers
// signed and not, pointers, char arrays, __data_loc strings, hostile bytes,
// wide and narrow names, CPUs and tids of every width) and compares each
// line with fmt's.
func TestTextLineMatchesFmt(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 9))
	comms := []string{"sh", "a-very-long-task-name", "é名前", "x\x1b[31my", "", "0123456789abcdef"}
	syms, err := procfs.ParseKallsyms(strings.NewReader(testKallsyms))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sys_enter_openat.6.18.format", "sched_switch.6.18.format", "netif_receive_skb.6.18.format", "kfree_skb.6.18.format", "block_rq_issue.6.18.format"} {
		format := tooltest.Format(t, name)
		ev := event{kind: "tracepoint", group: "g", name: strings.Split(name, ".")[0]}
		for i := 0; i < 2000; i++ {
			var out bytes.Buffer
			p := &printer{s: &run.Session{Opts: &run.Common{}}, ev: ev, format: format, pointers: map[string]bool{"skbaddr": i%2 == 0},
				comms: map[uint32]string{7: comms[i%len(comms)]}, out: bufio.NewWriter(&out), syms: syms, symsRead: true}
			raw := make([]byte, 64+r.IntN(64))
			for j := range raw {
				raw[j] = byte(r.Uint32())
				if r.IntN(4) == 0 {
					raw[j] = 'a' + byte(r.IntN(26))
				}
			}
			// Some __data_loc strings that fit.
			for _, f := range format.Fields {
				if f.DataLoc && f.Offset+4 <= len(raw) && r.IntN(2) == 0 {
					off, n := 48+r.IntN(8), r.IntN(12)
					raw[f.Offset], raw[f.Offset+1], raw[f.Offset+2], raw[f.Offset+3] = byte(off), 0, byte(n), 0
				}
			}
			smp := perfevent.Sample{Pid: 7, Tid: uint32(r.Uint64N(1 << (r.IntN(31) + 1))), CPU: uint32(r.IntN(300)), Time: r.Uint64N(1 << 50), Raw: raw}
			p.print(smp)
			p.out.Flush()
			if want := referenceLine(p, smp); out.String() != want {
				t.Fatalf("%s:\n got %q\nwant %q", name, out.String(), want)
			}
		}
	}
}
