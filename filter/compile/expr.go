package compile

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// The --where language, with C's precedence (!, comparisons, &&, ||):
//
//	expr    := and ('||' and)*
//	and     := unary ('&&' unary)*
//	unary   := '!' unary | '(' expr ')' | cmp
//	cmp     := operand OP operand          OP: == != < <= > >= ~
//	operand := arith
//	arith   := primary (BINOP primary)*    BINOP, tightest first: * / %, + -, << >>, &, ^, |
//	primary := '-' primary | '(' arith ')' | leaf
//	leaf    := INT | STRING | path | '(' ['const'] 'char' '*' ')' path | 'str' '(' path ')'
//	path    := base ('->' IDENT | '.' IDENT)*
//	base    := IDENT | '(' '(' 'struct' IDENT '*' ')' path ')' | '(' path ')'
//
// Comparisons take whole operands: C would read flags & 4 == 4 as
// flags & (4 == 4), so an unparenthesised & | ^ beside a comparison is
// refused rather than read either way.

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
	tArith  // + - / % & | ^ << >> (and tStar: *)
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
var singleChar = [256]tokKind{'.': tDot, '(': tLParen, ')': tRParen, '*': tStar, ',': tComma, '~': tOp, '!': tNot,
	'+': tArith, '-': tArith, '/': tArith, '%': tArith, '&': tArith, '|': tArith, '^': tArith}

// twoChar are the two-character tokens, tried before singleChar.
var twoChar = map[string]tokKind{"&&": tAnd, "||": tOr, "->": tArrow, "==": tOp, "!=": tOp, "<=": tOp, ">=": tOp, "<<": tArith, ">>": tArith}

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
		case c >= '0' && c <= '9' || c == '-' && i+1 < len(expr) && expr[i+1] >= '0' && expr[i+1] <= '9' && !endsOperand(toks):
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
		default:
			return nil, bad(i, "unexpected character %q", c)
		}
		toks[len(toks)-1].pos, toks[len(toks)-1].end = start, i
	}
	return append(toks, token{kind: tEOF, pos: len(expr), end: len(expr)}), nil
}

// endsOperand reports whether the last token ends an operand, so that a
// '-' after it subtracts (len-28) rather than starts a number (== -28).
func endsOperand(toks []token) bool {
	if len(toks) == 0 {
		return false
	}
	k := toks[len(toks)-1].kind
	return k == tIdent || k == tInt || k == tString || k == tRParen
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
	// Usym: usym(path), a user code address of the event's process,
	// printed as its function's name (--fields and --count-by).
	Usym bool
	// Arith: an arithmetic expression on two operands (a leaf has none).
	Arith *Arith
	// A constant.
	IsInt, IsString bool
	Int             uint64
	Neg             bool
	Str             string
	Text            string // the operand as written
}

// IsConst reports whether the operand is a number or a string literal.
func (o Operand) IsConst() bool { return o.IsInt || o.IsString }

// Arith is L Op R, on 64-bit integers with C's rules (ArithConst).
type Arith struct {
	Op    string
	OpPos int
	L, R  Operand
	Paren bool // written in parentheses
}

// anyLeaf reports whether f holds for a leaf of the operand: itself, or
// an operand of its arithmetic.
func (o Operand) anyLeaf(f func(Operand) bool) bool {
	if o.Arith != nil {
		return o.Arith.L.anyLeaf(f) || o.Arith.R.anyLeaf(f)
	}
	return f(o)
}

// constBits is an integer literal's 64 bits, and whether C types it
// signed (a literal above INT64_MAX is unsigned).
func (o Operand) constBits() (uint64, bool) {
	if o.Neg {
		return -o.Int, true
	}
	return o.Int, o.Int <= math.MaxInt64
}

// isShift: the result of a shift has its left operand's type.
func isShift(op string) bool { return op == "<<" || op == ">>" }

// ArithConst is what filter's arithmetic gives, in the kernel as when
// folding constants: 64-bit two's complement that wraps on overflow;
// / and % truncate toward zero, signed when both operands are; x / 0 is 0
// and x % 0 is x (BPF's rule, where C has none); a shift counts modulo
// 64, and >> of a signed value copies its sign.
func ArithConst(op string, a, b uint64, signed bool) uint64 {
	switch op {
	case "+":
		return a + b
	case "-":
		return a - b
	case "*":
		return a * b
	case "/", "%":
		switch {
		case b == 0 && op == "/":
			return 0
		case b == 0:
			return a
		case signed && op == "/":
			return uint64(int64(a) / int64(b)) // MinInt64 / -1 wraps to MinInt64
		case signed:
			return uint64(int64(a) % int64(b))
		case op == "/":
			return a / b
		}
		return a % b
	case "&":
		return a & b
	case "|":
		return a | b
	case "^":
		return a ^ b
	case "<<":
		return a << (b & 63)
	case ">>":
		if signed {
			return uint64(int64(a) >> (b & 63))
		}
		return a >> (b & 63)
	}
	panic("ArithConst: " + op)
}

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
		if l.Arith != nil && l.Arith.Op == "&" {
			return nil, p.errAt(op.pos, "expected a comparison (== != < <= > >= ~): (%s) != 0 tests the bits", l.Text)
		}
		return nil, p.errAt(op.pos, "expected a comparison (== != < <= > >= ~)")
	}
	p.i++
	r, err := p.operand()
	if err != nil {
		return nil, err
	}
	for _, o := range []Operand{l, r} {
		if a := o.Arith; a != nil && !a.Paren && (a.Op == "&" || a.Op == "|" || a.Op == "^") {
			return nil, p.errAt(a.OpPos, "put %s in parentheses: C binds %s looser than %s, and would read the comparison another way", o.Text, a.Op, op.text)
		}
	}
	return &Cmp{Left: l, Right: r, Op: op.text, OpPos: op.pos, End: p.toks[p.i-1].end}, nil
}

