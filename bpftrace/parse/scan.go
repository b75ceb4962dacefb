package parse

import (
	"fmt"
	"strconv"
	"strings"
)

// Limits on what a script may cost to read: it comes from a file or a
// command line, and is input like any other.
const (
	MaxSource = 1 << 20 // bytes of script
	maxDepth  = 100     // nesting of expressions and blocks
	maxMacro  = 16      // macros expanded within macros
)

// Error is a script's fault at a place in it: "script.bt:3:14: ...".
type Error struct {
	File string
	Pos  Pos
	Msg  string
}

func (e *Error) Error() string { return fmt.Sprintf("%s:%s: %s", e.File, e.Pos, e.Msg) }

type tokKind int

const (
	tEOF   tokKind = iota
	tInt           // 42, 0x2a
	tStr           // "text"
	tIdent         // pid, printf, struct
	tVar           // $name
	tParam         // $1, $#
	tMap           // @name, @
	tOp            // an operator or punctuation
)

type token struct {
	kind tokKind
	text string // as written; a string's value with escapes resolved
	num  uint64 // tInt's value, tParam's number
	pos  int    // byte offset
}

func (t token) is(op string) bool { return t.kind == tOp && t.text == op }

func (t token) String() string {
	switch t.kind {
	case tEOF:
		return "the end of the script"
	case tStr:
		return strconv.Quote(t.text)
	}
	return "'" + t.text + "'"
}

// ops, longest first: the scanner takes the longest that matches.
var ops = []string{
	"<<=", ">>=",
	"->", "++", "--", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||",
	"+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=",
	"+", "-", "*", "/", "%", "<", ">", "=", "!", "~", "&", "|", "^",
	"?", ":", ";", ",", ".", "(", ")", "[", "]", "{", "}",
}

// scanner turns source into tokens on demand; the parser reads a probe's
// attach points raw (attachPoint) where no token is buffered.
type scanner struct {
	file    string
	src     string
	off     int
	lines   []int // byte offsets where lines start
	buf     []token
	macros  map[string]string
	pending []token // a macro's expansion, not yet read
	err     *Error
}

func newScanner(file, src string, macros map[string]string) *scanner {
	s := &scanner{file: file, src: src, macros: macros, lines: []int{0}}
	for i := 0; i < len(src); i++ {
		if src[i] == '\n' {
			s.lines = append(s.lines, i+1)
		}
	}
	return s
}

// pos makes a Pos of a byte offset.
func (s *scanner) pos(off int) Pos {
	lo, hi := 0, len(s.lines)
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if s.lines[mid] <= off {
			lo = mid
		} else {
			hi = mid
		}
	}
	return Pos{Offset: off, Line: lo + 1, Col: off - s.lines[lo] + 1}
}

func (s *scanner) errorf(off int, format string, args ...any) *Error {
	return &Error{File: s.file, Pos: s.pos(off), Msg: fmt.Sprintf(format, args...)}
}

// skipSpace passes whitespace and comments.
func (s *scanner) skipSpace() error {
	for s.off < len(s.src) {
		c := s.src[s.off]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			s.off++
		case strings.HasPrefix(s.src[s.off:], "//"):
			end := strings.IndexByte(s.src[s.off:], '\n')
			if end < 0 {
				s.off = len(s.src)
			} else {
				s.off += end + 1
			}
		case strings.HasPrefix(s.src[s.off:], "/*"):
			end := strings.Index(s.src[s.off+2:], "*/")
			if end < 0 {
				return s.errorf(s.off, "a comment opened here is never closed (*/)")
			}
			s.off += 2 + end + 2
		default:
			return nil
		}
	}
	return nil
}

// peek returns the k-th token ahead (0: the next).
func (s *scanner) peek(k int) (token, error) {
	for len(s.buf) <= k {
		t, err := s.lex()
		if err != nil {
			return token{}, err
		}
		s.buf = append(s.buf, t)
	}
	return s.buf[k], nil
}

func (s *scanner) next() (token, error) {
	t, err := s.peek(0)
	if err != nil {
		return t, err
	}
	s.buf = s.buf[1:]
	return t, nil
}

