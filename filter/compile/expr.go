package compile

import (
	"fmt"
	"strconv"
	"strings"
)

// The --where language, with C's precedence (!, comparisons, &&, ||):
//
//	expr    := and ('||' and)*
//	and     := unary ('&&' unary)*
//	unary   := '!' unary | '(' expr ')' | cmp
//	cmp     := operand OP operand          OP: == != < <= > >= ~
//	operand := INT | STRING | path | '(' ['const'] 'char' '*' ')' path | 'str' '(' path ')'
//	path    := base ('->' IDENT | '.' IDENT)*
//	base    := IDENT | '(' '(' 'struct' IDENT '*' ')' path ')' | '(' path ')'

// ExprError is a bad expression: a message and where it points.
type ExprError struct {
	Option string // the option it came from: "" for --where
	Expr   string
	Pos    int
	Msg    string
	deep   bool // nested too deeply: no other reading of the expression gets further
}

func (e *ExprError) Error() string {
	return fmt.Sprintf("%s\n  %s\n  %s^", e.Msg, e.Expr, strings.Repeat(" ", e.Pos))
}

type tokKind int

const (
	tEOF tokKind = iota
	tIdent
	tInt
	tString
	tOp     // == != < <= > >= ~
	tAnd    // &&
	tOr     // ||
	tNot    // !
	tArrow  // ->
	tDot    // .
	tLParen // (
	tRParen // )
	tStar   // *
	tComma  // ,
)

type token struct {
	kind tokKind
	text string // identifier, operator, or the string's value
	num  uint64
	neg  bool // a negative integer: num is its magnitude
	pos  int
	end  int // just past the token
}

// singleChar are the one-character tokens (tEOF: not one).
var singleChar = [256]tokKind{'.': tDot, '(': tLParen, ')': tRParen, '*': tStar, ',': tComma, '~': tOp, '!': tNot}

// twoChar are the two-character tokens, tried before singleChar.
var twoChar = map[string]tokKind{"&&": tAnd, "||": tOr, "->": tArrow, "==": tOp, "!=": tOp, "<=": tOp, ">=": tOp}

func lex(expr string) ([]token, error) {
	var toks []token
	bad := func(pos int, format string, args ...any) error {
		return &ExprError{Expr: expr, Pos: pos, Msg: fmt.Sprintf(format, args...)}
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		start := i
		switch {
		case c == ' ' || c == '\t' || c == '\n':
			i++
			continue
		case isIdentStart(c):
			for i < len(expr) && isIdentChar(expr[i]) {
				i++
			}
			toks = append(toks, token{kind: tIdent, text: expr[start:i]})
		case c >= '0' && c <= '9' || c == '-' && i+1 < len(expr) && expr[i+1] >= '0' && expr[i+1] <= '9':
			if c == '-' {
				i++
			}
			for i < len(expr) && isIdentChar(expr[i]) {
				i++
			}
			text := expr[start:i]
			n, err := strconv.ParseUint(strings.TrimPrefix(text, "-"), 0, 64)
			if err != nil {
				return nil, bad(start, "bad number %q", text)
			}
			toks = append(toks, token{kind: tInt, text: text, num: n, neg: c == '-'})
		case c == '"':
			var b strings.Builder
			for i++; i < len(expr) && expr[i] != '"'; i++ {
				if expr[i] == '\\' && i+1 < len(expr) {
					i++
				}
				b.WriteByte(expr[i])
			}
			if i >= len(expr) {
				return nil, bad(start, "unterminated string")
			}
			i++
			toks = append(toks, token{kind: tString, text: b.String()})
		case i+1 < len(expr) && twoChar[expr[i:i+2]] != tEOF:
			i += 2
			toks = append(toks, token{kind: twoChar[expr[start:i]], text: expr[start:i]})
		case c == '<' || c == '>':
			i++
			toks = append(toks, token{kind: tOp, text: expr[start:i]})
		case singleChar[c] != tEOF:
			i++
			toks = append(toks, token{kind: singleChar[c], text: expr[start:i]})
		case c == '=':
			return nil, bad(i, "'=' is not an operator: use '==' to compare")
		case c == '&' || c == '|':
			return nil, bad(i, "'%c' is not an operator: use '%c%c' to join comparisons", c, c, c)
		default:
			return nil, bad(i, "unexpected character %q", c)
		}
		toks[len(toks)-1].pos, toks[len(toks)-1].end = start, i
	}
	return append(toks, token{kind: tEOF, pos: len(expr), end: len(expr)}), nil
}

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isIdentChar(c byte) bool  { return isIdentStart(c) || c >= '0' && c <= '9' }

// Node is a parsed expression: *Or, *And, *Not or *Cmp.
type Node interface{ span() (int, int) }

// Or holds when either side does; R is not evaluated when L holds.
type Or struct{ L, R Node }

// And holds when both sides do; R is not evaluated when L fails.
type And struct{ L, R Node }

// Not holds when X does not.
type Not struct {
	X   Node
	Pos int
}

// Cmp is one comparison.
type Cmp struct {
	Left, Right Operand
	Op          string
	OpPos       int
	End         int // just past the right operand
}

