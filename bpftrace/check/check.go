// Package check gives a bpftrace program's tree its meaning where the
// tree alone decides it, before anything is resolved against the kernel:
// each attach point's form, which builtins a probe has (args where there
// is a record, retval where there is a return), the functions and their
// arguments, aggregations only as a map's whole value, one type of value
// and one number of keys per map, variables assigned before they are
// read, printf's format against its arguments, --unsafe for what acts
// on the system. What it refuses it refuses with the node's place, in
// one line, before anything loads. Types that only the kernel knows (a
// tracepoint's fields, a struct's members) are left to the compiler.
package check

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tracekit/tracekit/bpftrace/output"
	"github.com/tracekit/tracekit/bpftrace/parse"
)

// Kind is what a value is, as far as the tree says.
type Kind int

const (
	Unknown Kind = iota // decided against the kernel (a field, a cast's walk)
	Int
	Str
	Stack // kstack, ustack
	Sym   // ksym, usym
	Inet  // ntop
	Tuple
	Agg // count(), hist(), ...: a map's value only
	Void
)

var kindNames = [...]string{"a value of the kernel's type", "an integer", "a string", "a stack", "a symbol", "an address", "a tuple", "an aggregation", "nothing"}

func (k Kind) String() string { return kindNames[k] }

// Options are the command line's say in the checking.
type Options struct {
	Unsafe bool // --unsafe: system() and signal() are taken
	// Const says whether a bare name is a constant the compiler can
	// resolve (an enum of the kernel's BTF, a header's macro); nil: none.
	Const func(name string) bool
}

// Error is parse's: file, place, message.
type Error = parse.Error

type mapInfo struct {
	value     Kind
	agg       string // the aggregation's function, for Agg
	keys      int    // -1: not seen yet
	at        parse.Pos
	assigned  bool
	firstRead *parse.Map
}

type checker struct {
	file  string
	opt   Options
	maps  map[string]*mapInfo
	probe *parse.Probe
	vars  map[string]Kind
	err   *Error
}

// Check checks prog, parsed from file, and returns the first fault.
func Check(file string, prog *parse.Program, opt Options) error {
	c := &checker{file: file, opt: opt, maps: map[string]*mapInfo{}}
	for _, pr := range prog.Probes {
		c.probe = pr
		c.vars = map[string]Kind{}
		for _, ap := range pr.Points {
			c.attachPoint(ap)
		}
		if pr.Pred != nil {
			c.expr(pr.Pred)
		}
		c.stmts(pr.Body)
		if c.err != nil {
			return c.err
		}
	}
	for name, m := range c.maps {
		if !m.assigned && m.firstRead != nil {
			c.fail(m.firstRead.Pos, "@%s is read but never assigned", name)
		}
	}
	if c.err != nil {
		return c.err
	}
	return nil
}

// fail keeps the first fault (by place, so that the report does not
// depend on the order maps are visited in).
func (c *checker) fail(at parse.Pos, format string, args ...any) {
	if c.err != nil && c.err.Pos.Offset <= at.Offset {
		return
	}
	c.err = &Error{File: c.file, Pos: at, Msg: fmt.Sprintf(format, args...)}
}

func positive(s string) bool {
	n, err := strconv.ParseUint(s, 10, 64)
	return err == nil && n > 0
}

