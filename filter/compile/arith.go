package compile

import (
	"fmt"
	"math"

	bpf "github.com/cilium/ebpf/asm"
)

// maxSpills bounds the left sides waiting on the stack while their right
// sides are fetched: slots strOff, strOff+8, ... below scratchOff, in
// the string area, which no arithmetic uses.
const maxSpills = 16

// arithType checks an arithmetic operand's leaves, without emitting
// their code: each must be a number. C's rules type the result: every
// operand is widened to 64 bits, signed unless it is an unsigned 8-byte
// value (a narrower unsigned one fits a signed long), and the result is
// signed when both sides are (a shift: when its left side is).
func (c *compiler) arithType(o Operand) (value, error) {
	a := o.Arith
	var signed [2]bool
	for i, x := range []Operand{a.L, a.R} {
		if x.IsInt {
			_, signed[i] = x.constBits()
			continue
		}
		v, _, err := c.typeOf(x)
		if err != nil {
			return value{}, err
		}
		if err := c.arithLeaf(x, v); err != nil {
			return value{}, err
		}
		signed[i] = widenedSigned(v)
	}
	s := signed[0] && (signed[1] || isShift(a.Op))
	return value{name: o.Text, kind: kInt, size: 8, signed: s, src: srcArith, arith: a}, nil
}

func widenedSigned(v value) bool { return v.signed || v.size < 8 && !v.pointer }

// arithLeaf refuses what arithmetic cannot take.
func (c *compiler) arithLeaf(x Operand, v value) error {
	switch {
	case x.Ksym || x.Usym:
		return c.errAt(x.Pos, "ksym() and usym() name an address in the output: they take part in no arithmetic")
	case v.kind == kDump:
		return c.errAt(x.Pos, "%s is a structure: arithmetic takes numbers", x.Text)
	case v.kind == kString:
		return c.errAt(x.Pos, "%s is a string: arithmetic takes numbers", v.name)
	case v.builtin == "kstack":
		return c.errAt(x.Pos, "kstack is a stack, a key of its own: it takes part in no arithmetic")
	case v.typed:
		return c.errAt(x.Pos, "%s is a struct pointer, which the verifier types at a BPF trampoline: arithmetic cannot take its bits; use --attach=perf (a kprobe)", v.name)
	}
	return nil
}

// pure reports a value whose fetch touches no register but its target:
// no helper call, no read of memory.
func (c *compiler) pure(v value) bool {
	switch v.src {
	case srcCtx, srcArg, srcStash, srcEntry:
		return true
	case srcFunc:
		return !c.t.Func.Cookie
	case srcBuiltin:
		return v.builtin == "cpid"
	}
	return false
}

// scratchRegs are the registers an operation may use beside its target.
func scratchRegs(dst bpf.Register) (tmp, flag bpf.Register) {
	var free []bpf.Register
	for _, r := range []bpf.Register{bpf.R2, bpf.R3, bpf.R4} {
		if r != dst {
			free = append(free, r)
		}
	}
	return free[0], free[1]
}

// arithSide leaves an operand of arithmetic in dst, 64 bits.
func (c *compiler) arithSide(x Operand, dst bpf.Register) error {
	if x.IsInt {
		bits, _ := x.constBits()
		c.movConst(dst, bits)
		return nil
	}
	v, err := c.resolve(x)
	if err != nil {
		return err
	}
	return c.fetchInt(v, dst)
}

func (c *compiler) movConst(dst bpf.Register, bits uint64) {
	if int64(bits) >= math.MinInt32 && int64(bits) <= math.MaxInt32 {
		c.emit(bpf.Mov.Imm(dst, int32(bits))) // sign-extended to 64 bits
		return
	}
	c.emit(bpf.LoadImm(dst, int64(bits), bpf.DWord))
}

// evalArith leaves the value of an arithmetic operand in dst; signed is
// its type, as arithType gave it. The left side is fetched first into
// dst; a right side whose fetch may call a helper (a probe read, a
// builtin) is fetched while the left one waits on the stack, any other
// straight into a second register.
func (c *compiler) evalArith(a *Arith, dst bpf.Register, signed bool) error {
	first := len(c.insns)
	if a.Op == "-" && a.L.IsInt && a.L.Int == 0 {
		// -x: negated in place.
		if err := c.arithSide(a.R, dst); err != nil {
			return err
		}
		c.emit(bpf.Neg.Imm(dst, 0))
		return nil
	}
	if err := c.arithSide(a.L, dst); err != nil {
		return err
	}
	tmp, flag := scratchRegs(dst)
	switch r := a.R; {
	case r.IsInt:
		bits, _ := r.constBits()
		c.opConst(a.Op, dst, tmp, flag, bits, signed)
	default:
		// What it is first: a walk's code, which resolve emits, uses R1.
		v, _, err := c.typeOf(r)
		if err != nil {
			return err
		}
		if r.Arith == nil && c.pure(v) {
			if v, err = c.resolve(r); err == nil {
				err = c.fetchInt(v, tmp)
			}
		} else {
			if c.spills >= maxSpills {
				return c.errAt(r.Pos, "arithmetic nested too deeply: more than %d left sides wait at once", maxSpills)
			}
			slot := int16(strOff + 8*c.spills)
			c.spills++
			c.emit(bpf.StoreMem(bpf.RFP, slot, dst, bpf.DWord).WithSource(bpf.Comment(fmt.Sprintf("%s waits at fp%d", a.L.Text, slot))))
			if r.Arith != nil {
				err = c.evalArith(r.Arith, dst, v.signed)
			} else if v, err = c.resolve(r); err == nil {
				err = c.fetchInt(v, dst)
			}
			c.emit(bpf.Mov.Reg(tmp, dst), bpf.LoadMem(dst, bpf.RFP, slot, bpf.DWord))
			c.spills--
		}
		if err != nil {
			return err
		}
		c.opReg(a.Op, dst, tmp, flag, signed)
	}
	if first < len(c.insns) && c.insns[first].Source() == nil {
		sign := "unsigned"
		if signed {
			sign = "signed"
		}
		c.insns[first] = c.insns[first].WithSource(bpf.Comment(fmt.Sprintf("%s = %s %s %s, %s", dst, a.L.Text, a.Op, a.R.Text, sign)))
	}
	return nil
}

