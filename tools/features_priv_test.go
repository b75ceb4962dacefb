package tools

import (
	"fmt"

	"testing"

	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/internal/privtest"
)

// BPF_ATOMIC compare and exchange arrived in 5.12: the probe says so on
// the kernel at hand.
func TestHaveAtomicCmpXchg(t *testing.T) {
	privtest.Require(t)
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var major, minor int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &major, &minor); err != nil {
		t.Fatal(err)
	}
	want := major > 5 || major == 5 && minor >= 12
	if got := HaveAtomicCmpXchg(); got != want {
		t.Errorf("kernel %d.%d: HaveAtomicCmpXchg() = %v, want %v", major, minor, got, want)
	}
}

// Lazily allocated hash maps in perf_event programs arrived with 6.1's BPF
// memory allocator.
func TestHaveLazyHashes(t *testing.T) {
	privtest.Require(t)
	if got, want := HaveLazyHashes(), kernelAtLeast(t, 6, 1); got != want {
		t.Errorf("HaveLazyHashes() = %v, want %v", got, want)
	}
}
