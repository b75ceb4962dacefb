package asm

import (
	"fmt"

	bpf "github.com/cilium/ebpf/asm"
)

// A value's statistics per key, as bpftrace's sum(), min(), max() and
// avg() keep them: each CPU's slot of a per-CPU hash holds {u64 count;
// u64 sum; u64 min; u64 max} (StatsSize), written by that CPU alone, so no
// atomic is needed and min and max are exact; user space adds the counts
// and sums and takes the least and greatest of the slots that counted.
const StatsSize = 32

// StatsUpdate adds the u64 at fp+valOff to the statistics of the key at
// fp+keyOff in the per-CPU hash mapName: a new key is inserted
// {1, v, v, v} (BPF_NOEXIST) from the 32 bytes of stack at fp+initOff; a
// key another CPU made has this CPU's slot zero, and it is set so; a full
// map adds 1 to slot 0 of the per-CPU array lostMap. signed compares as
// signed integers.
func StatsUpdate(prefix, mapName string, keyOff, valOff, initOff int16, signed bool, lostMap string) bpf.Instructions {
	have, set, retry, lost, done := prefix+"_have", prefix+"_set", prefix+"_retry", prefix+"_lost", prefix+"_done"
	nomin := prefix + "_nomin"
	ge := bpf.JGE
	if signed {
		ge = bpf.JSGE
	}
	var s Seq
	first := MapLookup(mapName, keyOff)
	first[0] = first[0].WithSymbol(prefix + "_hash").WithSource(bpf.Comment(fmt.Sprintf("%s[key]: count, sum, min and max of the value (this CPU's slot)", mapName)))
	s.Append(first)
	s.Add(bpf.JNE.Imm(bpf.R0, 0, have))
	s.Add(bpf.LoadMem(bpf.R1, bpf.RFP, valOff, bpf.DWord).WithSource(bpf.Comment("a new key: {1, v, v, v}")))
	s.Add(bpf.Mov.Imm(bpf.R2, 1))
	s.Add(bpf.StoreMem(bpf.RFP, initOff, bpf.R2, bpf.DWord))
	for off := int16(8); off < StatsSize; off += 8 {
		s.Add(bpf.StoreMem(bpf.RFP, initOff+off, bpf.R1, bpf.DWord))
	}
	s.Append(MapUpdate(mapName, keyOff, initOff, UpdateNoExist))
	s.Add(bpf.JEq.Imm(bpf.R0, 0, done))
	again := MapLookup(mapName, keyOff)
	again[0] = again[0].WithSymbol(retry).WithSource(bpf.Comment("insert failed: another CPU made the key, or the map is full"))
	s.Append(again)
	s.Add(bpf.JEq.Imm(bpf.R0, 0, lost))
	s.Add(bpf.LoadMem(bpf.R1, bpf.RFP, valOff, bpf.DWord).WithSymbol(have))
	s.Add(bpf.LoadMem(bpf.R2, bpf.R0, 0, bpf.DWord))
	s.Add(bpf.JNE.Imm(bpf.R2, 0, set).WithSource(bpf.Comment("this CPU's slot counted already")))
	s.Add(bpf.Mov.Imm(bpf.R2, 1).WithSource(bpf.Comment("its first value here: {1, v, v, v}")))
	s.Add(bpf.StoreMem(bpf.R0, 0, bpf.R2, bpf.DWord))
	for off := int16(8); off < StatsSize; off += 8 {
		s.Add(bpf.StoreMem(bpf.R0, off, bpf.R1, bpf.DWord))
	}
	s.Add(bpf.Ja.Label(done))
	s.Add(bpf.Add.Imm(bpf.R2, 1).WithSymbol(set).WithSource(bpf.Comment("count++, sum += v")))
	s.Add(bpf.StoreMem(bpf.R0, 0, bpf.R2, bpf.DWord))
	s.Add(bpf.LoadMem(bpf.R2, bpf.R0, 8, bpf.DWord))
	s.Add(bpf.Add.Reg(bpf.R2, bpf.R1))
	s.Add(bpf.StoreMem(bpf.R0, 8, bpf.R2, bpf.DWord))
	s.Add(bpf.LoadMem(bpf.R2, bpf.R0, 16, bpf.DWord).WithSource(bpf.Comment("min")))
	s.Add(ge.Reg(bpf.R1, bpf.R2, nomin))
	s.Add(bpf.StoreMem(bpf.R0, 16, bpf.R1, bpf.DWord))
	s.Add(bpf.LoadMem(bpf.R2, bpf.R0, 24, bpf.DWord).WithSymbol(nomin).WithSource(bpf.Comment("max")))
	s.Add(ge.Reg(bpf.R2, bpf.R1, done))
	s.Add(bpf.StoreMem(bpf.R0, 24, bpf.R1, bpf.DWord))
	s.Add(bpf.Ja.Label(done))
	s.Append(fullMapLost(prefix, lost, done, lostMap, valOff))
	return s.Instructions
}

// StatsCacheSize is a StatsCache slot: {u64 key0; u64 key1; the
// statistics (StatsSize)}.
const StatsCacheSize = 16 + StatsSize

// StatsCache is StatsUpdate's fast path for a 16-byte key at fp+keyOff:
// a per-CPU array of slots, direct-mapped by (key0 ^ key0>>8) & mask, as
// CacheIncrement's. A free slot (key0 0) is claimed by the first key
// that maps to it and never changes hands; a hit or a claim jumps to
// StatsUpdate's prefix_have with R0 at the slot's statistics, which a
// claim finds zero. Another key's slot, or a key whose key0 is 0, falls
// through to the hash path that follows. idxOff is 4 bytes of free
// stack. User space merges the slots' statistics with the hash's.
func StatsCache(prefix, cacheMap string, keyOff, idxOff int16, mask int32) bpf.Instructions {
	claim, have := prefix+"_claim", prefix+"_have"
	s := cacheSlot(cacheMap, keyOff, idxOff, mask, claim, prefix+"_hash", true)
	s.Add(bpf.Add.Imm(bpf.R0, 16).WithSource(bpf.Comment("hit: this CPU's statistics of the key")))
	s.Add(bpf.Ja.Label(have))
	s.Add(bpf.StoreMem(bpf.R0, 0, bpf.R2, bpf.DWord).WithSymbol(claim))
	s.Add(bpf.LoadMem(bpf.R1, bpf.RFP, keyOff+8, bpf.DWord))
	s.Add(bpf.StoreMem(bpf.R0, 8, bpf.R1, bpf.DWord))
	s.Add(bpf.Add.Imm(bpf.R0, 16))
	s.Add(bpf.Ja.Label(have))
	return s.Instructions
}
