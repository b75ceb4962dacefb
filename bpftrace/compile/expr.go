package compile

import (
	"encoding/binary"
	"fmt"

	bpf "github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/bpftrace/output"
	"github.com/tracekit/tracekit/bpftrace/parse"
	"github.com/tracekit/tracekit/uprobe"
)

// expr compiles x: an integer into R0, a string into a stack buffer the
// result names (given back with the statement's temporaries).
func (g *gen) expr(x parse.Expr) (typ, error) {
	switch x := x.(type) {
	case *parse.Int:
		g.loadConst(int64(x.Value), "")
		return typ{size: 8, signed: true}, nil
	case *parse.Str:
		return g.literal(x.Value, x.Pos)
	case *parse.Param:
		s, n, isStr := g.c.param(x)
		if isStr {
			return g.literal(s, x.Pos)
		}
		g.loadConst(int64(n), "")
		return typ{size: 8, signed: true}, nil
	case *parse.Ident:
		return g.builtin(x)
	case *parse.Field:
		if id, ok := x.X.(*parse.Ident); ok && id.Name == "args" {
			return g.field(x)
		}
		return g.walk(x)
	case *parse.Cast:
		return g.cast(x)
	case *parse.Var:
		v, ok := g.vars[x.Name]
		if !ok {
			return typ{}, errAt(g.file(), x.Pos, "$%s is read before it is assigned", x.Name)
		}
		if t := v.t; t.buffer() {
			t.off = v.off // the variable's own slot
			return t, nil
		}
		g.emit(bpf.LoadMem(bpf.R0, bpf.RFP, v.off, bpf.DWord))
		return v.t, nil
	case *parse.Map:
		return g.mapRead(x)
	case *parse.Call:
		return g.callValue(x)
	case *parse.Unary:
		return g.unary(x)
	case *parse.Binary:
		return g.binary(x)
	case *parse.Ternary:
		t, err := g.expr(x.Cond)
		if err != nil {
			return typ{}, err
		}
		if t.str {
			return typ{}, errAt(g.file(), x.Cond.ExprPos(), "a condition is an integer, not a string")
		}
		els, end := g.label("else"), g.label("endternary")
		g.emit(bpf.JEq.Imm(bpf.R0, 0, els))
		a, err := g.expr(x.Then)
		if err != nil {
			return typ{}, err
		}
		g.emit(bpf.Ja.Label(end))
		g.mark(els)
		b, err := g.expr(x.Else)
		if err != nil {
			return typ{}, err
		}
		if a.str || b.str {
			return typ{}, errAt(g.file(), x.Pos, "a ternary of strings is not taken yet")
		}
		g.mark(end)
		return typ{size: 8, signed: a.signed}, nil
	case *parse.IncDec:
		if err := g.assign(&parse.Assign{Pos: x.Pos, Target: x.X, Op: map[string]string{"++": "+=", "--": "-="}[x.Op], Value: &parse.Int{Pos: x.Pos, Value: 1}}); err != nil {
			return typ{}, err
		}
		t, err := g.expr(x.X) // the new value
		if err != nil {
			return typ{}, err
		}
		if x.Post { // the old one
			g.emit(bpf.Add.Imm(bpf.R0, map[string]int32{"++": -1, "--": 1}[x.Op]))
		}
		return t, nil
	}
	return typ{}, errAt(g.file(), x.ExprPos(), "this expression is not taken yet")
}

// loadConst puts v in R0: one instruction where it fits the 32 bits a
// move sign-extends, else two.
func (g *gen) loadConst(v int64, name string) {
	ins := bpf.LoadImm(bpf.R0, v, bpf.DWord)
	if v == int64(int32(v)) {
		ins = bpf.Mov.Imm(bpf.R0, int32(v))
	}
	if name != "" {
		ins = ins.WithSource(bpf.Comment(name))
	}
	g.emit(ins)
}

// constValue is x's value where the compiler knows it: a literal, a
// numeric parameter, a constant's name, a negated one.
func (g *gen) constValue(x parse.Expr) (int64, bool) {
	switch x := x.(type) {
	case *parse.Int:
		return int64(x.Value), true
	case *parse.Param:
		if _, n, isStr := g.c.param(x); !isStr {
			return int64(n), true
		}
	case *parse.Ident:
		if !intBuiltins[x.Name] {
			return g.c.constant(x.Name)
		}
	case *parse.Unary:
		if v, ok := g.constValue(x.X); ok && x.Op == "-" {
			return -v, true
		}
	}
	return 0, false
}

