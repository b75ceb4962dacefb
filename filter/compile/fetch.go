package compile

import (
	"fmt"
	"strconv"

	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/uprobe"
)

// read probe-reads size bytes of kernel memory at the address in R1 to the
// stack at off.
func (c *compiler) read(size int, off int16) {
	c.emit(
		bpf.Mov.Reg(bpf.R3, bpf.R1).WithSource(bpf.Comment(fmt.Sprintf("read %d bytes at r1 with %v", size, c.t.Read.Kernel))),
		bpf.Mov.Reg(bpf.R1, bpf.RFP),
		bpf.Add.Imm(bpf.R1, int32(off)),
		bpf.Mov.Imm(bpf.R2, int32(size)),
		c.t.Read.Kernel.Call(),
	)
}

func sizeOf(n int) bpf.Size {
	switch n {
	case 1:
		return bpf.Byte
	case 2:
		return bpf.Half
	case 4:
		return bpf.Word
	}
	return bpf.DWord
}

// fetchInt emits code that leaves an integer value in dst, extended to 64
// bits by its sign. It may call helpers: R1-R5 are clobbered.
func (c *compiler) fetchInt(v value, dst bpf.Register) error {
	if v.size != 1 && v.size != 2 && v.size != 4 && v.size != 8 {
		return fmt.Errorf("%s has an unsupported size %d", v.name, v.size)
	}
	narrow := v.size < 8 // a register's upper bits need clearing or extending
	switch v.src {
	case srcCtx:
		ld, err := asm.LoadField(dst, v.name, v.ctxOff, v.size, v.signed)
		if err != nil {
			return err
		}
		c.emit(ld...)
		return nil // LoadField extends
	case srcArg:
		where := fmt.Sprintf("register at pt_regs+%d", v.regOff)
		if c.slots() {
			where = fmt.Sprintf("the trampoline's slot %d", v.regOff/8)
		}
		c.emit(bpf.LoadMem(dst, asm.RegCtx, v.regOff, c.regWord()).WithSource(bpf.Comment(fmt.Sprintf("%s = %s (%s)", dst, v.name, where))))
		// A 4-byte register (32-bit ARM) is loaded zero-extended.
		narrow = v.size < c.regWord().Sizeof() || v.signed && v.size < 8
	case srcEntry:
		c.emitEntryLoad(dst, v)
		narrow = v.size < c.regWord().Sizeof() && !v.nr || v.size < 8 && v.signed
	case srcWalk:
		c.read(v.size, scratchOff)
		c.emit(bpf.LoadMem(dst, bpf.RFP, scratchOff, sizeOf(v.size)))
		narrow = v.signed && v.size < 8 // loaded at its size: zero-extended already
	case srcUSDT:
		return c.fetchUSDT(v, dst)
	case srcArith:
		return c.evalArith(v.arith, dst, v.signed)
	case srcStash:
		c.emit(bpf.LoadMem(dst, regStash, int16(v.ctxOff), bpf.DWord).WithSource(bpf.Comment(fmt.Sprintf("%s = %s, as the entry had it", dst, v.name))))
		return nil // stashed as 8 bytes, extended
	case srcFunc:
		f := c.t.Func
		if f.Cookie {
			c.emit(
				bpf.Mov.Reg(bpf.R1, asm.RegCtx).WithSource(bpf.Comment(fmt.Sprintf("%s = func: the function's index, its link's cookie", dst))),
				bpf.FnGetAttachCookie.Call(),
				bpf.Mov.Reg(dst, bpf.R0),
			)
			return nil
		}
		c.emit(bpf.Mov.Imm(dst, int32(f.Index)).WithSource(bpf.Comment(fmt.Sprintf("%s = func: %s", dst, f.Names[f.Index]))))
		return nil
	case srcDuration:
		c.emit(
			bpf.FnKtimeGetNs.Call().WithSource(bpf.Comment(fmt.Sprintf("%s = duration: now - the entry's time", dst))),
			bpf.Mov.Reg(dst, bpf.R0),
			bpf.LoadMem(bpf.R0, regStash, stashTime, bpf.DWord),
			bpf.Sub.Reg(dst, bpf.R0),
		)
		return nil
	case srcBuiltin:
		switch v.builtin {
		case "pid", "tid":
			if c.t.NS != nil {
				// {u32 pid; u32 tgid;}: the thread's id, then the process's.
				field := int16(0)
				if v.builtin == "pid" {
					field = 4
				}
				c.emit(asm.NsPidTgid(*c.t.NS, scratchOff)...)
				c.emit(bpf.LoadMem(dst, bpf.RFP, scratchOff+field, bpf.Word).WithSource(bpf.Comment(v.builtin + " in this pid namespace, 0 outside it")))
				return nil
			}
			c.emit(bpf.FnGetCurrentPidTgid.Call().WithSource(bpf.Comment(v.builtin + " from bpf_get_current_pid_tgid()")))
		case "uid", "gid":
			c.emit(bpf.FnGetCurrentUidGid.Call().WithSource(bpf.Comment(v.builtin + " from bpf_get_current_uid_gid()")))
		case "cpu":
			c.emit(bpf.FnGetSmpProcessorId.Call().WithSource(bpf.Comment("cpu = bpf_get_smp_processor_id()")))
		case "kstack":
			c.stacks = true
			c.emit(
				bpf.Mov.Reg(bpf.R1, asm.RegCtx).WithSource(bpf.Comment(fmt.Sprintf("%s = kstack: bpf_get_stackid(ctx, %s, 0), the kernel's stack (negative: not recorded)", dst, StacksMap))),
				bpf.LoadMapPtr(bpf.R2, 0).WithReference(StacksMap),
				bpf.Mov.Imm(bpf.R3, 0),
				bpf.FnGetStackid.Call(),
				bpf.Mov.Reg(dst, bpf.R0),
			)
			return nil
		case "cpid":
			c.emit(bpf.Mov.Imm(dst, int32(c.t.CPid)).WithSource(bpf.Comment(fmt.Sprintf("%s = cpid: the -c command's pid, %d", dst, c.t.CPid))))
			return nil
		default:
			return fmt.Errorf("%s is not a number", v.name)
		}
		c.emit(bpf.Mov.Reg(dst, bpf.R0))
		switch v.builtin {
		case "pid", "gid": // the upper half
			c.emit(bpf.RSh.Imm(dst, 32))
			return nil
		case "cpu":
			return nil
		}
		narrow = true
	default:
		return fmt.Errorf("%s is not a number", v.name)
	}
	if narrow {
		return c.extend(dst, v.size, v.signed)
	}
	return nil
}

