// Package prog builds dropmon's program: kfree_skb counted by (location,
// reason[, kernel stack]) in a hash behind a per-CPU cache, on a perf, raw
// or BTF tracepoint.
package prog

import (
	"fmt"
	"math/bits"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/tracefs"
)

const (
	maxDrops   = 10240 // (location, reason, stack) keys
	MaxStacks  = 2048  // per stack map: ids 0..2047 in stacks, 2048.. in overflow
	eexist     = -17   // bpf_get_stackid: the id's bucket holds another stack
	cacheSlots = 256   // per-CPU fast-path slots, a power of two
	StackDepth = 127   // PERF_MAX_STACK_DEPTH
	NoStack    = -1    // the stack slot of the key without --stacks
	keyOff     = -16   // {u64 location; u32 reason; s32 stack id}
	valOff     = -24
	readOff    = -32       // bpf_probe_read_kernel's buffer (raw tracepoint)
	Name       = "dropmon" // the program's name in Collection
)

// Layout is where kfree_skb keeps what dropmon reads, from the format file.
type Layout struct {
	Location tracefs.Field
	Reason   *tracefs.Field // nil before 5.17, or with --no-reason
	Protocol tracefs.Field
}

func LayoutOf(f *tracefs.Format, noReason bool) (Layout, error) {
	var l Layout
	var err error
	if l.Location, err = f.MustField("location"); err != nil {
		return l, err
	}
	if l.Protocol, err = f.MustField("protocol"); err != nil {
		return l, err
	}
	if r, ok := f.Field("reason"); ok && !noReason {
		l.Reason = &r
	}
	return l, nil
}

// Config says which program variant to build.
type Config struct {
	Layout   Layout
	Protocol int // only this protocol (host order, as the tracepoint stores it); -1 for all
	Stacks   bool
	// Hook is how the program reaches kfree_skb: through its record
	// (perf, at Layout's offsets), or its arguments (raw, btf):
	// kfree_skb(skb, location[, reason]), with skb->protocol at ProtoOff.
	Hook      hook.Hook
	ProtoOff  int
	ProbeRead bpf.BuiltinFunc // raw: how to read skb->protocol
}

// Program counts each kfree_skb by (location, reason[, kernel stack]).
func Program(cfg Config) (bpf.Instructions, error) {
	if cfg.Hook == hook.Raw || cfg.Hook == hook.BTF {
		return argsProgram(cfg)
	}
	l := cfg.Layout
	var insns asm.Seq
	insns.Append(asm.Prologue())
	if cfg.Protocol >= 0 {
		proto, err := asm.LoadField(bpf.R1, "protocol", l.Protocol.Offset, l.Protocol.Size, false)
		if err != nil {
			return nil, err
		}
		insns.Append(proto)
		insns.Add(bpf.JNE.Imm(bpf.R1, int32(cfg.Protocol), "exit").
			WithSource(bpf.Comment(fmt.Sprintf("only protocol 0x%04x", cfg.Protocol))))
	}
	loc, err := asm.LoadField(bpf.R1, "location", l.Location.Offset, l.Location.Size, false)
	if err != nil {
		return nil, err
	}
	insns.Append(loc)
	insns.Add(asm.StoreKey(keyOff, bpf.R1, bpf.DWord))
	if l.Reason != nil {
		reason, err := asm.LoadField(bpf.R1, "reason", l.Reason.Offset, l.Reason.Size, false)
		if err != nil {
			return nil, err
		}
		insns.Append(reason)
	} else {
		insns.Add(bpf.Mov.Imm(bpf.R1, 0).WithSource(bpf.Comment("no reason on this kernel, or --no-reason")))
	}
	insns.Add(asm.StoreKey(keyOff+8, bpf.R1, bpf.Word))
	insns.Append(countKey(cfg))
	return insns.Instructions, nil
}

// argsProgram is program for a raw or BTF tracepoint: the same key, from
// kfree_skb's arguments, args[0] = skb, args[1] = location, args[2] =
// reason (5.17+). No record is built for it.
func argsProgram(cfg Config) (bpf.Instructions, error) {
	var insns asm.Seq
	insns.Append(asm.Prologue())
	if cfg.Protocol >= 0 {
		insns.Add(bpf.LoadMem(bpf.R1, asm.RegCtx, 0, bpf.DWord).WithSource(bpf.Comment("r1 = skb (args[0])")))
		note := fmt.Sprintf("r1 = skb->protocol (offset %d, network order)", cfg.ProtoOff)
		if cfg.Hook == hook.BTF {
			insns.Add(bpf.LoadMem(bpf.R1, bpf.R1, int16(cfg.ProtoOff), bpf.Half).WithSource(bpf.Comment(note)))
		} else {
			insns.Add(bpf.Add.Imm(bpf.R1, int32(cfg.ProtoOff)).WithSource(bpf.Comment(note)))
			insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R1))
			insns.Add(bpf.Mov.Reg(bpf.R1, bpf.RFP))
			insns.Add(bpf.Add.Imm(bpf.R1, readOff))
			insns.Add(bpf.Mov.Imm(bpf.R2, 2))
			insns.Add(cfg.ProbeRead.Call())
			insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, readOff, bpf.Half))
		}
		// Compared in network order: the EtherType's bytes swapped (the
		// toolkit's architectures are little-endian).
		insns.Add(bpf.JNE.Imm(bpf.R1, int32(bits.ReverseBytes16(uint16(cfg.Protocol))), "exit").
			WithSource(bpf.Comment(fmt.Sprintf("only protocol 0x%04x", cfg.Protocol))))
	}
	insns.Add(bpf.LoadMem(bpf.R1, asm.RegCtx, 8, bpf.DWord).WithSource(bpf.Comment("r1 = location (args[1])")))
	insns.Add(asm.StoreKey(keyOff, bpf.R1, bpf.DWord))
	if cfg.Layout.Reason != nil {
		insns.Add(bpf.LoadMem(bpf.R1, asm.RegCtx, 16, bpf.DWord).WithSource(bpf.Comment("r1 = reason (args[2])")))
	} else {
		insns.Add(bpf.Mov.Imm(bpf.R1, 0).WithSource(bpf.Comment("no reason on this kernel, or --no-reason")))
	}
	insns.Add(asm.StoreKey(keyOff+8, bpf.R1, bpf.Word))
	insns.Append(countKey(cfg))
	return insns.Instructions, nil
}

