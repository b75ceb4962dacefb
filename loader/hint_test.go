package loader

import (
	"errors"
	"fmt"
	"testing"

	"golang.org/x/sys/unix"
)

// cilium/ebpf's memlock hint is dropped from the text, and the error
// still unwraps to the errno.
func TestNoMemlockHint(t *testing.T) {
	err := fmt.Errorf("load BPF programs: %w%s", noMemlockHint{fmt.Errorf("map hist: map create: %w"+memlockHint, unix.EPERM)}, permissionHint)
	if got, want := err.Error(), "load BPF programs: map hist: map create: operation not permitted"+permissionHint; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if !errors.Is(err, unix.EPERM) {
		t.Error("EPERM lost")
	}
}
