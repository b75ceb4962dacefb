package terminal

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// WriteTable prints rows (the first is the header) in aligned columns two
// spaces apart: right[i] aligns column i to the right (numbers), else to
// the left (names). No line ends in spaces.
func WriteTable(w io.Writer, rows [][]string, right []bool) error {
	var width []int
	for _, r := range rows {
		for i, cell := range r {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(cell))
		}
	}
	var b strings.Builder
	for _, r := range rows {
		var line strings.Builder
		for i, cell := range r {
			if i > 0 {
				line.WriteString("  ")
			}
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(cell))
			if i < len(right) && right[i] {
				line.WriteString(pad + cell)
			} else {
				line.WriteString(cell + pad)
			}
		}
		fmt.Fprintln(&b, strings.TrimRight(line.String(), " "))
	}
	_, err := io.WriteString(w, b.String())
	return err
}
