package iolat

import (
	"fmt"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/internal/slots"
	"github.com/tracekit/tracekit/tracefs"
)

const (
	maxInFlight = 10240 // requests issued and not yet completed
	maxHists    = 4096  // {disk or op, slot} keys
	eexist      = 17

	// Stack layout shared by the programs.
	// The in-flight key, {u32 dev; u64 sector} packed in 12 bytes: the
	// hash (jhash2 by words) mixes three words in one round, where 16 bytes
	// take two; three hash operations a request make that count.
	keyOff  = -12
	keySize = 12
	tsOff   = -24 // the start time to store
	histOff = -32 // {u32 id; u32 slot}
	valOff  = -40
	idxOff  = -44 // the request's slot in the slots array

	// nSlots direct-mapped slots {u64 tag; u32 dev; u32 pad; u64 ts} hold
	// the start times of requests in flight (a power of two; the tests
	// lower it with TRACEKIT_IOLAT_SLOTS to make requests collide).
	nSlots   = 4096
	slotSize = 24
)

// Group-by choices for the histograms.
const (
	byNone  = iota
	byDisk  // -D: one per device
	byFlags // -F: one per operation
)

// rqFields are the fields the programs read from a block_rq_* event.
type rqFields struct {
	Dev, Sector tracefs.Field
	Rwbs        tracefs.Field // only read on completion, with -F
}

func rqFieldsOf(f *tracefs.Format) (rqFields, error) {
	var r rqFields
	var err error
	if r.Dev, err = f.MustField("dev"); err != nil {
		return r, err
	}
	if r.Sector, err = f.MustField("sector"); err != nil {
		return r, err
	}
	if rw, ok := f.Field("rwbs"); ok {
		r.Rwbs = rw
	}
	return r, nil
}

// progConfig says which programs to build.
type progConfig struct {
	Issue, Complete rqFields
	Insert          *rqFields // -Q: also start the clock at block_rq_insert
	Dev             uint32    // only this device (kernel dev_t); 0 for all
	Heatmap         bool      // decade slots of ns instead of log2 slots
	Divisor         int32     // log2 mode: ns per unit (1000 usecs, 1000000 msecs)
	By              int
	// Slots keeps start times in a direct-mapped array first, claimed with
	// BPF_ATOMIC compare-and-exchange (5.12+), and in the hash only when a
	// request's slot is taken: no hash insert and delete per IO. Not with
	// -Q, whose insert time must win over the issue time. Its value is the
	// number of slots, a power of two; 0 is the hash alone.
	Slots uint32
}

// loadKey stores the in-flight key {dev, sector} of the event at keyOff,
// after the device filter.
func loadKey(f rqFields, dev uint32) (bpf.Instructions, error) {
	d, err := asm.LoadField(bpf.R1, "dev", f.Dev.Offset, f.Dev.Size, false)
	if err != nil {
		return nil, err
	}
	s, err := asm.LoadField(bpf.R1, "sector", f.Sector.Offset, f.Sector.Size, false)
	if err != nil {
		return nil, err
	}
	insns := asm.Prologue()
	insns = append(insns, d...)
	if dev != 0 {
		insns = append(insns, bpf.JNE.Imm(bpf.R1, int32(dev), "exit").
			WithSource(bpf.Comment(fmt.Sprintf("only device %d:%d", dev>>20, dev&(1<<20-1)))))
	}
	insns = append(insns, asm.StoreKey(keyOff, bpf.R1, bpf.Word))
	insns = append(insns, s...)
	return append(insns, asm.StoreKey(keyOff+4, bpf.R1, bpf.DWord)), nil
}

