package compile

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/cilium/ebpf/btf"

	"github.com/tracekit/tracekit/bpftrace/output"
	"github.com/tracekit/tracekit/bpftrace/parse"
	"github.com/tracekit/tracekit/tracefs"
)

// typ is what an expression gives: an integer (signed or not, as
// bpftrace decides: literals are signed, builtins not) or a string of
// size bytes, kept in a stack buffer at off.
type typ struct {
	str    bool
	size   int
	signed bool
	off    int16
	// ptr is what a pointer points at, in the kernel's BTF (nil: an
	// integer); embedded says R0 holds the address of a struct that is
	// itself a member (x.name walks it, x->name a pointer); user says
	// the memory is the process's, not the kernel's.
	ptr      btf.Type
	embedded bool
	user     bool
	// read is the bytes a walk reads at the address (0: read already);
	// castSize the bytes an integer cast keeps.
	read, castSize int
	// stack is a kstack's STACK_TRACE map (the integer its id); ksym an
	// address printed as its kernel symbol; inet an address ntop made
	// (family, then 16 bytes).
	stack      string
	ksym, inet bool
	// usym is usym()'s: the address, then the process's id (8 bytes
	// each), named in user space by the process's mappings.
	usym bool
	// buf is buf()'s: a length byte, then the bytes (str too: it is
	// kept in a stack buffer).
	buf bool
	// strftime is strftime()'s format; the integer, nanoseconds since
	// boot.
	strftime string
	// ustack is the user stack, of at most frames frames: no bytes of
	// its own, the stack pipeline's frames (see ustack.go).
	ustack bool
	frames int
	// width is the bytes an integer had where it was read (a member, a
	// field, a cast), for bswap; bytes a char array's length.
	width, bytes int
}

// key is how t is laid out as a map's key or a printf argument.
func (t typ) key() Key {
	return Key{Str: t.str, Size: t.size, Stack: t.stack, Ksym: t.ksym, Inet: t.inet, Usym: t.usym, Ustack: t.ustack, Frames: t.frames, Buf: t.buf, Strftime: t.strftime}
}

// buffer says whether t is kept in a stack buffer (at off), not in R0.
func (t typ) buffer() bool { return t.str || t.inet || t.usym }

// sameKind says whether t and u are kept alike: an integer, a string, an
// address of ntop() or of usym().
func (t typ) sameKind(u typ) bool {
	return t.str == u.str && t.inet == u.inet && t.usym == u.usym
}

// inetSize is ntop's value: the family (8 bytes), then the address (16).
const inetSize = 24

// usymSize is usym()'s value: the address, then the process's id.
const usymSize = 16

var intT = typ{size: 8}

func strT(n int) typ { return typ{str: true, size: roundUp(n)} }

func roundUp(n int) int { return (n + stackAlign - 1) / stackAlign * stackAlign }

// intBuiltins are the integer builtins and the helper each calls.
var intBuiltins = map[string]bool{"pid": true, "tid": true, "uid": true, "gid": true, "cpu": true, "nsecs": true, "cgroup": true, "curtask": true, "elapsed": true, "cpid": true}

// aggs are the aggregations and the kind of map each makes.
var aggs = map[string]output.Kind{"count": output.Count, "sum": output.Sum, "min": output.Min, "max": output.Max, "avg": output.Avg, "stats": output.Stats, "hist": output.Hist, "lhist": output.Lhist}

// field is a tracepoint field an args->name names.
func (c *compiler) field(tp *Target, x *parse.Field) (tracefs.Field, typ, error) {
	if id, ok := x.X.(*parse.Ident); !ok || id.Name != "args" {
		return tracefs.Field{}, typ{}, errAt(c.opt.File, x.Pos, "only args->field is taken here (struct walks through BTF are not yet)")
	}
	if tp.Provider != "tracepoint" {
		return tracefs.Field{}, typ{}, errAt(c.opt.File, x.Pos, "args is a tracepoint's record here; a %s has arg0, arg1, ...", tp.Provider)
	}
	f, ok := tp.Format.Field(x.Name)
	if !ok || f.Common {
		return f, typ{}, errAt(c.opt.File, x.Pos, "tracepoint:%s:%s has no field %q (fields: %s)", tp.Group, tp.Name, x.Name, joinNames(tp.Format.FieldNames()))
	}
	char := strings.HasPrefix(f.Type, "char") || strings.HasPrefix(f.Type, "const char") || strings.HasPrefix(f.Type, "unsigned char")
	switch {
	case f.DataLoc && char && !tp.user():
		return f, strT(StrSize), nil
	case f.DataLoc:
		return f, typ{}, errAt(c.opt.File, x.Pos, "args->%s is a __data_loc %s: not taken", x.Name, f.Type)
	case f.ArrayLen > 0 && char:
		return f, strT(f.ArrayLen), nil
	case f.ArrayLen > 0 || f.Size > 8 || f.Size&(f.Size-1) != 0:
		return f, typ{}, errAt(c.opt.File, x.Pos, "args->%s is %s: arrays other than strings are not taken", x.Name, f.Type)
	}
	t := typ{size: 8, signed: f.Signed, user: f.IsPointer() && tp.user()}
	if strings.HasSuffix(f.Type, "*") && strings.Contains(f.Type, "struct ") && c.opt.Types != nil {
		// A pointer to a struct (syscalls:sys_enter_nanosleep's rqtp): ->
		// walks it, in the process's memory for a syscall's.
		if p, err := c.named(strings.TrimSpace(strings.TrimSuffix(f.Type, "*")), x.Pos); err == nil {
			t.ptr, t.user = p, tp.user()
		}
	}
	return f, t, nil
}

