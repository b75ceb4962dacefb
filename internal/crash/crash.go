// Package crash says where a recovered panic happened, so that the one
// line an internal error prints is enough to find the fault from a user's
// report, without a Go stack trace on their terminal.
package crash

import (
	"fmt"
	"path"
	"runtime"
	"strings"
)

// Error is the error a recovered panic p becomes: "HEAD: p (at FUNC
// FILE:LINE)", head being what the caller calls it ("internal error in
// the collection"). It must be called by the deferred function that
// recovered p, whose frames still hold the panic's.
func Error(head string, p any) error {
	if at := site(); at != "" {
		return fmt.Errorf("%s: %v (at %s)", head, p, at)
	}
	return fmt.Errorf("%s: %v", head, p)
}

// site is the frame that panicked: the first frame outside the runtime
// below runtime.gopanic, "" if the stack does not show one.
func site() string {
	pcs := make([]uintptr, 64)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	panicking := false
	for {
		f, more := frames.Next()
		switch {
		case f.Function == "runtime.gopanic":
			panicking = true
		case panicking && !strings.HasPrefix(f.Function, "runtime."):
			fn := f.Function[strings.LastIndex(f.Function, "/")+1:]
			return fmt.Sprintf("%s %s:%d", fn, path.Base(f.File), f.Line)
		}
		if !more {
			return ""
		}
	}
}
