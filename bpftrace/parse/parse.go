package parse

import (
	"fmt"
	"strings"
)

// providers are the probe types bpftrace 0.17 knows, by every name it
// takes; the compiler says which it runs.
var providers = map[string]string{
	"BEGIN": "BEGIN", "END": "END",
	"tracepoint": "tracepoint", "t": "tracepoint",
	"rawtracepoint": "rawtracepoint", "rt": "rawtracepoint",
	"kprobe": "kprobe", "k": "kprobe",
	"kretprobe": "kretprobe", "kr": "kretprobe",
	"uprobe": "uprobe", "u": "uprobe",
	"uretprobe": "uretprobe", "ur": "uretprobe",
	"usdt": "usdt", "U": "usdt",
	"profile": "profile", "p": "profile",
	"interval": "interval", "i": "interval",
	"software": "software", "s": "software",
	"hardware": "hardware", "h": "hardware",
	"kfunc": "kfunc", "f": "kfunc", "fentry": "kfunc",
	"kretfunc": "kretfunc", "fr": "kretfunc", "fexit": "kretfunc",
	"watchpoint": "watchpoint", "w": "watchpoint",
	"asyncwatchpoint": "asyncwatchpoint", "aw": "asyncwatchpoint",
	"iter": "iter", "it": "iter",
}

// Provider is the probe type a name stands for in bpftrace ("t" is
// "tracepoint", "U" "usdt", "fentry" "kfunc"), and whether it is one.
func Provider(name string) (string, bool) {
	p, ok := providers[name]
	return p, ok
}

// Parse reads a script named file (for messages: a path, or "stdin" for
// -e's program). defined are the names #ifdef sees as defined, as if by
// -D (BPFTRACE_HAVE_BTF where the kernel has BTF).
func Parse(file, src string, defined []string) (*Program, error) {
	if len(src) > MaxSource {
		return nil, &Error{File: file, Pos: Pos{Line: 1, Col: 1}, Msg: fmt.Sprintf("the script is %d bytes, more than the %d taken", len(src), MaxSource)}
	}
	code, prog, macros, err := preprocess(file, src, defined)
	if err != nil {
		return nil, err
	}
	p := &parser{s: newScanner(file, code, macros)}
	for {
		end, err := p.s.atEOF()
		if err != nil {
			return nil, err
		}
		if end {
			break
		}
		probe, err := p.probe()
		if err != nil {
			return nil, err
		}
		prog.Probes = append(prog.Probes, probe)
	}
	if len(prog.Probes) == 0 {
		return nil, &Error{File: file, Pos: Pos{Line: 1, Col: 1}, Msg: "no probes: a program is probes with actions, as in: tracepoint:syscalls:sys_enter_read { @[comm] = count(); }"}
	}
	return prog, nil
}

