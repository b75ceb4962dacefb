package tools

import (
	"fmt"

	"testing"

	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/asm"
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

// The syscall registers' offsets the toolkit writes down (asm.Regs) are
// where the running kernel's BTF puts them: an fentry program at a
// syscall's wrapper reads the user's pt_regs with them.
func TestSyscallRegsMatchBTF(t *testing.T) {
	privtest.Require(t)
	regs, err := asm.HostPtRegs()
	if err != nil {
		t.Fatal(err)
	}
	members := map[string][]string{
		"amd64": {"di", "si", "dx", "r10", "r8", "r9", "orig_ax"},
		"arm64": {"regs", "", "", "", "", "", "syscallno"},
	}[regs.Arch]
	for i, name := range members {
		if name == "" {
			continue // regs[i]: the array's start plus 8 each
		}
		off, err := MemberOffset("pt_regs", name)
		if err != nil {
			t.Fatal(err)
		}
		want := regs.SyscallNr
		if i < 6 {
			want = regs.SyscallArgs[i]
		}
		if i == 0 && regs.Arch == "arm64" {
			for j, a := range regs.SyscallArgs {
				if a != int16(off+8*j) {
					t.Errorf("syscall argument %d at %d, BTF's regs[%d] at %d", j+1, a, j, off+8*j)
				}
			}
			continue
		}
		if int(want) != off {
			t.Errorf("%s: %d in asm.Regs, %d in the kernel's BTF", name, want, off)
		}
	}
}

// The 5.5 reading helpers, found with one probe, on the kernels that have
// them; bpf_probe_read and its _str before.
func TestReaders(t *testing.T) {
	privtest.Require(t)
	want := asm.OldReaders
	if kernelAtLeast(t, 5, 5) {
		want = asm.NewReaders
	}
	if got := Readers(); got != want {
		t.Errorf("Readers() = %+v, want %+v", got, want)
	}
}
