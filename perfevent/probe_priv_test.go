package perfevent

import (
	"debug/elf"
	"fmt"
	"os"
	"os/exec"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/counts"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/loader"
	"github.com/tracekit/tracekit/tracefs"
)

// A write of this size is ours: nothing else on the machine writes it.
const markerSize = 4321

// countMarker counts the runs where the register at regOff holds
// markerSize: the size argument on entry (dx), the return value (ax).
func countMarker(t *testing.T, regOff int16) (*ebpf.Collection, *ebpf.Map) {
	t.Helper()
	return countMarkerAt(t, regOff, -1)
}

// countMarkerAt is countMarker of the 4-byte value at the user address in
// the register at regOff plus disp (disp < 0: the register itself).
func countMarkerAt(t *testing.T, regOff int16, disp int32) (*ebpf.Collection, *ebpf.Map) {
	t.Helper()
	insns := asm.Prologue()
	insns = append(insns, bpf.LoadMem(bpf.R1, asm.RegCtx, regOff, hostRegs(t).Load()))
	if disp >= 0 {
		insns = append(insns,
			bpf.Mov.Reg(bpf.R3, bpf.R1),
			bpf.Add.Imm(bpf.R3, disp),
			bpf.Mov.Reg(bpf.R1, bpf.RFP),
			bpf.Add.Imm(bpf.R1, -8),
			bpf.Mov.Imm(bpf.R2, 4),
			bpf.FnProbeReadUser.Call(),
			bpf.LoadMem(bpf.R1, bpf.RFP, -8, bpf.Word),
		)
	}
	insns = append(insns,
		bpf.JNE.Imm(bpf.R1, markerSize, "exit"),
		bpf.Mov.Imm(bpf.R1, 0),
		asm.StoreKey(-4, bpf.R1, bpf.Word),
	)
	insns = append(insns, asm.PerCPUArrayIncrement("n", "count", -4)...)
	insns = append(insns, asm.Return("exit", 0)...)
	coll, err := loader.Load(&ebpf.CollectionSpec{
		Maps:     map[string]*ebpf.MapSpec{"count": {Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1}},
		Programs: map[string]*ebpf.ProgramSpec{"p": {Type: ebpf.Kprobe, License: "GPL", Instructions: insns}},
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	return coll, coll.Maps["count"]
}

func TestKprobeAndKretprobeFire(t *testing.T) {
	privtest.RequireKprobes(t)
	const n = 31
	for _, legacy := range []bool{false, true} {
		for _, ret := range []bool{false, true} {
			name := fmt.Sprintf("legacy=%v ret=%v", legacy, ret)
			regs := hostRegs(t)
			off := regs.Args[2]
			if ret {
				off = regs.Ret
			}
			coll, m := countMarker(t, off)
			att, err := AttachProbe(coll.Programs["p"], tracefs.Probe{Symbol: "ksys_write", Ret: ret}, "test", legacy)
			if err != nil {
				coll.Close()
				t.Fatalf("%s: %v", name, err)
			}
			fd, _ := unix.Open("/dev/null", unix.O_WRONLY, 0)
			buf := make([]byte, markerSize)
			for i := 0; i < n; i++ {
				unix.Write(fd, buf)
			}
			unix.Close(fd)
			if err := att.Close(); err != nil {
				t.Errorf("%s: detach: %v", name, err)
			}
			got, err := counts.ReadPerCPUCounter(m)
			coll.Close()
			if err != nil || got != n {
				t.Errorf("%s: counted %d (%v), want exactly %d", name, got, err, n)
			}
		}
	}
	if left := ownEvents(t, "kprobe_events"); left != "" {
		t.Errorf("kprobe_events after detaching: %q", left)
	}
}

// ownEvents lists the lines of a probe events file in this test process's
// group: other packages' tests, run in parallel, register theirs.
func ownEvents(t *testing.T, file string) string {
	t.Helper()
	ns, err := tracefs.PidNamespace()
	if err != nil {
		t.Fatal(err)
	}
	root, err := tracefs.Root()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(root + "/" + file)
	group := ":" + tracefs.Group("test", ns, os.Getpid()) + "/"
	var own []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, group) {
			own = append(own, line)
		}
	}
	return strings.Join(own, "\n")
}

