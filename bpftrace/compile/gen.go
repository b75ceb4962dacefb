package compile

import (
	"fmt"
	"strconv"
	"strings"

	bpf "github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/bpftrace/output"
	"github.com/tracekit/tracekit/bpftrace/parse"
)

// slot is a variable's place on the stack.
type slot struct {
	off int16
	t   typ
}

// gen makes one program: R6 holds the context throughout; an integer
// expression leaves its value in R0, a string its bytes in a stack
// buffer. sp is the stack in use, in bytes below the frame pointer:
// variables keep their slots for the whole program, temporaries are
// given back when their expression is done.
type gen struct {
	c       *compiler
	tp      *Target
	insns   bpf.Instructions
	pending string // a label for the next instruction
	labels  int
	sp      int
	vars    map[string]slot
	varOffs []slot
	// varTypes are the variables' types over the whole program, from
	// the typer: a string's slot fits its longest value.
	varTypes map[string]typ
	err      error
	// pidTgid is the slot of bpf_get_current_pid_tgid's value, read
	// once for the program (0: pid and tid call it where they are).
	pidTgid int16
	// reusable are the predicate's map reads whose values the body may
	// reuse, by their text (keyText); known the slots of those read, by
	// the same text, until a statement writes their map (see reuse.go).
	reusable map[*parse.Map]string
	known    map[string]int16
}

func (g *gen) file() string { return g.c.opt.File }

func (g *gen) emit(insns ...bpf.Instruction) {
	for _, ins := range insns {
		if g.pending != "" {
			ins = ins.WithSymbol(g.pending)
			g.pending = ""
		}
		g.insns = append(g.insns, ins)
	}
}

// mark puts label on the next instruction.
func (g *gen) mark(label string) {
	if g.pending != "" {
		g.emit(asm.Nop())
	}
	g.pending = label
}

func (g *gen) label(what string) string {
	g.labels++
	return fmt.Sprintf("%s_%d", what, g.labels)
}

// alloc takes n bytes (rounded up to 8) of stack.
func (g *gen) alloc(n int, at parse.Pos) (int16, error) {
	g.sp += roundUp(n)
	if g.sp > maxStack {
		return 0, errAt(g.file(), at, "the probe needs more than the %d bytes of stack BPF has", maxStack)
	}
	return int16(-g.sp), nil
}

// zero clears n bytes (a multiple of 8) at fp+off.
func (g *gen) zero(off int16, n int) {
	for i := 0; i < n; i += 8 {
		g.emit(storeU32(bpf.RFP, off+int16(i), 0)...)
	}
}

// copy copies n bytes (a multiple of 8) from src+soff to fp+doff.
func (g *gen) copy(doff int16, src bpf.Register, soff int16, n int) {
	for i := 0; i < n; i += 8 {
		g.emit(bpf.LoadMem(bpf.R1, src, soff+int16(i), bpf.DWord), bpf.StoreMem(bpf.RFP, doff+int16(i), bpf.R1, bpf.DWord))
	}
}

// place puts the string t into size bytes at fp+dst, cut or
// NUL-padded.
func (g *gen) place(dst int16, size int, t typ) {
	n := min(size, t.size)
	g.copy(dst, bpf.RFP, t.off, n)
	g.zero(dst+int16(n), size-n)
}

// stackPtr points reg at fp+off.
func (g *gen) stackPtr(reg bpf.Register, off int16) {
	g.emit(bpf.Mov.Reg(reg, bpf.RFP), bpf.Add.Imm(reg, int32(off)))
}

// stmts compiles a block up to its return: what follows one is never
// run, and the verifier refuses unreachable code.
func (g *gen) stmts(ss []parse.Stmt) error {
	for _, s := range ss {
		if err := g.stmt(s); err != nil {
			return err
		}
		if _, ok := s.(*parse.Jump); ok {
			break
		}
	}
	return nil
}

// returns says whether a block ends in return.
func returns(ss []parse.Stmt) bool {
	for _, s := range ss {
		if _, ok := s.(*parse.Jump); ok {
			return true
		}
	}
	return false
}

