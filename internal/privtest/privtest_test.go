package privtest

import (
	"os"
	"path/filepath"
	"testing"
)

// TestRecord: a gate writes the package and the top-level test, once per
// call, when TRACEKIT_KERNEL_TESTS names a file, and nothing otherwise.
func TestRecord(t *testing.T) {
	list := filepath.Join(t.TempDir(), "kernel-tests")
	t.Setenv("TRACEKIT_KERNEL_TESTS", "")
	record(t)
	if _, err := os.Stat(list); !os.IsNotExist(err) {
		t.Fatalf("written without TRACEKIT_KERNEL_TESTS: %v", err)
	}
	t.Setenv("TRACEKIT_KERNEL_TESTS", list)
	record(t)
	t.Run("sub/case", func(t *testing.T) { Need(t, true, "nothing") })
	b, err := os.ReadFile(list)
	if err != nil {
		t.Fatal(err)
	}
	if want := "internal/privtest TestRecord\ninternal/privtest TestRecord\n"; string(b) != want {
		t.Errorf("%q, want %q", b, want)
	}
}
