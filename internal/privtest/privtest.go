// Package privtest gates tests that need the real kernel and root.
package privtest

import (
	"os"
	"testing"
)

// Require skips the test, with the reason, when not running as root, and
// fails it instead when REQUIRE_PRIVILEGED=1 (as .ci/run sets): in CI a
// skipped kernel test must never pass for coverage.
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("REQUIRE_PRIVILEGED") == "1" {
		t.Fatal("this test needs root and REQUIRE_PRIVILEGED=1 forbids skipping it")
	}
	t.Skip("needs root to load BPF programs (set REQUIRE_PRIVILEGED=1 to make this a failure)")
}
