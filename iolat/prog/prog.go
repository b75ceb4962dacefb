// Package prog builds iolat's programs: block requests timed from issue
// (or insert) to completion into log2 or decade histograms, keyed by disk
// or operation, on perf, raw or BTF tracepoints.
package prog

import (
	"fmt"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/internal/slots"
	"github.com/tracekit/tracekit/kbtf"
	"github.com/tracekit/tracekit/kernel"
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
	readOff = -56 // bpf_probe_read_kernel's buffer (raw tracepoints)

	// NSlots direct-mapped slots {u64 tag; u32 dev; u32 pad; u64 ts} hold
	// the start times of requests in flight (a power of two; the tests
	// lower it with TRACEKIT_IOLAT_SLOTS to make requests collide).
	NSlots   = 4096
	slotSize = 24
)

// Group-by choices for the histograms.
const (
	ByNone  = iota
	ByDisk  // -D: one per device
	ByFlags // -F: one per operation
)

// Fields are the fields the programs read from a block_rq_* event.
type Fields struct {
	Dev, Sector tracefs.Field
	Rwbs        tracefs.Field // only read on completion, with -F
}

// FieldsOf reads Fields from a block_rq_* format file.
func FieldsOf(f *tracefs.Format) (Fields, error) {
	var r Fields
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

// Config says which programs to build.
type Config struct {
	Issue, Complete Fields
	Insert          *Fields // -Q: also start the clock at block_rq_insert
	Dev             uint32  // only this device (kernel dev_t); 0 for all
	Heatmap         bool    // decade slots of ns instead of log2 slots
	Divisor         int32   // log2 mode: ns per unit (1000 usecs, 1000000 msecs)
	By              int
	// Slots keeps start times in a direct-mapped array first, claimed with
	// BPF_ATOMIC compare-and-exchange (5.12+), and in the hash only when a
	// request's slot is taken: no hash insert and delete per IO. Not with
	// -Q, whose insert time must win over the issue time. Its value is the
	// number of slots, a power of two; 0 is the hash alone.
	Slots uint32
	// Args, when set, builds programs for raw or BTF tracepoints: they
	// read the request from the tracepoint's arguments and key it by its
	// address (as biolatency does) instead of {dev, sector}.
	Args *Args
}

// Args is where a raw or BTF tracepoint program finds what it needs: the
// struct request among each tracepoint's arguments (5.10's block_rq_issue
// has the queue first), and through it, at offsets from the kernel's BTF,
// its device and operation.
type Args struct {
	Hook                             hook.Hook
	IssueArg, CompleteArg, InsertArg int
	RqDisk                           int // request.rq_disk (before 5.16), or -1: the disk is request.q->disk
	Q, QDisk                         int // request.q, request_queue.disk
	Major, FirstMinor                int // gendisk
	CmdFlags                         int // request.cmd_flags: the operation in its low 8 bits
	ProbeRead                        bpf.BuiltinFunc
}

// event names the tracepoints the programs go on.
type event int

const (
	issueEvent event = iota
	completeEvent
	insertEvent
)

// loadKey stores the in-flight key of the event at keyOff, after the
// device filter: {dev, sector} from the record, or {dev or 0, request
// address} from the arguments (the device only where it is needed).
func loadKey(cfg Config, ev event) (bpf.Instructions, error) {
	if a := cfg.Args; a != nil {
		return loadArgsKey(cfg, a, ev), nil
	}
	f := map[event]Fields{issueEvent: cfg.Issue, completeEvent: cfg.Complete}[ev]
	if ev == insertEvent {
		f = *cfg.Insert
	}
	dev := cfg.Dev
	d, err := asm.LoadField(bpf.R1, "dev", f.Dev.Offset, f.Dev.Size, false)
	if err != nil {
		return nil, err
	}
	s, err := asm.LoadField(bpf.R1, "sector", f.Sector.Offset, f.Sector.Size, false)
	if err != nil {
		return nil, err
	}
	var insns asm.Seq
	insns.Append(asm.Prologue())
	insns.Append(d)
	if dev != 0 {
		insns.Add(bpf.JNE.Imm(bpf.R1, int32(dev), "exit").WithSource(bpf.Comment(fmt.Sprintf("only device %d:%d", dev>>20, dev&(1<<20-1)))))
	}
	insns.Add(asm.StoreKey(keyOff, bpf.R1, bpf.Word))
	insns.Append(s)
	insns.Add(asm.StoreKey(keyOff+4, bpf.R1, bpf.DWord))
	return insns.Instructions, nil
}

// loadArgsKey is loadKey from the tracepoint's arguments.
func loadArgsKey(cfg Config, a *Args, ev event) bpf.Instructions {
	arg := map[event]int{issueEvent: a.IssueArg, completeEvent: a.CompleteArg, insertEvent: a.InsertArg}[ev]
	var insns asm.Seq
	insns.Append(asm.Prologue())
	insns.Add(bpf.LoadMem(bpf.R7, asm.RegCtx, int16(8*arg), bpf.DWord).WithSource(bpf.Comment(fmt.Sprintf("r7 = rq (args[%d])", arg))))
	if a.Hook == hook.BTF {
		// A BTF tracepoint's rq is a typed pointer, good for loads, not
		// for the shifts of a slot index. The difference of two pointers
		// is a number (to a loader with CAP_PERFMON, which tracing
		// programs need anyway), and the value of a one-entry array has
		// a fixed address: the key is the request's distance from it,
		// one to one with the request's address. (A copy out of the
		// context with bpf_probe_read_kernel cost a helper call.)
		insns.Add(bpf.LoadMapValue(bpf.R1, 0, 0).WithReference("anchor").WithSource(bpf.Comment("key.rq = rq - &anchor[0], a number")))
		insns.Add(bpf.Mov.Reg(bpf.R2, bpf.R7))
		insns.Add(bpf.Sub.Reg(bpf.R2, bpf.R1))
		insns.Add(asm.StoreKey(keyOff+4, bpf.R2, bpf.DWord))
	} else {
		insns.Add(asm.StoreKey(keyOff+4, bpf.R7, bpf.DWord))
	}
	if cfg.Dev == 0 && cfg.By != ByDisk {
		insns.Add(bpf.Mov.Imm(bpf.R1, 0).WithSource(bpf.Comment("the address alone is the key: no device needed")))
		insns.Add(asm.StoreKey(keyOff, bpf.R1, bpf.Word))
		return insns.Instructions
	}
	insns.Append(a.devOf())
	if cfg.Dev != 0 {
		insns.Add(bpf.JNE.Imm(bpf.R1, int32(cfg.Dev), "exit").WithSource(bpf.Comment(fmt.Sprintf("only device %d:%d", cfg.Dev>>20, cfg.Dev&(1<<20-1)))))
	}
	insns.Add(asm.StoreKey(keyOff, bpf.R1, bpf.Word))
	return insns.Instructions
}

// read puts the size bytes at src+off into dst: a direct load from a BTF
// tracepoint, bpf_probe_read_kernel from a raw one (R1-R5 clobbered; src
// must not be one of them unless it is R3).
func (a *Args) read(dst, src bpf.Register, off int, size bpf.Size, note string) bpf.Instructions {
	if a.Hook == hook.BTF {
		var insns asm.Seq
		insns.Add(bpf.LoadMem(dst, src, int16(off), size).WithSource(bpf.Comment(note)))
		return insns.Instructions
	}
	var insns asm.Seq
	insns.Add(bpf.Mov.Reg(bpf.R3, src).WithSource(bpf.Comment(note)))
	insns.Add(bpf.Add.Imm(bpf.R3, int32(off)))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.RFP))
	insns.Add(bpf.Add.Imm(bpf.R1, readOff))
	insns.Add(bpf.Mov.Imm(bpf.R2, int32(size.Sizeof())))
	insns.Add(a.ProbeRead.Call())
	insns.Add(bpf.LoadMem(dst, bpf.RFP, readOff, size))
	return insns.Instructions
}

