// Package usage is the error every layer returns for a bad flag or
// argument: the run ends with exit status 2 and a hint to read --help.
package usage

import "fmt"

// Error is a bad flag or argument.
type Error struct{ msg string }

func (e *Error) Error() string { return e.msg }

// Errorf builds an Error.
func Errorf(format string, args ...any) error {
	return &Error{msg: fmt.Sprintf(format, args...)}
}
