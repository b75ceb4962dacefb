// Package privtest gates tests that need the real kernel and root.
//
// Every gate also records the test that called it, when
// TRACEKIT_KERNEL_TESTS names a file (make test sets it for the host's
// run): the kernel matrix's x86-64 guests then run only those tests, the
// ones that touch the kernel, since the host has just run the others on
// the same architecture (the foreign architectures' guests run them all).
// A test that reads the running kernel without needing root (its
// kallsyms, its BTF) calls a gate too.
package privtest

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
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
	record(t)
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
	record(t)
	if have {
		return
	}
	if os.Getenv("REQUIRE_PRIVILEGED") == "1" {
		t.Fatalf("this kernel has no %s, and REQUIRE_PRIVILEGED=1 forbids skipping", what)
	}
	t.Skipf("this kernel has no %s", what)
}

// NeedBTF is Need for the kernel's BTF, which one kernel of the matrix
// lacks by its build: 32-bit ARM's (Debian's armmp kernel has no
// CONFIG_DEBUG_INFO_BTF). Its guest says so (TRACEKIT_NO_BTF=1), and only
// there does a test that needs BTF skip; docs/design/kernel-matrix.md names
// those skips. Elsewhere a kernel without BTF fails the test under
// REQUIRE_PRIVILEGED=1, as Need does.
func NeedBTF(t testing.TB) {
	t.Helper()
	record(t)
	if HaveBTF() {
		return
	}
	if os.Getenv("TRACEKIT_NO_BTF") == "1" {
		t.Skip("this kernel has no BTF (built without CONFIG_DEBUG_INFO_BTF, as 32-bit ARM's Debian kernel is): what needs it is refused in one line")
	}
	Need(t, false, "kernel BTF (/sys/kernel/btf/vmlinux)")
}

// HaveBTF reports whether the kernel publishes its BTF.
func HaveBTF() bool {
	_, err := os.Stat("/sys/kernel/btf/vmlinux")
	return err == nil
}

// NoBTF reports, and logs, a kernel without BTF where the matrix says it
// has none (see NeedBTF): the caller leaves out the part of a test that
// needs BTF and runs the rest.
func NoBTF(t testing.TB) bool {
	t.Helper()
	if HaveBTF() || os.Getenv("TRACEKIT_NO_BTF") != "1" {
		return false
	}
	t.Log("this kernel has no BTF (built without CONFIG_DEBUG_INFO_BTF): the cases that need it are left out")
	return true
}

// NeedTracepointStacks skips a test of kernel stacks taken at a
// tracepoint on 32-bit ARM, where the kernel returns one frame: its
// unwinder (CONFIG_UNWINDER_ARM, Debian's armmp) starts from the
// registers perf_arch_fetch_caller_regs fills, the caller's pc with the
// current sp and no lr, and stops after that frame. A kprobe's stack,
// from real registers, is whole there. docs/design/kernel-matrix.md names
// this skip. (The tools ask kernel.TracepointStackLimit, which this
// package cannot import: kernel's own tests import it.)
func NeedTracepointStacks(t testing.TB) {
	t.Helper()
	if runtime.GOARCH == "arm" {
		t.Skip("32-bit ARM's kernel gives one frame for a stack taken at a tracepoint (perf_arch_fetch_caller_regs sets no lr for its unwinder)")
	}
}

// record appends "package TestName" (the package as a path from the
// module's root, the top-level test's name) to the file
// TRACEKIT_KERNEL_TESTS names, if any. A line is one append, whole even
// when tests of a package run in parallel.
func record(t testing.TB) {
	path := os.Getenv("TRACEKIT_KERNEL_TESTS")
	if path == "" {
		return
	}
	pkg, err := packageDir()
	if err != nil {
		t.Fatalf("TRACEKIT_KERNEL_TESTS: %v", err)
	}
	name, _, _ := strings.Cut(t.Name(), "/")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err == nil {
		_, err = f.WriteString(pkg + " " + name + "\n")
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatalf("TRACEKIT_KERNEL_TESTS: %v", err)
	}
}

// packageDir is the test's package directory (go test runs a test in
// it) relative to the module's root, the nearest directory above with a
// go.mod: "writesize/prog".
func packageDir() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for root := wd; ; {
		if _, err := os.Stat(filepath.Join(root, "go.mod")); err == nil {
			return filepath.Rel(root, wd)
		}
		up := filepath.Dir(root)
		if up == root {
			return "", fmt.Errorf("no go.mod above %s", wd)
		}
		root = up
	}
}