var aluOps = map[string]bpf.ALUOp{"+": bpf.Add, "-": bpf.Sub, "*": bpf.Mul, "&": bpf.And, "|": bpf.Or, "^": bpf.Xor, "<<": bpf.LSh, "/": bpf.Div, "%": bpf.Mod}

func aluOp(op string, signed bool) bpf.ALUOp {
	if op == ">>" {
		if signed {
			return bpf.ArSh
		}
		return bpf.RSh
	}
	return aluOps[op]
}

// opConst applies op with a constant right side to dst.
func (c *compiler) opConst(op string, dst, tmp, flag bpf.Register, b uint64, signed bool) {
	switch {
	case isShift(op):
		c.emit(aluOp(op, signed).Imm(dst, int32(b&63)))
		return
	case b == 0 && op == "/":
		c.emit(bpf.Mov.Imm(dst, 0).WithSource(bpf.Comment("x / 0 is 0")))
		return
	case b == 0 && op == "%":
		return // x % 0 is x
	case (op == "/" || op == "%") && signed && int64(b) > 0 && b <= math.MaxInt32:
		c.signedDivide(op, dst, flag, func() { c.emit(aluOp(op, false).Imm(dst, int32(b))) })
		return
	case (op == "/" || op == "%") && (signed || b > math.MaxInt32):
		// A negative divisor, or one an immediate (sign-extended) cannot hold.
		c.movConst(tmp, b)
		c.opReg(op, dst, tmp, flag, signed)
		return
	case int64(b) < math.MinInt32 || int64(b) > math.MaxInt32:
		c.movConst(tmp, b)
		c.opReg(op, dst, tmp, flag, signed)
		return
	}
	c.emit(aluOp(op, signed).Imm(dst, int32(b)))
}

// opReg applies op with the right side in tmp to dst.
func (c *compiler) opReg(op string, dst, tmp, flag bpf.Register, signed bool) {
	switch {
	case isShift(op):
		// The kernel's JITs and interpreter count modulo 64 already;
		// the mask says so to the verifier too.
		c.emit(bpf.And.Imm(tmp, 63), aluOp(op, signed).Reg(dst, tmp))
		return
	case (op == "/" || op == "%") && signed:
		c.signedDivide(op, dst, flag, func() {
			pos := c.label("divisor_pos")
			c.emit(bpf.JSGE.Imm(tmp, 0, pos), bpf.Neg.Imm(tmp, 0))
			if op == "/" {
				c.emit(bpf.Xor.Imm(flag, 1))
			}
			c.mark(pos)
			c.emit(aluOp(op, false).Reg(dst, tmp))
		})
		return
	}
	c.emit(aluOp(op, signed).Reg(dst, tmp))
}

// signedDivide divides dst as C does, toward zero, with BPF's unsigned
// division (BPF_SDIV is 6.6+): on the magnitudes, the quotient negated
// when the signs differ, the remainder when the dividend is negative.
// divide emits the unsigned operation, and flips flag for a negative
// divisor of a quotient.
func (c *compiler) signedDivide(op string, dst, flag bpf.Register, divide func()) {
	pos, done := c.label("dividend_pos"), c.label("divided")
	c.emit(
		bpf.Mov.Imm(flag, 0).WithSource(bpf.Comment(fmt.Sprintf("signed %s on the magnitudes; the %s", op, map[string]string{"/": "quotient is negative when one of the signs is", "%": "remainder takes the dividend's sign"}[op]))),
		bpf.JSGE.Imm(dst, 0, pos),
		bpf.Neg.Imm(dst, 0),
		bpf.Mov.Imm(flag, 1),
	)
	c.mark(pos)
	divide()
	c.emit(bpf.JEq.Imm(flag, 0, done), bpf.Neg.Imm(dst, 0))
	c.mark(done)
}
