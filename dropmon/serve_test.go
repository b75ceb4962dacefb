package dropmon

import (
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/dropmon/prog"
	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/run"
)

// TestExpositionGoldens serves fixed map contents, the names from a fixed
// kallsyms: drops by function and reason, two offsets of one function
// summed, the locations beyond --serve-top under "other", the fast-path
// cache's counts included, and no address anywhere.
func TestExpositionGoldens(t *testing.T) {
	privtest.Require(t)
	coll := tooltest.Maps(t, map[string]*ebpf.MapSpec{
		"drops": {Type: ebpf.Hash, KeySize: 16, ValueSize: 8, MaxEntries: 64},
		"cache": {Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 24, MaxEntries: 4},
		"lost":  {Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1},
	})
	syms, err := procfs.ParseKallsyms(strings.NewReader("ffffffff81000000 T _stext\nffffffff81100000 T __udp4_lib_rcv\nffffffff81200000 T tcp_v4_rcv\nffffffff81300000 t nf_hook_slow\nffffffff81400000 T sk_stream_kill_queues\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []struct {
		loc    uint64
		reason uint32
		n      uint64
	}{
		{0xffffffff81100040, 2, 41}, {0xffffffff81100080, 2, 1}, {0xffffffff81200010, 3, 7}, {0xffffffff81300020, 2, 5}, {0xffffffff81400010, 9, 2},
	} {
		if err := coll.Maps["drops"].Put(dropKey{Location: d.loc, Reason: d.reason, Stack: prog.NoStack}, d.n); err != nil {
			t.Fatal(err)
		}
	}
	slot := make([]cacheSlot, tooltest.PossibleCPUs(t))
	slot[0] = cacheSlot{Key: dropKey{Location: 0xffffffff81200010, Reason: 3, Stack: prog.NoStack}, Count: 10}
	if err := coll.Maps["cache"].Put(uint32(1), slot); err != nil {
		t.Fatal(err)
	}
	tooltest.PutPerCPU(t, coll.Maps["lost"], uint32(0), 1)
	r := &reporter{coll: coll, reasons: map[uint64]string{2: "NO_SOCKET", 3: "TCP_CSUM", 9: "QUEUE_PURGE"}, hasReason: true}
	c := &collector{r: r, syms: syms, series: run.StickySeries[uint64]{Max: 3}}
	out := tooltest.Exposition(t, c.families())
	if strings.Contains(out, "ffffffff") {
		t.Errorf("an address is exposed:\n%s", out)
	}
	golden.Check(t, "expo", out)
}