// param is $N: an integer if it reads as one, else a string.
func (c *compiler) param(x *parse.Param) (string, uint64, bool) {
	if x.N == 0 {
		return "", uint64(len(c.opt.Params)), false
	}
	v := ""
	if x.N <= len(c.opt.Params) {
		v = c.opt.Params[x.N-1]
	}
	if n, err := strconv.ParseInt(v, 0, 64); err == nil {
		return "", uint64(n), false
	}
	if v == "" {
		return "", 0, false // bpftrace: a missing parameter is 0 (or "" in str())
	}
	return v, 0, true
}

// typer learns the maps' kinds and keys before any code is made.
type typer struct {
	c    *compiler
	tp   *Target
	vars map[string]typ
}

func (t *typer) stmts(ss []parse.Stmt) error {
	if t.vars == nil {
		t.vars = map[string]typ{}
	}
	for _, s := range ss {
		if err := t.stmt(s); err != nil {
			return err
		}
	}
	return nil
}

func (t *typer) stmt(s parse.Stmt) error {
	switch s := s.(type) {
	case *parse.ExprStmt:
		if x, ok := s.X.(*parse.IncDec); ok {
			return t.store(x.X, intT, "", nil, x.Pos)
		}
		_, err := t.expr(s.X)
		return err
	case *parse.Assign:
		if call, ok := s.Value.(*parse.Call); ok {
			if kind, ok := aggs[call.Name]; ok {
				v := intT
				for i, a := range call.Args {
					at, err := t.expr(a)
					if err != nil {
						return err
					}
					if i == 0 && kind == output.Sum {
						v.signed = at.signed // a sum prints with its argument's sign
					}
				}
				if err := t.store(s.Target, v, call.Name, &kind, s.Pos); err != nil {
					return err
				}
				if kind == output.Lhist {
					return t.lhist(s.Target, call)
				}
				return nil
			}
		}
		v, err := t.expr(s.Value)
		if err != nil {
			return err
		}
		if s.Op != "=" && v.str {
			return errAt(t.c.opt.File, s.Pos, "%s on a string", s.Op)
		}
		return t.store(s.Target, v, "", nil, s.Pos)
	case *parse.If:
		if _, err := t.expr(s.Cond); err != nil {
			return err
		}
		if err := t.stmts(s.Then); err != nil {
			return err
		}
		return t.stmts(s.Else)
	case *parse.Unroll:
		return t.stmts(s.Body)
	case *parse.While:
		return errAt(t.c.opt.File, s.Pos, "while is not taken: it needs bounded loops (5.3+), which old kernels refuse; use unroll")
	case *parse.Jump:
		if s.Kind != "return" {
			return errAt(t.c.opt.File, s.Pos, "%s is not taken outside while, which is not", s.Kind)
		}
		return nil
	}
	return errAt(t.c.opt.File, s.StmtPos(), "this statement is not taken yet")
}

