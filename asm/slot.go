package asm

import (
	"fmt"
	"math"
	"math/bits"

	bpf "github.com/cilium/ebpf/asm"
)

// Log2SlotOf is the Go reference of Log2Slot: the histogram slot of v.
func Log2SlotOf(v uint64) int { return bits.Len64(v | 1) }

// DecadeSlots is the number of slots of the latency heatmap: ten per
// decade of nanoseconds, slot 30 = 1 us, 60 = 1 ms, 90 = 1 s, and slot 99
// takes everything slower.
const DecadeSlots = 100

// decadeStarts[k] is the smallest value of slot k: ceil(10^(k/10)), exact
// at every decade (10^n), so 999 ns and 1000 ns land in slots 29 and 30.
var decadeStarts = func() [DecadeSlots]uint64 {
	var t [DecadeSlots]uint64
	for k := range t {
		if k%10 == 0 {
			t[k] = uint64(math.Pow10(k / 10))
			continue
		}
		t[k] = uint64(math.Ceil(math.Pow(10, float64(k)/10)))
	}
	return t
}()

// DecadeSlotStart returns the smallest value (in ns) slot k holds.
func DecadeSlotStart(k int) uint64 { return decadeStarts[k] }

// DecadeSlotOf is the Go reference of DecadeSlot: floor(10*log10(v)) in
// 0..99, with 0 and 1 in slot 0.
func DecadeSlotOf(v uint64) int {
	k := 0
	for k+1 < DecadeSlots && decadeStarts[k+1] <= v {
		k++
	}
	return k
}

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
			bpf.LoadImm(tmp, int64(decadeStarts[mid]), bpf.DWord).WithSymbol(label),
			bpf.JGE.Reg(v, tmp, upper),
		)
		node(lo, mid-1, fmt.Sprintf("%s_lt%d", prefix, mid))
		node(mid, hi, upper)
	}
	node(0, DecadeSlots-1, prefix+"_search")
	insns[0] = insns[0].WithSource(bpf.Comment(fmt.Sprintf("%s = heatmap slot of %s: floor(10*log10(ns)), 0..99", out, v)))
	// The last leaf's jump to done is the fall-through.
	insns = insns[:len(insns)-1]
	return append(insns, Nop().WithSymbol(done))
}
