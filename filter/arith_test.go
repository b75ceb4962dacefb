package filter

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
)

// badFD is a descriptor no test opens: the syscalls fail with EBADF, after
// their tracepoints saw the arguments.
const badFD = 987654

// arithPairs are the operands the kernel computes with: signs, zero
// divisors, shifts by 64 and more, overflow, the one quotient that
// overflows.
var arithPairs = [][2]int64{
	{100, 7}, {-100, 7}, {100, -7}, {-100, -7}, {math.MinInt64, -1}, {5, 0}, {-5, 0},
	{1, 70}, {-1, 65}, {math.MaxInt64, 2}, {1 << 40, 3}, {-(1 << 40), 3}, {12345, 63},
}

// quo and rem are the documented rules, written out apart from the
// compiler's ArithConst: truncation toward zero, x / 0 == 0, x % 0 == x.
func quo[T int64 | uint64](a, b T) T {
	if b == 0 {
		return 0
	}
	return a / b
}

func rem[T int64 | uint64](a, b T) T {
	if b == 0 {
		return a
	}
	return a % b
}

// Each operator and constant form, computed in the kernel on a syscall's
// arguments the test chose: fallocate's offset and len are signed 8-byte
// fields, pwrite64's count unsigned (which makes the arithmetic unsigned)
// and pos signed. Every value equals what C's rules (and the documented
// ones for / 0, % 0 and shifts by 64 or more) give.
func TestArithmetic(t *testing.T) {
	privtest.Require(t)
	if strconv.IntSize == 32 {
		// The compiler's arithmetic is the goldens' and the fuzzer's there.
		t.Skip("a 32-bit kernel's syscall records have no 8-byte fields: each argument is one 4-byte register, and a loff_t's two halves are two arguments")
	}
	pid := int64(os.Getpid())
	signed := []struct {
		expr string
		want func(a, b int64) int64
	}{
		{"offset + len", func(a, b int64) int64 { return a + b }},
		{"offset - len", func(a, b int64) int64 { return a - b }},
		{"offset * len", func(a, b int64) int64 { return a * b }},
		{"offset / len", quo[int64]},
		{"offset % len", rem[int64]},
		{"offset & len", func(a, b int64) int64 { return a & b }},
		{"offset | len", func(a, b int64) int64 { return a | b }},
		{"offset ^ len", func(a, b int64) int64 { return a ^ b }},
		{"offset << len", func(a, b int64) int64 { return a << (b & 63) }},
		{"offset >> len", func(a, b int64) int64 { return a >> (b & 63) }},
		{"offset / 0", func(a, b int64) int64 { return 0 }},
		{"offset % 0", func(a, b int64) int64 { return a }},
		{"offset << 70", func(a, b int64) int64 { return a << 6 }},
		{"offset >> 65", func(a, b int64) int64 { return a >> 1 }},
		{"offset / -3", func(a, b int64) int64 { return a / -3 }},
		{"offset % 4096", func(a, b int64) int64 { return a % 4096 }},
		{"offset * 0x100000000", func(a, b int64) int64 { return a * 0x100000000 }},
		{"offset + len * 2", func(a, b int64) int64 { return a + b*2 }},
		{"(offset + len) * 2", func(a, b int64) int64 { return (a + b) * 2 }},
		{"offset - (len - pid)", func(a, b int64) int64 { return a - (b - pid) }},
		{"pid * len", func(a, b int64) int64 { return pid * b }},
		{"offset / (len % 5)", func(a, b int64) int64 { return quo(a, rem(b, 5)) }},
		{"-offset", func(a, b int64) int64 { return -a }},
		{"offset-3", func(a, b int64) int64 { return a - 3 }},
		{"offset - -3", func(a, b int64) int64 { return a + 3 }},
		{"mode * 2 - 1", nil}, // mode is the case's index
	}
	unsigned := []struct {
		expr string
		want func(a, b uint64) uint64
	}{
		{"count + pos", func(a, b uint64) uint64 { return a + b }},
		{"count / pos", quo[uint64]},
		{"count % pos", rem[uint64]},
		{"pos / count", func(a, b uint64) uint64 { return quo(b, a) }},
		{"count >> pos", func(a, b uint64) uint64 { return a >> (b & 63) }},
		{"pos >> count", func(a, b uint64) uint64 { return uint64(int64(b) >> (a & 63)) }}, // a shift has its left side's type
		{"count / 3", func(a, b uint64) uint64 { return a / 3 }},
		{"count >> 65", func(a, b uint64) uint64 { return a >> 1 }},
		{"count - 1", func(a, b uint64) uint64 { return a - 1 }},
	}
	var sf, uf []string
	for _, c := range signed {
		sf = append(sf, c.expr)
	}
	for _, c := range unsigned {
		uf = append(uf, c.expr)
	}
	bin := tooltest.Tool(t, "filter")
	where := fmt.Sprintf("fd == %d", badFD)
	st := startTracer(t, "Tracing", bin, "--json", "--fields", "offset,len,mode,"+strings.Join(sf, ","), "syscalls:sys_enter_fallocate", "--where", where)
	ut := startTracer(t, "Tracing", bin, "--json", "--fields", "count,pos,"+strings.Join(uf, ","), "syscalls:sys_enter_pwrite64", "--where", where)
	for i, p := range arithPairs {
		unix.Syscall6(unix.SYS_FALLOCATE, badFD, uintptr(i), uintptr(p[0]), uintptr(p[1]), 0, 0)
		unix.Syscall6(unix.SYS_PWRITE64, badFD, uintptr(i), uintptr(p[0]), uintptr(p[1]), 0, 0)
	}
	done := func(out string) bool { return strings.Count(out, "\n") >= len(arithPairs) }
	// Each event is found by its operands (pwrite64's buf is a string: it
	// cannot carry the index as fallocate's mode does).
	index := func(a, b string) int {
		for i, p := range arithPairs {
			if a == strconv.FormatInt(p[0], 10) && b == strconv.FormatInt(p[1], 10) || a == strconv.FormatUint(uint64(p[0]), 10) && b == strconv.FormatInt(p[1], 10) {
				return i
			}
		}
		return -1
	}
	check := func(out, x, y string, each func(i int, fields map[string]json.Number)) {
		seen := 0
		for _, line := range lines(out) {
			var ev struct{ Fields map[string]json.Number }
			d := json.NewDecoder(bytes.NewReader([]byte(line)))
			d.UseNumber()
			if err := d.Decode(&ev); err != nil {
				t.Errorf("%v: %q", err, line)
				continue
			}
			i := index(ev.Fields[x].String(), ev.Fields[y].String())
			if i < 0 {
				t.Errorf("%s and %s are no case's: %q", x, y, line)
				continue
			}
			each(i, ev.Fields)
			seen++
		}
		if seen != len(arithPairs) {
			t.Errorf("%d events, want %d:\n%s", seen, len(arithPairs), out)
		}
	}
	check(st.stop(t, done), "offset", "len", func(i int, f map[string]json.Number) {
		a, b := arithPairs[i][0], arithPairs[i][1]
		for _, c := range signed {
			want := strconv.Itoa(2*i - 1)
			if c.want != nil {
				want = strconv.FormatInt(c.want(a, b), 10)
			}
			if got := f[c.expr].String(); got != want {
				t.Errorf("%s with offset=%d len=%d: %s, want %s", c.expr, a, b, got, want)
			}
		}
	})
	check(ut.stop(t, done), "count", "pos", func(i int, f map[string]json.Number) {
		a, b := uint64(arithPairs[i][0]), uint64(arithPairs[i][1])
		for _, c := range unsigned {
			want := strconv.FormatUint(c.want(a, b), 10)
			if c.expr == "pos >> count" {
				want = strconv.FormatInt(int64(c.want(a, b)), 10)
			}
			if got := f[c.expr].String(); got != want {
				t.Errorf("%s with count=%d pos=%d: %s, want %s", c.expr, a, int64(b), got, want)
			}
		}
	})
}

