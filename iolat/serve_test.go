package iolat

import (
	"strings"
	"testing"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/procfs"
)

// TestExpositionGoldens serves fixed map contents: per disk (-D) in
// microseconds, per operation (-F) in milliseconds, and all IO; the
// bounds in seconds, 2^k units (latencies are truncated to whole units).
func TestExpositionGoldens(t *testing.T) {
	privtest.Require(t)
	var b strings.Builder
	write := func(c *collector) { b.WriteString(tooltest.Exposition(t, c.families())) }
	hash := tooltest.Maps(t, map[string]*ebpf.MapSpec{
		"hist": {Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: 64},
		"lost": {Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1},
	})
	loop0, vda := procfs.MkDev(7, 0), procfs.MkDev(254, 0)
	for _, e := range []struct {
		id, slot uint32
		n        uint64
	}{
		{loop0, 5, 40}, {loop0, 6, 17}, {vda, 9, 3}, {vda, 30, 1},
	} {
		if err := hash.Maps["hist"].Put([2]uint32{e.id, e.slot}, e.n); err != nil {
			t.Fatal(err)
		}
	}
	write(&collector{coll: hash, o: &options{Disks: true}, names: procfs.Disks{loop0: "loop0", vda: "vda"}})

	ops := tooltest.Maps(t, map[string]*ebpf.MapSpec{
		"hist": {Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: 64},
		"lost": {Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1},
	})
	for _, e := range []struct {
		id, slot uint32
		n        uint64
	}{{'W', 2, 8}, {'R', 1, 2}, {'F', 4, 1}} {
		if err := ops.Maps["hist"].Put([2]uint32{e.id, e.slot}, e.n); err != nil {
			t.Fatal(err)
		}
	}
	tooltest.PutPerCPU(t, ops.Maps["lost"], uint32(0), 3)
	write(&collector{coll: ops, o: &options{Flags: true, Millis: true}})

	all := tooltest.Maps(t, map[string]*ebpf.MapSpec{
		"hist": {Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 65},
		"lost": {Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1},
	})
	tooltest.PutPerCPU(t, all.Maps["hist"], uint32(7), 4, 5)
	write(&collector{coll: all, o: &options{Disk: "loop0"}})
	golden.Check(t, "expo", b.String())
}
