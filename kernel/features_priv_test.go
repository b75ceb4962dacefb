package kernel

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/kbtf"
	"github.com/tracekit/tracekit/loader"
)

// verdict loads a program of typ and says whether the verifier took it,
// and if not, its log: the oracle for a feature probe is the kernel's own
// answer to a program that uses the feature, never a version number (a
// distribution's backport would fail such a test while the probe is
// right).
func verdict(t *testing.T, typ ebpf.ProgramType, insns bpf.Instructions) (bool, string) {
	t.Helper()
	if err := loader.RemoveMemlock(); err != nil {
		t.Fatal(err)
	}
	p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: typ, License: "GPL", Instructions: insns})
	if err == nil {
		p.Close()
		return true, ""
	}
	var ve *ebpf.VerifierError
	if !errors.As(err, &ve) {
		t.Fatalf("load: %v (not the verifier's answer)", err)
	}
	return false, strings.Join(ve.Log, "\n")
}

// HaveAtomicCmpXchg says what the verifier does with a compare and
// exchange on a map value in a socket filter (another program type than
// the probe's): taken where the probe says yes, refused for the
// instruction itself where it says no.
func TestHaveAtomicCmpXchg(t *testing.T) {
	privtest.Require(t)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ok, log := verdict(t, ebpf.SocketFilter, lookupProgram(m,
		bpf.Mov.Reg(bpf.R1, bpf.R0), bpf.Mov.Imm(bpf.R0, 0), bpf.Mov.Imm(bpf.R2, 1), asm.CmpXchg(bpf.R1, bpf.R2, bpf.DWord, 0)))
	if got := HaveAtomicCmpXchg(); got != ok {
		t.Errorf("HaveAtomicCmpXchg() = %v, but the verifier took a cmpxchg: %v\n%s", got, ok, log)
	}
	if !ok && !strings.Contains(log, "atomic") && !strings.Contains(log, "BPF_STX") && !strings.Contains(log, "unknown") {
		t.Errorf("the verifier refused the cmpxchg for another reason:\n%s", log)
	}
}

// HaveLazyHashes agrees with the verifier's word on a perf_event program
// that looks up a BPF_F_NO_PREALLOC hash: before 6.1 it says
// "perf_event programs can only use preallocated hash map".
func TestHaveLazyHashes(t *testing.T) {
	privtest.Require(t)
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 1, Flags: unix.BPF_F_NO_PREALLOC})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	ok, log := verdict(t, ebpf.PerfEvent, lookupProgram(m))
	if strconv.IntSize == 32 {
		// Taken or not, never used there: a lazily allocated value is
		// 4-byte aligned on a 32-bit kernel (see HaveLazyHashes).
		if HaveLazyHashes() {
			t.Error("HaveLazyHashes() on a 32-bit kernel")
		}
		return
	}
	if got := HaveLazyHashes(); got != ok {
		t.Errorf("HaveLazyHashes() = %v, but the verifier took the program: %v\n%s", got, ok, log)
	}
	if !ok && !strings.Contains(log, "preallocated") {
		t.Errorf("the verifier refused the program for another reason:\n%s", log)
	}
}

// The syscall registers' offsets the toolkit writes down (asm.Regs) are
// where the running kernel's BTF puts them: an fentry program at a
// syscall's wrapper reads the user's pt_regs with them.
func TestSyscallRegsMatchBTF(t *testing.T) {
	privtest.Require(t)
	privtest.NeedBTF(t)
	regs, err := asm.HostPtRegs()
	if err != nil {
		t.Fatal(err)
	}
	members := map[string][]string{
		"amd64":   {"di", "si", "dx", "r10", "r8", "r9", "orig_ax"},
		"arm64":   {"regs", "", "", "", "", "", "syscallno"},
		"riscv64": {"orig_a0", "a1", "a2", "a3", "a4", "a5", "a7"},
	}[regs.Arch]
	if members == nil {
		t.Fatalf("no BTF names for %s's pt_regs here", regs.Arch)
	}
	if regs.Arch == "riscv64" {
		// Every register a probe or a USDT operand names: the struct's
		// members are the ABI's names (and epc).
		for name, at := range regs.Named {
			member := name
			if name == "pc" {
				member = "epc"
			}
			if off, err := kbtf.MemberOffset("pt_regs", member); err != nil || off != int(at) {
				t.Errorf("%s: %d in asm.Regs, %d in the kernel's BTF (%v)", name, at, off, err)
			}
		}
	}
	for i, name := range members {
		if name == "" {
			continue // regs[i]: the array's start plus 8 each
		}
		off, err := kbtf.MemberOffset("pt_regs", name)
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

// The 5.5 reading helpers, found with one probe (from a kprobe program),
// agree with the verifier's word on a tracepoint program that calls
// bpf_probe_read_user: it knows the helper, or Readers are the old ones.
func TestReaders(t *testing.T) {
	privtest.Require(t)
	ok, log := verdict(t, ebpf.TracePoint, bpf.Instructions{
		bpf.Mov.Reg(bpf.R1, bpf.RFP),
		bpf.Add.Imm(bpf.R1, -8),
		bpf.Mov.Imm(bpf.R2, 8),
		bpf.Mov.Imm(bpf.R3, 0),
		bpf.FnProbeReadUser.Call(),
		bpf.Mov.Imm(bpf.R0, 0),
		bpf.Return(),
	})
	want := asm.OldReaders
	if ok {
		want = asm.NewReaders
	} else if !strings.Contains(log, "func") {
		t.Errorf("the verifier refused bpf_probe_read_user for another reason:\n%s", log)
	}
	if got := Readers(); got != want {
		t.Errorf("Readers() = %+v, want %+v (the verifier on bpf_probe_read_user: %v %s)", got, want, ok, log)
	}
}
