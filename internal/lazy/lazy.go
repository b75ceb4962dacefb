// Package lazy compiles a regular expression when it is first used, not
// in a package's init: the multi-call binary runs every package's init for
// every tool, and most of its patterns serve one tool or one option.
package lazy

import (
	"regexp"
	"sync"
)

// Regexp returns a function that compiles expr on its first call (it must
// compile: a bad pattern panics there, as regexp.MustCompile does) and
// returns the same *regexp.Regexp on every call.
func Regexp(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}