// fetchUSDT emits the load of a USDT argument into dst: a register, a
// constant, or |size| bytes of user memory at an address computed from
// registers, the spec's displacement and symbol (uprobe.LoadArg).
func (c *compiler) fetchUSDT(v value, dst bpf.Register) error {
	a, site := v.usdt, c.t.Event.(*USDT)
	insns, err := uprobe.LoadArg(dst, *a, site.Site, site.Regs, scratchOff, c.t.Read.User)
	if err != nil {
		return err
	}
	insns[0] = insns[0].WithSource(bpf.Comment(fmt.Sprintf("%s = %s (USDT spec %s)", dst, v.name, a.Text)))
	c.emit(insns...)
	return nil
}

// extend clears or sign-extends the bits of dst above its size bytes.
func (c *compiler) extend(dst bpf.Register, size int, signed bool) error {
	if size >= 8 {
		return nil
	}
	shift := int32(64 - 8*size)
	c.emit(bpf.LSh.Imm(dst, shift))
	if signed {
		c.emit(bpf.ArSh.Imm(dst, shift))
	} else {
		c.emit(bpf.RSh.Imm(dst, shift))
	}
	return nil
}

// regWord is the size of the registers the event's arguments are loaded
// from: the CPU's word in pt_regs, 8 bytes in a trampoline's slots.
func (c *compiler) regWord() bpf.Size {
	e := c.t.Event
	if r, ok := e.(*Return); ok {
		e = r.Entry
	}
	switch e := e.(type) {
	case *Registers:
		return asm.LoadSize(e.Width)
	case *USDT:
		return e.Regs.Load()
	case *SyscallEntry:
		return e.Regs.Load()
	}
	return bpf.DWord
}

// ptrSize is the size of an address on the traced CPU: its registers'
// width at a probe, a pointer field's size in a tracepoint's record (this
// binary's pointer in a record without one), 8 in a trampoline's slots.
func (c *compiler) ptrSize() int {
	e := c.t.Event
	if r, ok := e.(*Return); ok {
		e = r.Entry
	}
	switch e := e.(type) {
	case *Registers, *USDT, *SyscallEntry:
		return c.regWord().Sizeof()
	case *Record:
		for _, f := range e.Format.Fields {
			if !f.Common && f.IsPointer() {
				return f.Size
			}
		}
		return strconv.IntSize / 8
	}
	return 8
}

// slots reports an event whose arguments are a trampoline's slots: fentry's,
// or fexit's, a call's return paired with fentry.
func (c *compiler) slots() bool {
	e := c.t.Event
	if r, ok := e.(*Return); ok {
		e = r.Entry
	}
	_, ok := e.(*Slots)
	return ok
}
