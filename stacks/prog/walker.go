package prog

import (
	"fmt"

	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/unwind"
)

// unwindProg walks framesPerProg frames of the user stack by the row
// tables, then tail-calls itself; the walk's state lives in the scratch
// value. Registers in a frame: R6 the address in the file, R7 and R8 the
// row search, R9 the scratch value.
func unwindProg(cfg Config) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.StoreMem(bpf.RFP, fpCtx, bpf.R1, bpf.DWord).WithSource(bpf.Comment("r9 = the per-CPU scratch: key and walk state")))
	insns.Add(bpf.StoreImm(bpf.RFP, fpZero, 0, bpf.Word))
	insns.Append(asm.MapLookup("scratch", fpZero))
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, "exit"))
	insns.Add(bpf.Mov.Reg(bpf.R9, bpf.R0))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, keyPid, bpf.Word))
	insns.Add(bpf.StoreMem(bpf.RFP, fpTgid, bpf.R1, bpf.Word))
	for f := 0; f < framesPerProg; f++ {
		insns.Append(frame(cfg, fmt.Sprintf("f%d", f), f == framesPerProg-1))
	}
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpCtx, bpf.DWord).WithSymbol("next").WithSource(bpf.Comment("more frames: tail call this program again (31 times walk 256 frames; the kernel allows 32, 33 since 5.17)")))
	insns.Add(bpf.LoadMapPtr(bpf.R2, 0).WithReference("progs"))
	insns.Add(bpf.Mov.Imm(bpf.R3, 0))
	insns.Add(bpf.FnTailCall.Call())
	insns.Add(bpf.Mov.Imm(bpf.R1, StopTruncated))
	insns.Add(bpf.Ja.Label("stop"))
	insns.Add(bpf.Mov.Imm(bpf.R1, StopNoRow).WithSymbol("no_row"))
	insns.Add(bpf.Ja.Label("signal"))
	insns.Add(bpf.Mov.Imm(bpf.R1, StopNoTable).WithSymbol("no_table"))
	insns.Add(bpf.Ja.Label("signal"))
	insns.Add(bpf.Mov.Imm(bpf.R1, StopRead).WithSymbol("read_error"))
	insns.Add(bpf.Ja.Label("stop"))
	insns.Add(bpf.Mov.Imm(bpf.R1, StopTruncated).WithSymbol("truncated"))
	insns.Add(bpf.Ja.Label("stop"))
	insns.Add(bpf.Mov.Imm(bpf.R1, StopEnd).WithSymbol("end"))
	insns.Add(bpf.Ja.Label("stop"))
	insns.Append(signalFrame(cfg))
	insns.Append(deferred(cfg))
	insns.Add(bpf.StoreMem(bpf.R9, keyStop, bpf.R1, bpf.Byte).WithSymbol("stop"))
	insns.Append(finish(cfg, "count", bpf.R9, false))
	insns.Append(asm.Return("exit", 0))
	return insns.Instructions
}

