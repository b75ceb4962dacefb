package filter

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/procfs"
)

// decimalOffsets writes a frame's offset in decimal, as bpftrace does:
// name+0x1f is name+31.
func decimalOffsets(frame string) string {
	name, off, ok := strings.Cut(frame, "+0x")
	if !ok {
		return frame
	}
	n, err := strconv.ParseUint(off, 16, 64)
	if err != nil {
		return frame
	}
	return name + "+" + strconv.FormatUint(n, 10)
}

// strayless is frames (offsets in decimal) without an innermost frame
// a megabyte or more past its symbol: an address in no function, which
// 6.12's and 7.2's guests gave --count-by kstack's stack now and then
// (handshake_exit+771886355, where a module's last symbol is nearest: a
// BPF program loaded after this test read kallsyms, the other tracer's),
// and not --fields kstack's of the same event. Logged; the frames of the
// kernel's functions are compared.
func strayless(t *testing.T, frames []string) []string {
	for len(frames) > 1 {
		_, off, ok := strings.Cut(frames[0], "+")
		n, err := strconv.ParseUint(off, 10, 64)
		if !ok || err != nil || n < 1<<20 {
			break
		}
		t.Logf("a stray innermost frame left out: %s", frames[0])
		frames = frames[1:]
	}
	return frames
}

func straylessStacks(t *testing.T, stacks map[string]int) map[string]int {
	out := map[string]int{}
	for st, c := range stacks {
		out[strings.Join(strayless(t, strings.Split(st, "\n")), "\n")] += c
	}
	return out
}

// kstacks decodes a --json --count-by kstack report: each stack's frames
// (offsets in decimal) joined by newlines, and its count.
func kstacks(t *testing.T, out string) (map[string]int, int) {
	t.Helper()
	var rep countByReport
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &rep); err != nil {
		t.Fatalf("--json --count-by kstack: %v: %q", err, out)
	}
	stacks, total := map[string]int{}, 0
	for _, c := range rep.Counts {
		raw, _ := c.Key["kstack"].([]any)
		var frames []string
		for _, f := range raw {
			s, _ := f.(string)
			frames = append(frames, decimalOffsets(s))
		}
		stacks[strings.Join(frames, "\n")] += int(c.Count)
		total += int(c.Count)
	}
	return stacks, total
}