// devOf puts the dev_t of the request in R7 into R1: disk->major << 20 |
// disk->first_minor, the disk being rq->rq_disk or rq->q->disk.
func (a *Args) devOf() bpf.Instructions {
	var insns asm.Seq
	if a.Hook == hook.Raw {
		insns.Add(bpf.Mov.Imm(bpf.R1, 0))
		insns.Add(asm.StoreKey(readOff, bpf.R1, bpf.DWord))
	}
	if a.RqDisk >= 0 {
		insns.Append(a.read(bpf.R8, bpf.R7, a.RqDisk, bpf.DWord, "r8 = rq->rq_disk"))
	} else {
		insns.Append(a.read(bpf.R8, bpf.R7, a.Q, bpf.DWord, "r8 = rq->q"))
		insns.Append(a.read(bpf.R8, bpf.R8, a.QDisk, bpf.DWord, "r8 = q->disk"))
	}
	insns.Append(a.read(bpf.R9, bpf.R8, a.Major, bpf.Word, "r9 = disk->major << 20"))
	insns.Add(bpf.LSh.Imm(bpf.R9, 20))
	insns.Append(a.read(bpf.R1, bpf.R8, a.FirstMinor, bpf.Word, "r1 = dev = r9 | disk->first_minor"))
	insns.Add(bpf.Or.Reg(bpf.R1, bpf.R9))
	return insns.Instructions
}