// preprocess does what bpftrace's clang would for a script: the #! line,
// #include, #define of object-like macros, #ifdef/#ifndef/#else/#endif.
// Directives and the lines left out become spaces, so every place in the
// code is where it was.
func preprocess(file, src string, defined []string) (string, *Program, map[string]string, error) {
	prog := &Program{}
	macros := map[string]string{}
	isDefined := map[string]bool{}
	for _, d := range defined {
		isDefined[d] = true
	}
	type cond struct {
		active, seenElse bool
		at               int
	}
	var conds []cond
	active := func() bool {
		for _, c := range conds {
			if !c.active {
				return false
			}
		}
		return true
	}
	out := []byte(src)
	blank := func(from, to int) {
		for i := from; i < to; i++ {
			if out[i] != '\n' {
				out[i] = ' '
			}
		}
	}
	errAt := func(off int, format string, args ...any) error {
		s := newScanner(file, src, nil)
		return s.errorf(off, format, args...)
	}
	inComment := false // a line that starts inside /* ... */ has no directive
	for start := 0; start < len(src); {
		end := strings.IndexByte(src[start:], '\n')
		if end < 0 {
			end = len(src)
		} else {
			end += start
		}
		line := src[start:end]
		trimmed := strings.TrimLeft(line, " \t")
		commented := inComment
		inComment = endsInComment(line, inComment)
		switch {
		case start == 0 && strings.HasPrefix(line, "#!"):
			blank(start, end)
		case !commented && strings.HasPrefix(trimmed, "#"):
			at := start + len(line) - len(trimmed)
			name, rest, _ := strings.Cut(strings.TrimSpace(trimmed[1:]), " ")
			if i := strings.IndexByte(name, '\t'); i >= 0 {
				name, rest = name[:i], name[i+1:]+" "+rest
			}
			rest = strings.TrimSpace(rest)
			if strings.HasSuffix(rest, "\\") {
				return "", nil, nil, errAt(at, "#%s continued on the next line: write it on one", name)
			}
			switch name {
			case "ifdef", "ifndef":
				if !isIdent(rest) {
					return "", nil, nil, errAt(at, "#%s needs one name, not %q", name, rest)
				}
				conds = append(conds, cond{active: isDefined[rest] == (name == "ifdef"), at: at})
			case "else":
				if len(conds) == 0 || conds[len(conds)-1].seenElse {
					return "", nil, nil, errAt(at, "#else without its #ifdef")
				}
				c := &conds[len(conds)-1]
				c.active, c.seenElse = !c.active, true
			case "endif":
				if len(conds) == 0 {
					return "", nil, nil, errAt(at, "#endif without its #ifdef")
				}
				conds = conds[:len(conds)-1]
			case "if", "elif":
				return "", nil, nil, errAt(at, "#%s is not taken (no expressions in the preprocessor here): use #ifdef or #ifndef", name)
			case "include":
				if active() {
					if len(rest) < 3 || !(rest[0] == '<' && rest[len(rest)-1] == '>' || rest[0] == '"' && rest[len(rest)-1] == '"') {
						return "", nil, nil, errAt(at, "#include needs <header.h> or \"header.h\", not %q", rest)
					}
					prog.Includes = append(prog.Includes, rest)
				}
			case "define":
				if active() {
					mname, body, _ := strings.Cut(rest, " ")
					if i := strings.IndexByte(mname, '('); i >= 0 {
						return "", nil, nil, errAt(at, "#define %s: macros with arguments are not taken, only #define NAME value", mname[:i])
					}
					if !isIdent(mname) {
						return "", nil, nil, errAt(at, "#define needs a name, not %q", mname)
					}
					macros[mname] = strings.TrimSpace(body)
					isDefined[mname] = true
				}
			case "undef":
				if active() {
					delete(macros, rest)
					delete(isDefined, rest)
				}
			default:
				return "", nil, nil, errAt(at, "unknown directive #%s", name)
			}
			blank(start, end)
		case !active():
			blank(start, end)
		}
		start = end + 1
	}
	if len(conds) > 0 {
		return "", nil, nil, errAt(conds[len(conds)-1].at, "#ifdef without its #endif")
	}
	return string(out), prog, macros, nil
}

// endsInComment says whether a line that starts inside a block comment
// (in) or not ends inside one, passing strings and // comments.
func endsInComment(line string, in bool) bool {
	for i := 0; i < len(line); i++ {
		switch {
		case in:
			if strings.HasPrefix(line[i:], "*/") {
				in = false
				i++
			}
		case line[i] == '"':
			for i++; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '\\' {
					i++
				}
			}
		case strings.HasPrefix(line[i:], "//"):
			return false
		case strings.HasPrefix(line[i:], "/*"):
			in = true
			i++
		}
	}
	return in
}

func isIdent(s string) bool {
	if s == "" || !isIdentStart(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !isIdentChar(s[i]) {
			return false
		}
	}
	return true
}

type parser struct {
	s      *scanner
	depth  int
	inPred bool // a '/' outside brackets ends the predicate
	nest   int  // brackets open within the predicate
}

func (p *parser) errorf(off int, format string, args ...any) error {
	return p.s.errorf(off, format, args...)
}

func (p *parser) peek() (token, error) { return p.s.peek(0) }

// expect reads the operator op, or says what it found instead.
func (p *parser) expect(op, after string) (token, error) {
	t, err := p.s.next()
	if err != nil {
		return t, err
	}
	if !t.is(op) {
		return t, p.errorf(t.pos, "expected '%s' %s, found %s", op, after, t)
	}
	return t, nil
}

// accept reads the operator op if it is next.
func (p *parser) accept(op string) (bool, error) {
	t, err := p.peek()
	if err != nil || !t.is(op) {
		return false, err
	}
	_, err = p.s.next()
	return true, err
}

