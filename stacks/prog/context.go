package prog

import (
	"fmt"

	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
)

// The context a process publishes for profilers, read at each sample with
// the labels (Config.Context): the OpenTelemetry thread context (OTEP
// 4947: the thread-local otel_thread_ctx_v1 points at a record of a trace
// id, a span id, a valid byte, and attributes as {u8 key index; u8 length;
// bytes}) and Polar Signals' custom labels (a thread-local label set of
// {len, buf} keys and values; ABI v1 through a pointer, v0 in place).
// Their locations follow the labels' in the labels map: the record's
// pointer, then the label set's (LocIndirect: the location holds a pointer
// to it). What was read goes into the context, ContextSize bytes after the
// key in the scratch value; the contexts hash gives each distinct one an
// id, kept in the key's last 8 bytes: a sample key stays small whatever a
// context holds, and user space reads the contexts by id.
//
// The context: {u8 read (bit 0 the record, bit 1 the label set); u8 pad[7];
// the record's first OTelRecord bytes, its attributes cut at OTelAttrs
// and zero past their size; CustomEntries labels of customEntry bytes:
// {u16 key length; u16 value length; u8 read; u8 pad[3]; key[CustomKeyLen];
// value[CustomValLen]}, the lengths cut at their arrays'}.
const (
	OTelHeader    = 28  // trace id, span id, valid, reserved, u16 attributes' size
	OTelAttrs     = 100 // attribute bytes kept
	CustomEntries = 4
	CustomKeyLen  = 16
	CustomValLen  = 40
	CustomEntry   = 8 + CustomKeyLen + CustomValLen

	ContextOTel   = 8
	ContextCustom = ContextOTel + OTelHeader + OTelAttrs
	ContextSize   = ContextCustom + CustomEntries*CustomEntry

	LocIndirect = 0x100 // a mode's flag: the location holds a pointer to the value
	maxContexts = 4096
)

// Locations is how many locations a process has in the labels map: one
// per label, then the context's two.
func (c Config) Locations() int {
	if c.Context {
		return len(c.Labels) + 2
	}
	return len(c.Labels)
}

// ContextOffset is where the context's id sits in a key.
func (c Config) ContextOffset() int { return c.LabelOffset(len(c.Labels)) }