// histRE reads a log2 histogram's rows as BCC (filter) and bpftrace print
// them: the slot's low bound and its count.
var (
	bccRow      = regexp.MustCompile(`(?m)^\s*(\d+) -> \d+\s+: (\d+)`)
	bpftraceRow = regexp.MustCompile(`(?m)^\[(\d+[KMGTPE]?)(?:, \S+\)|\])\s+(\d+)`)
)

// unitless writes bpftrace's 4K as 4096.
func unitless(s string) string {
	for i, u := range "KMGTPE" {
		if n, ok := strings.CutSuffix(s, string(u)); ok {
			v, _ := strconv.ParseUint(n, 10, 64)
			return strconv.FormatUint(v<<(10*(i+1)), 10)
		}
	}
	return s
}

func histRows(re *regexp.Regexp, out string) map[string]string {
	m := map[string]string{}
	for _, r := range re.FindAllStringSubmatch(out, -1) {
		if r[2] != "0" {
			m[unitless(r[1])] = r[2]
		}
	}
	return m
}

// An arithmetic --hist and --count-by key over writes of 100 bytes 3
// times, 1000 twice and 5000 once: count - 28 falls in the slots from 64,
// 512 and 4096 (3, 2, 1), and count / 100 keys 1, 10 and 50 (3, 2, 1); on
// the host, the same slots and keys as bpftrace's hist(args->count - 28)
// and @[args->count / 100] = count() attached at the same time.
func TestArithmeticSideBySide(t *testing.T) {
	privtest.Require(t)
	self := selfComm()
	where := fmt.Sprintf(`comm == "%s" && (count == 100 || count == 1000 || count == 5000)`, self)
	bin := tooltest.Tool(t, "filter")
	hist := startTracer(t, "Tracing", bin, "--hist", "count - 28", "syscalls:sys_enter_write", "--where", where)
	keys := startTracer(t, "Tracing", bin, "--json", "--count-by", "count / 100", "syscalls:sys_enter_write", "--where", where)
	var bt *tracer
	if p := tooltest.Peer(t, "bpftrace", "bpftrace"); p != "" {
		bt = startBpftrace(t, p, fmt.Sprintf(`tracepoint:syscalls:sys_enter_write /comm == "%s" && (args->count == 100 || args->count == 1000 || args->count == 5000)/ {
			@h = hist(args->count - 28); @k[args->count / 100] = count(); }`, self))
	}
	cmd := tooltest.Writes(t, 100, 3) + "; " + tooltest.Writes(t, 1000, 2) + "; " + tooltest.Writes(t, 5000, 1)
	if out, err := exec.Command("/bin/sh", "-c", cmd).CombinedOutput(); err != nil {
		t.Fatalf("writes: %v %s", err, out)
	}
	wantHist := map[string]string{"64": "3", "512": "2", "4096": "1"}
	gotHist := histRows(bccRow, hist.stop(t, func(string) bool { return true }))
	if fmt.Sprint(gotHist) != fmt.Sprint(wantHist) {
		t.Errorf("--hist 'count - 28': slots %v, want %v\n%s", gotHist, wantHist, hist.errors())
	}
	var rep struct {
		Counts []struct {
			Key   map[string]json.Number
			Count int
		}
	}
	out := keys.stop(t, func(string) bool { return true })
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &rep); err != nil {
		t.Fatalf("--count-by 'count / 100': %v: %q %s", err, out, keys.errors())
	}
	gotKeys := map[string]string{}
	for _, c := range rep.Counts {
		gotKeys[c.Key["count / 100"].String()] = strconv.Itoa(c.Count)
	}
	wantKeys := map[string]string{"1": "3", "10": "2", "50": "1"}
	if fmt.Sprint(gotKeys) != fmt.Sprint(wantKeys) {
		t.Errorf("--count-by 'count / 100': %v, want %v: %s", gotKeys, wantKeys, out)
	}
	if bt == nil {
		return // in the guests; the host compares
	}
	theirs := bt.stop(t, func(string) bool { return true })
	if h := histRows(bpftraceRow, theirs); fmt.Sprint(h) != fmt.Sprint(gotHist) {
		t.Errorf("bpftrace's hist(args->count - 28): %v, filter's %v\n%s", h, gotHist, theirs)
	}
	k := map[string]string{}
	for _, m := range regexp.MustCompile(`@k\[(\d+)\]: (\d+)`).FindAllStringSubmatch(theirs, -1) {
		k[m[1]] = m[2]
	}
	if fmt.Sprint(k) != fmt.Sprint(gotKeys) {
		t.Errorf("bpftrace's @k[args->count / 100]: %v, filter's %v\n%s", k, gotKeys, theirs)
	}
}
