package output

import (
	"strconv"
	"strings"
)

// Arg is one argument of printf: an integer (its 64 bits, as the
// program read them) or a string.
type Arg struct {
	Int   uint64
	Str   string
	IsStr bool
}

// Printf formats as bpftrace 0.17's printf does. It cuts the format
// after each conversion (%-?[0-9]*(.[0-9]+)? then s, r, rx, rh, c, or
// d, u, o, x, X, p with C's length modifiers) and runs each piece through C's
// snprintf with its one argument: so "%%" is a '%' in a piece, but the
// text after the last conversion is written as it is; and an integer
// without a length modifier is C's int, its low 32 bits (%ld, %lld,
// %lu, ... take all 64), hh a char's 8 and h a short's 16; %p is glibc's
// ("(nil)" for 0). Widths and precisions count bytes. The conversions
// have been checked against the arguments (check.Check): an argument
// short or of the wrong kind formats as C would not, with nothing.
func Printf(format string, args []Arg) string {
	var b strings.Builder
	rest := format
	for _, a := range args {
		at, sp, ok := nextSpec(rest)
		if !ok {
			break
		}
		literal(&b, rest[:at])
		b.WriteString(sp.format(a))
		rest = rest[at+sp.n:]
	}
	b.WriteString(rest)
	return b.String()
}

// spec is one conversion: %-08.3lld.
type spec struct {
	n         int // its length in the format
	left      bool
	zero      bool
	width     int
	precision int // -1: none
	bits      int // 8, 16, 32 or 64
	conv      byte
}

var lengths = []struct {
	mod  string
	bits int
}{{"hh", 8}, {"h", 16}, {"ll", 64}, {"l", 64}, {"j", 64}, {"z", 64}, {"t", 64}, {"", 32}}

// nextSpec finds the first conversion in s, as bpftrace's pattern does.
func nextSpec(s string) (int, spec, bool) {
	for at := strings.IndexByte(s, '%'); at >= 0; {
		if sp, ok := parseSpec(s[at:]); ok {
			return at, sp, true
		}
		next := strings.IndexByte(s[at+1:], '%')
		if next < 0 {
			break
		}
		at += 1 + next
	}
	return 0, spec{}, false
}

func parseSpec(s string) (spec, bool) {
	sp := spec{precision: -1}
	i := 1
	if i < len(s) && s[i] == '-' {
		sp.left = true
		i++
	}
	if i < len(s) && s[i] == '0' {
		sp.zero = true
	}
	start := i
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	sp.width, _ = strconv.Atoi(s[start:i])
	if i+1 < len(s) && s[i] == '.' && s[i+1] >= '0' && s[i+1] <= '9' {
		i++
		start = i
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		sp.precision, _ = strconv.Atoi(s[start:i])
	}
	if i < len(s) && (s[i] == 's' || s[i] == 'c') {
		sp.conv, sp.n = s[i], i+1
		return sp, true
	}
	if i < len(s) && s[i] == 'r' { // a buffer: %r, %rx, %rh
		sp.conv, sp.n = 'r', i+1
		if i+1 < len(s) && (s[i+1] == 'x' || s[i+1] == 'h') {
			sp.n++
		}
		return sp, true
	}
	for _, l := range lengths {
		if strings.HasPrefix(s[i:], l.mod) && i+len(l.mod) < len(s) && strings.IndexByte("duoxXp", s[i+len(l.mod)]) >= 0 {
			sp.bits, sp.conv, sp.n = l.bits, s[i+len(l.mod)], i+len(l.mod)+1
			return sp, true
		}
	}
	return spec{}, false
}

// literal writes a piece's text as snprintf would: "%%" is '%'.
func literal(b *strings.Builder, s string) {
	b.WriteString(strings.ReplaceAll(s, "%%", "%"))
}

func (sp spec) format(a Arg) string {
	switch sp.conv {
	case 's', 'r': // a buffer comes rendered (its bytes as buf() prints them)
		s := a.Str
		if sp.precision >= 0 && len(s) > sp.precision {
			s = s[:sp.precision]
		}
		return sp.pad(s, false)
	case 'c':
		return sp.pad(string([]byte{byte(a.Int)}), false)
	case 'p':
		if a.Int == 0 {
			return sp.pad("(nil)", false)
		}
		return sp.pad("0x"+strconv.FormatUint(a.Int, 16), false)
	}
	v := a.Int
	if sp.bits < 64 {
		v &= 1<<sp.bits - 1
	}
	neg := false
	var digits string
	switch sp.conv {
	case 'd':
		s := int64(v<<(64-sp.bits)) >> (64 - sp.bits) // sign-extended
		neg = s < 0
		u := uint64(s)
		if neg {
			u = -u
		}
		digits = strconv.FormatUint(u, 10)
	case 'u':
		digits = strconv.FormatUint(v, 10)
	case 'o':
		digits = strconv.FormatUint(v, 8)
	case 'x':
		digits = strconv.FormatUint(v, 16)
	case 'X':
		digits = strings.ToUpper(strconv.FormatUint(v, 16))
	}
	if sp.precision >= 0 {
		if sp.precision == 0 && v == 0 {
			digits = ""
		}
		if len(digits) < sp.precision {
			digits = strings.Repeat("0", sp.precision-len(digits)) + digits
		}
	}
	if neg {
		digits = "-" + digits
	}
	return sp.pad(digits, sp.zero && !sp.left && sp.precision < 0)
}

// pad widens s to the width: spaces on the left (or the right with '-'),
// or zeros after the sign.
func (sp spec) pad(s string, zeros bool) string {
	n := sp.width - len(s)
	switch {
	case n <= 0:
		return s
	case sp.left:
		return s + strings.Repeat(" ", n)
	case zeros && strings.HasPrefix(s, "-"):
		return "-" + strings.Repeat("0", n) + s[1:]
	case zeros:
		return strings.Repeat("0", n) + s
	}
	return strings.Repeat(" ", n) + s
}

// Conversions are format's conversions in order, as Printf finds them:
// 's', 'r' (a buffer), 'c', 'd', 'u', 'o', 'x', 'X', 'p' (a '%' followed
// by anything else is text, as in bpftrace).
func Conversions(format string) []byte {
	var convs []byte
	for {
		at, sp, ok := nextSpec(format)
		if !ok {
			return convs
		}
		convs = append(convs, sp.conv)
		format = format[at+sp.n:]
	}
}