// context reads the sampled thread's OpenTelemetry record and custom
// labels into the context, and its id into the key (0: none read, or the
// contexts table full). R7: the process's locations; R8: the scratch.
func context(cfg Config) bpf.Instructions {
	n := len(cfg.Labels)
	ctx := int32(keyBase + cfg.KeySize())
	rec := int16(ctx + ContextOTel)
	var insns asm.Seq
	// Most processes publish neither: their samples skip the clearing
	// read of address 0, a fault taken on every sample.
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R7, int16(LabelLocSize*n), bpf.Word).WithSource(bpf.Comment("neither in this process: no context, no id")))
	insns.Add(bpf.LoadMem(bpf.R2, bpf.R7, int16(LabelLocSize*(n+1)), bpf.Word))
	insns.Add(bpf.Or.Reg(bpf.R1, bpf.R2))
	insns.Add(bpf.JEq.Imm(bpf.R1, 0, "context_done"))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R8).WithSource(bpf.Comment("the context: zeroed (a read of address 0 fails and clears it)")))
	insns.Add(bpf.Add.Imm(bpf.R1, ctx))
	insns.Add(bpf.Mov.Imm(bpf.R2, ContextSize))
	insns.Add(bpf.Mov.Imm(bpf.R3, 0))
	insns.Add(cfg.Readers.Kernel.Call())

	// The OpenTelemetry record: its pointer, its header (kept when valid
	// is 1: not in the middle of an update), its attributes.
	insns.Append(locate("otel", int16(LabelLocSize*n), "the OpenTelemetry thread context: the thread-local's address", false, cfg))
	read := readUser(cfg, fpRead, 8, "otel_next", "")
	read[0] = read[0].WithSymbol("otel_read").WithSource(bpf.Comment("the record's pointer, then its header"))
	insns.Append(read)
	insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.JEq.Imm(bpf.R3, 0, "otel_next"))
	insns.Append(readUser(cfg, fpRecord, OTelHeader, "otel_next", ""))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRecord+24, bpf.Byte))
	insns.Add(bpf.JNE.Imm(bpf.R1, 1, "otel_next"))
	for off := int16(0); off < 24; off += 8 {
		insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRecord+off, bpf.DWord))
		insns.Add(bpf.StoreMem(bpf.R8, rec+off, bpf.R1, bpf.DWord))
	}
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRecord+24, bpf.Word))
	insns.Add(bpf.StoreMem(bpf.R8, rec+24, bpf.R1, bpf.Word))
	insns.Add(bpf.LoadMem(bpf.R2, bpf.RFP, fpRecord+26, bpf.Half).WithSource(bpf.Comment(fmt.Sprintf("its attributes: their size, at most %d", OTelAttrs))))
	insns.Add(bpf.JEq.Imm(bpf.R2, 0, "otel_set"))
	insns.Add(bpf.JLE.Imm(bpf.R2, OTelAttrs, "otel_size"))
	insns.Add(bpf.Mov.Imm(bpf.R2, OTelAttrs))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R8).WithSymbol("otel_size"))
	insns.Add(bpf.Add.Imm(bpf.R1, int32(rec)+OTelHeader))
	insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.Add.Imm(bpf.R3, OTelHeader))
	insns.Add(cfg.Readers.User.Call())
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, "otel_set"))
	insns.Add(bpf.StoreImm(bpf.R8, rec+26, 0, bpf.Half).WithSource(bpf.Comment("unreadable: no attributes")))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R8, int16(ctx), bpf.Byte).WithSymbol("otel_set"))
	insns.Add(bpf.Or.Imm(bpf.R1, 1))
	insns.Add(bpf.StoreMem(bpf.R8, int16(ctx), bpf.R1, bpf.Byte))
	insns.Add(asm.Nop().WithSymbol("otel_next"))

	// The custom labels: the label set (through its pointer in ABI v1),
	// then each of its first labels with a key.
	insns.Append(locate("custom", int16(LabelLocSize*(n+1)), "custom labels: the thread-local's address", true, cfg))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R7, int16(LabelLocSize*(n+1)), bpf.Word).WithSymbol("custom_read"))
	insns.Add(bpf.And.Imm(bpf.R1, LocIndirect))
	insns.Add(bpf.JEq.Imm(bpf.R1, 0, "custom_set_read"))
	insns.Append(readUser(cfg, fpRead, 8, "custom_next", "v1: the pointer to the label set"))
	insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.JEq.Imm(bpf.R3, 0, "custom_next"))
	read = readUser(cfg, fpMapHead, 16, "custom_next", "")
	read[0] = read[0].WithSymbol("custom_set_read").WithSource(bpf.Comment("the label set's {storage, count}"))
	insns.Append(read)
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpMapHead, bpf.DWord))
	insns.Add(bpf.JEq.Imm(bpf.R1, 0, "custom_next"))
	for e := 0; e < CustomEntries; e++ {
		q := fmt.Sprintf("custom_e%d", e)
		entry := int16(ctx + ContextCustom + int32(CustomEntry*e))
		insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpMapHead+8, bpf.DWord).WithSource(bpf.Comment(fmt.Sprintf("label %d, when the set has it: {key {len, buf}, value {len, buf}}", e))))
		insns.Add(bpf.JLE.Imm(bpf.R1, int32(e), "custom_set"))
		insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpMapHead, bpf.DWord))
		insns.Add(bpf.Add.Imm(bpf.R3, int32(32*e)))
		insns.Append(readUser(cfg, fpRecord, 32, q+"_next", ""))
		insns.Append(bytesAt(q+"_key", fpRecord, CustomKeyLen, entry, entry+8, q+"_next", cfg))
		insns.Append(bytesAt(q+"_val", fpRecord+16, CustomValLen, entry+2, entry+8+CustomKeyLen, q+"_next", cfg))
		insns.Add(bpf.StoreImm(bpf.R8, entry+4, 1, bpf.Byte))
		insns.Add(asm.Nop().WithSymbol(q + "_next"))
	}
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R8, int16(ctx), bpf.Byte).WithSymbol("custom_set"))
	insns.Add(bpf.Or.Imm(bpf.R1, 2))
	insns.Add(bpf.StoreMem(bpf.R8, int16(ctx), bpf.R1, bpf.Byte))
	insns.Add(asm.Nop().WithSymbol("custom_next"))
	insns.Append(contextID(ctx, cfg))
	return insns.Instructions
}