func (p *parser) enter(off int) error {
	if p.depth++; p.depth > maxDepth {
		return p.errorf(off, "nested more than %d deep", maxDepth)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// probe reads attach points, an optional /predicate/ and { action }.
func (p *parser) probe() (*Probe, error) {
	probe := &Probe{}
	for {
		raw, off, err := p.s.attachPoint()
		if err != nil {
			return nil, err
		}
		if raw == "" || !isIdentStart(raw[0]) {
			found := "the end of the script"
			if off < len(p.s.src) {
				found = fmt.Sprintf("%q", p.s.src[off:off+1])
			}
			return nil, p.errorf(off, "expected a probe (such as tracepoint:syscalls:sys_enter_read), found %s", found)
		}
		ap, err := p.attachPoint(raw, off)
		if err != nil {
			return nil, err
		}
		if len(probe.Points) == 0 {
			probe.Pos = ap.Pos
		}
		probe.Points = append(probe.Points, ap)
		c, err := p.s.peekByte()
		if err != nil {
			return nil, err
		}
		if c != ',' {
			break
		}
		p.s.off++
	}
	if len(probe.Points) > 1 {
		for _, ap := range probe.Points {
			ap.Listed = true
		}
	}
	c, err := p.s.peekByte()
	if err != nil {
		return nil, err
	}
	if c == '/' {
		if _, err := p.s.next(); err != nil { // the opening '/'
			return nil, err
		}
		p.inPred, p.nest = true, 0
		pred, err := p.expr()
		p.inPred = false
		if err != nil {
			return nil, err
		}
		if _, err := p.expect("/", "to end the predicate"); err != nil {
			return nil, err
		}
		probe.Pred = pred
	}
	t, err := p.peek()
	if err != nil {
		return nil, err
	}
	if !t.is("{") {
		return nil, p.errorf(t.pos, "expected '{' to open the probe's action, found %s", t)
	}
	if probe.Body, err = p.block(); err != nil {
		return nil, err
	}
	return probe, nil
}

// attachPoint takes apart a probe's text: its type, by any of its names,
// and the fields after it, split at ':' outside quotes.
func (p *parser) attachPoint(raw string, off int) (*AttachPoint, error) {
	ap := &AttachPoint{Pos: p.s.pos(off), Raw: raw}
	var parts []string
	var cur strings.Builder
	quoted := false
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == '"':
			quoted = !quoted
		case c == ':' && !quoted:
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(c)
		}
	}
	parts = append(parts, cur.String())
	name, ok := providers[parts[0]]
	if !ok {
		return nil, p.errorf(off, "unknown probe type %q in %q (tracepoint, kprobe, uprobe, usdt, profile, interval, ...)", parts[0], raw)
	}
	if (name == "BEGIN" || name == "END") != (len(parts) == 1) {
		if len(parts) == 1 {
			return nil, p.errorf(off, "%s needs more: such as %s:...", raw, parts[0])
		}
		return nil, p.errorf(off, "%s takes nothing after it", parts[0])
	}
	ap.Provider, ap.Parts = name, parts[1:]
	return ap, nil
}

// block reads { statements }.
func (p *parser) block() ([]Stmt, error) {
	open, err := p.expect("{", "to open a block")
	if err != nil {
		return nil, err
	}
	if err := p.enter(open.pos); err != nil {
		return nil, err
	}
	defer p.leave()
	var stmts []Stmt
	for {
		t, err := p.peek()
		if err != nil {
			return nil, err
		}
		switch {
		case t.is("}"):
			p.s.next()
			return stmts, nil
		case t.is(";"):
			p.s.next()
			continue
		case t.kind == tEOF:
			return nil, p.errorf(open.pos, "a block opened here is never closed ('}')")
		}
		st, braced, err := p.stmt()
		if err != nil {
			return nil, err
		}
		stmts = append(stmts, st)
		if braced {
			continue
		}
		if t, err = p.peek(); err != nil {
			return nil, err
		}
		if t.kind == tEOF {
			return nil, p.errorf(open.pos, "a block opened here is never closed ('}')")
		}
		if !t.is(";") && !t.is("}") {
			return nil, p.errorf(t.pos, "expected ';' or '}' after the statement, found %s", t)
		}
	}
}