// slotOf finds the request's slot: r8 = its tag, sector+1 (0, a sector of
// ~0, takes the hash at fallback), r7 = &slots[idx], where idx mixes the
// device (times the golden ratio, so that 7:0 and 8:0 part) with the
// sector in units of 4 KiB (so that sequential IO takes successive slots).
func slotOf(fallback string, n uint32) bpf.Instructions {
	insns := bpf.Instructions{
		bpf.LoadMem(bpf.R8, bpf.RFP, keyOff+4, bpf.DWord).WithSource(bpf.Comment("r8 = tag = sector + 1")),
		bpf.Add.Imm(bpf.R8, 1),
		bpf.JEq.Imm(bpf.R8, 0, fallback),
		bpf.LoadMem(bpf.R1, bpf.RFP, keyOff, bpf.Word).WithSource(bpf.Comment(fmt.Sprintf("idx = (dev * 0x9e3779b1 ^ tag >> 3) %% %d", n))),
		bpf.Mul.Imm(bpf.R1, -0x61c8864f),
		bpf.Mov.Reg(bpf.R2, bpf.R8),
		bpf.RSh.Imm(bpf.R2, 3),
		bpf.Xor.Reg(bpf.R1, bpf.R2),
		bpf.And.Imm(bpf.R1, int32(n-1)),
		asm.StoreKey(idxOff, bpf.R1, bpf.Word),
	}
	insns = append(insns, asm.MapLookup("slots", idxOff)...)
	return append(insns,
		bpf.JEq.Imm(bpf.R0, 0, fallback),
		bpf.Mov.Reg(bpf.R7, bpf.R0).WithSource(bpf.Comment("r7 = &slots[idx]")),
	)
}

// claimSlot records the start time in the request's slot when it is free
// (compare-and-exchange of its tag from 0), or already this request's (a
// re-issue restarts the clock, as the hash's BPF_ANY update does); else
// it goes to fallback.
func claimSlot(fallback string, n uint32) bpf.Instructions {
	insns := slotOf(fallback, n)
	insns = append(insns,
		bpf.Mov.Imm(bpf.R0, 0).WithSource(bpf.Comment("claim: if slot->tag == 0 { slot->tag = tag }; r0 = the old tag")),
		asm.CmpXchg(bpf.R7, bpf.R8, bpf.DWord, 0),
		bpf.JEq.Imm(bpf.R0, 0, "claimed"),
		bpf.JNE.Reg(bpf.R0, bpf.R8, fallback).WithSource(bpf.Comment("another request's: the hash")),
		bpf.LoadMem(bpf.R1, bpf.R7, 8, bpf.DWord).WithSource(bpf.Comment("this tag: this device too, or the hash")),
		bpf.LoadMem(bpf.R2, bpf.RFP, keyOff, bpf.Word),
		bpf.JNE.Reg(bpf.R1, bpf.R2, fallback),
		bpf.LoadMem(bpf.R1, bpf.RFP, keyOff, bpf.Word).WithSymbol("claimed").WithSource(bpf.Comment("slot->dev = dev; slot->ts = now")),
		bpf.StoreMem(bpf.R7, 8, bpf.R1, bpf.DWord),
	)
	insns = append(insns, asm.Ktime(bpf.R0)...)
	return append(insns,
		bpf.StoreMem(bpf.R7, 16, bpf.R0, bpf.DWord),
		bpf.Ja.Label("exit"),
	)
}

// releaseSlot takes the start time from the request's slot into R7 and
// frees the slot (compare-and-exchange of its tag back to 0), then goes to
// measure; a slot that is not this request's goes to fallback.
func releaseSlot(fallback, measure string, n uint32) bpf.Instructions {
	insns := slotOf(fallback, n)
	return append(insns,
		bpf.LoadMem(bpf.R1, bpf.R7, 8, bpf.DWord).WithSource(bpf.Comment("this device's, or the hash")),
		bpf.LoadMem(bpf.R2, bpf.RFP, keyOff, bpf.Word),
		bpf.JNE.Reg(bpf.R1, bpf.R2, fallback),
		bpf.LoadMem(bpf.R9, bpf.R7, 16, bpf.DWord).WithSource(bpf.Comment("r9 = slot->ts, before the slot is freed")),
		bpf.Mov.Reg(bpf.R0, bpf.R8).WithSource(bpf.Comment("free: if slot->tag == tag { slot->tag = 0 }; r0 = the old tag")),
		bpf.Mov.Imm(bpf.R1, 0),
		asm.CmpXchg(bpf.R7, bpf.R1, bpf.DWord, 0),
		bpf.JNE.Reg(bpf.R0, bpf.R8, fallback).WithSource(bpf.Comment("another request's: the hash")),
		bpf.Mov.Reg(bpf.R7, bpf.R9),
		bpf.Ja.Label(measure),
	)
}