// store records a map's or a variable's type at an assignment.
func (t *typer) store(target parse.Expr, v typ, agg string, kind *output.Kind, at parse.Pos) error {
	switch x := target.(type) {
	case *parse.Var:
		if kind != nil {
			return errAt(t.c.opt.File, at, "%s() goes into a map, not a variable", agg)
		}
		if old, ok := t.vars[x.Name]; ok && (old.str != v.str) {
			return errAt(t.c.opt.File, at, "$%s holds an integer and a string", x.Name)
		}
		if old, ok := t.vars[x.Name]; ok && old.size > v.size {
			v.size = old.size
		}
		t.vars[x.Name] = v
		return nil
	case *parse.Map:
		var keys []Key
		for _, k := range x.Keys {
			kt, err := t.expr(k)
			if err != nil {
				return err
			}
			if kt.buf {
				return errAt(t.c.opt.File, k.ExprPos(), "buf() as a map's key is not taken yet: it is printf's argument (%%r) here")
			}
			if kt.strftime != "" {
				return errAt(t.c.opt.File, k.ExprPos(), "strftime() as a map's key is not taken yet: it is printf's argument (%%s) here")
			}
			keys = append(keys, kt.key())
		}
		if v.buf || v.strftime != "" {
			return errAt(t.c.opt.File, at, "buf() and strftime() as a map's value are not taken yet: they are printf's arguments here")
		}
		m := t.c.maps["@"+x.Name]
		if m == nil {
			m = &Map{Name: "@" + x.Name, Keys: keys}
			switch {
			case kind != nil:
				m.Kind, m.PerCPU = *kind, true
				m.Unsigned = *kind == output.Sum && !v.signed
			case v.inet, v.usym:
				return errAt(t.c.opt.File, at, "an address from ntop() or usym() is a map's key or printf's argument here, not a map's value")
			case v.str:
				m.Kind, m.StrSize = output.Str, v.size
			default:
				m.Kind, m.Unsigned = output.Int, !v.signed
			}
			t.c.maps[m.Name] = m
		} else {
			for i := range min(len(keys), len(m.Keys)) {
				if keys[i].Str != m.Keys[i].Str {
					return errAt(t.c.opt.File, x.Pos, "@%s's key %d is a string in one place and an integer in another", x.Name, i+1)
				}
				m.Keys[i].Size = max(m.Keys[i].Size, keys[i].Size)
			}
			if v.str && m.Kind == output.Str {
				m.StrSize = max(m.StrSize, v.size)
			}
		}
		return nil
	}
	return errAt(t.c.opt.File, at, "only maps and variables are assigned to")
}

// lhist reads lhist's bounds, which are constants (check has counted
// them), the same wherever the map is assigned.
func (t *typer) lhist(target parse.Expr, call *parse.Call) error {
	var v [3]int64
	for i, a := range call.Args[1:4] {
		n, ok := a.(*parse.Int)
		if !ok {
			return errAt(t.c.opt.File, a.ExprPos(), "lhist's bounds and step are integer literals")
		}
		v[i] = int64(n.Value)
	}
	if v[2] <= 0 || v[1] <= v[0] || (v[1]-v[0])/v[2] > 1000 {
		return errAt(t.c.opt.File, call.Pos, "lhist(value, min, max, step) wants min < max, step > 0 and at most 1000 buckets")
	}
	m := t.c.maps["@"+target.(*parse.Map).Name]
	if m.Step != 0 && (m.Min != v[0] || m.Max != v[1] || m.Step != v[2]) {
		return errAt(t.c.opt.File, call.Pos, "%s is an lhist with other bounds elsewhere", m.Name)
	}
	m.Min, m.Max, m.Step = v[0], v[1], v[2]
	return nil
}