func (g *gen) stmt(s parse.Stmt) error {
	g.forget(s)
	base := g.sp
	defer func() { g.sp = max(base, g.varTop()) }()
	switch s := s.(type) {
	case *parse.ExprStmt:
		switch x := s.X.(type) {
		case *parse.IncDec:
			return g.assign(&parse.Assign{Pos: x.Pos, Target: x.X, Op: map[string]string{"++": "+=", "--": "-="}[x.Op], Value: &parse.Int{Pos: x.Pos, Value: 1}})
		case *parse.Call:
			return g.call(x)
		}
		_, err := g.expr(s.X)
		return err
	case *parse.Assign:
		return g.assign(s)
	case *parse.If:
		t, err := g.expr(s.Cond)
		if err != nil {
			return err
		}
		if t.str {
			return errAt(g.file(), s.Cond.ExprPos(), "a condition is an integer, not a string")
		}
		els, end := g.label("else"), g.label("endif")
		g.emit(bpf.JEq.Imm(bpf.R0, 0, els))
		if err := g.stmts(s.Then); err != nil {
			return err
		}
		if len(s.Else) == 0 {
			g.mark(els)
			return nil
		}
		if !returns(s.Then) { // a jump after return would be unreachable, which the verifier refuses
			g.emit(bpf.Ja.Label(end))
		}
		g.mark(els)
		if err := g.stmts(s.Else); err != nil {
			return err
		}
		g.mark(end)
		return nil
	case *parse.Unroll:
		n, ok := s.N.(*parse.Int)
		if !ok || n.Value < 1 || n.Value > 100 {
			return errAt(g.file(), s.Pos, "unroll takes an integer from 1 to 100")
		}
		for range n.Value {
			if err := g.stmts(s.Body); err != nil {
				return err
			}
		}
		return nil
	case *parse.Jump: // return (the typer refused the others)
		g.emit(bpf.Ja.Label("out"))
		return nil
	}
	return errAt(g.file(), s.StmtPos(), "this statement is not taken yet")
}

// typer types expressions as the program at this point has its
// variables.
func (g *gen) typer() *typer {
	ty := &typer{c: g.c, tp: g.tp, vars: map[string]typ{}}
	for name, v := range g.vars {
		ty.vars[name] = v.t
	}
	return ty
}

// varTop is the stack the variables hold.
func (g *gen) varTop() int {
	top := 0
	for _, v := range g.vars {
		top = max(top, int(-v.off))
	}
	return top
}

// assign compiles Target Op Value.
func (g *gen) assign(s *parse.Assign) error {
	value := s.Value
	if s.Op != "=" {
		value = &parse.Binary{Pos: s.Pos, Op: s.Op[:len(s.Op)-1], L: s.Target, R: s.Value}
	}
	switch x := s.Target.(type) {
	case *parse.Var:
		v, ok := g.vars[x.Name]
		if !ok {
			// The type the typer settled on; a slot for the whole
			// program, cleared at its start (a branch may read it unset).
			t, err := g.typer().expr(value)
			if err != nil {
				return err
			}
			if all, ok := g.varTypes[x.Name]; ok && all.buffer() {
				t.size = max(t.size, all.size)
			}
			off, err := g.alloc(t.size, x.Pos)
			if err != nil {
				return err
			}
			v = slot{off: off, t: t}
			g.vars[x.Name] = v
			g.varOffs = append(g.varOffs, v)
		}
		t, err := g.expr(value)
		if err != nil {
			return err
		}
		if !t.sameKind(v.t) {
			return errAt(g.file(), s.Pos, "$%s holds an integer and a string", x.Name)
		}
		if t.buffer() {
			g.place(v.off, v.t.size, t)
		} else {
			g.emit(bpf.StoreMem(bpf.RFP, v.off, bpf.R0, bpf.DWord))
		}
		return nil
	case *parse.Map:
		m := g.c.maps["@"+x.Name]
		if call, ok := value.(*parse.Call); ok {
			if _, isAgg := aggs[call.Name]; isAgg {
				return g.aggregate(m, x, call)
			}
		}
		t, err := g.expr(value)
		if err != nil {
			return err
		}
		val, err := g.alloc(m.ValueSize(), x.Pos)
		if err != nil {
			return err
		}
		if t.str {
			g.place(val, m.ValueSize(), t)
		} else {
			g.emit(bpf.StoreMem(bpf.RFP, val, bpf.R0, bpf.DWord))
		}
		key, err := g.key(m, x)
		if err != nil {
			return err
		}
		g.emit(asm.Note(asm.MapUpdate(m.BPFName, key, val, asm.UpdateAny), m.Name+"[...] = value")...)
		g.lost()
		return nil
	}
	return errAt(g.file(), s.Pos, "only maps and variables are assigned to")
}