// frame steps one frame: record the pc, find its file and row, compute the
// CFA, read the return address and the saved rbp. last frames of a program
// fall through to the tail call.
func frame(cfg Config, p string, last bool) bpf.Instructions {
	next := "next"
	if !last {
		next = p + "_end"
	}
	var insns asm.Seq
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, stateN, bpf.DWord).WithSymbol(p).WithSource(bpf.Comment("frame: key.user[n++] = pc; stop at the depth limit or pc 0")))
	insns.Add(bpf.JGE.Imm(bpf.R1, int32(cfg.UserDepth), "truncated"))
	insns.Add(bpf.LoadMem(bpf.R2, bpf.R9, statePC, bpf.DWord))
	insns.Add(bpf.JEq.Imm(bpf.R2, 0, "end"))
	insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R1))
	insns.Add(bpf.LSh.Imm(bpf.R3, 3))
	insns.Add(bpf.Add.Reg(bpf.R3, bpf.R9))
	insns.Add(bpf.StoreMem(bpf.R3, int16(cfg.keyUser()), bpf.R2, bpf.DWord))
	insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R1))
	insns.Add(bpf.Add.Imm(bpf.R3, 1))
	insns.Add(bpf.StoreMem(bpf.R9, stateN, bpf.R3, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R3, bpf.R9, stateRA, bpf.Word).WithSource(bpf.Comment("a return address points past its call: look up pc-1 (callers' pcs are)")))
	insns.Add(bpf.Sub.Reg(bpf.R2, bpf.R3))
	insns.Add(bpf.StoreImm(bpf.R9, stateRA, 1, bpf.Word))
	insns.Add(bpf.StoreMem(bpf.RFP, fpLookup, bpf.R2, bpf.DWord))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R2).WithSource(bpf.Comment("in the mapping cached (address - start < length): no trie lookup")))
	insns.Add(bpf.LoadMem(bpf.R3, bpf.R9, stateMapStart, bpf.DWord))
	insns.Add(bpf.Sub.Reg(bpf.R1, bpf.R3))
	insns.Add(bpf.LoadMem(bpf.R3, bpf.R9, stateMapLen, bpf.DWord))
	insns.Add(bpf.JGT.Reg(bpf.R3, bpf.R1, p+"_mapped"))
	insns.Add(bpf.StoreImm(bpf.RFP, fpLPM, 96, bpf.Word).WithSource(bpf.Comment("mappings: longest prefix of {pid, address}, big-endian")))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, keyPid, bpf.Word))
	insns.Add(bpf.HostTo(bpf.BE, bpf.R1, bpf.Word))
	insns.Add(bpf.StoreMem(bpf.RFP, fpLPM+4, bpf.R1, bpf.Word))
	insns.Add(bpf.HostTo(bpf.BE, bpf.R2, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.RFP, fpLPM+8, bpf.R2, bpf.DWord))
	insns.Append(asm.MapLookup("mappings", fpLPM))
	insns.Add(bpf.JEq.Imm(bpf.R0, 0, "deferred"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R0, 0, bpf.DWord).WithSource(bpf.Comment("cache it: first and rows, bias, start, length")))
	insns.Add(bpf.StoreMem(bpf.R9, stateMapFirst, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R0, 8, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R9, stateMapBias, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R0, 16, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R9, stateMapStart, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R2, bpf.R0, 24, bpf.DWord))
	insns.Add(bpf.Sub.Reg(bpf.R2, bpf.R1))
	insns.Add(bpf.StoreMem(bpf.R9, stateMapLen, bpf.R2, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R6, bpf.RFP, fpLookup, bpf.DWord).WithSymbol(p + "_mapped").WithSource(bpf.Comment("r6 = the address in the file; r7, r8 = its rows (none: a mapping known to have no table)")))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, stateMapBias, bpf.DWord))
	insns.Add(bpf.Sub.Reg(bpf.R6, bpf.R1))
	insns.Add(bpf.LoadMem(bpf.R7, bpf.R9, stateMapFirst, bpf.Word))
	insns.Add(bpf.LoadMem(bpf.R8, bpf.R9, stateMapCount, bpf.Word))
	insns.Add(bpf.JEq.Imm(bpf.R8, 0, p+"_notable"))
	insns.Append(rowSearch(p+"_search", "rows", "fences", int32(cfg.fences()-1), cfg.chunkShift(), bpf.R6, bpf.R7, bpf.R8, fpSearch, "no_row"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R0, 0, bpf.Word).WithSource(bpf.Comment("the row's address: above the target, the target is below the file's first row")))
	insns.Add(bpf.JGT.Reg(bpf.R1, bpf.R6, "no_row"))
	insns.Add(bpf.LoadMem(bpf.R2, bpf.R0, 4, bpf.Word).WithSource(bpf.Comment("the rule: base (bits 0-1), saved rbp (2-9), offset (10-31)")))
	insns.Add(bpf.StoreMem(bpf.RFP, fpRule, bpf.R2, bpf.DWord))
	if cfg.Arch.linkRegister() {
		insns.Append(stepLR(cfg, p, next))
		insns.Append(noTable(cfg, p, next))
		if !last {
			insns.Add(asm.Nop().WithSymbol(next))
		}
		return insns.Instructions
	}
	insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R2))
	insns.Add(bpf.And.Imm(bpf.R3, 3))
	insns.Add(bpf.Mov.Reg(bpf.R4, bpf.R2))
	insns.Add(bpf.RSh.Imm(bpf.R4, 10))
	insns.Add(bpf.JNE.Imm(bpf.R3, unwind.BaseStop, p+"_rsp"))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R4))
	insns.Add(bpf.JEq.Imm(bpf.R1, StopEnd, "stop"))
	insns.Add(bpf.Mov.Reg(bpf.R5, bpf.R4))
	insns.Add(bpf.And.Imm(bpf.R5, unwind.KindMask))
	insns.Add(bpf.JNE.Imm(bpf.R5, unwind.DerefRBP, "signal"))
	insns.Append(derefRBP(cfg, p))
	insns.Add(bpf.LoadMem(bpf.R5, bpf.R9, stateSP, bpf.DWord).WithSymbol(p + "_rsp"))
	insns.Add(bpf.JEq.Imm(bpf.R3, unwind.BaseRSP, p+"_cfa"))
	insns.Add(bpf.JNE.Imm(bpf.R3, unwind.BaseRBP, p+"_plt"))
	insns.Add(bpf.LoadMem(bpf.R5, bpf.R9, stateBP, bpf.DWord))
	insns.Add(bpf.Ja.Label(p + "_cfa"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, statePC, bpf.DWord).WithSymbol(p + "_plt").WithSource(bpf.Comment("PLT: cfa = rsp + 8 + ((pc & 15) >= cut) * 8")))
	insns.Add(bpf.And.Imm(bpf.R1, 15))
	insns.Add(bpf.Add.Imm(bpf.R5, 8))
	insns.Add(bpf.JGT.Reg(bpf.R4, bpf.R1, p+"_plt_lo")) // no JLT: 4.14+
	insns.Add(bpf.Add.Imm(bpf.R5, 8))
	insns.Add(bpf.Mov.Imm(bpf.R4, 0).WithSymbol(p + "_plt_lo"))
	insns.Add(bpf.Add.Reg(bpf.R5, bpf.R4).WithSymbol(p + "_cfa"))
	insns.Add(bpf.StoreMem(bpf.RFP, fpCFA, bpf.R5, bpf.DWord))
	// rbp saved just below the return address (every frame that keeps
	// frame pointers): both in one read, one helper call a frame less.
	insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpRule, bpf.DWord).WithSource(bpf.Comment("rbp saved at cfa - 16: rbp and the return address in one read")))
	insns.Add(bpf.LSh.Imm(bpf.R3, 54))
	insns.Add(bpf.ArSh.Imm(bpf.R3, 56))
	insns.Add(bpf.JNE.Imm(bpf.R3, -2, p+"_ra"))
	insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R5))
	insns.Add(bpf.Sub.Imm(bpf.R3, 16))
	insns.Append(readPair(cfg))
	insns.Add(bpf.Ja.Label(p + "_step"))
	insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R5).WithSymbol(p + "_ra").WithSource(bpf.Comment("return address = *(cfa - 8)")))
	insns.Add(bpf.Sub.Imm(bpf.R3, 8))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.RFP))
	insns.Add(bpf.Add.Imm(bpf.R1, fpRead))
	insns.Add(bpf.Mov.Imm(bpf.R2, 8))
	insns.Add(cfg.Readers.User.Call())
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, "read_error"))
	insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpRule, bpf.DWord).WithSource(bpf.Comment("rbp = *(cfa + 8*n) if the rule saved it")))
	insns.Add(bpf.LSh.Imm(bpf.R3, 54))
	insns.Add(bpf.ArSh.Imm(bpf.R3, 56))
	insns.Add(bpf.JEq.Imm(bpf.R3, 0, p+"_step"))
	insns.Add(bpf.LSh.Imm(bpf.R3, 3))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpCFA, bpf.DWord))
	insns.Add(bpf.Add.Reg(bpf.R3, bpf.R1))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R9))
	insns.Add(bpf.Add.Imm(bpf.R1, stateBP))
	insns.Add(bpf.Mov.Imm(bpf.R2, 8))
	insns.Add(cfg.Readers.User.Call())
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, "read_error"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpCFA, bpf.DWord).WithSymbol(p + "_step").WithSource(bpf.Comment("the caller: sp = cfa, pc = return address")))
	insns.Add(bpf.StoreMem(bpf.R9, stateSP, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R9, statePC, bpf.R1, bpf.DWord))
	insns.Add(bpf.Ja.Label(next))
	insns.Append(noTable(cfg, p, next))
	if !last {
		insns.Add(asm.Nop().WithSymbol(next))
	}
	return insns.Instructions
}