// literal puts s, NUL-padded to a multiple of 8 bytes, on the stack.
func (g *gen) literal(s string, at parse.Pos) (typ, error) {
	t := strT(len(s) + 1)
	off, err := g.alloc(t.size, at)
	if err != nil {
		return typ{}, err
	}
	b := make([]byte, t.size)
	copy(b, s)
	for i := 0; i < len(b); i += 4 {
		g.emit(bpf.StoreImm(bpf.RFP, off+int16(i), int64(int32(binary.LittleEndian.Uint32(b[i:]))), bpf.Word))
	}
	t.off = off
	return t, nil
}

func (g *gen) builtin(x *parse.Ident) (typ, error) {
	note := func(insns ...bpf.Instruction) { g.emit(asm.Note(insns, x.Name)...) }
	switch x.Name {
	case "pid":
		note(append(g.pidTgidCall(), bpf.RSh.Imm(bpf.R0, 32))...)
	case "tid":
		note(append(g.pidTgidCall(), bpf.LSh.Imm(bpf.R0, 32), bpf.RSh.Imm(bpf.R0, 32))...)
	case "uid":
		note(bpf.FnGetCurrentUidGid.Call(), bpf.LSh.Imm(bpf.R0, 32), bpf.RSh.Imm(bpf.R0, 32))
	case "gid":
		note(bpf.FnGetCurrentUidGid.Call(), bpf.RSh.Imm(bpf.R0, 32))
	case "cpu":
		note(bpf.FnGetSmpProcessorId.Call())
	case "nsecs":
		note(bpf.FnKtimeGetNs.Call())
	case "cgroup":
		note(bpf.FnGetCurrentCgroupId.Call())
	case "curtask":
		note(bpf.FnGetCurrentTask.Call())
		return g.c.curtask(), nil
	case "cpid":
		if g.c.opt.CPid == 0 {
			return typ{}, errAt(g.file(), x.Pos, "cpid is the pid of -c's command: run one with -c")
		}
		note(bpf.Mov.Imm(bpf.R0, int32(g.c.opt.CPid)))
	case "elapsed":
		note(bpf.FnKtimeGetNs.Call(), bpf.LoadImm(bpf.R1, int64(g.c.opt.Start), bpf.DWord), bpf.Sub.Reg(bpf.R0, bpf.R1))
	case "comm":
		off, err := g.alloc(16, x.Pos)
		if err != nil {
			return typ{}, err
		}
		// Cleared first: the helper may copy the name without padding the
		// buffer (the 6.1 guest's does), and a key compares all 16 bytes:
		// one process was counted under two keys there.
		g.emit(asm.Note(storeU32(bpf.RFP, off, 0), "comm = bpf_get_current_comm(), in a cleared buffer")...)
		g.emit(storeU32(bpf.RFP, off+8, 0)...)
		g.emit(bpf.Mov.Reg(bpf.R1, bpf.RFP), bpf.Add.Imm(bpf.R1, int32(off)), bpf.Mov.Imm(bpf.R2, 16), bpf.FnGetCurrentComm.Call())
		return typ{str: true, size: 16, off: off}, nil
	case "probe":
		return g.literal(g.tp.ProbeName(), x.Pos)
	case "kstack":
		return g.kstack(nil, x.Pos)
	case "ustack":
		return typ{}, errAt(g.file(), x.Pos, "ustack is a map's key or printf's argument, in its probe's last statement")
	case "func":
		if g.tp.Func == "" {
			return typ{}, errAt(g.file(), x.Pos, "func is a kprobe's or uprobe's function: %s has none", g.tp.ProbeName())
		}
		return g.literal(g.tp.Func, x.Pos)
	case "retval":
		if !g.tp.Probe.Ret {
			return typ{}, errAt(g.file(), x.Pos, "retval is a kretprobe's or uretprobe's")
		}
		t, err := g.register(g.c.opt.Regs.Ret, x.Name, true)
		t.user = g.tp.user() // a uretprobe's pointer is the process's
		return t, err
	default:
		if v, ok := g.c.constant(x.Name); ok {
			g.loadConst(v, x.Name)
			return typ{size: 8, signed: true}, nil
		}
		i, ok := argIndex(x.Name)
		if !ok {
			return typ{}, errAt(g.file(), x.Pos, "%s is not taken here yet", x.Name)
		}
		if g.tp.USDT != nil {
			return g.usdtArg(i, x)
		}
		if g.tp.Provider != "kprobe" && g.tp.Provider != "uprobe" {
			return typ{}, errAt(g.file(), x.Pos, "%s is a kprobe's or uprobe's argument; %s has %s", x.Name, g.tp.ProbeName(), map[bool]string{true: "args->field", false: "retval"}[g.tp.Provider == "tracepoint"])
		}
		if i >= len(g.c.opt.Regs.Args) {
			return typ{}, errAt(g.file(), x.Pos, "%s: %s passes %d arguments in registers", x.Name, g.c.opt.Regs.Arch, len(g.c.opt.Regs.Args))
		}
		t, err := g.register(g.c.opt.Regs.Args[i], x.Name, false)
		t.user = g.tp.user() // a uprobe's pointer is the process's
		return t, err
	}
	return intT, nil
}