// opArgs puts the operation letter of the completed request into R1, as the record's rwbs starts: R, W, F(lush),
// D(iscard, secure erase), N (the others).
func (a *Args) opArgs() bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.LoadMem(bpf.R7, asm.RegCtx, int16(8*a.CompleteArg), bpf.DWord).WithSource(bpf.Comment(fmt.Sprintf("r7 = rq (args[%d])", a.CompleteArg))))
	insns.Append(a.read(bpf.R1, bpf.R7, a.CmdFlags, bpf.Word, "r1 = rq->cmd_flags & REQ_OP_MASK"))
	insns.Add(bpf.And.Imm(bpf.R1, 0xff))
	for _, op := range []struct {
		num    int32
		letter byte
	}{{0, 'R'}, {1, 'W'}, {2, 'F'}, {3, 'D'}, {5, 'D'}} {
		insns.Add(bpf.Mov.Imm(bpf.R2, int32(op.letter)))
		insns.Add(bpf.JEq.Imm(bpf.R1, op.num, "op_done"))
	}
	insns.Add(bpf.Mov.Imm(bpf.R2, 'N'))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R2).WithSymbol("op_done"))
	return insns.Instructions
}

// slotOf finds the request's slot: r8 = its tag, sector+1 (0, a sector of
// ~0, takes the hash at fallback), r7 = &slots[idx], where idx mixes the
// device (times the golden ratio, so that 7:0 and 8:0 part) with the
// sector in units of 4 KiB (so that sequential IO takes successive slots).
func slotOf(fallback string, n uint32) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.LoadMem(bpf.R8, bpf.RFP, keyOff+4, bpf.DWord).WithSource(bpf.Comment("r8 = tag = sector (or request address) + 1")))
	insns.Add(bpf.Add.Imm(bpf.R8, 1))
	insns.Add(bpf.JEq.Imm(bpf.R8, 0, fallback))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, keyOff, bpf.Word).WithSource(bpf.Comment(fmt.Sprintf("idx = (dev * 0x9e3779b1 ^ tag >> 3) %% %d", n))))
	insns.Add(bpf.Mul.Imm(bpf.R1, -0x61c8864f))
	insns.Add(bpf.Mov.Reg(bpf.R2, bpf.R8))
	insns.Add(bpf.RSh.Imm(bpf.R2, 3))
	insns.Add(bpf.Xor.Reg(bpf.R1, bpf.R2))
	insns.Add(bpf.And.Imm(bpf.R1, int32(n-1)))
	insns.Add(asm.StoreKey(idxOff, bpf.R1, bpf.Word))
	insns.Append(asm.MapLookup("slots", idxOff))
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, fallback))
	insns.Add(bpf.Mov.Reg(bpf.R7, bpf.R0).WithSource(bpf.Comment("r7 = &slots[idx]")))
	return insns.Instructions
}

