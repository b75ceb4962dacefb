package asm

import "math/bits"

// Log2SlotOf is the Go reference of Log2Slot: the histogram slot of v.
func Log2SlotOf(v uint64) int { return bits.Len64(v | 1) }