// usdtArg reads a usdt probe's argument i as its site's spec says (a
// register, a constant, the process's memory), extended by its size and
// sign; a pointer in it is the process's.
func (g *gen) usdtArg(i int, x *parse.Ident) (typ, error) {
	site := g.tp.USDT
	if i >= len(site.Args) {
		return typ{}, errAt(g.file(), x.Pos, "%s: %s has %d arguments", x.Name, g.tp.ProbeName(), len(site.Args))
	}
	a := site.Args[i]
	scratch, err := g.alloc(8, x.Pos)
	if err != nil {
		return typ{}, err
	}
	insns, err := uprobe.LoadArg(bpf.R0, a, site.Addr, g.c.opt.Regs, scratch, g.c.opt.Readers().User)
	if err != nil {
		return typ{}, errAt(g.file(), x.Pos, "%s: %v", x.Name, err)
	}
	g.emit(asm.Note(insns, fmt.Sprintf("%s: USDT spec %s", x.Name, a.Text))...)
	// Unsigned, as bpftrace 0.17 types every usdt argument (a sum of
	// negative ones prints as a large number there too); the value is
	// sign-extended by its spec.
	return typ{size: 8, user: true}, nil
}

// register reads a register of the probe's struct pt_regs.
func (g *gen) register(off int16, name string, signed bool) (typ, error) {
	regs := g.c.opt.Regs
	g.emit(asm.Note(bpf.Instructions{bpf.LoadMem(bpf.R0, asm.RegCtx, off, regs.Load())}, fmt.Sprintf("%s: pt_regs+%d", name, off))...)
	if regs.Width == 4 && signed {
		g.emit(bpf.LSh.Imm(bpf.R0, 32), bpf.ArSh.Imm(bpf.R0, 32))
	}
	return typ{size: 8, signed: signed}, nil
}

// field reads args->name from the record.
func (g *gen) field(x *parse.Field) (typ, error) {
	f, t, err := g.c.field(g.tp, x)
	if err != nil {
		return typ{}, err
	}
	if !t.str {
		insns, err := asm.LoadField(bpf.R0, f.Name, f.Offset, f.Size, f.Signed)
		if err != nil {
			return typ{}, errAt(g.file(), x.Pos, "%v", err)
		}
		g.emit(insns...)
		return t, nil
	}
	off, err := g.alloc(t.size, x.Pos)
	if err != nil {
		return typ{}, err
	}
	t.off = off
	if f.DataLoc {
		g.zero(off, t.size) // the helper pads nothing; keys compare every byte
		// A __data_loc string: a u32 whose low 16 bits are its offset in
		// the record.
		g.emit(asm.Note(bpf.Instructions{bpf.LoadMem(bpf.R3, asm.RegCtx, int16(f.Offset), bpf.Word)}, "args->"+f.Name+": __data_loc, offset in the low 16 bits")...)
		g.emit(bpf.And.Imm(bpf.R3, 0xffff), bpf.Add.Reg(bpf.R3, asm.RegCtx))
		g.stackPtr(bpf.R1, off)
		g.emit(bpf.Mov.Imm(bpf.R2, int32(t.size)), g.c.opt.Readers().KernelStr.Call())
		return t, nil
	}
	// A char array in the record: copied in the widest loads its
	// alignment allows (the record is the context: no helper needed).
	n := f.ArrayLen
	for i := 0; i < n; {
		w := 8
		for w > 1 && ((f.Offset+i)%w != 0 || i%w != 0 || i+w > n) {
			w /= 2
		}
		sz, _ := asm.MemSize(w)
		ins := bpf.LoadMem(bpf.R1, asm.RegCtx, int16(f.Offset+i), sz)
		if i == 0 {
			ins = ins.WithSource(bpf.Comment("args->" + f.Name + ": " + f.Type))
		}
		g.emit(ins, bpf.StoreMem(bpf.RFP, off+int16(i), bpf.R1, sz))
		i += w
	}
	g.zeroTail(off, n, t.size)
	return t, nil
}