// --count-by kstack on net:netif_receive_skb: a workload's 6 datagrams of
// 300 bytes counted by the kernel's stack, every one, each stack's
// outermost frame a function of this kernel's kallsyms; --folded sums to 6
// too. On the host, beside bpftrace's @[kstack] = count() attached at the
// same time to the same workload: the same stacks, the same counts.
func TestKstack(t *testing.T) {
	privtest.Require(t)
	syms, err := procfs.LoadKallsyms()
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	where := `len == 328 && name == "lo"`
	work := tooltest.UDPSizes(t, fmt.Sprintf("300x%d", n))
	r := filter(t, "--json", "--count-by", "kstack", "net:netif_receive_skb", "--where", where, "-a", "-c", work)
	stacks, total := kstacks(t, r.Stdout)
	if total != n {
		t.Fatalf("%d datagrams counted by stack, want %d: %v\n%s", total, n, stacks, r.Stderr)
	}
	// On 32-bit ARM a stack taken at a tracepoint is one frame: said once.
	if notice := strings.Count(r.Stderr, "walks a stack taken at a tracepoint no further than its first frame"); notice != map[bool]int{true: 1}[runtime.GOARCH == "arm"] {
		t.Errorf("%d notices of one-frame stacks on %s:\n%s", notice, runtime.GOARCH, r.Stderr)
	}
	for stack := range stacks {
		frames := strings.Split(stack, "\n")
		fn, _, _ := strings.Cut(frames[len(frames)-1], "+")
		if !syms.Has(fn) {
			t.Errorf("outermost frame %q: not a function of this kernel's:\n%s", frames[len(frames)-1], stack)
		}
	}
	// Folded, for a flame graph: functions outermost first, then the count.
	r = filter(t, "--count-by", "kstack", "--folded", "net:netif_receive_skb", "--where", where, "-a", "-c", work)
	folded := 0
	for _, l := range lines(r.Stdout) {
		m := regexp.MustCompile(`^([A-Za-z0-9_.;]+) (\d+)$`).FindStringSubmatch(l)
		if m == nil {
			t.Errorf("--folded line %q: want FUNCTION;...;FUNCTION COUNT", l)
			continue
		}
		c, _ := strconv.Atoi(m[2])
		folded += c
	}
	if r.Status != 0 || folded != n {
		t.Errorf("--folded: exit %d, %d datagrams, want %d:\n%s%s", r.Status, folded, n, r.Stdout, r.Stderr)
	}

	bt := tooltest.Peer(t, "bpftrace", "bpftrace")
	if bt == "" {
		return // in the guests; the host compares
	}
	// Both attached at once, so that both see the same packets (one may
	// be received in the sender's context, another in ksoftirqd's).
	ours := startTracer(t, "Tracing", tooltest.Tool(t, "filter"), "--json", "--count-by", "kstack", "net:netif_receive_skb", "--where", where)
	env, err := exec.LookPath("env")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bt, "-e", `tracepoint:net:netif_receive_skb /args->len == 328/ { @[kstack] = count(); }`, "-c", env+" "+work).CombinedOutput()
	if err != nil {
		t.Fatalf("bpftrace: %v\n%s", err, out)
	}
	mine, _ := kstacks(t, ours.stop(t, func(string) bool { return true }))
	theirs := map[string]int{}
	for _, m := range regexp.MustCompile(`(?s)@\[\n(.*?)\n\]: (\d+)`).FindAllStringSubmatch(string(out), -1) {
		var frames []string
		for _, l := range strings.Split(m[1], "\n") {
			frames = append(frames, strings.TrimSpace(l))
		}
		c, _ := strconv.Atoi(m[2])
		theirs[strings.Join(frames, "\n")] += c
	}
	if len(mine) != len(theirs) || len(mine) == 0 {
		t.Errorf("filter counted %d stacks, bpftrace %d:\n%v\n%s", len(mine), len(theirs), mine, out)
	}
	for stack, c := range mine {
		if theirs[stack] != c {
			t.Errorf("stack\n%s\nfilter %d, bpftrace %d\n%s", stack, c, theirs[stack], out)
		}
	}
}

// --fields kstack prints each event's kernel stack: over 3 writes of 4099
// bytes, every event has frames, its outermost a function of this
// kernel's kallsyms, and the stacks are those --count-by kstack counts
// for the same writes, attached at the same time, 3 in all.
func TestKstackFields(t *testing.T) {
	privtest.Require(t)
	syms, err := procfs.LoadKallsyms()
	if err != nil {
		t.Fatal(err)
	}
	const n = 3
	where := "count == 4099"
	bin := tooltest.Tool(t, "filter")
	fields := startTracer(t, "Tracing", bin, "--json", "--fields", "count,kstack", "syscalls:sys_enter_write", "--where", where)
	counts := startTracer(t, "Tracing", bin, "--json", "--count-by", "kstack", "syscalls:sys_enter_write", "--where", where)
	if out, err := exec.Command("/bin/sh", "-c", tooltest.Writes(t, 4099, n)).CombinedOutput(); err != nil {
		t.Fatalf("writes: %v %s", err, out)
	}
	printed := map[string]int{}
	for _, l := range lines(fields.stop(t, func(out string) bool { return strings.Count(out, "\n") >= n })) {
		var ev struct {
			Fields struct {
				Count  int
				Kstack []string
			}
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.Fields.Count != 4099 || len(ev.Fields.Kstack) == 0 {
			t.Errorf("%v: an event of 4099 bytes with its frames: %q", err, l)
			continue
		}
		frames := ev.Fields.Kstack
		if fn, _, _ := strings.Cut(frames[len(frames)-1], "+"); !syms.Has(fn) && frames[0] != "[no kernel stack]" {
			t.Errorf("outermost frame %q: not a function of this kernel's: %q", fn, frames)
		}
		for i := range frames {
			frames[i] = decimalOffsets(frames[i])
		}
		printed[strings.Join(strayless(t, frames), "\n")]++
	}
	counted, total := kstacks(t, counts.stop(t, func(string) bool { return true }))
	counted = straylessStacks(t, counted)
	if total != n || fmt.Sprint(printed) != fmt.Sprint(counted) {
		t.Errorf("--fields kstack printed %v; --count-by kstack counted %v (%d, want %d)", printed, counted, total, n)
	}
}
