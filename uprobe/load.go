package uprobe

import (
	"fmt"
	"math"

	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
)

// LoadArg is the code that leaves USDT argument a of the site at its
// link-time address site in dst, extended to 64 bits by its size and
// sign: a constant, a register of the probe's pt_regs (the context in
// asm.RegCtx, laid out as regs), or Size bytes of the process's memory at
// an address computed from registers, the spec's displacement and
// symbol, read by readUser into the 8 bytes at fp+scratch. R1 to R5 are
// clobbered (dst may be one of them: it is written last).
func LoadArg(dst bpf.Register, a Arg, site uint64, regs *asm.Regs, scratch int16, readUser bpf.BuiltinFunc) (bpf.Instructions, error) {
	var out bpf.Instructions
	emit := func(insns ...bpf.Instruction) { out = append(out, insns...) }
	regOff := func(name string) (int16, error) {
		off, ok := regs.Named[name]
		if !ok {
			return 0, fmt.Errorf("%s: register %s is not in this architecture's pt_regs", a.Text, name)
		}
		return off, nil
	}
	extend := func(size int, signed bool) {
		if size >= 8 {
			return
		}
		shift := int32(64 - 8*size)
		emit(bpf.LSh.Imm(dst, shift))
		if signed {
			emit(bpf.ArSh.Imm(dst, shift))
		} else {
			emit(bpf.RSh.Imm(dst, shift))
		}
	}
	switch a.Kind {
	case ArgConst:
		// Truncated and extended here, as the load would be.
		v := a.Off
		if shift := 64 - 8*a.Size; shift > 0 && a.Signed {
			v = v << shift >> shift
		} else if shift > 0 {
			v = int64(uint64(v) << shift >> shift)
		}
		if v >= math.MinInt32 && v <= math.MaxInt32 {
			emit(bpf.Mov.Imm(dst, int32(v)))
		} else {
			emit(bpf.LoadImm(dst, v, bpf.DWord))
		}
		return out, nil
	case ArgReg:
		off, err := regOff(a.Reg)
		if err != nil {
			return nil, err
		}
		emit(bpf.LoadMem(dst, asm.RegCtx, off, regs.Load()))
		if a.RegHi != "" {
			// 32-bit ARM's pair: the next register holds the high half.
			hi, err := regOff(a.RegHi)
			if err != nil {
				return nil, err
			}
			tmp := bpf.R2
			if dst == tmp {
				tmp = bpf.R3
			}
			emit(bpf.LoadMem(tmp, asm.RegCtx, hi, regs.Load()), bpf.LSh.Imm(tmp, 32), bpf.Or.Reg(dst, tmp))
			return out, nil
		}
		if a.Size == regs.Width && !a.Signed {
			return out, nil // a whole 4-byte register, loaded zero-extended
		}
		extend(a.Size, a.Signed)
		return out, nil
	}
	// An address in R1, then a read of user memory.
	disp := a.Off + int64(a.SymAddr)
	switch a.Kind {
	case ArgMem:
		if a.Reg == "" && a.Sym != "" {
			// A non-PIE's global at its link-time address (riscv64's %lo).
			emit(bpf.Mov.Imm(bpf.R1, 0))
			break
		}
		off, err := regOff(a.Reg)
		if err != nil {
			return nil, err
		}
		emit(bpf.LoadMem(bpf.R1, asm.RegCtx, off, regs.Load()))
	case ArgIndex:
		idx, err := regOff(a.Index)
		if err != nil {
			return nil, err
		}
		emit(bpf.LoadMem(bpf.R1, asm.RegCtx, idx, regs.Load()))
		if shift := map[int]int32{2: 1, 4: 2, 8: 3}[a.Scale]; shift != 0 {
			emit(bpf.LSh.Imm(bpf.R1, shift))
		}
		if a.Reg != "" {
			base, err := regOff(a.Reg)
			if err != nil {
				return nil, err
			}
			emit(bpf.LoadMem(bpf.R2, asm.RegCtx, base, regs.Load()), bpf.Add.Reg(bpf.R1, bpf.R2))
		}
	case ArgGlobal:
		// The uprobe sets ip to the site: the global is as far from it as
		// their link-time addresses are.
		emit(bpf.LoadMem(bpf.R1, asm.RegCtx, regs.IP, regs.Load()))
		disp = int64(a.SymAddr) + a.Off - int64(site)
	default:
		return nil, fmt.Errorf("%s: unknown argument form", a.Text)
	}
	switch {
	case disp == 0:
	case disp >= math.MinInt32 && disp <= math.MaxInt32:
		emit(bpf.Add.Imm(bpf.R1, int32(disp)))
	default:
		emit(bpf.LoadImm(bpf.R2, disp, bpf.DWord), bpf.Add.Reg(bpf.R1, bpf.R2))
	}
	size, ok := asm.MemSize(a.Size)
	if !ok {
		size = bpf.DWord
	}
	emit(
		bpf.Mov.Reg(bpf.R3, bpf.R1),
		bpf.Mov.Reg(bpf.R1, bpf.RFP),
		bpf.Add.Imm(bpf.R1, int32(scratch)),
		bpf.Mov.Imm(bpf.R2, int32(a.Size)),
		readUser.Call(),
		bpf.LoadMem(dst, bpf.RFP, scratch, size),
	)
	if a.Signed && a.Size < 8 {
		extend(a.Size, true)
	}
	return out, nil
}
