package iolat

import "github.com/tracekit/tracekit/terminal"

func heatRowFor(slot int, n uint64) terminal.HeatRow {
	var r terminal.HeatRow
	r.Counts[slot] = n
	return r
}
