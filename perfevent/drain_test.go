package perfevent

import (
	"errors"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/loader"
)

// Drain blocks in poll without a tick (no periodic wake-ups), stop wakes
// it at once, and an error from fn ends it and reaches fail once.
func TestDrain(t *testing.T) {
	m := outputMap(t)
	rings, err := OpenOutputRings(m, "test", 1, WakeEach)
	if err != nil {
		t.Fatal(err)
	}
	defer rings.Close()

	calls := 0
	stop, err := rings.Drain(0, func() error { calls++; return nil }, func(err error) { t.Errorf("fail: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	stop()
	stop()
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("stop took %v", d)
	}
	if calls != 0 {
		t.Errorf("fn ran %d times with no records and no tick", calls)
	}

	failed := make(chan error, 2)
	stop, err = rings.Drain(time.Millisecond, func() error { return errors.New("stdout closed") }, func(err error) { failed <- err })
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-failed:
		if err.Error() != "stdout closed" {
			t.Errorf("fail got %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("fn's error never reached fail")
	}
	stop()
	if len(failed) != 0 {
		t.Error("fail was called twice")
	}
}

// Close ends the rings' Drain before it unmaps them; a Drain whose fn is
// blocked (the run's ending hung, the watchdog closing the run under it)
// keeps the rings mapped, and its next Read does not fault.
func TestCloseUnderDrain(t *testing.T) {
	m := outputMap(t)
	for _, blocked := range []bool{false, true} {
		rings, err := OpenOutputRings(m, "test", 1, WakeEach)
		if err != nil {
			t.Fatal(err)
		}
		release, inFn := make(chan struct{}), make(chan struct{}, 1)
		stop, err := rings.Drain(time.Millisecond, func() error {
			select {
			case inFn <- struct{}{}:
			default:
			}
			if blocked {
				<-release
			}
			rings.Read(func(Sample) {})
			return nil
		}, func(err error) { t.Errorf("fail: %v", err) })
		if err != nil {
			t.Fatal(err)
		}
		<-inFn
		start := time.Now()
		if err := rings.Close(); err != nil {
			t.Error(err)
		}
		took := time.Since(start)
		if want := rings.mmaps != nil; want != blocked {
			t.Errorf("blocked %v: rings mapped after Close: %v", blocked, want)
		}
		if blocked && (took < drainWait || took > drainWait+time.Second) {
			t.Errorf("Close took %v under a blocked Drain, want %v", took, drainWait)
		}
		close(release) // its Read, after the Close: no fault
		stop()
	}
}

// outputMap is a perf event array for output rings, closed with the test.
func outputMap(t *testing.T) *ebpf.Map {
	t.Helper()
	privtest.Require(t)
	if err := loader.RemoveMemlock(); err != nil {
		t.Fatal(err)
	}
	m, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerfEventArray})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// Drain with a tick calls fn at each tick, records or not (a trickle
// under WakeBatch shows within it).
func TestDrainTick(t *testing.T) {
	m := outputMap(t)
	rings, err := OpenOutputRings(m, "test", 1, WakeBatch)
	if err != nil {
		t.Fatal(err)
	}
	defer rings.Close()
	calls := make(chan struct{}, 16)
	stop, err := rings.Drain(50*time.Millisecond, func() error {
		select {
		case calls <- struct{}{}:
		default:
		}
		return nil
	}, func(err error) { t.Errorf("fail: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for i := range 3 {
		select {
		case <-calls:
		case <-time.After(5 * time.Second):
			t.Fatalf("call %d: none within 5 s of a 50 ms tick", i+1)
		}
	}
}

// A reader waiting for its rings holds no thread in a system call: it
// waits in Go's network poller (a thread in poll(2) kept Go's sysmon
// polling every 20 µs, at each of the reader's wake-ups, for as long as
// it waited), and still wakes at once to stop.
func TestDrainWaitsInPoller(t *testing.T) {
	m := outputMap(t)
	rings, err := OpenOutputRings(m, "test", 1, WakeEach)
	if err != nil {
		t.Fatal(err)
	}
	defer rings.Close()
	stop, err := rings.Drain(0, func() error { return nil }, func(err error) { t.Errorf("fail: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	time.Sleep(200 * time.Millisecond)
	set := uint64(rings.drain.set)
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		b, err := os.ReadFile("/proc/self/task/" + task.Name() + "/syscall")
		if err != nil {
			continue // the thread ended
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue // running
		}
		nr, _ := strconv.Atoi(f[0])
		arg, _ := strconv.ParseUint(strings.TrimPrefix(f[1], "0x"), 16, 64)
		switch {
		case slices.Contains(pollCalls(), nr):
			t.Errorf("thread %s blocked in poll(2): %s", task.Name(), strings.TrimSpace(string(b)))
		case slices.Contains(epollWaits(), nr) && arg == set:
			t.Errorf("thread %s blocked in epoll_wait(2) on the rings' set: %s", task.Name(), strings.TrimSpace(string(b)))
		}
	}
	start := time.Now()
	stop()
	if d := time.Since(start); d > time.Second {
		t.Errorf("stop took %v: the waiting reader did not wake", d)
	}
}

// pollCalls and epollWaits are the numbers of poll(2) and epoll_wait(2)
// and their kin here.
func pollCalls() []int {
	nrs := []int{unix.SYS_PPOLL}
	switch runtime.GOARCH {
	case "amd64":
		nrs = append(nrs, 7) // poll
	case "arm":
		nrs = append(nrs, 168, 414) // poll, ppoll_time64
	}
	return nrs
}

func epollWaits() []int {
	nrs := []int{unix.SYS_EPOLL_PWAIT, unix.SYS_EPOLL_PWAIT2}
	switch runtime.GOARCH {
	case "amd64":
		nrs = append(nrs, 232)
	case "arm":
		nrs = append(nrs, 252)
	}
	return nrs
}

// Each record wakes the reader, one after another: the reader looks at
// the rings' heads, not at what epoll says of them (a perf event's poll
// answers once per wake-up, and the poller's own check of the set takes
// that answer).
func TestDrainWakesForEachRecord(t *testing.T) {
	m := outputMap(t)
	rings, err := OpenOutputRings(m, "test", 1, WakeEach)
	if err != nil {
		t.Fatal(err)
	}
	defer rings.Close()
	// An XDP program run by BPF_PROG_TEST_RUN writes one 8-byte record to
	// its CPU's ring.
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.XDP, License: "GPL", Instructions: asm.Instructions{
		asm.Mov.Imm(asm.R2, 7),
		asm.StoreMem(asm.RFP, -8, asm.R2, asm.DWord),
		asm.LoadMapPtr(asm.R2, m.FD()),
		asm.LoadImm(asm.R3, 0xffffffff, asm.DWord), // BPF_F_CURRENT_CPU
		asm.Mov.Reg(asm.R4, asm.RFP),
		asm.Add.Imm(asm.R4, -8),
		asm.Mov.Imm(asm.R5, 8),
		asm.FnPerfEventOutput.Call(),
		asm.Mov.Imm(asm.R0, 2), // XDP_PASS
		asm.Return(),
	}})
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	defer prog.Close()
	got := make(chan int, 64)
	stop, err := rings.Drain(0, func() error {
		n := 0
		rings.Read(func(Sample) { n++ })
		if n > 0 {
			got <- n
		}
		return nil
	}, func(err error) { t.Errorf("fail: %v", err) })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	for i := 0; i < 50; i++ {
		if _, err := prog.Run(&ebpf.RunOptions{Data: make([]byte, 64)}); err != nil {
			t.Fatalf("run: %v", err)
		}
		select {
		case n := <-got:
			if n != 1 {
				t.Fatalf("record %d: read %d records, want 1", i, n)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("record %d did not wake the reader", i)
		}
	}
}