// bytesAt reads a {len, buf} string (at fp off) into the context: its
// length, cut at max, as a u16 at lenAt, its bytes at to; to fail when
// buf is NULL or unreadable.
func bytesAt(p string, off int16, max int32, lenAt, to int16, fail string, cfg Config) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, off+8, bpf.DWord))
	insns.Add(bpf.JEq.Imm(bpf.R3, 0, fail))
	insns.Add(bpf.LoadMem(bpf.R2, bpf.RFP, off, bpf.DWord))
	insns.Add(bpf.JLE.Imm(bpf.R2, max, p+"_len"))
	insns.Add(bpf.Mov.Imm(bpf.R2, max))
	insns.Add(bpf.StoreMem(bpf.R8, lenAt, bpf.R2, bpf.Half).WithSymbol(p + "_len"))
	insns.Add(bpf.JEq.Imm(bpf.R2, 0, p+"_done"))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R8))
	insns.Add(bpf.Add.Imm(bpf.R1, int32(to)))
	insns.Add(cfg.Readers.User.Call())
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, fail))
	insns.Add(asm.Nop().WithSymbol(p + "_done"))
	return insns.Instructions
}

// contextID puts the context's id into the key: the one the contexts
// hash has for it, else a new one, this CPU's next (cpu << 32 | n, never
// 0), inserted. Nothing read: no id.
func contextID(ctx int32, cfg Config) bpf.Instructions {
	lookup := func(note string) bpf.Instructions {
		i := bpf.Instructions{
			bpf.LoadMapPtr(bpf.R1, 0).WithReference("contexts"),
			bpf.Mov.Reg(bpf.R2, bpf.R8),
			bpf.Add.Imm(bpf.R2, ctx),
			bpf.FnMapLookupElem.Call(),
		}
		if note != "" {
			i[0] = i[0].WithSource(bpf.Comment(note))
		}
		return i
	}
	var insns asm.Seq
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R8, int16(ctx), bpf.Byte))
	insns.Add(bpf.JEq.Imm(bpf.R1, 0, "context_done"))
	insns.Append(lookup("the context's id: contexts[context], else a new one"))
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, "context_found"))
	insns.Append(asm.MapLookup("context_ids", fpZero))
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, "context_done"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R0, 0, bpf.DWord))
	insns.Add(bpf.Add.Imm(bpf.R1, 1))
	insns.Add(bpf.StoreMem(bpf.R0, 0, bpf.R1, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.RFP, fpCtxID, bpf.R1, bpf.DWord))
	insns.Add(bpf.FnGetSmpProcessorId.Call())
	insns.Add(bpf.LSh.Imm(bpf.R0, 32))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpCtxID, bpf.DWord))
	insns.Add(bpf.Or.Reg(bpf.R1, bpf.R0))
	insns.Add(bpf.StoreMem(bpf.RFP, fpCtxID, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMapPtr(bpf.R1, 0).WithReference("contexts"))
	insns.Add(bpf.Mov.Reg(bpf.R2, bpf.R8))
	insns.Add(bpf.Add.Imm(bpf.R2, ctx))
	insns.Add(bpf.Mov.Reg(bpf.R3, bpf.RFP))
	insns.Add(bpf.Add.Imm(bpf.R3, fpCtxID))
	insns.Add(bpf.Mov.Imm(bpf.R4, asm.UpdateNoExist))
	insns.Add(bpf.FnMapUpdateElem.Call())
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, "context_store"))
	insns.Append(lookup("another CPU inserted it first, or the table is full (no id)"))
	slot := int16(keyBase + cfg.ContextOffset())
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, "context_done"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R0, 0, bpf.DWord).WithSymbol("context_found"))
	insns.Add(bpf.StoreMem(bpf.R8, slot, bpf.R1, bpf.DWord))
	insns.Add(bpf.Ja.Label("context_done"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpCtxID, bpf.DWord).WithSymbol("context_store"))
	insns.Add(bpf.StoreMem(bpf.R8, slot, bpf.R1, bpf.DWord))
	insns.Add(asm.Nop().WithSymbol("context_done"))
	return insns.Instructions
}