// readPair reads the 16 bytes at R3, a saved frame pointer then a return
// address: the first to the state's frame pointer, the second to fpRead,
// where a step takes the return address from.
func readPair(cfg Config) bpf.Instructions {
	return bpf.Instructions{
		bpf.Mov.Reg(bpf.R1, bpf.RFP),
		bpf.Add.Imm(bpf.R1, fpRead),
		bpf.Mov.Imm(bpf.R2, 16),
		cfg.Readers.User.Call(),
		bpf.JNE.Imm(bpf.R0, 0, "read_error"),
		bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord),
		bpf.StoreMem(bpf.R9, stateBP, bpf.R1, bpf.DWord),
		bpf.LoadMem(bpf.R1, bpf.RFP, fpRead+8, bpf.DWord),
		bpf.StoreMem(bpf.RFP, fpRead, bpf.R1, bpf.DWord),
	}
}

// stepLR steps an arm64 or riscv64 frame by its rule word (R2, also at
// fpRule; see unwind.ARM64): CFA = sp or x29 + offset; the return address
// in x30 (a frame that has not saved it: only where pc is exact, the
// sampled frame or one a signal interrupted), or at CFA - 8n, with x29
// below it if the frame saved the pair. riscv64 (ra for x30, s0 for x29)
// has one more: s0 saved at CFA - 8n and the return address back in ra
// (an epilogue between its two loads). arm64's return address loses its
// pointer authentication code (the bits above the 48 of a user address).
func stepLR(cfg Config, p, next string) bpf.Instructions {
	var insns asm.Seq
	insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R2).WithSource(bpf.Comment("the rule: base (bits 0-1), saves (2-3), slot (4-16), cfa/8 (17-31); a stop's reason in 10-13")))
	insns.Add(bpf.And.Imm(bpf.R3, 3))
	insns.Add(bpf.JNE.Imm(bpf.R3, unwind.BaseStop, p+"_base"))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R2))
	insns.Add(bpf.RSh.Imm(bpf.R1, 10))
	insns.Add(bpf.And.Imm(bpf.R1, unwind.KindMask))
	insns.Add(bpf.JEq.Imm(bpf.R1, StopEnd, "stop"))
	insns.Add(bpf.Ja.Label("signal"))
	insns.Add(bpf.LoadMem(bpf.R5, bpf.R9, stateSP, bpf.DWord).WithSymbol(p + "_base"))
	insns.Add(bpf.JEq.Imm(bpf.R3, unwind.BaseRSP, p+"_cfa"))
	insns.Add(bpf.LoadMem(bpf.R5, bpf.R9, stateBP, bpf.DWord))
	insns.Add(bpf.Mov.Reg(bpf.R4, bpf.R2).WithSymbol(p + "_cfa"))
	insns.Add(bpf.RSh.Imm(bpf.R4, armCFAShift))
	insns.Add(bpf.LSh.Imm(bpf.R4, 3))
	insns.Add(bpf.Add.Reg(bpf.R5, bpf.R4))
	insns.Add(bpf.StoreMem(bpf.RFP, fpCFA, bpf.R5, bpf.DWord))
	insns.Add(bpf.Mov.Reg(bpf.R4, bpf.R2))
	insns.Add(bpf.RSh.Imm(bpf.R4, armSavesShift))
	insns.Add(bpf.And.Imm(bpf.R4, 3))
	insns.Add(bpf.JNE.Imm(bpf.R4, unwind.SavesNone, p+"_saved"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpLookup, bpf.DWord).WithSource(bpf.Comment("nothing saved: the return address is x30's, known only where pc is exact")))
	insns.Add(bpf.LoadMem(bpf.R3, bpf.R9, statePC, bpf.DWord))
	insns.Add(bpf.JEq.Reg(bpf.R1, bpf.R3, p+"_lr"))
	insns.Add(bpf.Mov.Imm(bpf.R1, StopUnsupported).WithSymbol(p + "_inexact"))
	insns.Add(bpf.Ja.Label("signal"))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, stateLR, bpf.DWord).WithSymbol(p + "_lr"))
	insns.Add(bpf.StoreMem(bpf.RFP, fpRead, bpf.R1, bpf.DWord))
	insns.Add(bpf.Ja.Label(p + "_step"))
	insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R2).WithSymbol(p + "_saved").WithSource(bpf.Comment("the slot: cfa - 8n")))
	insns.Add(bpf.RSh.Imm(bpf.R3, armSlotShift))
	insns.Add(bpf.And.Imm(bpf.R3, armSlotMask))
	insns.Add(bpf.LSh.Imm(bpf.R3, 3))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R5))
	insns.Add(bpf.Sub.Reg(bpf.R1, bpf.R3))
	insns.Add(bpf.Mov.Reg(bpf.R3, bpf.R1))
	insns.Add(bpf.JEq.Imm(bpf.R4, unwind.SavesPair, p+"_pair"))
	if cfg.Arch == RISCV64 {
		insns.Add(bpf.JEq.Imm(bpf.R4, unwind.SavesFP, p+"_s0"))
	}
	insns.Append(read8(bpf.RFP, fpRead, cfg.Readers.User.Call(), "read_error"))
	insns.Add(bpf.Ja.Label(p + "_step"))
	if cfg.Arch == RISCV64 {
		insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpLookup, bpf.DWord).WithSymbol(p + "_s0").WithSource(bpf.Comment("s0 saved, the return address back in ra: known only where pc is exact")))
		insns.Add(bpf.LoadMem(bpf.R2, bpf.R9, statePC, bpf.DWord))
		insns.Add(bpf.JNE.Reg(bpf.R1, bpf.R2, p+"_inexact"))
		insns.Append(read8(bpf.R9, stateBP, cfg.Readers.User.Call(), "read_error"))
		insns.Add(bpf.Ja.Label(p + "_lr"))
	}
	pair := readPair(cfg)
	pair[0] = pair[0].WithSymbol(p + "_pair").WithSource(bpf.Comment("the pair: x29, then x30"))
	insns.Append(pair)
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpCFA, bpf.DWord).WithSymbol(p + "_step").WithSource(bpf.Comment("the caller: sp = cfa, pc = return address without its authentication code")))
	insns.Add(bpf.StoreMem(bpf.R9, stateSP, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord))
	if cfg.Arch == ARM64 {
		insns.Append(stripPAC(bpf.R1, bpf.R2))
	}
	insns.Add(bpf.StoreMem(bpf.R9, statePC, bpf.R1, bpf.DWord))
	insns.Add(bpf.Ja.Label(next))
	return insns.Instructions
}