// lost counts a refused update (R0 != 0) in LostMap.
func (g *gen) lost() {
	done := g.label("stored")
	g.emit(bpf.JEq.Imm(bpf.R0, 0, done))
	g.emit(asm.Note(bpf.Instructions{bpf.Mov.Imm(bpf.R1, 0)}, "the map is full: count the update as lost")...)
	g.emit(bpf.StoreMem(bpf.RFP, -8, bpf.R1, bpf.Word))
	g.emit(asm.MapLookup(LostMap, -8)...)
	g.emit(bpf.JEq.Imm(bpf.R0, 0, done), bpf.Mov.Imm(bpf.R1, 1), bpf.StoreXAdd(bpf.R0, bpf.R1, bpf.DWord))
	g.mark(done)
}

// key builds m's key for the element x names on the stack, with room
// for a bucket after it for hist and lhist.
func (g *gen) key(m *Map, x *parse.Map) (int16, error) {
	off, err := g.alloc(m.KeySize(), x.Pos)
	if err != nil {
		return 0, err
	}
	if len(x.Keys) == 0 {
		g.emit(storeU32(bpf.RFP, off, 0)...)
		return off, nil
	}
	return off, g.pack(off, x.Keys, m.Keys, m.Name+"'s key")
}

// pack evaluates xs into the stack from fp+at on, each into its slot of
// layout (a map's key, a printf record): an integer in 8 bytes, a string
// cut or NUL-padded to its size.
func (g *gen) pack(at int16, xs []parse.Expr, layout []Key, what string) error {
	for i, x := range xs {
		save := g.sp
		t, err := g.expr(x)
		if err != nil {
			return err
		}
		if !t.sameKind(typ{str: layout[i].Str, inet: layout[i].Inet, usym: layout[i].Usym}) {
			return errAt(g.file(), x.ExprPos(), "%s %d is a string in one place and an integer in another", what, i+1)
		}
		if t.buffer() {
			g.place(at, layout[i].Size, t)
		} else {
			g.emit(bpf.StoreMem(bpf.RFP, at, bpf.R0, bpf.DWord))
		}
		at += int16(layout[i].Size)
		g.sp = save
	}
	return nil
}

// element points R0 at m's element for the key at fp+key, inserting a
// zero one first; where the map is full it counts the update as lost
// and jumps to skip.
func (g *gen) element(m *Map, key int16, skip string, at parse.Pos) error {
	val, err := g.alloc(m.ValueSize(), at)
	if err != nil {
		return err
	}
	have := g.label("have")
	g.emit(asm.Note(asm.MapLookup(m.BPFName, key), m.Name+": the element, inserted as zero if new")...)
	g.emit(bpf.JNE.Imm(bpf.R0, 0, have))
	g.zero(val, m.ValueSize())
	g.emit(asm.MapUpdate(m.BPFName, key, val, asm.UpdateNoExist)...)
	g.emit(asm.MapLookup(m.BPFName, key)...)
	g.emit(bpf.JNE.Imm(bpf.R0, 0, have))
	g.emit(bpf.Mov.Imm(bpf.R0, 1))
	g.lost()
	g.emit(bpf.Ja.Label(skip))
	g.mark(have)
	return nil
}