// claimSlot records the start time in the request's slot when it is free
// (compare-and-exchange of its tag from 0), or already this request's (a
// re-issue restarts the clock, as the hash's BPF_ANY update does); else
// it goes to fallback.
func claimSlot(fallback string, n uint32) bpf.Instructions {
	var insns asm.Seq
	insns.Append(slotOf(fallback, n))
	insns.Add(bpf.Mov.Imm(bpf.R0, 0).WithSource(bpf.Comment("claim: if slot->tag == 0 { slot->tag = tag }; r0 = the old tag")))
	insns.Add(asm.CmpXchg(bpf.R7, bpf.R8, bpf.DWord, 0))
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, "claimed"))
	insns.Add(bpf.JNE.Reg(bpf.R0, bpf.R8, fallback).WithSource(bpf.Comment("another request's: the hash")))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R7, 8, bpf.DWord).WithSource(bpf.Comment("this tag: this device too, or the hash")))
	insns.Add(bpf.LoadMem(bpf.R2, bpf.RFP, keyOff, bpf.Word))
	insns.Add(bpf.JNE.Reg(bpf.R1, bpf.R2, fallback))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, keyOff, bpf.Word).WithSymbol("claimed").WithSource(bpf.Comment("slot->dev = dev; slot->ts = now")))
	insns.Add(bpf.StoreMem(bpf.R7, 8, bpf.R1, bpf.DWord))
	insns.Append(asm.Ktime(bpf.R0))
	insns.Add(bpf.StoreMem(bpf.R7, 16, bpf.R0, bpf.DWord))
	insns.Add(bpf.Ja.Label("exit"))
	return insns.Instructions
}

// releaseSlot takes the start time from the request's slot into R7 and
// frees the slot, then goes to measure; a slot that is not this request's
// goes to fallback. Freeing is a plain store of 0: while the tag is this
// request's, no issue can claim the slot (a claim needs tag 0), so nothing
// can change it between the check and the store. A second request to the
// same sector in flight shares the slot, as with a compare-and-exchange.
func releaseSlot(fallback, measure string, n uint32) bpf.Instructions {
	var insns asm.Seq
	insns.Append(slotOf(fallback, n))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R7, 0, bpf.DWord).WithSource(bpf.Comment("this request's tag, or the hash")))
	insns.Add(bpf.JNE.Reg(bpf.R1, bpf.R8, fallback))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R7, 8, bpf.DWord).WithSource(bpf.Comment("this device's, or the hash")))
	insns.Add(bpf.LoadMem(bpf.R2, bpf.RFP, keyOff, bpf.Word))
	insns.Add(bpf.JNE.Reg(bpf.R1, bpf.R2, fallback))
	insns.Add(bpf.LoadMem(bpf.R9, bpf.R7, 16, bpf.DWord).WithSource(bpf.Comment("r9 = slot->ts, then free the slot: slot->tag = 0")))
	insns.Add(bpf.Mov.Imm(bpf.R1, 0))
	insns.Add(bpf.StoreMem(bpf.R7, 0, bpf.R1, bpf.DWord))
	insns.Add(bpf.Mov.Reg(bpf.R7, bpf.R9))
	insns.Add(bpf.Ja.Label(measure))
	return insns.Instructions
}

