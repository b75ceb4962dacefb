package main

import (
	"fmt"

	bpf "github.com/cilium/ebpf/asm"
	"testing"

	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/tracefs"
)

func countField(t *testing.T) tracefs.Field {
	t.Helper()
	c, err := tooltest.Format(t, "sys_enter_write.6.18.format").MustField("count")
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestProgramGoldens(t *testing.T) {
	count := countField(t)
	for name, cfg := range map[string]progConfig{
		"prog_all":             {Count: count},
		"prog_pid":             {Count: count, Pid: 1234},
		"prog_tree":            {Count: count, Tree: true},
		"prog_per_process":     {Count: count, PerProcess: true},
		"prog_pid_per_process": {Count: count, Pid: 1234, PerProcess: true},
		"prog_kprobe_wrapper":  {Kprobe: &kprobeConfig{Symbol: "__x64_sys_write", Wrapper: true, ProbeRead: bpf.FnProbeReadKernel}},
		"prog_kprobe_old_read": {Kprobe: &kprobeConfig{Symbol: "__x64_sys_write", Wrapper: true, ProbeRead: bpf.FnProbeRead}},
		"prog_kprobe_ksys":     {Kprobe: &kprobeConfig{Symbol: "ksys_write"}, Tree: true},
	} {
		insns, err := program(cfg)
		if err != nil {
			t.Fatal(err)
		}
		golden.Check(t, name, fmt.Sprintf("%v", insns))
	}
}

func TestProgramReadsOffsetFromFormat(t *testing.T) {
	// A layout where count moved: the program must follow it.
	moved := countField(t)
	moved.Offset = 48
	insns, err := program(progConfig{Count: moved})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ins := range insns {
		if ins.OpCode.Class().IsLoad() && ins.Offset == 48 {
			found = true
		}
	}
	if !found {
		t.Errorf("no load at offset 48:\n%v", insns)
	}
}