// aggregate compiles @m[k] = agg(args).
func (g *gen) aggregate(m *Map, x *parse.Map, call *parse.Call) error {
	arg := int16(0)
	if len(call.Args) > 0 {
		t, err := g.expr(call.Args[0])
		if err != nil {
			return err
		}
		if t.str {
			return errAt(g.file(), call.Args[0].ExprPos(), "%s() counts integers, not strings", call.Name)
		}
		if arg, err = g.alloc(8, call.Pos); err != nil {
			return err
		}
		g.emit(bpf.StoreMem(bpf.RFP, arg, bpf.R0, bpf.DWord))
	}
	key, err := g.key(m, x)
	if err != nil {
		return err
	}
	if m.Kind == output.Hist || m.Kind == output.Lhist {
		g.bucket(m, arg)
		bucketOff := key + int16(m.KeySize()-8)
		g.emit(bpf.StoreMem(bpf.RFP, bucketOff, bpf.R0, bpf.DWord))
	}
	skip := g.label("skip")
	if err := g.element(m, key, skip, call.Pos); err != nil {
		return err
	}
	switch m.Kind {
	case output.Count, output.Hist, output.Lhist:
		g.emit(bpf.Mov.Imm(bpf.R1, 1), bpf.StoreXAdd(bpf.R0, bpf.R1, bpf.DWord))
	case output.Sum:
		g.emit(bpf.LoadMem(bpf.R1, bpf.RFP, arg, bpf.DWord), bpf.StoreXAdd(bpf.R0, bpf.R1, bpf.DWord))
	case output.Avg, output.Stats:
		g.emit(bpf.Mov.Imm(bpf.R1, 1), bpf.StoreXAdd(bpf.R0, bpf.R1, bpf.DWord),
			bpf.LoadMem(bpf.R1, bpf.RFP, arg, bpf.DWord), xadd(bpf.R0, 8, bpf.R1))
	case output.Min, output.Max:
		// {value, set}: the first value is stored whatever it is.
		store := g.label("store")
		g.emit(bpf.LoadMem(bpf.R1, bpf.RFP, arg, bpf.DWord), bpf.LoadMem(bpf.R2, bpf.R0, 8, bpf.DWord))
		g.emit(bpf.JEq.Imm(bpf.R2, 0, store), bpf.LoadMem(bpf.R2, bpf.R0, 0, bpf.DWord))
		if m.Kind == output.Min {
			g.emit(bpf.JSGE.Reg(bpf.R1, bpf.R2, skip))
		} else {
			g.emit(bpf.JSLE.Reg(bpf.R1, bpf.R2, skip))
		}
		g.mark(store)
		g.emit(bpf.StoreMem(bpf.R0, 0, bpf.R1, bpf.DWord))
		g.emit(storeU32(bpf.R0, 8, 1)...)
	}
	g.mark(skip)
	return nil
}

// storeU32 stores the 64-bit value v (from 0 to 2^31-1) at dst+off:
// cilium/ebpf builds no 64-bit store of an immediate, so two of 32 bits.
func storeU32(dst bpf.Register, off int16, v int64) bpf.Instructions {
	return bpf.Instructions{bpf.StoreImm(dst, off, v, bpf.Word), bpf.StoreImm(dst, off+4, 0, bpf.Word)}
}

// xadd is an atomic add of src to the u64 at dst+off.
func xadd(dst bpf.Register, off int16, src bpf.Register) bpf.Instruction {
	ins := bpf.StoreXAdd(dst, src, bpf.DWord)
	ins.Offset = off
	return ins
}

// bucket leaves in R0 the bucket of the value at fp+arg: hist's
// (0 negative, 1 zero, 2+log2 of the rest) or lhist's (0 below min, 1+
// (v-min)/step within, the last at max and above).
func (g *gen) bucket(m *Map, arg int16) {
	done := g.label("bucket")
	g.emit(bpf.LoadMem(bpf.R1, bpf.RFP, arg, bpf.DWord))
	g.emit(bpf.Mov.Imm(bpf.R0, 0))
	if m.Kind == output.Hist {
		g.emit(asm.Note(bpf.Instructions{bpf.JSLT.Imm(bpf.R1, 0, done)}, "hist's bucket: negative, zero, then log2")...)
		g.emit(bpf.Mov.Imm(bpf.R0, 1), bpf.JEq.Imm(bpf.R1, 0, done))
		g.emit(asm.Log2Slot(g.label("log2"), bpf.R1, bpf.R2, bpf.R0)...)
		g.emit(bpf.Add.Imm(bpf.R0, 1))
		g.mark(done)
		return
	}
	g.emit(asm.Note(bpf.Instructions{bpf.LoadImm(bpf.R2, m.Min, bpf.DWord)}, fmt.Sprintf("lhist's bucket in [%d, %d) by %d", m.Min, m.Max, m.Step))...)
	g.emit(bpf.JSLT.Reg(bpf.R1, bpf.R2, done))
	g.emit(bpf.Mov.Imm(bpf.R0, int32(m.Buckets()-1)), bpf.LoadImm(bpf.R2, m.Max, bpf.DWord), bpf.JSGE.Reg(bpf.R1, bpf.R2, done))
	g.emit(bpf.Mov.Reg(bpf.R0, bpf.R1), bpf.LoadImm(bpf.R2, m.Min, bpf.DWord), bpf.Sub.Reg(bpf.R0, bpf.R2))
	g.emit(bpf.LoadImm(bpf.R2, m.Step, bpf.DWord), bpf.Div.Reg(bpf.R0, bpf.R2), bpf.Add.Imm(bpf.R0, 1))
	g.mark(done)
}