// startProgram records when a request was issued (or inserted). flags is
// the update's: BPF_ANY, or BPF_NOEXIST for issue under -Q, where an insert
// time already recorded must win.
func startProgram(cfg Config, ev event, noExist bool, nslots uint32) (bpf.Instructions, error) {
	key, err := loadKey(cfg, ev)
	if err != nil {
		return nil, err
	}
	var insns asm.Seq
	insns.Append(key)
	flags := int32(asm.UpdateAny)
	if noExist {
		flags = asm.UpdateNoExist
	}
	if nslots > 0 {
		insns.Append(claimSlot("hash", nslots))
	}
	insns.Append(asm.Ktime(bpf.R0))
	if nslots > 0 {
		insns.Instructions[len(insns.Instructions)-1] = insns.Instructions[len(insns.Instructions)-1].WithSymbol("hash")
	}
	insns.Add(asm.StoreKey(tsOff, bpf.R0, bpf.DWord))
	insns.Append(asm.Note(asm.MapUpdate("start", keyOff, tsOff, flags), "start[key] = now"))
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, "exit"))
	if noExist {
		// Before 6.4 map ops returned int, and a call the verifier patched
		// to the op directly leaves -EEXIST zero-extended in R0 (seen on
		// 6.1): compare the low 32 bits, sign-extended. No JMP32 (5.1+).
		insns.Add(bpf.LSh.Imm(bpf.R0, 32).WithSource(bpf.Comment("already inserted (-EEXIST in the low 32 bits): the insert time counts")))
		insns.Add(bpf.ArSh.Imm(bpf.R0, 32))
		insns.Add(bpf.JEq.Imm(bpf.R0, -eexist, "exit"))
	}
	insns.Append(lostIncrement("full"))
	insns.Append(asm.Return("exit", 0))
	return insns.Instructions, nil
}

// lostIncrement counts an event that could not be measured.
func lostIncrement(prefix string) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.Mov.Imm(bpf.R1, 0).WithSource(bpf.Comment("lost[0]++: the event cannot be measured")))
	insns.Add(asm.StoreKey(valOff, bpf.R1, bpf.Word))
	insns.Append(asm.PerCPUArrayIncrement(prefix+"_lost", "lost", valOff))
	return insns.Instructions
}

