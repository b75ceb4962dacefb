package terminal

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Printable is s with every control character and invalid UTF-8 byte
// written as \xNN (and a backslash as \\), for text output: a process may
// name itself "\x1b[31mX\nFAKE 1" to forge report lines or drive the
// terminal. JSON output escapes on its own.
func Printable(s string) string {
	clean := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == 0x7f || c == '\\' || c >= 0x80 {
			clean = false
			break
		}
	}
	if clean {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, "\\x%02x", s[i])
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0):
			fmt.Fprintf(&b, "\\x%02x", r)
		case r == '\\':
			b.WriteString(`\\`)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// PrintableLines is Printable for a message of several lines (an error
// with a caret under an expression, the verifier's log): each line
// escaped, the newlines and tabs between them kept (they move the cursor
// as text does, no further). Backslashes are kept too: a message quotes
// its input with %q, whose escapes must read as written.
func PrintableLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if strings.IndexFunc(l, func(r rune) bool {
			return r < 0x20 && r != '\t' || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == utf8.RuneError
		}) >= 0 {
			parts := strings.Split(l, "\t")
			for j, p := range parts {
				parts[j] = strings.ReplaceAll(Printable(p), `\\`, `\`)
			}
			lines[i] = strings.Join(parts, "\t")
		}
	}
	return strings.Join(lines, "\n")
}
