package main

import (
	"fmt"
	"strconv"
	"strings"
)

// The --where language: comparisons joined by &&, each a path compared with
// a constant.
//
//	expr    := cmp ('&&' cmp)*
//	cmp     := operand OP operand          OP: == != < <= > >=
//	operand := path | INT | STRING
//	path    := base ('->' IDENT | '.' IDENT)*
//	base    := IDENT | '(' '(' 'struct' IDENT '*' ')' path ')' | '(' path ')'

// ExprError is a bad expression: a message and where it points.
type ExprError struct {
	Expr string
	Pos  int
	Msg  string
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
	tOp     // == != < <= > >=
	tAnd    // &&
	tArrow  // ->
	tDot    // .
	tLParen // (
	tRParen // )
	tStar   // *
)

type token struct {
	kind tokKind
	text string // identifier, operator, or the string's value
	num  uint64
	neg  bool // a negative integer: num is its magnitude
	pos  int
}

// singleChar are the one-character tokens (tEOF: not one).
var singleChar = [256]tokKind{'.': tDot, '(': tLParen, ')': tRParen, '*': tStar}

func lex(expr string) ([]token, error) {
	var toks []token
	bad := func(pos int, format string, args ...any) error {
		return &ExprError{Expr: expr, Pos: pos, Msg: fmt.Sprintf(format, args...)}
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == ' ' || c == '\t':
			i++
		case isIdentStart(c):
			j := i
			for j < len(expr) && isIdentChar(expr[j]) {
				j++
			}
			toks = append(toks, token{kind: tIdent, text: expr[i:j], pos: i})
			i = j
		case c >= '0' && c <= '9' || c == '-' && i+1 < len(expr) && expr[i+1] >= '0' && expr[i+1] <= '9':
			j := i
			if c == '-' {
				j++
			}
			for j < len(expr) && (isIdentChar(expr[j])) {
				j++
			}
			text := expr[i:j]
			neg := strings.HasPrefix(text, "-")
			n, err := strconv.ParseUint(strings.TrimPrefix(text, "-"), 0, 64)
			if err != nil {
				return nil, bad(i, "bad number %q", text)
			}
			toks = append(toks, token{kind: tInt, text: text, num: n, neg: neg, pos: i})
			i = j
		case c == '"':
			j := i + 1
			var b strings.Builder
			for ; j < len(expr) && expr[j] != '"'; j++ {
				if expr[j] == '\\' && j+1 < len(expr) {
					j++
				}
				b.WriteByte(expr[j])
			}
			if j >= len(expr) {
				return nil, bad(i, "unterminated string")
			}
			toks = append(toks, token{kind: tString, text: b.String(), pos: i})
			i = j + 1
		case strings.HasPrefix(expr[i:], "&&"):
			toks = append(toks, token{kind: tAnd, text: "&&", pos: i})
			i += 2
		case strings.HasPrefix(expr[i:], "->"):
			toks = append(toks, token{kind: tArrow, text: "->", pos: i})
			i += 2
		case strings.HasPrefix(expr[i:], "=="), strings.HasPrefix(expr[i:], "!="),
			strings.HasPrefix(expr[i:], "<="), strings.HasPrefix(expr[i:], ">="):
			toks = append(toks, token{kind: tOp, text: expr[i : i+2], pos: i})
			i += 2
		case c == '<' || c == '>':
			toks = append(toks, token{kind: tOp, text: expr[i : i+1], pos: i})
			i++
		case singleChar[c] != tEOF:
			toks = append(toks, token{kind: singleChar[c], text: expr[i : i+1], pos: i})
			i++
		case c == '=':
			return nil, bad(i, "'=' is not an operator: use '==' to compare")
		case c == '|' || c == '!':
			return nil, bad(i, "only && joins comparisons (all must hold)")
		default:
			return nil, bad(i, "unexpected character %q", c)
		}
	}
	return append(toks, token{kind: tEOF, pos: len(expr)}), nil
}

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isIdentChar(c byte) bool  { return isIdentStart(c) || c >= '0' && c <= '9' }

// Operand is one side of a comparison.
type Operand struct {
	Pos int
	// A path: Base, then Steps. Cast names a struct the base pointer is cast to.
	Base  string
	Cast  string
	Steps []Step
	// A constant.
	IsInt, IsString bool
	Int             uint64
	Neg             bool
	Str             string
}

// Step is one "->member" (Deref) or ".member" of a path.
type Step struct {
	Member string
	Deref  bool
	Pos    int
}

// Cmp is one comparison.
type Cmp struct {
	Left, Right Operand
	Op          string
	OpPos       int
}

type parser struct {
	expr string
	toks []token
	i    int
}

// Parse parses a --where expression.
func Parse(expr string) ([]Cmp, error) {
	toks, err := lex(expr)
	if err != nil {
		return nil, err
	}
	p := &parser{expr: expr, toks: toks}
	var cmps []Cmp
	for {
		c, err := p.cmp()
		if err != nil {
			return nil, err
		}
		cmps = append(cmps, c)
		switch p.peek().kind {
		case tAnd:
			p.i++
			continue
		case tEOF:
			return cmps, nil
		}
		return nil, p.errAt(p.peek().pos, "expected && or the end of the expression")
	}
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token { t := p.toks[p.i]; p.i++; return t }

func (p *parser) errAt(pos int, format string, args ...any) error {
	return &ExprError{Expr: p.expr, Pos: pos, Msg: fmt.Sprintf(format, args...)}
}

func (p *parser) cmp() (Cmp, error) {
	l, err := p.operand()
	if err != nil {
		return Cmp{}, err
	}
	op := p.peek()
	if op.kind != tOp {
		return Cmp{}, p.errAt(op.pos, "expected a comparison (== != < <= > >=)")
	}
	p.i++
	r, err := p.operand()
	if err != nil {
		return Cmp{}, err
	}
	return Cmp{Left: l, Right: r, Op: op.text, OpPos: op.pos}, nil
}

func (p *parser) operand() (Operand, error) {
	t := p.peek()
	switch t.kind {
	case tInt:
		p.i++
		return Operand{Pos: t.pos, IsInt: true, Int: t.num, Neg: t.neg}, nil
	case tString:
		p.i++
		return Operand{Pos: t.pos, IsString: true, Str: t.text}, nil
	case tIdent, tLParen:
		return p.path()
	}
	return Operand{}, p.errAt(t.pos, "expected a field, a number or a string")
}

func (p *parser) path() (Operand, error) {
	var o Operand
	t := p.next()
	o.Pos = t.pos
	switch t.kind {
	case tIdent:
		o.Base = t.text
	case tLParen:
		if p.peek().kind == tLParen {
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