// attachPoint checks a point's form for its type.
func (c *checker) attachPoint(ap *parse.AttachPoint) {
	n := len(ap.Parts)
	empty := false
	for _, p := range ap.Parts {
		empty = empty || p == ""
	}
	bad := func(form string) { c.fail(ap.Pos, "%s: %s probes are written %s", ap.Raw, ap.Provider, form) }
	switch ap.Provider {
	case "BEGIN", "END":
	case "tracepoint":
		if n != 2 || empty {
			bad("tracepoint:CATEGORY:EVENT")
		}
	case "rawtracepoint":
		if n != 1 || empty {
			bad("rawtracepoint:EVENT")
		}
	case "kprobe", "kretprobe", "kfunc", "kretfunc":
		if n < 1 || n > 2 || empty {
			bad(ap.Provider + ":FUNCTION or " + ap.Provider + ":MODULE:FUNCTION")
		}
	case "uprobe", "uretprobe":
		if n < 2 || n > 3 || empty {
			bad(ap.Provider + ":PATH:FUNCTION")
		}
	case "usdt":
		if n < 1 || n > 3 || empty {
			bad("usdt:PATH:PROBE or usdt:PATH:PROVIDER:PROBE")
		}
	case "profile", "interval":
		units := map[string]bool{"hz": true, "s": true, "ms": true, "us": true}
		if n != 2 || !units[ap.Parts[0]] || !positive(ap.Parts[1]) {
			bad(ap.Provider + ":UNIT:N, UNIT hz, s, ms or us and N a positive number")
		}
	case "software", "hardware":
		if n < 1 || n > 2 || empty || n == 2 && !positive(ap.Parts[1]) {
			bad(ap.Provider + ":EVENT or " + ap.Provider + ":EVENT:COUNT")
		}
	default:
		c.fail(ap.Pos, "%s: %s probes are not taken", ap.Raw, ap.Provider)
	}
}

func (c *checker) stmts(ss []parse.Stmt) {
	for _, s := range ss {
		c.stmt(s)
	}
}

func (c *checker) stmt(s parse.Stmt) {
	switch s := s.(type) {
	case *parse.ExprStmt:
		if call, ok := s.X.(*parse.Call); ok && isAgg(call.Name) {
			c.fail(call.Pos, "%s() is a map's value: write @name = %s(...)", call.Name, call.Name)
			return
		}
		c.expr(s.X)
	case *parse.Assign:
		c.assign(s)
	case *parse.If:
		c.cond(s.Cond)
		c.stmts(s.Then)
		c.stmts(s.Else)
	case *parse.Unroll:
		if n, ok := s.N.(*parse.Int); !ok || n.Value < 1 || n.Value > 100 {
			c.fail(s.Pos, "unroll takes a number from 1 to 100")
		}
		c.stmts(s.Body)
	case *parse.While:
		c.cond(s.Cond)
		c.stmts(s.Body)
	case *parse.Jump:
	}
}

func (c *checker) cond(x parse.Expr) {
	switch k := c.expr(x); k {
	case Int, Unknown:
	default:
		c.fail(x.ExprPos(), "a condition is an integer, not %s", k)
	}
}

func (c *checker) assign(s *parse.Assign) {
	var value Kind
	agg := ""
	if call, ok := s.Value.(*parse.Call); ok && isAgg(call.Name) {
		m, isMap := s.Target.(*parse.Map)
		if !isMap || s.Op != "=" {
			c.fail(call.Pos, "%s() is a map's value: write @name = %s(...)", call.Name, call.Name)
			return
		}
		c.call(call)
		value, agg = Agg, call.Name
		c.mapValue(m, value, agg, s.Pos)
		return
	}
	value = c.expr(s.Value)
	if s.Op != "=" && value != Int && value != Unknown {
		c.fail(s.Value.ExprPos(), "'%s' takes an integer, not %s", s.Op, value)
	}
	switch t := s.Target.(type) {
	case *parse.Var:
		if s.Op != "=" {
			if _, ok := c.vars[t.Name]; !ok {
				c.fail(t.Pos, "$%s is used before it is assigned", t.Name)
			}
		}
		if old, ok := c.vars[t.Name]; ok && old != value && old != Unknown && value != Unknown {
			c.fail(s.Pos, "$%s holds %s, and is assigned %s here", t.Name, old, value)
		}
		c.vars[t.Name] = value
	case *parse.Map:
		c.mapValue(t, value, "", s.Pos)
		if s.Op != "=" {
			c.mapRead(t)
		}
	}
}