// call compiles a call made for its effect.
func (g *gen) call(x *parse.Call) error {
	switch x.Name {
	case "printf", "exit", "time", "cat", "system":
		return g.printf(x)
	case "signal":
		return g.signal(x)
	case "join":
		return g.join(x)
	case "print", "clear", "zero":
		if m, ok := x.Args[0].(*parse.Map); ok && m.Keys == nil {
			return g.mapOp(x, m)
		}
	case "delete":
		m, ok := x.Args[0].(*parse.Map)
		if !ok {
			return errAt(g.file(), x.Pos, "delete takes a map's element")
		}
		info := g.c.maps["@"+m.Name]
		if info == nil {
			return errAt(g.file(), m.Pos, "@%s is never assigned", m.Name)
		}
		if info.Kind == output.Hist || info.Kind == output.Lhist {
			return errAt(g.file(), x.Pos, "delete of a histogram's element is not taken yet")
		}
		key, err := g.key(info, m)
		if err != nil {
			return err
		}
		g.emit(asm.Note(asm.MapDelete(info.BPFName, key), "delete("+info.Name+"[...])")...)
		return nil
	}
	_, err := g.expr(x)
	return err
}

// printf sends a record to user space: the printf's id, then each
// argument (8 bytes an integer, a string its buffer). exit() is a record
// of its own.
func (g *gen) printf(x *parse.Call) error {
	p := Printf{Exit: x.Name == "exit", Time: x.Name == "time", Cat: x.Name == "cat", System: x.Name == "system"}
	var args []parse.Expr
	switch {
	case p.Time:
		p.Format = "%H:%M:%S\n"
		if len(x.Args) > 0 {
			f, ok := x.Args[0].(*parse.Str)
			if !ok {
				return errAt(g.file(), x.Pos, "time's format is a string literal")
			}
			p.Format = f.Value
		}
	case !p.Exit:
		f, ok := x.Args[0].(*parse.Str)
		if !ok {
			return errAt(g.file(), x.Pos, "%s's format is a string literal", x.Name)
		}
		p.Format, args = f.Value, x.Args[1:]
	}
	ty := g.typer()
	size := 8
	for _, a := range args {
		t, err := ty.expr(a)
		if err != nil {
			return err
		}
		p.Args = append(p.Args, t.key())
		size += t.size
	}
	rec, err := g.alloc(size, x.Pos)
	if err != nil {
		return err
	}
	id := len(g.c.printfs)
	g.c.printfs = append(g.c.printfs, p)
	if err := g.pack(rec+8, args, p.Args, "printf's argument"); err != nil {
		return err
	}
	what := fmt.Sprintf("printf %d: the record to user space", id)
	switch {
	case p.Exit:
		what = "exit(): tell user space"
	case p.Time:
		what = "time(): user space prints the time the record comes"
	case p.Cat:
		what = fmt.Sprintf("cat %d: user space prints the file the record names", id)
	case p.System:
		what = fmt.Sprintf("system %d: user space runs the command the record names", id)
	}
	g.emit(asm.Note(storeU32(bpf.RFP, rec, int64(id)), what)...)
	g.emit(bpf.Mov.Reg(bpf.R1, asm.RegCtx), bpf.LoadMapPtr(bpf.R2, 0).WithReference(EventsMap), bpf.LoadImm(bpf.R3, 0xffffffff, bpf.DWord))
	g.stackPtr(bpf.R4, rec)
	g.emit(bpf.Mov.Imm(bpf.R5, int32(size)), bpf.FnPerfEventOutput.Call())
	return nil
}

// signals are the names signal() takes, as bpftrace's: with or without
// SIG, in any case.
var signals = map[string]unix.Signal{
	"SIGABRT": unix.SIGABRT, "SIGALRM": unix.SIGALRM, "SIGBUS": unix.SIGBUS, "SIGCHLD": unix.SIGCHLD,
	"SIGCONT": unix.SIGCONT, "SIGFPE": unix.SIGFPE, "SIGHUP": unix.SIGHUP, "SIGILL": unix.SIGILL,
	"SIGINT": unix.SIGINT, "SIGKILL": unix.SIGKILL, "SIGPIPE": unix.SIGPIPE, "SIGPOLL": unix.SIGPOLL,
	"SIGQUIT": unix.SIGQUIT, "SIGSEGV": unix.SIGSEGV, "SIGSTOP": unix.SIGSTOP, "SIGSYS": unix.SIGSYS,
	"SIGTERM": unix.SIGTERM, "SIGTRAP": unix.SIGTRAP, "SIGTSTP": unix.SIGTSTP, "SIGTTIN": unix.SIGTTIN,
	"SIGTTOU": unix.SIGTTOU, "SIGURG": unix.SIGURG, "SIGUSR1": unix.SIGUSR1, "SIGUSR2": unix.SIGUSR2,
	"SIGVTALRM": unix.SIGVTALRM, "SIGWINCH": unix.SIGWINCH, "SIGXCPU": unix.SIGXCPU, "SIGXFSZ": unix.SIGXFSZ,
}