// countKey adds the stack id to the key and counts it.
func countKey(cfg Config) bpf.Instructions {
	var insns asm.Seq
	if cfg.Stacks {
		insns.Add(bpf.Mov.Reg(bpf.R1, asm.RegCtx).WithSource(bpf.Comment("stack id = bpf_get_stackid(ctx, stacks, 0); < 0 if lost")))
		insns.Add(bpf.LoadMapPtr(bpf.R2, 0).WithReference("stacks"))
		insns.Add(bpf.Mov.Imm(bpf.R3, 0))
		insns.Add(bpf.FnGetStackid.Call())
		insns.Add(bpf.JNE.Imm(bpf.R0, eexist, "stack_key"))
		// -EEXIST: the stack's hash bucket holds another stack. The
		// overflow map, which only such stacks reach, takes it; its
		// ids follow the first map's.
		insns.Add(bpf.Mov.Reg(bpf.R1, asm.RegCtx).WithSource(bpf.Comment("a hash collision: stack id = MaxStacks + bpf_get_stackid(ctx, overflow, 0)")))
		insns.Add(bpf.LoadMapPtr(bpf.R2, 0).WithReference("overflow"))
		insns.Add(bpf.Mov.Imm(bpf.R3, 0))
		insns.Add(bpf.FnGetStackid.Call())
		insns.Add(bpf.JSGT.Imm(bpf.R0, -1, "stack_overflow"))
		insns.Add(bpf.Ja.Label("stack_key"))
		insns.Add(bpf.Add.Imm(bpf.R0, MaxStacks).WithSymbol("stack_overflow"))
		insns.Add(asm.StoreKey(keyOff+12, bpf.R0, bpf.Word).WithSymbol("stack_key"))
	} else {
		insns.Add(bpf.Mov.Imm(bpf.R1, NoStack))
		insns.Add(asm.StoreKey(keyOff+12, bpf.R1, bpf.Word))
	}
	// Most drops come from a few sites: a per-CPU direct-mapped cache
	// counts them without hashing; the hash takes the rest.
	insns.Append(asm.CacheIncrement("cache", "cache", keyOff, valOff, cacheSlots-1, "hash", "exit"))
	hash := asm.HashIncrement("count", "drops", keyOff, valOff, "lost", nil)
	hash[0] = hash[0].WithSymbol("hash")
	insns.Append(hash)
	insns.Append(asm.Return("exit", 0))
	return insns.Instructions
}

// Collection is Program with the maps it counts in: drops (the hash),
// cache (the per-CPU fast path), lost, and with Stacks the stack maps,
// stacks and overflow (ids from MaxStacks up).
func Collection(cfg Config) (*ebpf.CollectionSpec, error) {
	insns, err := Program(cfg)
	if err != nil {
		return nil, err
	}
	maps := map[string]*ebpf.MapSpec{
		"drops": {Name: "dropmon_drops", Type: ebpf.Hash, KeySize: 16, ValueSize: 8, MaxEntries: maxDrops},
		"cache": {Name: "dropmon_cache", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 24, MaxEntries: cacheSlots},
		"lost":  {Name: "dropmon_lost", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1},
	}
	if cfg.Stacks {
		maps["stacks"] = &ebpf.MapSpec{Name: "dropmon_stacks", Type: ebpf.StackTrace, KeySize: 4, ValueSize: 8 * StackDepth, MaxEntries: MaxStacks}
		maps["overflow"] = &ebpf.MapSpec{Name: "dropmon_ovstack", Type: ebpf.StackTrace, KeySize: 4, ValueSize: 8 * StackDepth, MaxEntries: MaxStacks}
	}
	prog := &ebpf.ProgramSpec{Name: Name, Type: ebpf.TracePoint, License: "GPL", Instructions: insns}
	switch cfg.Hook {
	case hook.Raw:
		prog.Type = ebpf.RawTracepoint
	case hook.BTF:
		prog.Type, prog.AttachType, prog.AttachTo = ebpf.Tracing, ebpf.AttachTraceRawTp, "kfree_skb"
	}
	return &ebpf.CollectionSpec{Maps: maps, Programs: map[string]*ebpf.ProgramSpec{Name: prog}}, nil
}

// Stack reads the frames of a stack id from coll: below MaxStacks from the
// stacks map, from MaxStacks up from the overflow map; a negative id is
// the error bpf_get_stackid returned.
func Stack(coll *ebpf.Collection, id int32) ([StackDepth]uint64, error) {
	var pcs [StackDepth]uint64
	if id < 0 {
		return pcs, fmt.Errorf("lost: error %d", id)
	}
	m, key := coll.Maps["stacks"], uint32(id)
	if id >= MaxStacks {
		m, key = coll.Maps["overflow"], uint32(id-MaxStacks)
	}
	err := m.Lookup(key, &pcs)
	return pcs, err
}