// derefRBP computes the CFA of a realigned frame (gcc's DRAP: the rule
// word in R4, shifted, see unwind.DerefRBP): CFA = *(rbp + 8a) into R5,
// R4 = 0, and the caller's rbp = *(rbp + 8b) into the walk's state, then
// joins the common step at p_cfa (the word has no CFA-relative rbp).
func derefRBP(cfg Config, p string) bpf.Instructions {
	var insns asm.Seq
	field := func(shift int32) {
		insns.Add(bpf.LoadMem(bpf.R3, bpf.RFP, fpRule, bpf.DWord))
		insns.Add(bpf.LSh.Imm(bpf.R3, 64-8-shift))
		insns.Add(bpf.ArSh.Imm(bpf.R3, 56))
		insns.Add(bpf.LSh.Imm(bpf.R3, 3))
		insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, stateBP, bpf.DWord))
		insns.Add(bpf.Add.Reg(bpf.R3, bpf.R1))
	}
	field(unwind.DerefShift)
	insns.Instructions[0] = insns.Instructions[0].WithSource(bpf.Comment("realigned (DRAP): cfa = *(rbp + 8a), rbp = *(rbp + 8b)"))
	insns.Append(read8(bpf.RFP, fpCFA, cfg.Readers.User.Call(), "read_error"))
	field(unwind.DerefShift + 8)
	insns.Append(read8(bpf.R9, stateBP, cfg.Readers.User.Call(), "read_error"))
	insns.Add(bpf.LoadMem(bpf.R5, bpf.RFP, fpCFA, bpf.DWord))
	insns.Add(bpf.Mov.Imm(bpf.R4, 0))
	insns.Add(bpf.Ja.Label(p + "_cfa"))
	return insns.Instructions
}