// mapRead reads @m[k]: 0 (or "") where the element is absent.
func (g *gen) mapRead(x *parse.Map) (typ, error) {
	m := g.c.maps["@"+x.Name]
	if m == nil {
		return typ{}, errAt(g.file(), x.Pos, "@%s is never assigned in a probe", x.Name)
	}
	switch m.Kind {
	case output.Int, output.Str:
	default:
		return typ{}, errAt(g.file(), x.Pos, "@%s holds an aggregation, which is printed, not read", x.Name)
	}
	var out int16
	if m.Kind == output.Str {
		var err error
		if out, err = g.alloc(m.StrSize, x.Pos); err != nil {
			return typ{}, err
		}
		g.zero(out, m.StrSize)
	}
	text, reuse := g.reusable[x]
	if !reuse && m.Kind == output.Int {
		if t, ok := keyText(x); ok {
			if off, ok := g.known[t]; ok {
				g.emit(asm.Note(bpf.Instructions{bpf.LoadMem(bpf.R0, bpf.RFP, off, bpf.DWord)}, m.Name+"[...] as the predicate read it")...)
				return typ{size: 8, signed: true}, nil
			}
		}
	}
	var keep int16
	if reuse {
		var err error
		if keep, err = g.hiddenSlot(text, x.Pos); err != nil {
			return typ{}, err
		}
	}
	save := g.sp
	key, err := g.key(m, x)
	if err != nil {
		return typ{}, err
	}
	g.sp = save
	end := g.label("read")
	g.emit(asm.Note(asm.MapLookup(m.BPFName, key), m.Name+"[...], 0 if absent")...)
	if m.Kind == output.Str {
		g.emit(bpf.JEq.Imm(bpf.R0, 0, end), bpf.Mov.Reg(bpf.R2, bpf.R0))
		g.copy(out, bpf.R2, 0, m.StrSize)
		g.mark(end)
		return typ{str: true, size: m.StrSize, off: out}, nil
	}
	g.emit(bpf.JEq.Imm(bpf.R0, 0, end), bpf.LoadMem(bpf.R0, bpf.R0, 0, bpf.DWord))
	g.mark(end)
	if reuse {
		g.emit(asm.Note(bpf.Instructions{bpf.StoreMem(bpf.RFP, keep, bpf.R0, bpf.DWord)}, "kept for the body")...)
		g.known[text] = keep
	}
	return typ{size: 8, signed: true}, nil
}

// pidTgidCall leaves bpf_get_current_pid_tgid's value in R0: the slot
// the program keeps it in, or the helper.
func (g *gen) pidTgidCall() bpf.Instructions {
	if g.pidTgid != 0 {
		return bpf.Instructions{bpf.LoadMem(bpf.R0, bpf.RFP, g.pidTgid, bpf.DWord)}
	}
	return bpf.Instructions{bpf.FnGetCurrentPidTgid.Call()}
}