func (t *typer) expr(x parse.Expr) (typ, error) {
	c := t.c
	switch x := x.(type) {
	case *parse.Int:
		return typ{size: 8, signed: true}, nil
	case *parse.Str:
		return strT(len(x.Value) + 1), nil
	case *parse.Param:
		if s, _, isStr := c.param(x); isStr {
			return strT(len(s) + 1), nil
		}
		return typ{size: 8, signed: true}, nil
	case *parse.Ident:
		switch {
		case x.Name == "kstack":
			return c.kstack(nil, x.Pos)
		case x.Name == "ustack":
			return c.ustackType(nil)
		case x.Name == "curtask":
			return c.curtask(), nil
		case intBuiltins[x.Name]:
			return intT, nil
		case x.Name == "comm":
			return strT(16), nil
		case x.Name == "probe":
			return strT(len(t.tp.ProbeName()) + 1), nil
		case x.Name == "func":
			return strT(len(t.tp.Func) + 1), nil
		case x.Name == "retval":
			return typ{size: 8, signed: true, user: t.tp.user()}, nil
		}
		if _, ok := c.constant(x.Name); ok {
			return typ{size: 8, signed: true}, nil
		}
		if _, ok := argIndex(x.Name); ok {
			return typ{size: 8, user: t.tp.user()}, nil
		}
		return typ{}, errAt(c.opt.File, x.Pos, "%s is not taken here yet", x.Name)
	case *parse.Field:
		if id, ok := x.X.(*parse.Ident); ok && id.Name == "args" {
			_, ft, err := c.field(t.tp, x)
			return ft, err
		}
		base, err := t.expr(x.X)
		if err != nil {
			return typ{}, err
		}
		_, _, ft, err := c.member(base, x)
		ft.read = 0
		return ft, err
	case *parse.Cast:
		from, err := t.expr(x.X)
		if err != nil {
			return typ{}, err
		}
		ct, err := c.castType(x, from)
		ct.castSize = 0
		return ct, err
	case *parse.Var:
		if v, ok := t.vars[x.Name]; ok {
			return v, nil
		}
		return intT, nil
	case *parse.Map:
		for _, k := range x.Keys {
			if _, err := t.expr(k); err != nil {
				return typ{}, err
			}
		}
		if m := c.maps["@"+x.Name]; m != nil && m.Kind == output.Str {
			return strT(m.StrSize), nil
		}
		return typ{size: 8, signed: true}, nil
	case *parse.Call:
		if x.Name == "kstack" || x.Name == "ustack" {
			// Their arguments are a mode's name and a number, not values.
			if x.Name == "kstack" {
				return c.kstack(x, x.Pos)
			}
			return c.ustackType(x)
		}
		for _, a := range x.Args {
			if _, err := t.expr(a); err != nil {
				return typ{}, err
			}
		}
		switch x.Name {
		case "str":
			return strT(StrSize), nil
		case "strftime":
			return c.strftimeType(x)
		case "buf":
			n, err := c.bufLen(x, t.expr)
			if err != nil {
				return typ{}, err
			}
			b := strT(BufData + n)
			b.buf = true
			return b, nil
		case "kstack":
			return c.kstack(x, x.Pos)
		case "ustack":
			return c.ustackType(x)
		case "ksym":
			return typ{size: 8, ksym: true}, nil
		case "usym":
			return typ{size: usymSize, usym: true}, nil
		case "ntop":
			return typ{size: inetSize, inet: true}, nil
		}
		return intT, nil
	case *parse.Unary:
		v, err := t.expr(x.X)
		if err == nil && x.Op == "*" {
			return c.derefType(v, x.Pos)
		}
		return typ{size: 8, signed: true}, err
	case *parse.Binary:
		if _, err := t.expr(x.L); err != nil {
			return typ{}, err
		}
		_, err := t.expr(x.R)
		return intT, err
	case *parse.Ternary:
		for _, e := range []parse.Expr{x.Cond, x.Then, x.Else} {
			if _, err := t.expr(e); err != nil {
				return typ{}, err
			}
		}
		return t.expr(x.Then)
	case *parse.IncDec:
		return intT, t.store(x.X, intT, "", nil, x.Pos)
	}
	return typ{}, errAt(c.opt.File, x.ExprPos(), "this expression is not taken yet")
}

// argIndex is N of argN.
func argIndex(name string) (int, bool) {
	n, ok := strings.CutPrefix(name, "arg")
	if !ok || n == "" || len(n) > 2 {
		return 0, false
	}
	i, err := strconv.Atoi(n)
	return i, err == nil
}

// curtask's type: a pointer to the kernel's struct task_struct where its
// BTF says what that is, else an integer.
func (c *compiler) curtask() typ {
	t := typ{size: 8}
	if c.opt.Types != nil {
		if p, err := c.opt.Types.Named("struct task_struct"); err == nil {
			t.ptr = p
		}
	}
	return t
}

// kstackDepth is kstack's frames without a limit: bpftrace's, and the
// kernel's perf_event_max_stack default.
const kstackDepth = 127

// kstack is kstack's and kstack(N)'s type: the id of a stack in a
// STACK_TRACE map of N frames (a map per depth, as bpftrace's).
func (c *compiler) kstack(call *parse.Call, at parse.Pos) (typ, error) {
	depth := kstackDepth
	if call != nil {
		for _, a := range call.Args {
			switch a := a.(type) {
			case *parse.Int:
				if a.Value < 1 || a.Value > kstackDepth {
					return typ{}, errAt(c.opt.File, a.Pos, "kstack's frames: 1 to %d", kstackDepth)
				}
				depth = int(a.Value)
			case *parse.Ident:
				if a.Name != "bpftrace" {
					return typ{}, errAt(c.opt.File, a.Pos, "kstack(%s): only bpftrace's format is taken yet", a.Name)
				}
			}
		}
	}
	name := fmt.Sprintf("kstack%d", depth)
	c.stackMaps[name] = depth
	return typ{size: 8, stack: name}, nil
}