// mapValue records an assignment to m, which must agree with the others.
func (c *checker) mapValue(m *parse.Map, value Kind, agg string, at parse.Pos) {
	info := c.mapKeys(m)
	if info == nil {
		return
	}
	if info.assigned {
		if info.value != value && info.value != Unknown && value != Unknown || info.agg != agg {
			c.fail(at, "@%s holds %s, and is assigned %s here", m.Name, describe(info.value, info.agg), describe(value, agg))
		}
		return
	}
	info.assigned, info.value, info.agg = true, value, agg
}

func describe(k Kind, agg string) string {
	if k == Agg {
		return agg + "()"
	}
	return k.String()
}

// mapKeys checks m's keys, and their number against the map's other
// uses.
func (c *checker) mapKeys(m *parse.Map) *mapInfo {
	for _, k := range m.Keys {
		switch kind := c.expr(k); kind {
		case Agg, Void:
			c.fail(k.ExprPos(), "a map's key cannot be %s", kind)
		}
	}
	info := c.maps[m.Name]
	if info == nil {
		info = &mapInfo{keys: -1}
		c.maps[m.Name] = info
	}
	if info.keys < 0 { // the first use with its keys
		info.keys, info.at = len(m.Keys), m.Pos
		return info
	}
	if len(m.Keys) != info.keys {
		c.fail(m.Pos, "@%s has %s here, %s at %s", m.Name, keyCount(len(m.Keys)), keyCount(info.keys), info.at)
		return nil
	}
	return info
}

func keyCount(n int) string {
	switch n {
	case 0:
		return "no key"
	case 1:
		return "1 key"
	}
	return fmt.Sprintf("%d keys", n)
}

// wholeMap is a use of a map as a whole (print, clear, zero): whatever
// its keys, it must be assigned somewhere.
func (c *checker) wholeMap(m *parse.Map) {
	info := c.maps[m.Name]
	if info == nil {
		info = &mapInfo{keys: -1, at: m.Pos}
		c.maps[m.Name] = info
	}
	if info.firstRead == nil {
		info.firstRead = m
	}
}

// mapRead is a read of m's value.
func (c *checker) mapRead(m *parse.Map) Kind {
	info := c.mapKeys(m)
	if info == nil {
		return Unknown
	}
	if info.firstRead == nil {
		info.firstRead = m
	}
	if info.value == Agg {
		// bpftrace: "comparing 'count' with 'int64'": per-CPU values,
		// summed only when printed.
		c.fail(m.Pos, "@%s holds %s(), which is printed, not read", m.Name, info.agg)
		return Unknown
	}
	return info.value
}

// builtins are bpftrace 0.17's: what each is, and the probe types it
// belongs to (nil: every one).
var builtins = map[string]struct {
	kind  Kind
	probe []string
}{
	"pid": {Int, nil}, "tid": {Int, nil}, "uid": {Int, nil}, "gid": {Int, nil},
	"nsecs": {Int, nil}, "elapsed": {Int, nil}, "cpu": {Int, nil}, "comm": {Str, nil},
	"kstack": {Stack, nil}, "ustack": {Stack, nil}, "cgroup": {Int, nil},
	"curtask": {Int, nil}, "rand": {Int, nil}, "cpid": {Int, nil}, "numaid": {Int, nil},
	"jiffies": {Int, nil}, "username": {Str, nil}, "probe": {Str, nil},
	"func":   {Sym, []string{"kprobe", "kretprobe", "uprobe", "uretprobe", "kfunc", "kretfunc"}},
	"retval": {Unknown, []string{"kretprobe", "uretprobe", "kretfunc"}},
	"args":   {Unknown, []string{"tracepoint", "kfunc", "kretfunc", "rawtracepoint"}},
}

// argN: the probe types whose arguments are read by position.
var argProbes = []string{"kprobe", "uprobe", "usdt"}

