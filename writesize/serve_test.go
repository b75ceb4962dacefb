package writesize

import (
	"testing"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
)

// TestExpositionGoldens serves fixed map contents: the histogram of all
// writes, and with -P one per task name (two processes of one name summed,
// a hostile name escaped, the names beyond the bound under "other").
func TestExpositionGoldens(t *testing.T) {
	privtest.Require(t)
	all := tooltest.Maps(t, map[string]*ebpf.MapSpec{
		"hist": {Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 65},
	})
	tooltest.PutPerCPU(t, all.Maps["hist"], uint32(1), 2)     // 0 and 1 byte
	tooltest.PutPerCPU(t, all.Maps["hist"], uint32(10), 5, 7) // 512 to 1023
	tooltest.PutPerCPU(t, all.Maps["hist"], uint32(40), 1)    // above the last bucket
	c := &collector{r: &reader{coll: all}}
	golden.Check(t, "expo_all", tooltest.Exposition(t, c.families()))

	per := tooltest.Maps(t, map[string]*ebpf.MapSpec{
		"hist":  {Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: 64},
		"hist1": {Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: 64},
		"gen":   {Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1},
		"comms": {Type: ebpf.Hash, KeySize: 4, ValueSize: 16, MaxEntries: 64},
		"lost":  {Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1},
	})
	// Pids above any pid_max: /proc never names them.
	for pid, name := range map[uint32]string{4194401: "dd", 4194402: "dd", 4194403: "evil\"\\\n\xff", 4194404: "cat", 4194405: "zz"} {
		var comm [16]byte
		copy(comm[:], name)
		if err := per.Maps["comms"].Put(pid, comm); err != nil {
			t.Fatal(err)
		}
	}
	for _, w := range []struct {
		pid, slot uint32
		n         uint64
	}{
		{4194401, 10, 3}, {4194402, 10, 4}, {4194402, 2, 1}, {4194403, 5, 9}, {4194404, 13, 8}, {4194405, 1, 1},
	} {
		if err := per.Maps["hist"].Put([2]uint32{w.pid, w.slot}, w.n); err != nil {
			t.Fatal(err)
		}
	}
	tooltest.PutPerCPU(t, per.Maps["lost"], uint32(0), 6)
	table, err := newProcTable(per, nil, 10, false, false, true)
	if err != nil {
		t.Fatal(err)
	}
	defer table.Close()
	table.serve.series.Max = 3
	golden.Check(t, "expo_per_process", tooltest.Exposition(t, table.families()))
}