// startProgram records when a request was issued (or inserted). flags is
// the update's: BPF_ANY, or BPF_NOEXIST for issue under -Q, where an insert
// time already recorded must win.
func startProgram(f rqFields, dev uint32, noExist bool, nslots uint32) (bpf.Instructions, error) {
	insns, err := loadKey(f, dev)
	if err != nil {
		return nil, err
	}
	flags := int32(asm.UpdateAny)
	if noExist {
		flags = asm.UpdateNoExist
	}
	if nslots > 0 {
		insns = append(insns, claimSlot("hash", nslots)...)
	}
	insns = append(insns, asm.Ktime(bpf.R0)...)
	if nslots > 0 {
		insns[len(insns)-1] = insns[len(insns)-1].WithSymbol("hash")
	}
	insns = append(insns, asm.StoreKey(tsOff, bpf.R0, bpf.DWord))
	insns = append(insns, asm.Note(asm.MapUpdate("start", keyOff, tsOff, flags), "start[key] = now")...)
	insns = append(insns, bpf.JEq.Imm(bpf.R0, 0, "exit"))
	if noExist {
		insns = append(insns,
			// Before 6.4 map ops returned int, and a call the verifier patched
			// to the op directly leaves -EEXIST zero-extended in R0 (seen on
			// 6.1): compare the low 32 bits, sign-extended. No JMP32 (5.1+).
			bpf.LSh.Imm(bpf.R0, 32).WithSource(bpf.Comment("already inserted (-EEXIST in the low 32 bits): the insert time counts")),
			bpf.ArSh.Imm(bpf.R0, 32),
			bpf.JEq.Imm(bpf.R0, -eexist, "exit"),
		)
	}
	insns = append(insns, lostIncrement("full")...)
	return append(insns, asm.Return("exit", 0)...), nil
}

// lostIncrement counts an event that could not be measured.
func lostIncrement(prefix string) bpf.Instructions {
	insns := bpf.Instructions{
		bpf.Mov.Imm(bpf.R1, 0).WithSource(bpf.Comment("lost[0]++: the event cannot be measured")),
		asm.StoreKey(valOff, bpf.R1, bpf.Word),
	}
	return append(insns, asm.PerCPUArrayIncrement(prefix+"_lost", "lost", valOff)...)
}

// completeProgram measures a request from its start to its completion and
// counts the latency in the kernel.
func completeProgram(cfg progConfig) (bpf.Instructions, error) {
	insns, err := loadKey(cfg.Complete, cfg.Dev)
	if err != nil {
		return nil, err
	}
	if cfg.Slots > 0 {
		insns = append(insns, releaseSlot("hash", "measure", cfg.Slots)...)
	}
	lookup := asm.Note(asm.MapLookup("start", keyOff), "ts = start[key]; issued before tracing began: not counted")
	if cfg.Slots > 0 {
		lookup[0] = lookup[0].WithSymbol("hash")
	}
	insns = append(insns, lookup...)
	insns = append(insns,
		bpf.JEq.Imm(bpf.R0, 0, "exit"),
		bpf.LoadMem(bpf.R7, bpf.R0, 0, bpf.DWord),
	)
	insns = append(insns, asm.Note(asm.MapDelete("start", keyOff), "delete start[key]")...)
	now := asm.Ktime(bpf.R1)
	if cfg.Slots > 0 {
		now[0] = now[0].WithSymbol("measure")
	}
	insns = append(insns, now...)
	insns = append(insns,
		bpf.Sub.Reg(bpf.R1, bpf.R7).WithSource(bpf.Comment("r1 = latency in ns; negative: lost")),
		bpf.JSLT.Imm(bpf.R1, 0, "negative"),
	)
	if cfg.Heatmap {
		insns = append(insns, asm.DecadeSlot("slot", bpf.R1, bpf.R2, bpf.R3)...)
	} else {
		if cfg.Divisor > 1 {
			insns = append(insns, bpf.Div.Imm(bpf.R1, cfg.Divisor).WithSource(bpf.Comment(fmt.Sprintf("to units of %d ns", cfg.Divisor))))
		}
		insns = append(insns, asm.Log2Slot("slot", bpf.R1, bpf.R2, bpf.R3)...)
	}
	switch cfg.By {
	case byNone:
		insns = append(insns, asm.StoreKey(histOff, bpf.R3, bpf.Word))
		insns = append(insns, asm.PerCPUArrayIncrement("count", "hist", histOff)...)
		insns = append(insns, bpf.Ja.Label("exit"))
	case byDisk:
		insns = append(insns,
			bpf.LoadMem(bpf.R1, bpf.RFP, keyOff, bpf.Word).WithSource(bpf.Comment("histogram of this device")),
			asm.StoreKey(histOff, bpf.R1, bpf.Word),
			asm.StoreKey(histOff+4, bpf.R3, bpf.Word),
		)
		insns = append(insns, asm.HashIncrement("count", "hist", histOff, valOff, "lost", nil)...)
		insns = append(insns, bpf.Ja.Label("exit"))
	case byFlags:
		op, err := opOf(cfg.Complete.Rwbs)
		if err != nil {
			return nil, err
		}
		insns = append(insns, op...)
		insns = append(insns,
			asm.StoreKey(histOff, bpf.R1, bpf.Word),
			asm.StoreKey(histOff+4, bpf.R3, bpf.Word),
		)
		insns = append(insns, asm.HashIncrement("count", "hist", histOff, valOff, "lost", nil)...)
		insns = append(insns, bpf.Ja.Label("exit"))
	}
	neg := lostIncrement("negative")
	neg[0] = neg[0].WithSymbol("negative")
	insns = append(insns, neg...)
	return append(insns, asm.Return("exit", 0)...), nil
}

