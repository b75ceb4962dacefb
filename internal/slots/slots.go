// Package slots is the layout of histogram slots, shared by the programs
// that count into them (asm) and the renderers that draw them (terminal),
// with the Go reference of each slot function.
package slots

import (
	"math"
	"math/bits"
)

// Log2 is the number of slots of a log2 histogram, BCC's layout: slot 0 is
// unused, slot 1 holds 0 and 1, slot k >= 2 holds 2^(k-1) .. 2^k-1, slot 64
// holds 2^63 .. 2^64-1.
const Log2 = 65

// Log2Of is the log2 slot of v: the bit length of v|1.
func Log2Of(v uint64) int { return bits.Len64(v | 1) }

// Decade is the number of slots of the latency heatmap: ten per decade of
// nanoseconds, slot 30 = 1 us, 60 = 1 ms, 90 = 1 s, and slot 99 takes
// everything slower.
const Decade = 100

// decadeStarts[k] is the smallest value of slot k: ceil(10^(k/10)), exact
// at every decade (10^n), so 999 ns and 1000 ns land in slots 29 and 30.
var decadeStarts = func() [Decade]uint64 {
	var t [Decade]uint64
	for k := range t {
		if k%10 == 0 {
			t[k] = uint64(math.Pow10(k / 10))
			continue
		}
		t[k] = uint64(math.Ceil(math.Pow(10, float64(k)/10)))
	}
	return t
}()

// DecadeStart returns the smallest value (in ns) decade slot k holds.
func DecadeStart(k int) uint64 { return decadeStarts[k] }

// DecadeOf is the decade slot of v: floor(10*log10(v)) in 0..99, with 0
// and 1 in slot 0.
func DecadeOf(v uint64) int {
	k := 0
	for k+1 < Decade && decadeStarts[k+1] <= v {
		k++
	}
	return k
}