// callValue compiles a call whose value is used.
func (g *gen) callValue(x *parse.Call) (typ, error) {
	switch x.Name {
	case "str":
		if len(x.Args) != 1 {
			return typ{}, errAt(g.file(), x.Pos, "str() with a length is not taken yet")
		}
		t, err := g.expr(x.Args[0])
		if err != nil {
			return typ{}, err
		}
		if t.str {
			return t, nil
		}
		off, err := g.alloc(StrSize, x.Pos)
		if err != nil {
			return typ{}, err
		}
		rd := g.c.opt.Readers()
		helper := rd.KernelStr
		if g.tp.user() {
			helper = rd.UserStr
		}
		// A kprobe's pointer may be the kernel's or the user's (a
		// syscall's path): the kernel's first, then the user's.
		either := g.tp.Provider == "kprobe" || g.tp.Provider == "kretprobe"
		either = either && rd.Split()
		g.emit(asm.Note(bpf.Instructions{bpf.Mov.Reg(bpf.R8, bpf.R0)}, fmt.Sprintf("str(): at most %d bytes by %v", StrSize-1, helper))...)
		g.zero(off, StrSize)
		g.stackPtr(bpf.R1, off)
		g.emit(bpf.Mov.Imm(bpf.R2, StrSize), bpf.Mov.Reg(bpf.R3, bpf.R8), helper.Call())
		if either {
			done := g.label("str")
			g.emit(asm.Note(bpf.Instructions{bpf.JSGE.Imm(bpf.R0, 0, done)}, "not a kernel address: the user's")...)
			g.stackPtr(bpf.R1, off)
			g.emit(bpf.Mov.Imm(bpf.R2, StrSize), bpf.Mov.Reg(bpf.R3, bpf.R8), rd.UserStr.Call())
			g.mark(done)
		}
		return typ{str: true, size: StrSize, off: off}, nil
	}
	switch x.Name {
	case "strftime":
		t, err := g.c.strftimeType(x)
		if err != nil {
			return typ{}, err
		}
		if _, err := g.expr(x.Args[1]); err != nil {
			return typ{}, err
		}
		return t, nil
	case "buf":
		return g.buf(x)
	case "ntop":
		return g.ntop(x)
	case "bswap":
		t, err := g.expr(x.Args[0])
		if err != nil {
			return typ{}, err
		}
		if t.str {
			return typ{}, errAt(g.file(), x.Args[0].ExprPos(), "bswap takes an integer, not a string")
		}
		w := t.width
		if w == 0 {
			w = 8
		}
		size, _ := asm.MemSize(w)
		if w > 1 {
			g.emit(asm.Note(bpf.Instructions{bpf.HostTo(bpf.BE, bpf.R0, size)}, fmt.Sprintf("bswap: %d bytes", w))...)
		}
		return typ{size: 8, width: w}, nil
	case "kstack":
		return g.kstack(x, x.Pos)
	case "ustack":
		return typ{}, errAt(g.file(), x.Pos, "ustack is a map's key or printf's argument, in its probe's last statement")
	case "ksym":
		t, err := g.expr(x.Args[0])
		if err != nil {
			return typ{}, err
		}
		if t.str {
			return typ{}, errAt(g.file(), x.Args[0].ExprPos(), "ksym takes an address, not a string")
		}
		return typ{size: 8, ksym: true}, nil
	case "usym":
		return g.usym(x)
	case "kaddr":
		name, ok := x.Args[0].(*parse.Str)
		if !ok {
			return typ{}, errAt(g.file(), x.Pos, "kaddr takes a symbol's name, a string literal")
		}
		var addr uint64
		if g.c.opt.Kaddr != nil {
			addr, ok = g.c.opt.Kaddr(name.Value)
		}
		if !ok {
			return typ{}, errAt(g.file(), name.Pos, "kaddr(%q): no such symbol in /proc/kallsyms (or its addresses are hidden)", name.Value)
		}
		g.emit(asm.Note(bpf.Instructions{bpf.LoadImm(bpf.R0, int64(addr), bpf.DWord)}, "kaddr "+name.Value)...)
		return intT, nil
	}
	if _, ok := aggs[x.Name]; ok {
		return typ{}, errAt(g.file(), x.Pos, "%s() is a map's value: @name = %s(...)", x.Name, x.Name)
	}
	return typ{}, errAt(g.file(), x.Pos, "%s() is not taken here yet", x.Name)
}

func (g *gen) unary(x *parse.Unary) (typ, error) {
	t, err := g.expr(x.X)
	if err != nil {
		return typ{}, err
	}
	if t.str {
		return typ{}, errAt(g.file(), x.Pos, "%s on a string", x.Op)
	}
	switch x.Op {
	case "*":
		return g.deref(t, x.Pos)
	case "-":
		g.emit(bpf.Neg.Imm(bpf.R0, 0))
	case "~":
		g.emit(bpf.Xor.Imm(bpf.R0, -1))
	case "!":
		one := g.label("not")
		g.emit(bpf.Mov.Reg(bpf.R1, bpf.R0), bpf.Mov.Imm(bpf.R0, 1), bpf.JEq.Imm(bpf.R1, 0, one), bpf.Mov.Imm(bpf.R0, 0))
		g.mark(one)
	default:
		return typ{}, errAt(g.file(), x.Pos, "unary %s is not taken yet", x.Op)
	}
	return typ{size: 8, signed: t.signed}, nil
}

// deref compiles *x at the address in R0: what a pointer points at, or
// 8 bytes as a signed integer at an integer's address (bpftrace's
// *kaddr("avenrun")), read from the memory x came from.
func (g *gen) deref(t typ, at parse.Pos) (typ, error) {
	v, err := g.c.derefType(t, at)
	if err != nil {
		return typ{}, err
	}
	return g.read(v, at)
}

var arith = map[string]bpf.ALUOp{"+": bpf.Add, "-": bpf.Sub, "*": bpf.Mul, "/": bpf.Div, "%": bpf.Mod, "&": bpf.And, "|": bpf.Or, "^": bpf.Xor, "<<": bpf.LSh, ">>": bpf.RSh}

// compares are each comparison's jump when it holds: unsigned, signed.
var compares = map[string][2]bpf.JumpOp{
	"==": {bpf.JEq, bpf.JEq}, "!=": {bpf.JNE, bpf.JNE},
	"<": {bpf.JLT, bpf.JSLT}, "<=": {bpf.JLE, bpf.JSLE},
	">": {bpf.JGT, bpf.JSGT}, ">=": {bpf.JGE, bpf.JSGE},
}