// needProbe fails unless every point of the probe is of one of types.
func (c *checker) needProbe(at parse.Pos, what string, types []string) {
	for _, ap := range c.probe.Points {
		ok := false
		for _, t := range types {
			ok = ok || ap.Provider == t
		}
		if !ok {
			c.fail(at, "%s is not in %s probes (%s): only %s", what, ap.Provider, ap.Raw, strings.Join(types, ", "))
			return
		}
	}
}

func (c *checker) ident(x *parse.Ident) Kind {
	if b, ok := builtins[x.Name]; ok {
		if b.probe != nil {
			c.needProbe(x.Pos, x.Name, b.probe)
		}
		return b.kind
	}
	if n, ok := argIndex(x.Name); ok {
		c.needProbe(x.Pos, x.Name, argProbes)
		if n > 5 {
			c.fail(x.Pos, "%s: the arguments in registers are arg0 to arg5", x.Name)
		}
		return Int
	}
	if c.opt.Const != nil && c.opt.Const(x.Name) {
		return Int
	}
	c.fail(x.Pos, "unknown name %q: not a builtin (pid, comm, args, ...), nor a constant of the kernel's", x.Name)
	return Unknown
}

// argIndex reads "arg3" (or "sarg3", a stack argument).
func argIndex(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, "arg")
	if !ok {
		if digits, ok = strings.CutPrefix(name, "sarg"); !ok {
			return 0, false
		}
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n < 0 || digits == "" || len(digits) > 1 && digits[0] == '0' {
		return 0, false
	}
	return n, true
}

func (c *checker) expr(x parse.Expr) Kind {
	switch x := x.(type) {
	case *parse.Int:
		return Int
	case *parse.Str:
		return Str
	case *parse.Ident:
		return c.ident(x)
	case *parse.Var:
		k, ok := c.vars[x.Name]
		if !ok {
			c.fail(x.Pos, "$%s is used before it is assigned", x.Name)
		}
		return k
	case *parse.Param:
		return Unknown // an integer or a string, by the command line
	case *parse.Map:
		return c.mapRead(x)
	case *parse.Call:
		if isAgg(x.Name) {
			c.fail(x.Pos, "%s() is a map's value: write @name = %s(...)", x.Name, x.Name)
			return Agg
		}
		return c.call(x)
	case *parse.Unary:
		k := c.expr(x.X)
		if x.Op == "*" || x.Op == "&" {
			return Unknown
		}
		if k != Int && k != Unknown {
			c.fail(x.Pos, "'%s' takes an integer, not %s", x.Op, k)
		}
		return Int
	case *parse.Binary:
		l, r := c.expr(x.L), c.expr(x.R)
		if (x.Op == "==" || x.Op == "!=") && l == Str && r == Str {
			return Int
		}
		for _, k := range []Kind{l, r} {
			if k != Int && k != Unknown {
				c.fail(x.Pos, "'%s' takes integers, not %s", x.Op, k)
			}
		}
		return Int
	case *parse.Ternary:
		c.cond(x.Cond)
		a, b := c.expr(x.Then), c.expr(x.Else)
		if a != b && a != Unknown && b != Unknown {
			c.fail(x.Pos, "the branches of '?' are %s and %s: one kind, both", a, b)
		}
		return a
	case *parse.IncDec:
		switch t := x.X.(type) {
		case *parse.Var:
			if k := c.expr(t); k != Int && k != Unknown {
				c.fail(x.Pos, "'%s' takes an integer, not %s", x.Op, k)
			}
		case *parse.Map:
			if info := c.maps[t.Name]; info != nil && info.assigned && info.value != Int {
				c.fail(x.Pos, "'%s' takes an integer, and @%s holds %s", x.Op, t.Name, describe(info.value, info.agg))
			}
			c.mapValue(t, Int, "", x.Pos)
		default:
			c.fail(x.Pos, "'%s' takes a map (@name) or a variable ($name)", x.Op)
		}
		return Int
	case *parse.Cast:
		c.expr(x.X)
		return Unknown
	case *parse.Field:
		c.expr(x.X)
		return Unknown
	case *parse.Index:
		c.expr(x.X)
		c.expr(x.I)
		return Unknown
	case *parse.Tuple:
		for _, e := range x.Elems {
			if k := c.expr(e); k == Agg || k == Void || k == Tuple {
				c.fail(e.ExprPos(), "a tuple cannot hold %s", k)
			}
		}
		return Tuple
	case *parse.Sizeof:
		if x.X != nil {
			c.expr(x.X)
		}
		return Int
	}
	return Unknown
}