func (n *Or) span() (int, int) {
	a, _ := n.L.span()
	_, b := n.R.span()
	return a, b
}

func (n *And) span() (int, int) {
	a, _ := n.L.span()
	_, b := n.R.span()
	return a, b
}

func (n *Not) span() (int, int) { _, b := n.X.span(); return n.Pos, b }
func (n *Cmp) span() (int, int) { return min(n.Left.Pos, n.Right.Pos), n.End }

// Operand is one side of a comparison.
type Operand struct {
	Pos int
	// A path: Base, then Steps. Cast names a struct the base pointer is cast to.
	Base  string
	Cast  string
	Steps []Step
	// CharPtr: the path is the address of a NUL-terminated string,
	// (char *)path or str(path).
	CharPtr bool
	// Dump: *path, the whole structure the path points to, printed from
	// BTF (--fields only).
	Dump bool
	// Ksym: ksym(path), a kernel code address, printed as symbol+0xoff
	// (--fields and --count-by).
	Ksym bool
	// A constant.
	IsInt, IsString bool
	Int             uint64
	Neg             bool
	Str             string
	Text            string // the operand as written
}

// IsConst reports whether the operand is a number or a string literal.
func (o Operand) IsConst() bool { return o.IsInt || o.IsString }

// Step is one "->member" (Deref) or ".member" of a path.
type Step struct {
	Member string
	Deref  bool
	Pos    int
}

type parser struct {
	expr string
	toks []token
	i    int
}

// maxDepth bounds nesting, so a hostile expression cannot exhaust the stack.
const maxDepth = 64