func (g *gen) binary(x *parse.Binary) (typ, error) {
	if x.Op == "&&" || x.Op == "||" {
		return g.logical(x)
	}
	save := g.sp
	l, err := g.expr(x.L)
	if err != nil {
		return typ{}, err
	}
	if v, ok := g.constValue(x.R); ok && v == int64(int32(v)) && !l.str && !(v == 0 && (x.Op == "/" || x.Op == "%")) {
		// (The verifier refuses a division by an immediate 0; by a
		// register that is 0, BPF gives 0.)
		// A constant on the right: the instruction's immediate, no spill.
		return g.binaryImm(x.Op, l, int32(v), x.Pos)
	}
	var spill int16
	if !l.str {
		if spill, err = g.alloc(8, x.Pos); err != nil {
			return typ{}, err
		}
		g.emit(bpf.StoreMem(bpf.RFP, spill, bpf.R0, bpf.DWord))
	}
	r, err := g.expr(x.R)
	if err != nil {
		return typ{}, err
	}
	if l.str || r.str {
		if !l.str || !r.str || (x.Op != "==" && x.Op != "!=") {
			return typ{}, errAt(g.file(), x.Pos, "strings are compared with == and != only, with strings")
		}
		g.strEq(l, r, x.Op == "!=")
		g.sp = save
		return typ{size: 8}, nil
	}
	g.emit(bpf.Mov.Reg(bpf.R1, bpf.R0), bpf.LoadMem(bpf.R0, bpf.RFP, spill, bpf.DWord))
	g.sp = save
	signed := l.signed && r.signed
	if op, ok := arith[x.Op]; ok {
		g.emit(op.Reg(bpf.R0, bpf.R1))
		if x.Op == "<<" || x.Op == ">>" {
			signed = l.signed
		}
		return typ{size: 8, signed: signed}, nil
	}
	jumps, ok := compares[x.Op]
	if !ok {
		return typ{}, errAt(g.file(), x.Pos, "%s is not taken yet", x.Op)
	}
	jump := jumps[0]
	if signed {
		jump = jumps[1]
	}
	yes := g.label("true")
	g.emit(bpf.Mov.Imm(bpf.R2, 1), jump.Reg(bpf.R0, bpf.R1, yes), bpf.Mov.Imm(bpf.R2, 0))
	g.mark(yes)
	g.emit(bpf.Mov.Reg(bpf.R0, bpf.R2))
	return typ{size: 8}, nil
}

// binaryImm is L Op v with L in R0: literals are signed, so the
// operation is signed where L is.
func (g *gen) binaryImm(op string, l typ, v int32, at parse.Pos) (typ, error) {
	if alu, ok := arith[op]; ok {
		g.emit(alu.Imm(bpf.R0, v))
		return typ{size: 8, signed: l.signed}, nil
	}
	jumps, ok := compares[op]
	if !ok {
		return typ{}, errAt(g.file(), at, "%s is not taken yet", op)
	}
	jump := jumps[0]
	if l.signed {
		jump = jumps[1]
	}
	yes := g.label("true")
	g.emit(bpf.Mov.Reg(bpf.R1, bpf.R0), bpf.Mov.Imm(bpf.R0, 1), jump.Imm(bpf.R1, v, yes), bpf.Mov.Imm(bpf.R0, 0))
	g.mark(yes)
	return typ{size: 8}, nil
}

// logical is && and || with C's short circuit: 0 or 1.
func (g *gen) logical(x *parse.Binary) (typ, error) {
	short, end := g.label("short"), g.label("logic")
	jump := bpf.JEq // && stops at the first false
	if x.Op == "||" {
		jump = bpf.JNE
	}
	for _, e := range []parse.Expr{x.L, x.R} {
		t, err := g.expr(e)
		if err != nil {
			return typ{}, err
		}
		if t.str {
			return typ{}, errAt(g.file(), e.ExprPos(), "%s of a string", x.Op)
		}
		g.emit(jump.Imm(bpf.R0, 0, short))
	}
	result := int32(1) // && with neither operand false
	if x.Op == "||" {
		result = 0
	}
	g.emit(bpf.Mov.Imm(bpf.R0, result), bpf.Ja.Label(end))
	g.mark(short)
	g.emit(bpf.Mov.Imm(bpf.R0, 1-result))
	g.mark(end)
	return typ{size: 8}, nil
}

// strEq compares two strings as C's strcmp() == 0 (!= with ne): byte by
// byte to the first NUL, within the shorter buffer (a string filling its
// buffer ends there). R0 is 1 or 0.
func (g *gen) strEq(l, r typ, ne bool) {
	differ, same, end := g.label("differ"), g.label("same"), g.label("streq")
	n := min(l.size, r.size)
	for i := range n {
		ins := bpf.LoadMem(bpf.R1, bpf.RFP, l.off+int16(i), bpf.Byte)
		if i == 0 {
			ins = ins.WithSource(bpf.Comment("strings equal: byte by byte to the first NUL"))
		}
		g.emit(ins, bpf.LoadMem(bpf.R2, bpf.RFP, r.off+int16(i), bpf.Byte), bpf.JNE.Reg(bpf.R1, bpf.R2, differ), bpf.JEq.Imm(bpf.R1, 0, same))
	}
	eq, neq := int32(1), int32(0)
	if ne {
		eq, neq = 0, 1
	}
	g.mark(same)
	g.emit(bpf.Mov.Imm(bpf.R0, eq), bpf.Ja.Label(end))
	g.mark(differ)
	g.emit(bpf.Mov.Imm(bpf.R0, neq))
	g.mark(end)
}