// completeProgram measures a request from its start to its completion and
// counts the latency in the kernel.
func completeProgram(cfg Config) (bpf.Instructions, error) {
	key, err := loadKey(cfg, completeEvent)
	if err != nil {
		return nil, err
	}
	var insns asm.Seq
	insns.Append(key)
	if cfg.Slots > 0 {
		insns.Append(releaseSlot("hash", "measure", cfg.Slots))
	}
	lookup := asm.Note(asm.MapLookup("start", keyOff), "ts = start[key]; issued before tracing began: not counted")
	if cfg.Slots > 0 {
		lookup[0] = lookup[0].WithSymbol("hash")
	}
	insns.Append(lookup)
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, "exit"))
	insns.Add(bpf.LoadMem(bpf.R7, bpf.R0, 0, bpf.DWord))
	insns.Append(asm.Note(asm.MapDelete("start", keyOff), "delete start[key]"))
	now := asm.Ktime(bpf.R1)
	if cfg.Slots > 0 {
		now[0] = now[0].WithSymbol("measure")
	}
	insns.Append(now)
	insns.Add(bpf.Sub.Reg(bpf.R1, bpf.R7).WithSource(bpf.Comment("r1 = latency in ns; negative: lost")))
	insns.Add(bpf.JSLT.Imm(bpf.R1, 0, "negative"))
	if cfg.Heatmap {
		insns.Append(asm.DecadeSlot("slot", bpf.R1, bpf.R2, bpf.R3))
	} else {
		if cfg.Divisor > 1 {
			insns.Add(bpf.Div.Imm(bpf.R1, cfg.Divisor).WithSource(bpf.Comment(fmt.Sprintf("to units of %d ns", cfg.Divisor))))
		}
		insns.Append(asm.Log2Slot("slot", bpf.R1, bpf.R2, bpf.R3))
	}
	switch cfg.By {
	case ByNone:
		insns.Add(asm.StoreKey(histOff, bpf.R3, bpf.Word))
		insns.Append(asm.PerCPUArrayIncrement("count", "hist", histOff))
		insns.Add(bpf.Ja.Label("exit"))
	case ByDisk:
		insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, keyOff, bpf.Word).WithSource(bpf.Comment("histogram of this device")))
		insns.Add(asm.StoreKey(histOff, bpf.R1, bpf.Word))
		insns.Add(asm.StoreKey(histOff+4, bpf.R3, bpf.Word))
		insns.Append(asm.HashIncrement("count", "hist", histOff, valOff, "lost", nil))
		insns.Add(bpf.Ja.Label("exit"))
	case ByFlags:
		insns.Add(asm.StoreKey(histOff+4, bpf.R3, bpf.Word))
		if cfg.Args != nil {
			insns.Append(cfg.Args.opArgs())
		} else {
			op, err := opOf(cfg.Complete.Rwbs)
			if err != nil {
				return nil, err
			}
			insns.Append(op)
		}
		insns.Add(asm.StoreKey(histOff, bpf.R1, bpf.Word))
		insns.Append(asm.HashIncrement("count", "hist", histOff, valOff, "lost", nil))
		insns.Add(bpf.Ja.Label("exit"))
	}
	neg := lostIncrement("negative")
	neg[0] = neg[0].WithSymbol("negative")
	insns.Append(neg)
	insns.Append(asm.Return("exit", 0))
	return insns.Instructions, nil
}

// opOf puts the operation letter of rwbs into R1: rwbs[0], or rwbs[1]
// after a leading 'F' (preflush), except that "FN" (a flush alone) is 'F'.
func opOf(rwbs tracefs.Field) (bpf.Instructions, error) {
	if rwbs.Name == "" || rwbs.Size < 2 {
		return nil, fmt.Errorf("block_rq_complete has no rwbs field: -F needs it")
	}
	var insns asm.Seq
	insns.Add(bpf.LoadMem(bpf.R1, asm.RegCtx, int16(rwbs.Offset), bpf.Byte).
		WithSource(bpf.Comment(fmt.Sprintf("r1 = operation from rwbs (offset %d): R, W, D, F(lush), ...", rwbs.Offset))))
	insns.Add(bpf.JNE.Imm(bpf.R1, 'F', "op_done"))
	insns.Add(bpf.LoadMem(bpf.R2, asm.RegCtx, int16(rwbs.Offset+1), bpf.Byte))
	insns.Add(bpf.JEq.Imm(bpf.R2, 'N', "op_done"))
	insns.Add(bpf.JEq.Imm(bpf.R2, 0, "op_done"))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R2))
	insns.Add(asm.Nop().WithSymbol("op_done"))
	return insns.Instructions, nil
}