// Parse parses a --where expression.
func Parse(expr string) (Node, error) {
	toks, err := lex(expr)
	if err != nil {
		return nil, err
	}
	p := &parser{expr: expr, toks: toks}
	n, err := p.or(0)
	if err != nil {
		return nil, err
	}
	if t := p.peek(); t.kind != tEOF {
		return nil, p.errAt(t.pos, "expected &&, || or the end of the expression")
	}
	return n, nil
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token { t := p.toks[p.i]; p.i++; return t }

func (p *parser) errAt(pos int, format string, args ...any) error {
	return &ExprError{Expr: p.expr, Pos: pos, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) or(depth int) (Node, error) {
	l, err := p.and(depth)
	for err == nil && p.peek().kind == tOr {
		p.i++
		var r Node
		if r, err = p.and(depth); err == nil {
			l = &Or{L: l, R: r}
		}
	}
	return l, err
}

func (p *parser) and(depth int) (Node, error) {
	l, err := p.unary(depth)
	for err == nil && p.peek().kind == tAnd {
		p.i++
		var r Node
		if r, err = p.unary(depth); err == nil {
			l = &And{L: l, R: r}
		}
	}
	return l, err
}

func (p *parser) unary(depth int) (Node, error) {
	t := p.peek()
	if depth > maxDepth {
		err := p.errAt(t.pos, "expression nested deeper than %d levels", maxDepth)
		err.(*ExprError).deep = true
		return nil, err
	}
	switch t.kind {
	case tNot:
		p.i++
		x, err := p.unary(depth + 1)
		if err != nil {
			return nil, err
		}
		return &Not{X: x, Pos: t.pos}, nil
	case tLParen:
		// A parenthesised expression, or a comparison whose operand starts
		// with a parenthesis: ((struct sk_buff *)skbaddr)->len, (char *)arg0.
		// Try the comparison first; keep the error that got further.
		start := p.i
		cmp, cerr := p.cmp()
		if cerr == nil {
			return cmp, nil
		}
		p.i = start + 1
		x, err := p.or(depth + 1)
		if err == nil {
			if r := p.peek(); r.kind == tRParen {
				p.i++
				return x, nil
			}
			err = p.errAt(p.peek().pos, "expected ')'")
		}
		if ee, ok := err.(*ExprError); ok && ee.deep {
			return nil, err
		}
		if errPos(cerr) > errPos(err) {
			return nil, cerr
		}
		return nil, err
	}
	return p.cmp()
}

func errPos(err error) int {
	if ee, ok := err.(*ExprError); ok {
		return ee.Pos
	}
	return -1
}

func (p *parser) cmp() (*Cmp, error) {
	l, err := p.operand()
	if err != nil {
		return nil, err
	}
	op := p.peek()
	if op.kind != tOp {
		return nil, p.errAt(op.pos, "expected a comparison (== != < <= > >= ~)")
	}
	p.i++
	r, err := p.operand()
	if err != nil {
		return nil, err
	}
	return &Cmp{Left: l, Right: r, Op: op.text, OpPos: op.pos, End: p.toks[p.i-1].end}, nil
}

// operand parses one side of a comparison; --fields, --count-by and
// --hist take operands too. Text is the operand as written.
func (p *parser) operand() (Operand, error) {
	start := p.peek().pos
	o, err := p.operand1()
	if err == nil {
		o.Text = p.expr[start:p.toks[p.i-1].end]
	}
	return o, err
}

func (p *parser) operand1() (Operand, error) {
	t := p.peek()
	switch t.kind {
	case tInt:
		p.i++
		return Operand{Pos: t.pos, IsInt: true, Int: t.num, Neg: t.neg}, nil
	case tString:
		p.i++
		return Operand{Pos: t.pos, IsString: true, Str: t.text}, nil
	case tIdent:
		if t.text == "ksym" && p.toks[p.i+1].kind == tLParen {
			// ksym(path), as bpftrace writes it.
			p.i += 2
			o, err := p.path()
			if err != nil {
				return o, err
			}
			if r := p.next(); r.kind != tRParen {
				return o, p.errAt(r.pos, "expected ')' to close ksym(")
			}
			o.Ksym, o.Pos = true, t.pos
			return o, nil
		}
		if t.text == "str" && p.toks[p.i+1].kind == tLParen {
			// str(path), as bpftrace writes it.
			p.i += 2
			o, err := p.path()
			if err != nil {
				return o, err
			}
			if r := p.next(); r.kind != tRParen {
				return o, p.errAt(r.pos, "expected ')' to close str(")
			}
			return p.strOf(o, t.pos)
		}
		return p.path()
	case tStar:
		// *path: a structure printed whole.
		p.i++
		o, err := p.path()
		if err != nil {
			return o, err
		}
		o.Dump, o.Pos = true, t.pos
		return o, nil
	case tLParen:
		if p.isCharCast() {
			for p.next().kind != tRParen {
			}
			o, err := p.path()
			if err != nil {
				return o, err
			}
			return p.strOf(o, t.pos)
		}
		return p.path()
	}
	return Operand{}, p.errAt(t.pos, "expected a field, a number or a string")
}

// isCharCast reports whether the tokens at p.i are (char *) or
// (const char *).
func (p *parser) isCharCast() bool {
	want := []string{"(", "char", "*", ")"}
	if p.toks[p.i+1].text == "const" {
		want = []string{"(", "const", "char", "*", ")"}
	}
	for k, w := range want {
		if p.i+k >= len(p.toks) || p.toks[p.i+k].text != w || p.toks[p.i+k].kind == tString {
			return false
		}
	}
	return true
}

func (p *parser) strOf(o Operand, pos int) (Operand, error) {
	if o.CharPtr {
		return o, p.errAt(pos, "already a string: one (char *) or str() is enough")
	}
	o.CharPtr, o.Pos = true, pos
	return o, nil
}

func (p *parser) path() (Operand, error) {
	var o Operand
	t := p.next()
	o.Pos = t.pos
	switch t.kind {
	case tIdent:
		o.Base = t.text
	case tLParen:
		if p.peek().kind == tLParen && p.toks[p.i+1].kind == tIdent && p.toks[p.i+1].text == "struct" {
			// ((struct NAME *)path)
			p.i++
			if s := p.next(); s.kind != tIdent || s.text != "struct" {
				return o, p.errAt(s.pos, "expected a cast: (struct NAME *)")
			}
			name := p.next()
			if name.kind != tIdent {
				return o, p.errAt(name.pos, "expected a struct name")
			}
			if s := p.next(); s.kind != tStar {
				return o, p.errAt(s.pos, "only casts to a struct pointer are supported: (struct %s *)", name.text)
			}
			if s := p.next(); s.kind != tRParen {
				return o, p.errAt(s.pos, "expected ')' after the cast")
			}
			inner, err := p.path()
			if err != nil {
				return o, err
			}
			if inner.Cast != "" || len(inner.Steps) > 0 {
				return o, p.errAt(inner.Pos, "a cast applies to a plain field or argument")
			}
			o.Base, o.Cast = inner.Base, name.text
		} else {
			inner, err := p.path()
			if err != nil {
				return o, err
			}
			o = inner
		}
		if s := p.next(); s.kind != tRParen {
			return o, p.errAt(s.pos, "expected ')'")
		}
	default:
		return o, p.errAt(t.pos, "expected a field or argument name")
	}
	for {
		switch p.peek().kind {
		case tArrow, tDot:
			sep := p.next()
			m := p.next()
			if m.kind != tIdent {
				return o, p.errAt(m.pos, "expected a member name after %s", sep.text)
			}
			o.Steps = append(o.Steps, Step{Member: m.text, Deref: sep.kind == tArrow, Pos: m.pos})
		default:
			return o, nil
		}
	}
}

// ParseOperands parses a comma-separated list of operands (--fields,
// --count-by) or one operand (--hist, want 1).
func ParseOperands(list string, want int) ([]Operand, error) {
	toks, err := lex(list)
	if err != nil {
		return nil, err
	}
	p := &parser{expr: list, toks: toks}
	var ops []Operand
	for {
		o, err := p.operand()
		if err != nil {
			return nil, err
		}
		if o.IsConst() {
			return nil, p.errAt(o.Pos, "expected a field or a builtin, not a constant")
		}
		ops = append(ops, o)
		t := p.next()
		switch {
		case t.kind == tEOF:
			return ops, nil
		case t.kind == tComma && want == 0:
			continue
		case want == 1:
			return nil, p.errAt(t.pos, "expected one field or builtin")
		}
		return nil, p.errAt(t.pos, "expected ',' or the end of the list")
	}
}
