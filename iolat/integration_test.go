package iolat

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/kernel"
)

func TestMain(m *testing.M) { tooltest.Main(m) }

func iolat(t *testing.T, args ...string) tooltest.Result {
	return tooltest.Run(t, tooltest.Tool(t, "iolat"), args...)
}

// directWrites is exactly n block IOs of 4 KiB to dev.
func directWrites(dev string, n int) string {
	return fmt.Sprintf("dd if=/dev/zero of=%s bs=4k count=%d oflag=direct status=none", dev, n)
}

type histReport struct {
	Unit       string `json:"unit"`
	Lost       uint64 `json:"lost"`
	Histograms []struct {
		Label string `json:"label"`
		Total uint64 `json:"total"`
	} `json:"histograms"`
}

func TestLoopDeviceExactCount(t *testing.T) {
	privtest.Require(t)
	tooltest.ForEachHook(t, "block_rq_issue", func(t *testing.T) {
		tooltest.RawNeedsBTF(t) // -d reads the request
		dev := tooltest.LoopDevice(t)
		name := filepath.Base(dev)
		const n = 57
		r := iolat(t, "-D", "--json", "-c", directWrites(dev, n))
		if r.Status != 0 {
			t.Fatalf("exit %d: %s", r.Status, r.Stderr)
		}
		var rep histReport
		if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &rep); err != nil {
			t.Fatalf("%v: %q", err, r.Stdout)
		}
		found := false
		for _, h := range rep.Histograms {
			if h.Label == name {
				found = true
				if h.Total != n {
					t.Errorf("%s: %d IOs, want exactly %d", name, h.Total, n)
				}
			}
		}
		if !found || rep.Unit != "usecs" || rep.Lost != 0 {
			t.Errorf("no %s histogram, or unit %q, lost %d: %+v", name, rep.Unit, rep.Lost, rep)
		}

		// -Q (from insert where the request passed through it) and -F (per
		// operation) count the same IOs: all of them writes.
		for _, args := range [][]string{{"-Q", "-d", name}, {"-F", "-d", name}} {
			r := iolat(t, append(args, "--json", "-c", directWrites(dev, n))...)
			var rep histReport
			if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &rep); err != nil {
				t.Fatalf("%v: %v: %q %s", args, err, r.Stdout, r.Stderr)
			}
			var total uint64
			for _, h := range rep.Histograms {
				total += h.Total
				if args[0] == "-F" && h.Label != "write" {
					t.Errorf("-F: a %q histogram for direct writes", h.Label)
				}
			}
			if total != n || rep.Lost != 0 {
				t.Errorf("%v: %d IOs, lost %d; want exactly %d", args, total, rep.Lost, n)
			}
		}

		// The text report labels the disk as BCC's biolatency -D does.
		text := iolat(t, "-D", "-m", "-c", directWrites(dev, n))
		if !strings.Contains(text.Stdout, "disk = "+name+"\n     msecs ") {
			t.Errorf("text report:\n%s", text.Stdout)
		}
	})
}