// operand parses one side of a comparison; --fields, --count-by and
// --hist take operands too. Text is the operand as written, and each
// leaf's is its own.
func (p *parser) operand() (Operand, error) { return p.arith(1, 0) }

// binops are the arithmetic operators' precedences, C's.
var binops = map[string]int{"|": 1, "^": 2, "&": 3, "<<": 4, ">>": 4, "+": 5, "-": 5, "*": 6, "/": 6, "%": 6}

// arith parses operands joined by operators that bind at least minPrec,
// left to right.
func (p *parser) arith(minPrec, depth int) (Operand, error) {
	start := p.peek().pos
	l, err := p.primary(depth)
	for err == nil {
		t := p.peek()
		prec := 0
		if t.kind == tArith || t.kind == tStar {
			prec = binops[t.text]
		}
		if prec == 0 || prec < minPrec {
			break
		}
		p.i++
		var r Operand
		if r, err = p.arith(prec+1, depth+1); err == nil {
			l, err = p.binary(l, r, t, start)
		}
	}
	return l, err
}

// binary joins two operands, folding two constants.
func (p *parser) binary(l, r Operand, op token, start int) (Operand, error) {
	for _, o := range []Operand{l, r} {
		if o.IsString {
			return o, p.errAt(o.Pos, "a string literal takes part in no arithmetic")
		}
	}
	text := p.expr[start:p.toks[p.i-1].end]
	if l.IsInt && r.IsInt {
		a, as := l.constBits()
		b, bs := r.constBits()
		signed := as && (bs || isShift(op.text))
		v := ArithConst(op.text, a, b, signed)
		o := Operand{Pos: l.Pos, IsInt: true, Int: v, Text: text}
		if signed && int64(v) < 0 {
			o.Neg, o.Int = true, -v
		}
		return o, nil
	}
	return Operand{Pos: l.Pos, Text: text, Arith: &Arith{Op: op.text, OpPos: op.pos, L: l, R: r}}, nil
}

// primary is a leaf, a negated primary, or an arithmetic expression in
// parentheses.
func (p *parser) primary(depth int) (Operand, error) {
	t := p.peek()
	if depth > maxDepth {
		err := p.errAt(t.pos, "expression nested deeper than %d levels", maxDepth)
		err.(*ExprError).deep = true
		return Operand{}, err
	}
	switch {
	case t.kind == tArith && t.text == "-":
		p.i++
		x, err := p.primary(depth + 1)
		if err != nil {
			return x, err
		}
		return p.binary(Operand{Pos: t.pos, IsInt: true, Text: "0"}, x, t, t.pos)
	case t.kind == tLParen && !p.isCharCast():
		// A path's base in parentheses, ((struct sk_buff *)skbaddr)->len,
		// or arithmetic: (len - 28) / 4. Keep the error that got further.
		save := p.i
		o, lerr := p.leaf()
		if lerr == nil {
			return o, nil
		}
		p.i = save + 1
		o, err := p.arith(1, depth+1)
		if err == nil {
			if r := p.next(); r.kind != tRParen {
				err = p.errAt(r.pos, "expected ')'")
			}
		}
		if err != nil {
			if ee, ok := err.(*ExprError); !ok || !ee.deep && errPos(lerr) > ee.Pos {
				return o, lerr
			}
			return o, err
		}
		if o.Arith != nil {
			o.Arith.Paren = true
		}
		o.Text = p.expr[t.pos:p.toks[p.i-1].end]
		return o, nil
	}
	return p.leaf()
}

// leaf parses an operand without arithmetic.
func (p *parser) leaf() (Operand, error) {
	start := p.peek().pos
	o, err := p.leaf1()
	if err == nil {
		o.Text = p.expr[start:p.toks[p.i-1].end]
	}
	return o, err
}

func (p *parser) leaf1() (Operand, error) {
	t := p.peek()
	switch t.kind {
	case tInt:
		p.i++
		return Operand{Pos: t.pos, IsInt: true, Int: t.num, Neg: t.neg}, nil
	case tString:
		p.i++
		return Operand{Pos: t.pos, IsString: true, Str: t.text}, nil
	case tIdent:
		if (t.text == "ksym" || t.text == "usym") && p.toks[p.i+1].kind == tLParen {
			// ksym(path) and usym(path), as bpftrace writes them.
			p.i += 2
			o, err := p.path()
			if err != nil {
				return o, err
			}
			if r := p.next(); r.kind != tRParen {
				return o, p.errAt(r.pos, "expected ')' to close %s(", t.text)
			}
			o.Ksym, o.Usym, o.Pos = t.text == "ksym", t.text == "usym", t.pos
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