// stmt reads one statement; braced says it ended with its own block.
func (p *parser) stmt() (Stmt, bool, error) {
	t, err := p.peek()
	if err != nil {
		return nil, false, err
	}
	if t.kind == tIdent {
		switch t.text {
		case "if":
			st, err := p.ifStmt()
			return st, true, err
		case "unroll", "while":
			p.s.next()
			if _, err := p.expect("(", "after "+t.text); err != nil {
				return nil, false, err
			}
			x, err := p.expr()
			if err != nil {
				return nil, false, err
			}
			if _, err := p.expect(")", "after "+t.text+"'s condition"); err != nil {
				return nil, false, err
			}
			body, err := p.block()
			if err != nil {
				return nil, false, err
			}
			if t.text == "unroll" {
				return &Unroll{Pos: p.s.pos(t.pos), N: x, Body: body}, true, nil
			}
			return &While{Pos: p.s.pos(t.pos), Cond: x, Body: body}, true, nil
		case "return", "break", "continue":
			p.s.next()
			return &Jump{Pos: p.s.pos(t.pos), Kind: t.text}, false, nil
		}
	}
	x, err := p.expr()
	if err != nil {
		return nil, false, err
	}
	op, err := p.peek()
	if err != nil {
		return nil, false, err
	}
	if op.kind == tOp && (op.text == "=" || len(op.text) >= 2 && op.text[len(op.text)-1] == '=' && !isComparison(op.text)) {
		switch x.(type) {
		case *Map, *Var:
		default:
			return nil, false, p.errorf(op.pos, "only a map (@name) or a variable ($name) takes '%s'", op.text)
		}
		p.s.next()
		v, err := p.expr()
		if err != nil {
			return nil, false, err
		}
		return &Assign{Pos: x.ExprPos(), Target: x, Op: op.text, Value: v}, false, nil
	}
	return &ExprStmt{X: x}, false, nil
}

func isComparison(op string) bool { return op == "==" || op == "!=" || op == "<=" || op == ">=" }

func (p *parser) ifStmt() (Stmt, error) {
	t, _ := p.s.next() // if
	if _, err := p.expect("(", "after if"); err != nil {
		return nil, err
	}
	cond, err := p.expr()
	if err != nil {
		return nil, err
	}
	if _, err := p.expect(")", "after if's condition"); err != nil {
		return nil, err
	}
	st := &If{Pos: p.s.pos(t.pos), Cond: cond}
	if st.Then, err = p.block(); err != nil {
		return nil, err
	}
	e, err := p.peek()
	if err != nil || e.kind != tIdent || e.text != "else" {
		return st, err
	}
	p.s.next()
	n, err := p.peek()
	if err != nil {
		return nil, err
	}
	if n.kind == tIdent && n.text == "if" {
		if err := p.enter(n.pos); err != nil {
			return nil, err
		}
		defer p.leave()
		elif, err := p.ifStmt()
		if err != nil {
			return nil, err
		}
		st.Else = []Stmt{elif}
		return st, nil
	}
	st.Else, err = p.block()
	return st, err
}

// Binary operators by precedence, loosest first (C's).
var precedence = map[string]int{
	"||": 1, "&&": 2, "|": 3, "^": 4, "&": 5,
	"==": 6, "!=": 6, "<": 7, "<=": 7, ">": 7, ">=": 7,
	"<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10,
}

// expr reads a whole expression: a ternary, or a binary one.
func (p *parser) expr() (Expr, error) {
	t, err := p.peek()
	if err != nil {
		return nil, err
	}
	if err := p.enter(t.pos); err != nil {
		return nil, err
	}
	defer p.leave()
	cond, err := p.binary(1)
	if err != nil {
		return nil, err
	}
	q, err := p.peek()
	if err != nil || !q.is("?") {
		return cond, err
	}
	p.s.next()
	p.nest++ // a '/' between ? and : divides, even in a predicate
	then, err := p.expr()
	p.nest--
	if err != nil {
		return nil, err
	}
	if _, err := p.expect(":", "between the branches of '?'"); err != nil {
		return nil, err
	}
	els, err := p.expr()
	if err != nil {
		return nil, err
	}
	return &Ternary{Pos: cond.ExprPos(), Cond: cond, Then: then, Else: els}, nil
}