// kstack is the id of the kernel's stack here, in its depth's
// STACK_TRACE map (bpf_get_stackid: the kernel keeps each stack once);
// a negative id is a stack the map could not take.
func (g *gen) kstack(call *parse.Call, at parse.Pos) (typ, error) {
	t, err := g.c.kstack(call, at)
	if err != nil {
		return typ{}, err
	}
	g.emit(asm.Note(bpf.Instructions{bpf.Mov.Reg(bpf.R1, asm.RegCtx)}, "kstack: its id in "+t.stack)...)
	g.emit(bpf.LoadMapPtr(bpf.R2, 0).WithReference(t.stack), bpf.Mov.Imm(bpf.R3, 0), bpf.FnGetStackid.Call())
	return t, nil
}

// ntop is an address as ntop prints it: ntop(int) IPv4 from its four
// bytes as they are in memory, ntop(char[16]) IPv6, ntop(AF, x) either;
// the family then the address's 16 bytes on the stack.
func (g *gen) ntop(x *parse.Call) (typ, error) {
	arg := x.Args[len(x.Args)-1]
	family := int64(0)
	if len(x.Args) == 2 {
		v, ok := g.constValue(x.Args[0])
		if !ok || (v != 2 && v != 10) {
			return typ{}, errAt(g.file(), x.Args[0].ExprPos(), "ntop's family is AF_INET or AF_INET6, a constant")
		}
		family = v
	}
	t, err := g.expr(arg)
	if err != nil {
		return typ{}, err
	}
	off, err := g.alloc(inetSize, x.Pos)
	if err != nil {
		return typ{}, err
	}
	g.zero(off, inetSize)
	if t.embedded { // struct in6_addr, struct in_addr: their bytes
		n, err := btf.Sizeof(t.ptr)
		if err != nil || (n != 4 && n != 16) {
			return typ{}, errAt(g.file(), arg.ExprPos(), "ntop of a %s: an address is 4 or 16 bytes", typeName(t.ptr))
		}
		if family == 0 {
			family = map[int]int64{4: 2, 16: 10}[n]
		}
		helper := g.c.opt.Readers().Kernel
		if t.user {
			helper = g.c.opt.Readers().User
		}
		g.emit(bpf.Mov.Reg(bpf.R3, bpf.R0))
		g.stackPtr(bpf.R1, off+8)
		g.emit(bpf.Mov.Imm(bpf.R2, int32(n)), helper.Call())
		g.emit(asm.Note(storeU32(bpf.RFP, off, family), "ntop: the family")...)
		return typ{size: inetSize, inet: true, off: off}, nil
	}
	switch {
	case !t.str:
		if family == 0 {
			family = 2
		}
		g.emit(bpf.StoreMem(bpf.RFP, off+8, bpf.R0, bpf.Word))
	case t.bytes == 4 || t.bytes == 16:
		if family == 0 {
			family = map[int]int64{4: 2, 16: 10}[t.bytes]
		}
		g.copy(off+8, bpf.RFP, t.off, roundUp(t.bytes))
	default:
		return typ{}, errAt(g.file(), arg.ExprPos(), "ntop takes an IPv4 address (an integer, or 4 bytes) or an IPv6 one (16 bytes)")
	}
	g.emit(asm.Note(storeU32(bpf.RFP, off, family), "ntop: the family")...)
	return typ{size: inetSize, inet: true, off: off}, nil
}

// usym is usym(x): the address, and the process's id (bpftrace's
// layout), for user space to name by that process's mappings.
func (g *gen) usym(x *parse.Call) (typ, error) {
	t, err := g.expr(x.Args[0])
	if err != nil {
		return typ{}, err
	}
	if t.buffer() {
		return typ{}, errAt(g.file(), x.Args[0].ExprPos(), "usym takes an address, not a string")
	}
	off, err := g.alloc(usymSize, x.Pos)
	if err != nil {
		return typ{}, err
	}
	g.emit(asm.Note(bpf.Instructions{bpf.StoreMem(bpf.RFP, off, bpf.R0, bpf.DWord)}, "usym: the address")...)
	g.emit(bpf.FnGetCurrentPidTgid.Call(), bpf.RSh.Imm(bpf.R0, 32))
	g.emit(asm.Note(bpf.Instructions{bpf.StoreMem(bpf.RFP, off+8, bpf.R0, bpf.DWord)}, "usym: the process")...)
	return typ{size: usymSize, usym: true, off: off}, nil
}