// signal sends a signal to the process of the thread the probe fires in
// (bpf_send_signal, 5.3+): signal("SIGUSR1"), signal("usr1") or
// signal(10).
func (g *gen) signal(x *parse.Call) error {
	var n int64
	switch a := x.Args[0].(type) {
	case *parse.Str:
		name := strings.ToUpper(a.Value)
		if !strings.HasPrefix(name, "S") {
			name = "SIG" + name
		}
		sig, ok := signals[name]
		if !ok {
			return errAt(g.file(), a.Pos, "%q is not a signal's name (SIGUSR1, USR1, ...)", a.Value)
		}
		n = int64(sig)
	case *parse.Int:
		if a.Value < 1 || a.Value > 64 {
			return errAt(g.file(), a.Pos, "%d is not a signal: 1 to 64", a.Value)
		}
		n = int64(a.Value)
	default:
		return errAt(g.file(), x.Args[0].ExprPos(), "signal() takes a signal's name or number, a literal")
	}
	g.emit(asm.Note(bpf.Instructions{bpf.Mov.Imm(bpf.R1, int32(n))}, fmt.Sprintf("signal(%d): to the process of the thread the probe fires in", n))...)
	g.emit(bpf.FnSendSignal.Call())
	return nil
}

// mapOp sends print(@map[, top[, div]]), clear(@map) or zero(@map) to
// user space, which does it when the record comes: a record of the id
// alone.
func (g *gen) mapOp(x *parse.Call, m *parse.Map) error {
	info := g.c.maps["@"+m.Name]
	if info == nil {
		return errAt(g.file(), m.Pos, "@%s is never assigned", m.Name)
	}
	p := Printf{MapOp: x.Name, Map: info.Name}
	for i, a := range x.Args[1:] {
		var v uint64
		switch a := a.(type) {
		case *parse.Int:
			v = a.Value
		case *parse.Param:
			if a.N == 0 {
				v = uint64(len(g.c.opt.Params))
			} else if a.N <= len(g.c.opt.Params) {
				n, err := strconv.ParseInt(g.c.opt.Params[a.N-1], 0, 64)
				if err != nil {
					return errAt(g.file(), a.Pos, "$%d is %q: print()'s top and div are integers", a.N, g.c.opt.Params[a.N-1])
				}
				v = uint64(n)
			}
		}
		if i == 0 {
			p.Top = v
		} else {
			p.Div = v
		}
	}
	rec, err := g.alloc(8, x.Pos)
	if err != nil {
		return err
	}
	id := len(g.c.printfs)
	g.c.printfs = append(g.c.printfs, p)
	g.emit(asm.Note(storeU32(bpf.RFP, rec, int64(id)), fmt.Sprintf("%s(%s): user space does it when the record comes", x.Name, info.Name))...)
	g.emit(bpf.Mov.Reg(bpf.R1, asm.RegCtx), bpf.LoadMapPtr(bpf.R2, 0).WithReference(EventsMap), bpf.LoadImm(bpf.R3, 0xffffffff, bpf.DWord))
	g.stackPtr(bpf.R4, rec)
	g.emit(bpf.Mov.Imm(bpf.R5, 8), bpf.FnPerfEventOutput.Call())
	return nil
}

// zeroTail clears bytes n to size of the buffer at fp+off (n need not be
// a multiple of 8: the stores are the widest its alignment allows).
func (g *gen) zeroTail(off int16, n, size int) {
	for i := n; i < size; {
		w := 4
		for w > 1 && (i%w != 0 || i+w > size) {
			w /= 2
		}
		sz, _ := asm.MemSize(w)
		g.emit(bpf.StoreImm(bpf.RFP, off+int16(i), 0, sz))
		i += w
	}
}