// Collection returns the maps (start: requests in flight; slots: their
// direct-mapped fast path; hist; lost) and the programs: issue, complete,
// and with Insert, insert.
func Collection(cfg Config) (*ebpf.CollectionSpec, error) {
	if cfg.Slots > 0 && (cfg.Insert != nil || cfg.Slots&(cfg.Slots-1) != 0) {
		return nil, fmt.Errorf("%d slots: a power of two, and not with -Q (the insert time would not win over the issue time)", cfg.Slots)
	}
	issue, err := startProgram(cfg, issueEvent, cfg.Insert != nil, cfg.Slots)
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
	progType := func(name string) *ebpf.ProgramSpec {
		p := &ebpf.ProgramSpec{Name: "iolat_" + name, Type: ebpf.TracePoint, License: "GPL"}
		if cfg.Args != nil && cfg.Args.Hook == hook.Raw {
			p.Type = ebpf.RawTracepoint
		} else if cfg.Args != nil && cfg.Args.Hook == hook.BTF {
			p.Type, p.AttachType, p.AttachTo = ebpf.Tracing, ebpf.AttachTraceRawTp, "block_rq_"+name
		}
		return p
	}
	spec := &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{
			"start": {Name: "iolat_start", Type: ebpf.Hash, KeySize: keySize, ValueSize: 8, MaxEntries: maxInFlight},
			"lost":  {Name: "iolat_lost", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1},
			"hist":  {Name: "iolat_hist", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: nslots},
		},
		Programs: map[string]*ebpf.ProgramSpec{
			"issue":    progType("issue"),
			"complete": progType("complete"),
		},
	}
	spec.Programs["issue"].Instructions = issue
	spec.Programs["complete"].Instructions = complete
	if cfg.Slots > 0 {
		spec.Maps["slots"] = &ebpf.MapSpec{Name: "iolat_slots", Type: ebpf.Array, KeySize: 4, ValueSize: slotSize, MaxEntries: cfg.Slots}
	}
	if cfg.Args != nil && cfg.Args.Hook == hook.BTF {
		spec.Maps["anchor"] = &ebpf.MapSpec{Name: "iolat_anchor", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1}
	}
	if cfg.By != ByNone {
		spec.Maps["hist"] = &ebpf.MapSpec{Name: "iolat_hist", Type: ebpf.Hash, KeySize: 8, ValueSize: 8, MaxEntries: maxHists}
	}
	if cfg.Insert != nil {
		insert, err := startProgram(cfg, insertEvent, false, 0)
		if err != nil {
			return nil, err
		}
		spec.Programs["insert"] = progType("insert")
		spec.Programs["insert"].Instructions = insert
	}
	return spec, nil
}

// ArgsFor finds, in the kernel's BTF, where the raw or BTF tracepoint
// programs find the request and what they read through it. A raw program
// that reads nothing through it (deref false) needs only the request's
// place among the arguments, found without BTF: the queue comes first
// where block_rq_issue and block_rq_insert pass two (before 5.11).
func ArgsFor(h hook.Hook, queued, deref bool) (*Args, error) {
	a := &Args{Hook: h, RqDisk: -1, ProbeRead: kernel.Readers().Kernel}
	var err error
	if h == hook.Raw && !deref {
		n, err := hook.RawTracepointArgs("block_rq_issue", 2)
		if err != nil {
			return nil, err
		}
		a.IssueArg, a.InsertArg = n-1, n-1
		return a, nil
	}
	if a.IssueArg, err = kbtf.TracepointArg("block_rq_issue", "request"); err != nil {
		return nil, err
	}
	if a.CompleteArg, err = kbtf.TracepointArg("block_rq_complete", "request"); err != nil {
		return nil, err
	}
	if queued {
		if a.InsertArg, err = kbtf.TracepointArg("block_rq_insert", "request"); err != nil {
			return nil, err
		}
	}
	if off, err := kbtf.MemberOffset("request", "rq_disk"); err == nil {
		a.RqDisk = off // before 5.16
	} else {
		if a.Q, err = kbtf.MemberOffset("request", "q"); err != nil {
			return nil, err
		}
		if a.QDisk, err = kbtf.MemberOffset("request_queue", "disk"); err != nil {
			return nil, err
		}
	}
	for _, m := range []struct {
		st, name string
		off      *int
	}{{"gendisk", "major", &a.Major}, {"gendisk", "first_minor", &a.FirstMinor}, {"request", "cmd_flags", &a.CmdFlags}} {
		if *m.off, err = kbtf.MemberOffset(m.st, m.name); err != nil {
			return nil, err
		}
	}
	return a, nil
}