// Start times live in direct-mapped slots where the kernel has
// compare-and-exchange (5.12+), with the hash for requests whose slot is
// taken. Exact either way: the slots (the default), the hash alone
// (--slots 0), and one slot that a stale entry holds (written
// by the test into the running tool's map), so that every request takes
// the hash. The workload waits for the test's go-ahead (a file).
func TestSlotsAndHashCountExactly(t *testing.T) {
	privtest.Require(t)
	tooltest.ForEachHook(t, "block_rq_issue", func(t *testing.T) {
		tooltest.RawNeedsBTF(t) // -d reads the request
		dev := tooltest.LoopDevice(t)
		name := filepath.Base(dev)
		const n = 60
		sizes := []string{"auto", "0", "1"}
		if !kernel.HaveAtomicCmpXchg() {
			sizes = sizes[:2]
			r := iolat(t, "--slots", "1", "0.01", "1")
			if r.Status != 1 || !strings.Contains(r.Stderr, "--slots 1: the slots are claimed with BPF compare-and-exchange, which this kernel lacks") {
				t.Errorf("--slots 1 without compare-and-exchange: exit %d, stderr %q", r.Status, r.Stderr)
			}
		}
		for _, slots := range sizes {
			flag := filepath.Join(t.TempDir(), "go")
			work := fmt.Sprintf("while [ ! -e %s ]; do sleep 0.02; done; %s", flag, directWrites(dev, n))
			cmd := exec.Command(tooltest.Tool(t, "iolat"), "-d", name, "--json", "--slots", slots, "-c", work)
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			exited := false
			t.Cleanup(func() {
				if !exited {
					cmd.Process.Kill()
					cmd.Wait()
				}
			})
			if slots == "1" {
				occupySlot(t, cmd.Process.Pid)
			}
			if err := os.WriteFile(flag, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			err := cmd.Wait()
			exited = true
			if err != nil {
				t.Fatalf("slots %q: %v: %s", slots, err, errb.String())
			}
			var rep histReport
			if err := json.Unmarshal([]byte(strings.TrimSpace(out.String())), &rep); err != nil || len(rep.Histograms) != 1 {
				t.Fatalf("slots %q: %v: %q %s", slots, err, out.String(), errb.String())
			}
			// Exact, but for runs the kernel skipped and said it did
			// (as TestWholeMachine allows): 58 of 60 once, in the
			// CI of 39804e9, with other packages' programs running.
			skipped := tooltest.SkippedRuns("iolat", errb.String())
			if got := rep.Histograms[0].Total; got > n || got+skipped < n || rep.Lost != 0 {
				t.Errorf("slots %q: %d IOs, lost %d, %d runs skipped; want exactly %d (less the skipped), none lost: %s", slots, got, rep.Lost, skipped, n, errb.String())
			}
		}
	})
}

// occupySlot finds the slots map of the iolat run pid once it is loaded
// (through the map ids in its /proc/PID/fdinfo: a map of an earlier run
// may not be freed yet) and fills its every slot with a request that
// never completes. Under emulation a start takes seconds.
func occupySlot(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		infos, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fdinfo/*", pid))
		for _, fdinfo := range infos {
			b, err := os.ReadFile(fdinfo)
			if err != nil {
				continue
			}
			var id uint32
			for _, line := range strings.Split(string(b), "\n") {
				if v, ok := strings.CutPrefix(line, "map_id:"); ok {
					fmt.Sscan(strings.TrimSpace(v), &id)
				}
			}
			if id == 0 {
				continue
			}
			m, err := ebpf.NewMapFromID(ebpf.MapID(id))
			if err != nil {
				continue
			}
			info, err := m.Info()
			if err == nil && info.Name == "iolat_slots" {
				stale := make([]byte, 24)
				binary.LittleEndian.PutUint64(stale, 1<<40) // a tag no request here has
				for i := uint32(0); i < m.MaxEntries(); i++ {
					if err := m.Put(i, stale); err != nil {
						t.Fatal(err)
					}
				}
				m.Close()
				return
			}
			m.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("no iolat_slots map appeared for iolat (pid %d)", pid)
}

// Without -d, -D or -F nothing is read through the request, and a raw
// tracepoint program finds it without BTF (by the count of arguments the
// kernel lets it read). Every IO of the machine is counted then: at least
// the workload's, none lost.
func TestWholeMachine(t *testing.T) {
	privtest.Require(t)
	dev := tooltest.LoopDevice(t)
	const n = 33
	tooltest.ForEachHook(t, "block_rq_issue", func(t *testing.T) {
		for _, q := range [][]string{nil, {"-Q"}} {
			r := iolat(t, append(q, "--json", "-c", directWrites(dev, n))...)
			var rep histReport
			if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &rep); err != nil || len(rep.Histograms) != 1 {
				t.Fatalf("%v: %v: %q %s", q, err, r.Stdout, r.Stderr)
			}
			// A run of a program that interrupts itself on one CPU (the
			// loop device's completion in its worker, the backing disk's in
			// an interrupt) is skipped, and said at the end: the IO is
			// then not measured.
			skipped := tooltest.SkippedRuns("iolat", r.Stderr)
			if got := rep.Histograms[0].Total; got+skipped < n || rep.Lost != 0 {
				t.Errorf("%v: %d IOs, lost %d, %d runs skipped; want at least %d, none lost: %s", q, got, rep.Lost, skipped, n, r.Stderr)
			}
		}
	})
}

func TestHeatmapCountsEveryIOAboveZero(t *testing.T) {
	privtest.Require(t)
	dev := tooltest.LoopDevice(t)
	const n = 33
	r := iolat(t, "--heatmap", "--json", "--full", "-d", filepath.Base(dev), "-c", directWrites(dev, n))
	if r.Status != 0 {
		t.Fatalf("exit %d: %s", r.Status, r.Stderr)
	}
	var total uint64
	for _, line := range strings.Split(strings.TrimSpace(r.Stdout), "\n") {
		var row struct {
			Total uint64   `json:"total"`
			Lost  uint64   `json:"lost"`
			Slots []uint64 `json:"slots"`
		}
		if err := json.Unmarshal([]byte(line), &row); err != nil {
			t.Fatalf("%v: %q", err, line)
		}
		if len(row.Slots) != 100 || row.Slots[0] != 0 || row.Lost != 0 {
			t.Errorf("row: %d slots, %d at 0-1 ns, lost %d", len(row.Slots), row.Slots[0], row.Lost)
		}
		var sum uint64
		for _, c := range row.Slots {
			sum += c
		}
		if sum != row.Total {
			t.Errorf("slots sum %d, total %d", sum, row.Total)
		}
		total += row.Total
	}
	if total != n {
		t.Errorf("heatmap counted %d IOs on %s, want exactly %d", total, dev, n)
	}

	// The text stream: legend, banner, rows ending in their counts.
	text := iolat(t, "--heatmap", "--text", "-d", filepath.Base(dev), "-c", directWrites(dev, n))
	lines := strings.Split(strings.TrimRight(text.Stdout, "\n"), "\n")
	if len(lines) < 3 || !strings.Contains(lines[1], "|1us      |10us") || strings.Contains(text.Stdout, "\x1b") {
		t.Fatalf("text heatmap:\n%s", text.Stdout)
	}
	var sum int
	for _, l := range lines[2:] {
		m := regexp.MustCompile(` (\d+)$`).FindStringSubmatch(l)
		if m == nil {
			t.Fatalf("row without a count: %q", l)
		}
		c, _ := strconv.Atoi(m[1])
		sum += c
	}
	if sum != n {
		t.Errorf("text rows count %d, want %d", sum, n)
	}
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-d", "nosuchdisk9"}, {"-d", "../sda"}, {"abc"}, {"-1"}, {"--text"}, {"-D", "-F"},
		{"--heatmap", "-F"}, {"--scale", "wide", "--heatmap"},
		{"--heatmap", "--json", "--text"}, {"--heatmap", "--json", "--scale", "global"}, {"--heatmap", "-T"}, {"--json", "-T"},
		{"--slots", "3"}, {"--slots", "x"}, {"--slots", "131072"}, {"-Q", "--slots", "0"},
	} {
		r := iolat(t, args...)
		if r.Status != 2 || !strings.Contains(r.Stderr, "Try 'iolat --help'") {
			t.Errorf("%v: exit %d, stderr %q", args, r.Status, r.Stderr)
		}
	}
}