func TestKprobeBadSymbols(t *testing.T) {
	privtest.RequireKprobes(t)
	coll, _ := countMarker(t, hostRegs(t).Args[2])
	defer coll.Close()
	for _, legacy := range []bool{false, true} {
		if _, err := AttachProbe(coll.Programs["p"], tracefs.Probe{Symbol: "no_such_function_tk"}, "test", legacy); err == nil {
			t.Errorf("legacy=%v: attached to a function that does not exist", legacy)
		}
		if _, err := AttachProbe(coll.Programs["p"], tracefs.Probe{Symbol: "ksys_write\n-:kprobes/x"}, "test", legacy); err == nil {
			t.Errorf("legacy=%v: an injected line was accepted", legacy)
		}
	}
}

func hostRegs(t *testing.T) *asm.Regs {
	regs, err := asm.HostPtRegs()
	if err != nil {
		t.Fatal(err)
	}
	return regs
}

// goArg0 is a program counting calls whose first integer argument is the
// marker: Go's register ABI passes it in rax on x86-64, x0 on arm64, a0
// (X10) on riscv64; on 32-bit ARM Go has no register ABI (ABI0), and the
// argument is on the stack, at sp+4 at the function's entry.
func goArg0(t *testing.T) (*ebpf.Collection, *ebpf.Map) {
	regs := hostRegs(t)
	if regs.Arch == "arm" {
		return countMarkerAt(t, regs.SP, 4)
	}
	off, ok := regs.Named[map[string]string{"amd64": "rax", "arm64": "x0", "riscv64": "a0"}[regs.Arch]]
	if !ok {
		t.Fatalf("Go's first argument register on %s is not known here", regs.Arch)
	}
	return countMarker(t, off)
}

// uprobeTarget is what the uprobe test probes: Go passes x in a register
// (goArg0).
//
//go:noinline
func uprobeTarget(x int) int { return x + 1 }

// TestMain makes the test binary a workload: TK_UPROBE_CALLS=N calls
// uprobeTarget(markerSize) N times and uprobeTarget(1) N times.
func TestMain(m *testing.M) {
	if v := os.Getenv("TK_UPROBE_CALLS"); v != "" {
		n, _ := strconv.Atoi(v)
		for i := 0; i < n; i++ {
			uprobeTarget(markerSize)
			uprobeTarget(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fileOffset is the file offset of the code at addr in this (non-PIE)
// binary: the address converted through the PT_LOAD segment that holds it.
// go test strips the symbol table, so the address comes from the running
// function itself.
func fileOffset(t *testing.T, path string, addr uint64) uint64 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Type != elf.ET_EXEC {
		t.Fatalf("%s is %v: this test converts addresses of non-PIE binaries only", path, f.Type)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && addr >= p.Vaddr && addr < p.Vaddr+p.Filesz {
			return addr - p.Vaddr + p.Off
		}
	}
	t.Fatalf("0x%x is in no PT_LOAD segment of %s", addr, path)
	return 0
}

// A uprobe, through the uprobe PMU and through uprobe_events, counts
// exactly the calls whose first argument is the marker, and leaves nothing
// in uprobe_events.
func TestUprobeFires(t *testing.T) {
	privtest.Require(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	off := fileOffset(t, self, uint64(reflect.ValueOf(uprobeTarget).Pointer()))
	const n = 29
	for _, legacy := range []bool{false, true} {
		coll, m := goArg0(t) // Go's first argument
		att, err := AttachProbe(coll.Programs["p"], tracefs.Probe{Type: tracefs.Uprobe, Path: self, Offset: off}, "test", legacy)
		if err != nil {
			coll.Close()
			t.Fatalf("legacy=%v: %v", legacy, err)
		}
		cmd := exec.Command(self)
		cmd.Env = append(os.Environ(), "TK_UPROBE_CALLS="+strconv.Itoa(n))
		runErr := cmd.Run()
		if err := att.Close(); err != nil {
			t.Errorf("legacy=%v: detach: %v", legacy, err)
		}
		got, err := counts.ReadPerCPUCounter(m)
		coll.Close()
		if runErr != nil || err != nil || got != n {
			t.Errorf("legacy=%v: counted %d (%v, %v), want exactly %d", legacy, got, runErr, err, n)
		}
	}
	if left := ownEvents(t, "uprobe_events"); left != "" {
		t.Errorf("uprobe_events after detaching: %q", left)
	}
}