// opOf puts the operation letter of rwbs into R1: rwbs[0], or rwbs[1]
// after a leading 'F' (preflush), except that "FN" (a flush alone) is 'F'.
func opOf(rwbs tracefs.Field) (bpf.Instructions, error) {
	if rwbs.Name == "" || rwbs.Size < 2 {
		return nil, fmt.Errorf("block_rq_complete has no rwbs field: -F needs it")
	}
	return bpf.Instructions{
		bpf.LoadMem(bpf.R1, asm.RegCtx, int16(rwbs.Offset), bpf.Byte).
			WithSource(bpf.Comment(fmt.Sprintf("r1 = operation from rwbs (offset %d): R, W, D, F(lush), ...", rwbs.Offset))),
		bpf.JNE.Imm(bpf.R1, 'F', "op_done"),
		bpf.LoadMem(bpf.R2, asm.RegCtx, int16(rwbs.Offset+1), bpf.Byte),
		bpf.JEq.Imm(bpf.R2, 'N', "op_done"),
		bpf.JEq.Imm(bpf.R2, 0, "op_done"),
		bpf.Mov.Reg(bpf.R1, bpf.R2),
		asm.Nop().WithSymbol("op_done"),
	}, nil
}

// collection returns the maps and programs.
func collection(cfg progConfig) (*ebpf.CollectionSpec, error) {
	if cfg.Slots > 0 && (cfg.Insert != nil || cfg.Slots&(cfg.Slots-1) != 0) {
		return nil, fmt.Errorf("%d slots: a power of two, and not with -Q (the insert time would not win over the issue time)", cfg.Slots)
	}
	issue, err := startProgram(cfg.Issue, cfg.Dev, cfg.Insert != nil, cfg.Slots)
	if err != nil {
		return nil, err
	}
	complete, err := completeProgram(cfg)
	if err != nil {
		return nil, err
	}
	nslots := uint32(slots.Log2)
	if cfg.Heatmap {
		nslots = slots.Decade
	}
	spec := &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			"start": {Name: "iolat_start", Type: ebpf.Hash, KeySize: keySize, ValueSize: 8, MaxEntries: maxInFlight},
			"lost":  {Name: "iolat_lost", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1},
			"hist":  {Name: "iolat_hist", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: nslots},
		},
		Programs: map[string]*ebpf.ProgramSpec{
			"issue":    {Name: "iolat_issue", Type: ebpf.TracePoint, License: "GPL", Instructions: issue},
			"complete": {Name: "iolat_complete", Type: ebpf.TracePoint, License: "GPL", Instructions: complete},
		},
	}
	if cfg.Slots > 0 {
		spec.Maps["slots"] = &ebpf.MapSpec{Name: "iolat_slots", Type: ebpf.Array, KeySize: 4, ValueSize: slotSize, MaxEntries: cfg.Slots}
	}
	if cfg.By != byNone {
		spec.Maps["hist"] = &ebpf.MapSpec{Name: "iolat_hist", Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: maxHists}
	}
	if cfg.Insert != nil {
		insert, err := startProgram(*cfg.Insert, cfg.Dev, false, 0)
		if err != nil {
			return nil, err
		}
		spec.Programs["insert"] = &ebpf.ProgramSpec{Name: "iolat_insert", Type: ebpf.TracePoint, License: "GPL", Instructions: insert}
	}
	return spec, nil
}