// function is one of bpftrace 0.17's functions: how many arguments it
// takes (max -1: any), what it gives, and what it asks of them.
type function struct {
	min, max int
	result   Kind
	format   bool // the first argument is a format string, checked against the rest
	mapArg   int  // 1: a whole map (clear, zero), 2: a map's element (delete)
	unsafe   bool
}

var functions = map[string]function{
	"printf": {1, -1, Void, true, 0, false}, "system": {1, -1, Void, true, 0, true},
	"cat": {1, -1, Void, true, 0, false}, "time": {0, 1, Void, false, 0, false},
	"print": {1, 3, Void, false, 0, false}, "exit": {0, 0, Void, false, 0, false},
	"clear": {1, 1, Void, false, 1, false}, "zero": {1, 1, Void, false, 1, false},
	"delete": {1, 1, Void, false, 2, false}, "signal": {1, 1, Void, false, 0, true},
	"str": {1, 2, Str, false, 0, false}, "buf": {1, 2, Str, false, 0, false},
	"join": {1, 2, Void, false, 0, false}, "ksym": {1, 1, Sym, false, 0, false},
	"usym": {1, 1, Sym, false, 0, false}, "kaddr": {1, 1, Int, false, 0, false},
	"uaddr": {1, 1, Int, false, 0, false}, "ntop": {1, 2, Inet, false, 0, false},
	"strftime": {2, 2, Str, false, 0, false}, "bswap": {1, 1, Int, false, 0, false},
	"kstack": {0, 2, Stack, false, 0, false}, "ustack": {0, 2, Stack, false, 0, false},
	"strncmp": {3, 3, Int, false, 0, false}, "sizeof": {1, 1, Int, false, 0, false},
	"reg": {1, 1, Int, false, 0, false}, "cgroupid": {1, 1, Int, false, 0, false},
	"macaddr": {1, 1, Str, false, 0, false}, "path": {1, 1, Str, false, 0, false},
	"override": {1, 1, Void, false, 0, true},
	"count":    {0, 0, Agg, false, 0, false}, "sum": {1, 1, Agg, false, 0, false},
	"avg": {1, 1, Agg, false, 0, false}, "min": {1, 1, Agg, false, 0, false},
	"max": {1, 1, Agg, false, 0, false}, "stats": {1, 1, Agg, false, 0, false},
	"hist": {1, 1, Agg, false, 0, false}, "lhist": {4, 4, Agg, false, 0, false},
}

func isAgg(name string) bool { return functions[name].result == Agg }

