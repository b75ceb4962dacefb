package iolat

import (
	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/counts"
	"github.com/tracekit/tracekit/internal/slots"
	"github.com/tracekit/tracekit/metrics"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/run"
)

// collector turns the latency slots into tracekit_iolat_latency_seconds at
// each scrape: cumulative since the start, by disk (-D, or the disk of -d)
// or by operation (-F). It reads the maps on its own: the interval reports
// keep their deltas.
type collector struct {
	coll  *ebpf.Collection
	o     *options
	names procfs.Disks
}

// The buckets: slots up to 2^27 microseconds (134 s), or 2^17 ms with -m.
const lastSlotUs, lastSlotMs = 27, 17

func (c *collector) families() []metrics.Family {
	lat := metrics.Family{Name: "tracekit_iolat_latency_seconds", Help: "Block IO latency since iolat started: from issue (with -Q, from the OS queue) to completion.", Type: metrics.Histogram}
	lost, _ := counts.ReadPerCPUCounter(c.coll.Maps["lost"])
	out := []metrics.Family{lat, run.LostFamily("iolat", lost)}
	var per map[uint32][]uint64
	if c.o.Disks || c.o.Flags {
		m, err := counts.ReadSlotHash(c.coll.Maps["hist"], slots.Log2)
		if err != nil {
			return out
		}
		per = m
	} else {
		all, err := counts.ReadSlotArray(c.coll.Maps["hist"])
		if err != nil {
			return out
		}
		per = map[uint32][]uint64{0: all}
	}
	div, last := 1e6, lastSlotUs
	if c.o.Millis {
		div, last = 1e3, lastSlotMs
	}
	for id, counts := range per {
		var labels []metrics.Label
		switch {
		case c.o.Disks:
			labels = []metrics.Label{{Name: "disk", Value: c.names.Name(id)}}
		case c.o.Flags:
			op, ok := opNames[id]
			if !ok {
				op = string(rune(id))
			}
			labels = []metrics.Label{{Name: "op", Value: op}}
		case c.o.Disk != "":
			labels = []metrics.Label{{Name: "disk", Value: c.o.Disk}}
		}
		lat.Metrics = append(lat.Metrics, metrics.Metric{Labels: labels, Hist: run.Log2Hist(counts, last, div, true)})
	}
	out[0] = lat
	return out
}
