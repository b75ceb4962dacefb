// Package privtest gates tests that need the real kernel and root.
package privtest

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/tracefs"
)

// Require skips the test, with the reason, when not running as root, and
// fails it instead when REQUIRE_PRIVILEGED=1 (as .ci/run sets): in CI a
// skipped kernel test must never pass for coverage. As root, it raises
// RLIMIT_MEMLOCK first, as the tools do: before 5.11 the kernel charges BPF
// memory to it, per user, and a test that makes maps itself failed in the
// 5.10 guest (64 KiB there) once other processes held some.
func Require(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		// loader.RemoveMemlock's effect; loader's own tests import this.
		_ = unix.Setrlimit(unix.RLIMIT_MEMLOCK, &unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY})
		return
	}
	if os.Getenv("REQUIRE_PRIVILEGED") == "1" {
		t.Fatal("this test needs root and REQUIRE_PRIVILEGED=1 forbids skipping it")
	}
	t.Skip("needs root to load BPF programs (set REQUIRE_PRIVILEGED=1 to make this a failure)")
}

// RequireKprobes is Require for tests that need kprobes, which our host
// kernel lacks: there the test skips (make test-vm runs it on kernels that
// have them), unless TRACEKIT_REQUIRE_KPROBES=1 (set inside the kernel
// matrix's guests), where a skip is a failure.
func RequireKprobes(t testing.TB) {
	t.Helper()
	Require(t)
	if tracefs.KprobesAvailable() {
		return
	}
	if os.Getenv("TRACEKIT_REQUIRE_KPROBES") == "1" {
		t.Fatal("this kernel has no kprobes and TRACEKIT_REQUIRE_KPROBES=1 forbids skipping")
	}
	t.Skip("this kernel has no kprobes (CONFIG_KPROBES): make test-vm runs this test on kernels that have them")
}

// Need skips the test, with the reason, when the kernel at hand lacks
// what it needs (have is false), and fails it instead when
// REQUIRE_PRIVILEGED=1: every kernel CI runs on (the host and the
// matrix's guests) has BTF, raw and BTF tracepoints, so there a missing
// one is a broken probe, not a kernel without the feature. Decide have
// from the kernel's own word (its BTF, tracefs), not from the probe under
// test.
func Need(t testing.TB, have bool, what string) {
	t.Helper()
	if have {
		return
	}
	if os.Getenv("REQUIRE_PRIVILEGED") == "1" {
		t.Fatalf("this kernel has no %s, and REQUIRE_PRIVILEGED=1 forbids skipping", what)
	}
	t.Skipf("this kernel has no %s", what)
}