// read8 reads the 8 bytes at the address in R3 into to+off with the read
// helper call; a failed read goes to fail.
func read8(to bpf.Register, off int32, call bpf.Instruction, fail string) bpf.Instructions {
	return bpf.Instructions{
		bpf.Mov.Reg(bpf.R1, to),
		bpf.Add.Imm(bpf.R1, off),
		bpf.Mov.Imm(bpf.R2, 8),
		call,
		bpf.JNE.Imm(bpf.R0, 0, fail),
	}
}

// readStack reads size bytes of the user stack at the walk's sp + off
// into dst + dstOff; a failed read ends the walk (read_error).
func readStack(cfg Config, off int32, dst bpf.Register, dstOff, size int32) bpf.Instructions {
	return bpf.Instructions{
		bpf.LoadMem(bpf.R3, bpf.R9, stateSP, bpf.DWord),
		bpf.Add.Imm(bpf.R3, off),
		bpf.Mov.Reg(bpf.R1, dst),
		bpf.Add.Imm(bpf.R1, dstOff),
		bpf.Mov.Imm(bpf.R2, size),
		cfg.Readers.User.Call(),
		bpf.JNE.Imm(bpf.R0, 0, "read_error"),
	}
}

// noTable steps a frame whose mapping is known to have no table (JIT
// code, a file without unwind information or past the table's room): eh
// stops there; auto steps by the frame pointer where that is plausible (a
// frame above the stack pointer, within 8 MiB of it, aligned), and marks
// the key: frame pointers are a guess in code built without them.
func noTable(cfg Config, p, next string) bpf.Instructions {
	var insns asm.Seq
	if cfg.Mode == UnwindEH {
		insns.Add(bpf.Ja.Label("no_table").WithSymbol(p + "_notable"))
		return insns.Instructions
	}
	first := bpf.LoadMem(bpf.R3, bpf.R9, stateBP, bpf.DWord).WithSource(bpf.Comment("frame pointers: {saved rbp, return address} at rbp, if rbp is a plausible frame"))
	if cfg.Arch == RISCV64 {
		first = first.WithSource(bpf.Comment("frame pointers: {saved s0, return address} below s0 (the caller's sp), if s0 is a plausible frame"))
	}
	if cfg.Arch.linkRegister() {
		// The vdso's trampoline has no table, and a frame record that
		// holds the link register, not pc: the signal frame has them both.
		code, sigreturn := "mov x8, #139; svc #0", int64(sigreturnARM64)
		if cfg.Arch == RISCV64 {
			code, sigreturn = "li a7, 139; ecall", sigreturnRISCV64
		}
		insns.Add(bpf.Mov.Reg(bpf.R1, bpf.RFP).WithSymbol(p + "_notable").WithSource(bpf.Comment("not the sigreturn trampoline (" + code + "): its frame record is not the interrupted code's")))
		insns.Add(bpf.Add.Imm(bpf.R1, fpRead))
		insns.Add(bpf.Mov.Imm(bpf.R2, 8))
		insns.Add(bpf.LoadMem(bpf.R3, bpf.R9, statePC, bpf.DWord))
		insns.Add(cfg.Readers.User.Call())
		insns.Add(bpf.JNE.Imm(bpf.R0, 0, p+"_fp"))
		insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord))
		insns.Add(bpf.LoadImm(bpf.R2, sigreturn, bpf.DWord))
		insns.Add(bpf.JEq.Reg(bpf.R1, bpf.R2, "no_table"))
		insns.Add(first.WithSymbol(p + "_fp"))
	} else {
		insns.Add(first.WithSymbol(p + "_notable"))
	}
	insns.Add(bpf.JEq.Imm(bpf.R3, 0, "end"))
	insns.Add(bpf.LoadMem(bpf.R2, bpf.R9, stateSP, bpf.DWord))
	if cfg.Arch == ARM64 {
		// Go's arm64 frames keep x29 8 bytes below sp (the frame pointer
		// saved at sp-8, the return address at sp).
		insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R3).WithSource(bpf.Comment("x29 at sp-8 or above (Go's frames), within 8 MiB")))
		insns.Add(bpf.Add.Imm(bpf.R1, 8))
		insns.Add(bpf.JGT.Reg(bpf.R2, bpf.R1, "no_table"))
		insns.Add(bpf.Sub.Reg(bpf.R1, bpf.R2))
	} else {
		insns.Add(bpf.JGE.Reg(bpf.R2, bpf.R3, "no_table"))
		insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R3))
		insns.Add(bpf.Sub.Reg(bpf.R1, bpf.R2))
	}
	insns.Add(bpf.JGT.Imm(bpf.R1, MaxFrame, "no_table"))
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.R3))
	insns.Add(bpf.And.Imm(bpf.R1, 7))
	insns.Add(bpf.JNE.Imm(bpf.R1, 0, "no_table"))
	if cfg.Arch == RISCV64 {
		insns.Add(bpf.Sub.Imm(bpf.R3, 16))
	}
	insns.Add(bpf.Mov.Reg(bpf.R1, bpf.RFP))
	insns.Add(bpf.Add.Imm(bpf.R1, fpRead))
	insns.Add(bpf.Mov.Imm(bpf.R2, 16))
	insns.Add(cfg.Readers.User.Call())
	insns.Add(bpf.JNE.Imm(bpf.R0, 0, "read_error"))
	insns.Add(bpf.StoreImm(bpf.R9, keyFP, 1, bpf.Byte))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.R9, stateBP, bpf.DWord))
	if cfg.Arch != RISCV64 {
		insns.Add(bpf.Add.Imm(bpf.R1, 16))
	}
	insns.Add(bpf.StoreMem(bpf.R9, stateSP, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead, bpf.DWord))
	insns.Add(bpf.StoreMem(bpf.R9, stateBP, bpf.R1, bpf.DWord))
	insns.Add(bpf.LoadMem(bpf.R1, bpf.RFP, fpRead+8, bpf.DWord))
	if cfg.Arch == ARM64 {
		insns.Append(stripPAC(bpf.R1, bpf.R2))
	}
	insns.Add(bpf.StoreMem(bpf.R9, statePC, bpf.R1, bpf.DWord))
	insns.Add(bpf.Ja.Label(next))
	return insns.Instructions
}

// MaxFrame is the most a frame-pointer step may move up the stack.
const MaxFrame = 8 << 20