// bufLen is the bytes buf(x[, n]) keeps room for: n where it is a
// constant, the char array's length without it, BufSize at most (and
// where n is computed), as bpftrace sizes it.
func (c *compiler) bufLen(x *parse.Call, typeOf func(parse.Expr) (typ, error)) (int, error) {
	if len(x.Args) == 2 {
		if n, ok := x.Args[1].(*parse.Int); ok {
			if int64(n.Value) < 0 {
				return 0, errAt(c.opt.File, x.Pos, "buf cannot use a negative length (%d)", int64(n.Value))
			}
			return int(min(n.Value, BufSize)), nil
		}
		return BufSize, nil
	}
	t, err := typeOf(x.Args[0])
	if err != nil {
		return 0, err
	}
	if t.bytes == 0 {
		return 0, errAt(c.opt.File, x.Pos, "buf() of a pointer or an integer takes a length: buf(x, n)")
	}
	return min(t.bytes, BufSize), nil
}

// BufData is where buf()'s bytes start after its length byte: 8, so
// that they are copied 8 bytes at a time.
const BufData = 8

// buf compiles buf(x[, n]): a length byte (n, at most the room), then
// from BufData that many bytes read at x (a char array already read is
// copied), the rest zero; printf's %r prints them.
func (g *gen) buf(x *parse.Call) (typ, error) {
	room, err := g.c.bufLen(x, g.typer().expr)
	if err != nil {
		return typ{}, err
	}
	b := strT(BufData + room)
	off, err := g.alloc(b.size, x.Pos)
	if err != nil {
		return typ{}, err
	}
	g.zero(off, b.size)
	if len(x.Args) == 2 {
		if _, ok := x.Args[1].(*parse.Int); !ok {
			// A length computed at the event: held to the room.
			if _, err := g.expr(x.Args[1]); err != nil {
				return typ{}, err
			}
			fits := g.label("buflen")
			g.emit(bpf.JLE.Imm(bpf.R0, int32(room), fits), bpf.Mov.Imm(bpf.R0, int32(room)))
			g.mark(fits)
			g.emit(bpf.StoreMem(bpf.RFP, off, bpf.R0, bpf.Byte))
		}
	}
	if len(x.Args) == 1 || isInt(x.Args[1]) {
		g.emit(bpf.StoreImm(bpf.RFP, off, int64(room), bpf.Byte))
	}
	t, err := g.expr(x.Args[0])
	if err != nil {
		return typ{}, err
	}
	if t.buffer() {
		if len(x.Args) == 2 && !isInt(x.Args[1]) {
			return typ{}, errAt(g.file(), x.Pos, "buf() of a string or an array takes a constant length here")
		}
		g.copy(off+BufData, bpf.RFP, t.off, min(roundUp(room), t.size))
	} else {
		rd := g.c.opt.Readers()
		helper := rd.Kernel
		if t.user || t.ptr == nil && g.tp.user() {
			helper = rd.User
		}
		// The length again from its byte: the verifier bounds it.
		full := g.label("bufsize")
		g.emit(bpf.Mov.Reg(bpf.R3, bpf.R0), bpf.LoadMem(bpf.R2, bpf.RFP, off, bpf.Byte))
		g.emit(bpf.JLE.Imm(bpf.R2, int32(room), full), bpf.Mov.Imm(bpf.R2, int32(room)))
		g.mark(full)
		g.stackPtr(bpf.R1, off+BufData)
		g.emit(asm.Note(bpf.Instructions{helper.Call()}, fmt.Sprintf("buf(): at most %d bytes by %v", room, helper))...)
	}
	b.buf, b.off = true, off
	return b, nil
}

// isInt says whether x is an integer literal.
func isInt(x parse.Expr) bool {
	_, ok := x.(*parse.Int)
	return ok
}

// strftimeType is strftime(FORMAT, nsecs)'s: an integer, the time in
// nanoseconds since boot, that printf's %s prints as FORMAT (strftime(3)'s,
// and %f the microseconds) of the wall-clock time it was.
func (c *compiler) strftimeType(x *parse.Call) (typ, error) {
	f, ok := x.Args[0].(*parse.Str)
	if !ok || f.Value == "" {
		return typ{}, errAt(c.opt.File, x.Pos, "strftime's format is a string literal")
	}
	return typ{size: 8, strftime: f.Value}, nil
}