// lex reads one token, expanding macros.
func (s *scanner) lex() (token, error) {
	for depth := 0; ; depth++ {
		var t token
		if len(s.pending) > 0 {
			t, s.pending = s.pending[0], s.pending[1:]
		} else {
			var err error
			if t, err = s.lexRaw(); err != nil {
				return t, err
			}
		}
		body, ok := s.macros[t.text]
		if t.kind != tIdent || !ok {
			return t, nil
		}
		if depth >= maxMacro {
			return t, s.errorf(t.pos, "macro %s expands too deep (a macro that names itself?)", t.text)
		}
		// The expansion, each token at the use's place.
		sub := newScanner(s.file, body, nil)
		var exp []token
		for {
			u, err := sub.lexRaw()
			if err != nil {
				return t, s.errorf(t.pos, "in macro %s: %s", t.text, err.(*Error).Msg)
			}
			if u.kind == tEOF {
				break
			}
			u.pos = t.pos
			exp = append(exp, u)
		}
		s.pending = append(exp, s.pending...)
	}
}

func isIdentStart(c byte) bool { return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
func isIdentChar(c byte) bool  { return isIdentStart(c) || c >= '0' && c <= '9' }
func isDigit(c byte) bool      { return c >= '0' && c <= '9' }

func (s *scanner) lexRaw() (token, error) {
	if err := s.skipSpace(); err != nil {
		return token{}, err
	}
	start := s.off
	if s.off >= len(s.src) {
		return token{kind: tEOF, pos: start}, nil
	}
	c := s.src[s.off]
	word := func(from int) string {
		i := from
		for i < len(s.src) && isIdentChar(s.src[i]) {
			i++
		}
		s.off = i
		return s.src[from:i]
	}
	switch {
	case isIdentStart(c):
		return token{kind: tIdent, text: word(s.off), pos: start}, nil
	case isDigit(c):
		return s.number()
	case c == '"':
		return s.str()
	case c == '$':
		if s.off+1 < len(s.src) && s.src[s.off+1] == '#' {
			s.off += 2
			return token{kind: tParam, text: "$#", pos: start}, nil
		}
		if s.off+1 < len(s.src) && isDigit(s.src[s.off+1]) {
			digits := word(s.off + 1)
			n, err := strconv.Atoi(digits)
			if err != nil || n < 1 || n > 1024 || digits[0] == '0' {
				return token{}, s.errorf(start, "bad positional parameter $%s: $1 to $1024", digits)
			}
			return token{kind: tParam, text: "$" + digits, num: uint64(n), pos: start}, nil
		}
		if s.off+1 < len(s.src) && isIdentStart(s.src[s.off+1]) {
			return token{kind: tVar, text: word(s.off + 1), pos: start}, nil
		}
		return token{}, s.errorf(start, "'$' must start a variable ($name) or a parameter ($1)")
	case c == '@':
		return token{kind: tMap, text: word(s.off + 1), pos: start}, nil
	}
	for _, op := range ops {
		if strings.HasPrefix(s.src[s.off:], op) {
			s.off += len(op)
			return token{kind: tOp, text: op, pos: start}, nil
		}
	}
	return token{}, s.errorf(start, "unexpected character %q", s.src[s.off:s.off+1])
}

// number reads 42, 0x2a, 052 (octal, as C) or 1e6 (an integer: a
// million, as bpftrace takes it).
func (s *scanner) number() (token, error) {
	start := s.off
	i := s.off
	for i < len(s.src) && isIdentChar(s.src[i]) {
		i++
	}
	text := s.src[start:i]
	s.off = i
	if m, e, ok := strings.Cut(text, "e"); ok && !strings.HasPrefix(text, "0x") && !strings.HasPrefix(text, "0X") {
		v, err1 := strconv.ParseUint(m, 10, 64)
		exp, err2 := strconv.ParseUint(e, 10, 8)
		if err1 != nil || err2 != nil || m == "" || e == "" {
			return token{}, s.errorf(start, "bad number %q", text)
		}
		for ; exp > 0; exp-- {
			if v > (1<<64-1)/10 {
				return token{}, s.errorf(start, "%s is more than 64 bits", text)
			}
			v *= 10
		}
		return token{kind: tInt, text: text, num: v, pos: start}, nil
	}
	v, err := strconv.ParseUint(text, 0, 64)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			return token{}, s.errorf(start, "%s is more than 64 bits", text)
		}
		return token{}, s.errorf(start, "bad number %q", text)
	}
	return token{kind: tInt, text: text, num: v, pos: start}, nil
}