func (p *parser) binary(min int) (Expr, error) {
	l, err := p.unary()
	if err != nil {
		return nil, err
	}
	for {
		t, err := p.peek()
		if err != nil {
			return nil, err
		}
		prec, ok := precedence[t.text]
		if t.kind != tOp || !ok || prec < min {
			return l, nil
		}
		if t.text == "/" && p.inPred && p.nest == 0 {
			return l, nil // the predicate's end
		}
		p.s.next()
		r, err := p.binary(prec + 1)
		if err != nil {
			return nil, err
		}
		l = &Binary{Pos: l.ExprPos(), Op: t.text, L: l, R: r}
	}
}

func (p *parser) unary() (Expr, error) {
	t, err := p.peek()
	if err != nil {
		return nil, err
	}
	if err := p.enter(t.pos); err != nil {
		return nil, err
	}
	defer p.leave()
	if t.kind == tOp {
		switch t.text {
		case "!", "~", "-", "+", "*", "&":
			p.s.next()
			x, err := p.unary()
			if err != nil {
				return nil, err
			}
			if t.text == "+" {
				return x, nil
			}
			return &Unary{Pos: p.s.pos(t.pos), Op: t.text, X: x}, nil
		case "++", "--":
			p.s.next()
			x, err := p.unary()
			if err != nil {
				return nil, err
			}
			return &IncDec{Pos: p.s.pos(t.pos), Op: t.text, X: x}, nil
		case "(":
			if typ, ok, err := p.castType(); err != nil {
				return nil, err
			} else if ok {
				x, err := p.unary()
				if err != nil {
					return nil, err
				}
				return &Cast{Pos: p.s.pos(t.pos), Type: typ, X: x}, nil
			}
		}
	}
	if t.kind == tIdent && t.text == "sizeof" {
		return p.sizeof()
	}
	x, err := p.primary()
	if err != nil {
		return nil, err
	}
	return p.postfix(x)
}

// typeWords are the names a type may be made of besides struct, union
// and enum ones (bpftrace's own integer types, and C's).
var typeWords = map[string]bool{
	"int8": true, "int16": true, "int32": true, "int64": true,
	"uint8": true, "uint16": true, "uint32": true, "uint64": true,
	"char": true, "short": true, "int": true, "long": true, "unsigned": true,
	"signed": true, "bool": true, "void": true,
	"u8": true, "u16": true, "u32": true, "u64": true,
	"s8": true, "s16": true, "s32": true, "s64": true,
}

// castType reads "(type)" if that is what follows: a struct, union or
// enum, type words (unsigned long), or a name with at least one '*'.
// Otherwise it reads nothing.
func (p *parser) castType() (Type, bool, error) {
	var words []string
	i := 1 // past '('
	for ; ; i++ {
		t, err := p.s.peek(i)
		if err != nil {
			return Type{}, false, err
		}
		if t.kind != tIdent {
			break
		}
		if (t.text == "struct" || t.text == "union" || t.text == "enum") && len(words) == 0 {
			n, err := p.s.peek(i + 1)
			if err != nil || n.kind != tIdent {
				return Type{}, false, err
			}
			words = append(words, t.text+" "+n.text)
			i++
			continue
		}
		words = append(words, t.text)
	}
	if len(words) == 0 {
		return Type{}, false, nil
	}
	known := strings.Contains(words[0], " ")
	if !known {
		known = true
		for _, w := range words {
			known = known && typeWords[w]
		}
	}
	ptr := 0
	for ; ; i++ {
		t, err := p.s.peek(i)
		if err != nil {
			return Type{}, false, err
		}
		if !t.is("*") {
			break
		}
		ptr++
	}
	end, err := p.s.peek(i)
	if err != nil {
		return Type{}, false, err
	}
	if !end.is(")") || !known && (ptr == 0 || len(words) > 1) {
		return Type{}, false, nil
	}
	for range i + 1 {
		p.s.next()
	}
	return Type{Name: strings.Join(words, " "), Ptr: ptr}, true, nil
}