func (c *checker) call(x *parse.Call) Kind {
	f, ok := functions[x.Name]
	if !ok {
		c.fail(x.Pos, "unknown function %s()", x.Name)
		return Unknown
	}
	n := len(x.Args)
	if n < f.min || f.max >= 0 && n > f.max {
		c.fail(x.Pos, "%s() takes %s, not %d", x.Name, argCount(f.min, f.max), n)
		return f.result
	}
	if f.unsafe && !c.opt.Unsafe {
		c.fail(x.Pos, "%s() acts on the system: it is taken only with --unsafe", x.Name)
	}
	switch x.Name {
	case "kstack", "ustack":
		c.stackArgs(x)
		return Stack
	}
	switch f.mapArg {
	case 1, 2:
		m, ok := x.Args[0].(*parse.Map)
		switch {
		case !ok:
			c.fail(x.Args[0].ExprPos(), "%s() takes a map (@name)", x.Name)
		case f.mapArg == 1 && m.Keys != nil:
			c.fail(m.Pos, "%s() takes a whole map: @%s, not one of its elements", x.Name, m.Name)
		case f.mapArg == 2 && m.Keys == nil && c.maps[m.Name] != nil && c.maps[m.Name].keys > 0:
			c.fail(m.Pos, "delete() takes one element of @%s: @%s[key]", m.Name, m.Name)
		case f.mapArg == 2:
			c.mapKeys(m)
		default:
			c.wholeMap(m)
		}
		return f.result
	}
	if x.Name == "print" {
		if m, ok := x.Args[0].(*parse.Map); ok && m.Keys == nil {
			c.wholeMap(m)
			// top and div: integer literals (or positional parameters,
			// which bpftrace makes literals), as bpftrace wants them.
			for _, a := range x.Args[1:] {
				switch a.(type) {
				case *parse.Int, *parse.Param:
				default:
					c.fail(a.ExprPos(), "print()'s top and div are integer literals")
				}
			}
			return Void
		}
	}
	kinds := make([]Kind, n)
	for i, a := range x.Args {
		kinds[i] = c.expr(a)
		if kinds[i] == Void || kinds[i] == Agg {
			c.fail(a.ExprPos(), "%s() cannot take %s", x.Name, kinds[i])
		}
	}
	if f.format {
		c.format(x, kinds)
	}
	return f.result
}

func argCount(min, max int) string {
	switch {
	case max < 0:
		return fmt.Sprintf("%d arguments or more", min)
	case min == max && min == 1:
		return "1 argument"
	case min == max:
		return fmt.Sprintf("%d arguments", min)
	}
	return fmt.Sprintf("%d to %d arguments", min, max)
}

// stackArgs: kstack(perf), kstack(10), kstack(bpftrace, 10).
func (c *checker) stackArgs(x *parse.Call) {
	for i, a := range x.Args {
		switch a := a.(type) {
		case *parse.Ident:
			if i == 0 && (a.Name == "perf" || a.Name == "bpftrace" || a.Name == "raw") {
				continue
			}
		case *parse.Int:
			if i == len(x.Args)-1 && a.Value >= 1 && a.Value <= 1024 {
				continue
			}
		}
		c.fail(a.ExprPos(), "%s() takes a mode (perf, bpftrace, raw) and a number of frames (1 to 1024)", x.Name)
	}
}

// format checks a format string's conversions (as bpftrace finds them: a
// '%' before anything else is text) against the arguments after it:
// their number, integers for %d, %u, %x, %c, %p, strings (or symbols,
// stacks, addresses) for %s.
func (c *checker) format(x *parse.Call, kinds []Kind) {
	s, ok := x.Args[0].(*parse.Str)
	if !ok {
		c.fail(x.Args[0].ExprPos(), "%s()'s first argument is its format, a string in quotes", x.Name)
		return
	}
	convs := output.Conversions(s.Value)
	args := kinds[1:]
	if len(args) != len(convs) {
		c.fail(x.Pos, "%s(): the format has %d conversions and %d arguments follow it", x.Name, len(convs), len(args))
		return
	}
	for i, conv := range convs {
		switch k := args[i]; {
		case k == Unknown:
		case (conv == 's' || conv == 'r') && k != Str && k != Sym && k != Stack && k != Inet:
			c.fail(x.Args[i+1].ExprPos(), "%s(): %%%c takes a string, not %s", x.Name, conv, k)
		case conv != 's' && conv != 'r' && k != Int:
			c.fail(x.Args[i+1].ExprPos(), "%s(): %%%c takes an integer, not %s", x.Name, conv, k)
		}
	}
}