// str reads a string literal with C's escapes.
func (s *scanner) str() (token, error) {
	start := s.off
	var b strings.Builder
	i := s.off + 1
	for {
		if i >= len(s.src) || s.src[i] == '\n' {
			return token{}, s.errorf(start, "a string opened here is not closed on its line")
		}
		c := s.src[i]
		if c == '"' {
			s.off = i + 1
			return token{kind: tStr, text: b.String(), pos: start}, nil
		}
		if c != '\\' {
			b.WriteByte(c)
			i++
			continue
		}
		if i+1 >= len(s.src) {
			return token{}, s.errorf(i, "a string ends in a lone backslash")
		}
		e := s.src[i+1]
		i += 2
		switch e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'a':
			b.WriteByte('\a')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'v':
			b.WriteByte('\v')
		case '\\', '"', '\'', '?':
			b.WriteByte(e)
		case 'x':
			j := i
			for j < len(s.src) && j < i+2 && strings.IndexByte("0123456789abcdefABCDEF", s.src[j]) >= 0 {
				j++
			}
			if j == i {
				return token{}, s.errorf(i-2, `\x needs hex digits`)
			}
			v, _ := strconv.ParseUint(s.src[i:j], 16, 8)
			b.WriteByte(byte(v))
			i = j
		case '0', '1', '2', '3', '4', '5', '6', '7':
			j := i - 1
			for j < len(s.src) && j < i+2 && s.src[j] >= '0' && s.src[j] <= '7' {
				j++
			}
			v, _ := strconv.ParseUint(s.src[i-1:j], 8, 16)
			if v > 255 {
				return token{}, s.errorf(i-2, "octal escape \\%s is more than a byte", s.src[i-1:j])
			}
			b.WriteByte(byte(v))
			i = j
		default:
			if e > ' ' && e < 0x7f {
				return token{}, s.errorf(i-2, "unknown escape \\%c", e)
			}
			return token{}, s.errorf(i-2, "a backslash before %q is no escape", e)
		}
	}
}

// atEOF says whether only space and comments are left (no token buffered).
func (s *scanner) atEOF() (bool, error) {
	if len(s.buf) > 0 || len(s.pending) > 0 {
		return false, nil
	}
	if err := s.skipSpace(); err != nil {
		return false, err
	}
	return s.off >= len(s.src), nil
}

// attachPoint reads one attach point raw, up to space, ',' or '{' outside
// quotes: its text keeps paths' '/' and '.', wildcards and ':'.
func (s *scanner) attachPoint() (string, int, error) {
	if len(s.buf) > 0 || len(s.pending) > 0 {
		t := s.buf
		if len(t) == 0 {
			t = s.pending
		}
		return "", 0, s.errorf(t[0].pos, "expected a probe, found %s", t[0])
	}
	if err := s.skipSpace(); err != nil {
		return "", 0, err
	}
	start := s.off
	quoted := false
	for s.off < len(s.src) {
		c := s.src[s.off]
		if c == '"' {
			quoted = !quoted
		} else if !quoted && (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ',' || c == '{') {
			break
		} else if !quoted && (strings.HasPrefix(s.src[s.off:], "//") || strings.HasPrefix(s.src[s.off:], "/*")) {
			break
		}
		s.off++
	}
	if quoted {
		return "", 0, s.errorf(start, "a quote in this probe is not closed")
	}
	return s.src[start:s.off], start, nil
}

// peekByte is the next character after space and comments, 0 at the end
// (no token buffered).
func (s *scanner) peekByte() (byte, error) {
	if err := s.skipSpace(); err != nil {
		return 0, err
	}
	if s.off >= len(s.src) {
		return 0, nil
	}
	return s.src[s.off], nil
}