func (p *parser) sizeof() (Expr, error) {
	t, _ := p.s.next()
	open, err := p.expect("(", "after sizeof")
	if err != nil {
		return nil, err
	}
	p.s.buf = append([]token{open}, p.s.buf...) // castType looks past '('
	typ, ok, err := p.castType()
	if err != nil {
		return nil, err
	}
	if ok {
		return &Sizeof{Pos: p.s.pos(t.pos), Type: &typ}, nil
	}
	p.s.next() // '('
	p.nest++
	x, err := p.expr()
	p.nest--
	if err != nil {
		return nil, err
	}
	if _, err := p.expect(")", "after sizeof's operand"); err != nil {
		return nil, err
	}
	return &Sizeof{Pos: p.s.pos(t.pos), X: x}, nil
}

func (p *parser) primary() (Expr, error) {
	t, err := p.s.next()
	if err != nil {
		return nil, err
	}
	pos := p.s.pos(t.pos)
	switch t.kind {
	case tInt:
		return &Int{Pos: pos, Value: t.num, Text: t.text}, nil
	case tStr:
		return &Str{Pos: pos, Value: t.text}, nil
	case tVar:
		return &Var{Pos: pos, Name: t.text}, nil
	case tParam:
		return &Param{Pos: pos, N: int(t.num)}, nil
	case tMap:
		m := &Map{Pos: pos, Name: t.text}
		if open, err := p.accept("["); err != nil || !open {
			return m, err
		}
		if m.Keys, err = p.list("]", "the map's keys"); err != nil {
			return nil, err
		}
		if len(m.Keys) == 0 {
			return nil, p.errorf(t.pos, "@%s[]: a key goes between the brackets", t.text)
		}
		return m, nil
	case tIdent:
		if open, err := p.accept("("); err != nil {
			return nil, err
		} else if open {
			args, err := p.list(")", t.text+"'s arguments")
			if err != nil {
				return nil, err
			}
			return &Call{Pos: pos, Name: t.text, Args: args}, nil
		}
		return &Ident{Pos: pos, Name: t.text}, nil
	case tOp:
		if t.text == "(" {
			elems, err := p.list(")", "the parentheses")
			if err != nil {
				return nil, err
			}
			switch len(elems) {
			case 0:
				return nil, p.errorf(t.pos, "empty parentheses: an expression goes between them")
			case 1:
				return elems[0], nil
			}
			return &Tuple{Pos: pos, Elems: elems}, nil
		}
	}
	return nil, p.errorf(t.pos, "expected an expression, found %s", t)
}

// list reads expressions separated by ',' up to the closing op.
func (p *parser) list(closing, what string) ([]Expr, error) {
	p.nest++
	defer func() { p.nest-- }()
	var xs []Expr
	if done, err := p.accept(closing); err != nil || done {
		return xs, err
	}
	for {
		x, err := p.expr()
		if err != nil {
			return nil, err
		}
		xs = append(xs, x)
		t, err := p.s.next()
		if err != nil {
			return nil, err
		}
		if t.is(closing) {
			return xs, nil
		}
		if !t.is(",") {
			return nil, p.errorf(t.pos, "expected ',' or '%s' in %s, found %s", closing, what, t)
		}
	}
}

// postfix reads .field, ->field, [index], ++ and -- after x.
func (p *parser) postfix(x Expr) (Expr, error) {
	for {
		t, err := p.peek()
		if err != nil {
			return nil, err
		}
		if t.kind != tOp {
			return x, nil
		}
		switch t.text {
		case ".", "->":
			p.s.next()
			f, err := p.s.next()
			if err != nil {
				return nil, err
			}
			if f.kind != tIdent && f.kind != tInt { // tuples: $t.0
				return nil, p.errorf(f.pos, "expected a field name after '%s', found %s", t.text, f)
			}
			x = &Field{Pos: x.ExprPos(), X: x, Name: f.text, NamePos: p.s.pos(t.pos), Arrow: t.text == "->"}
		case "[":
			p.s.next()
			is, err := p.list("]", "the index")
			if err != nil {
				return nil, err
			}
			if len(is) != 1 {
				return nil, p.errorf(t.pos, "one index goes between the brackets")
			}
			x = &Index{Pos: x.ExprPos(), X: x, I: is[0]}
		case "++", "--":
			p.s.next()
			x = &IncDec{Pos: x.ExprPos(), Op: t.text, Post: true, X: x}
		default:
			return x, nil
		}
	}
}
