package asm

import (
	"fmt"

	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/internal/slots"
)

// DecadeSlot puts the heatmap slot of the value in v into out, by a binary
// search over the 100 slot boundaries unrolled into compares: 7 jumps per
// value, no loops, no division, no floats. tmp is clobbered.
func DecadeSlot(prefix string, v, tmp, out bpf.Register) bpf.Instructions {
	done := prefix + "_done"
	var insns bpf.Instructions
	var node func(lo, hi int, label string)
	// node emits the search for slots lo..hi (v is known to be >= start(lo)
	// and < start(hi+1)).
	node = func(lo, hi int, label string) {
		if lo == hi {
			insns = append(insns,
				bpf.Mov.Imm(out, int32(lo)).WithSymbol(label),
				bpf.Ja.Label(done),
			)
			return
		}
		mid := (lo + hi + 1) / 2
		upper := fmt.Sprintf("%s_ge%d", prefix, mid)
		insns = append(insns,
			bpf.LoadImm(tmp, int64(slots.DecadeStart(mid)), bpf.DWord).WithSymbol(label),
			bpf.JGE.Reg(v, tmp, upper),
		)
		node(lo, mid-1, fmt.Sprintf("%s_lt%d", prefix, mid))
		node(mid, hi, upper)
	}
	node(0, slots.Decade-1, prefix+"_search")
	insns[0] = insns[0].WithSource(bpf.Comment(fmt.Sprintf("%s = heatmap slot of %s: floor(10*log10(ns)), 0..99", out, v)))
	// The last leaf's jump to done is the fall-through.
	insns = insns[:len(insns)-1]
	return append(insns, Nop().WithSymbol(done))
}
