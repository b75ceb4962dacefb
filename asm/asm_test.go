package asm

import (
	"fmt"
	"testing"

	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/internal/slots"
)

func TestSnippetGoldens(t *testing.T) {
	field, err := LoadField(bpf.R1, "pid", 28, 4, true)
	if err != nil {
		t.Fatal(err)
	}
	fork, err := FollowForks("pids", "pids_lost", 12, 20)
	if err != nil {
		t.Fatal(err)
	}
	exits, err := ForgetExits("pids", 24)
	if err != nil {
		t.Fatal(err)
	}
	forkRaw, err := FollowForksRaw("pids", "pids_lost", 1264, bpf.FnProbeReadKernel)
	if err != nil {
		t.Fatal(err)
	}
	for name, insns := range map[string]bpf.Instructions{
		"log2slot":         Log2Slot("slot", bpf.R1, bpf.R2, bpf.R3),
		"field_signed":     field,
		"percpu_inc":       PerCPUArrayIncrement("inc", "hist", -4),
		"hash_inc":         HashIncrement("inc", "hist", -8, -16, "lost", StoreComm("comms", -8, -32)),
		"pid_in_set":       PidInSet("pids", -36, "exit"),
		"follow_forks":     fork,
		"forget_exits":     exits,
		"follow_forks_raw": forkRaw,
		"forget_exits_raw": ForgetExitsRaw("pids"),
		"tree_on_exec":     TreeOnExec("pids", nil, 4321, TreeWaiting),
		"tree_on_exec_ns":  TreeOnExec("pids", &PidNS{Dev: 4, Ino: 4026532417}, 2, TreeTraced),
		"decade_slot":      DecadeSlot("heat", bpf.R1, bpf.R2, bpf.R3),
		"cache_inc":        CacheIncrement("cache", "cache", -16, -24, 255, "hash", "exit"),
		"stats_cache":      StatsCache("stats", "stats_cache", -176, -148, 255),
	} {
		golden.Check(t, name, fmt.Sprintf("%v", insns))
	}
}

func TestLoadFieldRejectsOddSizes(t *testing.T) {
	for _, size := range []int{0, 3, 16} {
		if _, err := LoadField(bpf.R1, "x", 8, size, false); err == nil {
			t.Errorf("size %d accepted", size)
		}
	}
	if _, err := LoadField(bpf.R1, "x", 40000, 8, false); err == nil {
		t.Error("offset 40000 accepted")
	}
}

func TestLog2SlotOf(t *testing.T) {
	for _, tc := range []struct {
		v    uint64
		slot int
	}{{0, 1}, {1, 1}, {2, 2}, {3, 2}, {4, 3}, {1023, 10}, {1024, 11}, {1 << 20, 21}, {1<<63 - 1, 63}, {1 << 63, 64}, {^uint64(0), 64}} {
		if got := slots.Log2Of(tc.v); got != tc.slot {
			t.Errorf("slots.Log2Of(%d) = %d, want %d", tc.v, got, tc.slot)
		}
	}
}

func TestDecadeSlotOf(t *testing.T) {
	for _, tc := range []struct {
		v    uint64
		slot int
	}{
		{0, 0}, {1, 0}, {2, 3}, {9, 9}, {10, 10}, {999, 29}, {1000, 30}, {1001, 30},
		{999_999, 59}, {1_000_000, 60}, {999_999_999, 89}, {1_000_000_000, 90},
		{7_943_282_347, 98}, {7_943_282_348, 99}, {1 << 40, 99}, {^uint64(0), 99},
	} {
		if got := slots.DecadeOf(tc.v); got != tc.slot {
			t.Errorf("slots.DecadeOf(%d) = %d, want %d", tc.v, got, tc.slot)
		}
	}
	for k := 1; k < slots.Decade; k++ {
		// Below 10 ns whole nanoseconds cannot fill ten slots: some start
		// at the same value and stay empty; above, every slot is distinct.
		if a, b := slots.DecadeStart(k-1), slots.DecadeStart(k); b < a || k >= 10 && b == a {
			t.Errorf("slot starts %d, %d at %d", a, b, k)
		}
		if v := slots.DecadeStart(k); k >= 10 && slots.DecadeOf(v) != k {
			t.Errorf("slot of start(%d) = %d", k, slots.DecadeOf(v))
		}
	}
}
