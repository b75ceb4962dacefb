package loader

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/kbtf"
)

// kernelAtLeast reports whether the running kernel is major.minor or newer.
func kernelAtLeast(t *testing.T, major, minor int) bool {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		t.Fatal(err)
	}
	return ma > major || ma == major && mi >= minor
}

// A BTF tracepoint program loaded by Tracing, through Load with a map
// it shares, counts this thread's getppid calls on raw_syscalls:sys_enter
// exactly: the map reference is wired and the jumps land.
func TestLoadTracingCounts(t *testing.T) {
	privtest.Require(t)
	needBTFTracepoint(t, "sys_enter")
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	insns := bpf.Instructions{
		bpf.Mov.Reg(bpf.R6, bpf.R1), // args: struct pt_regs *regs, long id
		bpf.FnGetCurrentPidTgid.Call(),
		bpf.LSh.Imm(bpf.R0, 32),
		bpf.RSh.Imm(bpf.R0, 32),
		bpf.JNE.Imm(bpf.R0, int32(tid), "out"),
		bpf.LoadMem(bpf.R1, bpf.R6, 8, bpf.DWord),
		bpf.JNE.Imm(bpf.R1, unix.SYS_GETPPID, "out"),
		bpf.StoreImm(bpf.RFP, -4, 0, bpf.Word),
		bpf.LoadMapPtr(bpf.R1, 0).WithReference("counts"),
		bpf.Mov.Reg(bpf.R2, bpf.RFP),
		bpf.Add.Imm(bpf.R2, -4),
		bpf.FnMapLookupElem.Call(),
		bpf.JEq.Imm(bpf.R0, 0, "out"),
		bpf.Mov.Imm(bpf.R1, 1),
		bpf.StoreXAdd(bpf.R0, bpf.R1, bpf.DWord),
		bpf.Mov.Imm(bpf.R0, 0).WithSymbol("out"),
		bpf.Return(),
	}
	coll, err := Load(&ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{"counts": {Name: "tk_test_counts", Type: ebpf.Array, KeySize: 4, ValueSize: 8, MaxEntries: 1}},
		Programs: map[string]*ebpf.ProgramSpec{"count": {
			Name: "tk_test_count", Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp, AttachTo: "sys_enter",
			License: "GPL", Instructions: insns,
		}},
	}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer coll.Close()
	l, err := link.AttachTracing(link.TracingOptions{Program: coll.Programs["count"]})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	for i := 0; i < n; i++ {
		unix.Getppid()
	}
	l.Close()
	var got uint64
	if err := coll.Maps["counts"].Lookup(uint32(0), &got); err != nil {
		t.Fatal(err)
	}
	if got != n {
		t.Errorf("counted %d getppid calls, made %d", got, n)
	}
}

// A program the verifier refuses: the error names it and, without
// --verbose, ends with the log's last lines, where the verifier says why.
func TestLoadTracingRejected(t *testing.T) {
	privtest.Require(t)
	needBTFTracepoint(t, "sys_enter")
	_, err := Load(&ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{"bad": {
		Name: "tk_test_bad", Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp, AttachTo: "sys_enter", License: "GPL",
		Instructions: bpf.Instructions{
			bpf.LoadMem(bpf.R0, bpf.R1, 8*9, bpf.DWord), // sys_enter has 2 arguments
			bpf.Return(),
		},
	}}}, false)
	if err == nil {
		t.Fatal("a read past the arguments loaded")
	}
	msg := err.Error()
	if !strings.Contains(msg, "verifier rejected them: program tk_test_bad") || !strings.Contains(msg, "last lines") {
		t.Errorf("rejection: %v", err)
	}
	if !strings.Contains(msg, "doesn't have 5-th argument") && !strings.Contains(msg, "invalid bpf_context access") {
		t.Errorf("rejection does not say why: %v", err)
	}
	if n := strings.Count(msg, "\n"); n > shortLog+2 {
		t.Errorf("rejection has %d lines, want at most %d", n, shortLog+2)
	}
}

// needBTFTracepoint skips a test on a kernel whose BTF has no btf_trace_
// typedef for event (they came with BTF tracepoints, 5.5), and fails it
// under REQUIRE_PRIVILEGED: every kernel CI runs on has them.
func needBTFTracepoint(t *testing.T, event string) {
	t.Helper()
	privtest.NeedBTF(t)
	spec, err := kbtf.Kernel()
	if err == nil {
		_, err = spec.ID("btf_trace_"+event, kbtf.KindTypedef)
	}
	privtest.Need(t, err == nil, "BTF tracepoint "+event)
}