// join sends join(array[, delim])'s record: the array's strings, read
// into the per-CPU JoinMap (16 of 256 bytes do not fit the stack) up to
// its first NULL, which user space prints joined by delim.
func (g *gen) join(x *parse.Call) error {
	p := Printf{Join: true, Format: " "}
	if len(x.Args) > 1 {
		d, ok := x.Args[1].(*parse.Str)
		if !ok {
			return errAt(g.file(), x.Args[1].ExprPos(), "join's delimiter is a string literal")
		}
		p.Format = d.Value
	}
	t, err := g.expr(x.Args[0])
	if err != nil {
		return err
	}
	if t.str {
		return errAt(g.file(), x.Args[0].ExprPos(), "join takes an array of strings' addresses (args->argv), not a string")
	}
	array, err := g.alloc(8, x.Pos)
	if err != nil {
		return err
	}
	ptr, err := g.alloc(8, x.Pos)
	if err != nil {
		return err
	}
	id := len(g.c.printfs)
	g.c.printfs = append(g.c.printfs, p)
	rd := g.c.opt.Readers()
	read, readStr := rd.Kernel, rd.KernelStr
	if g.tp.user() {
		read, readStr = rd.User, rd.UserStr
	}
	ptrSize := bpf.DWord
	if g.c.opt.Regs != nil && g.c.opt.Regs.Width == 4 {
		ptrSize = bpf.Word
	}
	skip, send, elems := g.label("nojoin"), g.label("join"), g.label("joinelem")
	elemLabel := func(i int) string {
		if i == JoinArgs {
			return send
		}
		return fmt.Sprintf("%s_%d", elems, i)
	}
	g.emit(asm.Note(bpf.Instructions{bpf.StoreMem(bpf.RFP, array, bpf.R0, bpf.DWord)}, fmt.Sprintf("join(): the array's first %d strings into the per-CPU buffer", JoinArgs))...)
	g.emit(bpf.StoreImm(bpf.RFP, -8, 0, bpf.Word))
	g.emit(asm.MapLookup(JoinMap, -8)...)
	g.emit(bpf.JEq.Imm(bpf.R0, 0, skip), bpf.Mov.Reg(bpf.R9, bpf.R0))
	g.emit(storeU32(bpf.R9, 0, int64(id))...)
	for i := range JoinArgs {
		elem := int16(8 + i*JoinArgSize)
		end := g.label("joinend")
		g.emit(asm.Note(bpf.Instructions{bpf.StoreImm(bpf.RFP, ptr, 0, bpf.Word)}, fmt.Sprintf("array[%d]", i))...)
		g.emit(bpf.StoreImm(bpf.RFP, ptr+4, 0, bpf.Word))
		g.stackPtr(bpf.R1, ptr)
		g.emit(bpf.Mov.Imm(bpf.R2, int32(ptrSize.Sizeof())), bpf.LoadMem(bpf.R3, bpf.RFP, array, bpf.DWord), bpf.Add.Imm(bpf.R3, int32(i*ptrSize.Sizeof())), read.Call())
		g.emit(bpf.LoadMem(bpf.R3, bpf.RFP, ptr, ptrSize), bpf.JEq.Imm(bpf.R3, 0, end))
		g.emit(bpf.Mov.Reg(bpf.R1, bpf.R9), bpf.Add.Imm(bpf.R1, int32(elem)), bpf.Mov.Imm(bpf.R2, JoinArgSize), readStr.Call())
		g.emit(bpf.JSGT.Imm(bpf.R0, 0, elemLabel(i+1)))
		g.mark(end) // a NULL (or a string that cannot be read) ends the list
		g.emit(bpf.StoreImm(bpf.R9, elem, 0, bpf.Byte), bpf.Ja.Label(send))
		if i+1 < JoinArgs {
			g.mark(elemLabel(i + 1))
		}
	}
	g.mark(send)
	g.emit(bpf.Mov.Reg(bpf.R1, asm.RegCtx), bpf.LoadMapPtr(bpf.R2, 0).WithReference(EventsMap), bpf.LoadImm(bpf.R3, 0xffffffff, bpf.DWord))
	g.emit(bpf.Mov.Reg(bpf.R4, bpf.R9), bpf.Mov.Imm(bpf.R5, 8+JoinArgs*JoinArgSize), bpf.FnPerfEventOutput.Call())
	g.mark(skip)
	return nil
}
