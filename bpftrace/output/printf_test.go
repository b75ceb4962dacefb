package output

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// printfCases are printf calls with their arguments: integers written
// as bpftrace literals (their 64 bits) or strings.
var printfCases = []struct {
	format string
	args   []any
}{
	{`%d %i|\n`, []any{int64(-5)}}, // %i is no conversion: written as it is
	{`%d|%5d|%-5d|%05d|%-05d|%.3d|%8.3d|%.0d|\n`, []any{int64(42), int64(-42), int64(42), int64(-42), int64(42), int64(7), int64(-7), int64(0)}},
	{`%d %u %x %ld %lu %lld %llx\n`, []any{int64(5000000000), int64(-1), int64(-1), int64(5000000000), int64(-1), int64(-5000000000), int64(-1)}},
	{`%hhd %hhu %hd %hu %hx\n`, []any{int64(200), int64(-1), int64(40000), int64(-1), int64(-2)}},
	{`%o %X %08x %-8X| %zd %jd %td\n`, []any{int64(8), int64(3054), int64(255), int64(255), int64(-3), int64(-4), int64(-5)}},
	{`%c%c%c|%3c|%-3c|\n`, []any{int64(72), int64(105), int64(321), int64(65), int64(66)}},
	{`%p %p %20p|\n`, []any{int64(0), int64(4096), int64(255)}},
	{`%s|%8s|%-8s|%.2s|%6.2s|%-6.2s|\n`, []any{"hello", "hi", "hi", "hello", "hello", "hello"}},
	{`100%% %d%% of %s, and 50%%\n`, []any{int64(3), "all"}}, // the tail after the last conversion is raw
	{`no conversions, 10%% and a tab\tend\n`, nil},
	{`%-16s %6d %s\n`, []any{"comm", int64(1234), ""}},
}

func printfArgs(args []any) []Arg {
	var out []Arg
	for _, a := range args {
		switch a := a.(type) {
		case int64:
			out = append(out, Arg{Int: uint64(a)})
		case string:
			out = append(out, Arg{Str: a, IsStr: true})
		}
	}
	return out
}

// unescape resolves the \n and \t the table writes as bpftrace's source.
func unescape(s string) string {
	return strings.NewReplacer(`\n`, "\n", `\t`, "\t").Replace(s)
}

// printfScript is the table as a bpftrace program.
func printfScript() string {
	var b strings.Builder
	b.WriteString("BEGIN\n{\n")
	for _, c := range printfCases {
		fmt.Fprintf(&b, "\tprintf(\"%s\"", c.format)
		for _, a := range c.args {
			switch a := a.(type) {
			case int64:
				fmt.Fprintf(&b, ", %d", a)
			case string:
				fmt.Fprintf(&b, ", %s", strconv.Quote(a))
			}
		}
		b.WriteString(");\n")
	}
	b.WriteString("\texit();\n}\n")
	return b.String()
}

// TestPrintfAsBpftrace: each case formats as bpftrace 0.17 formatted it
// (testdata/printf.txt): C's widths, flags and precisions, int's 32 bits
// without a length modifier, glibc's %p, %% in a piece, the raw tail.
func TestPrintfAsBpftrace(t *testing.T) {
	want, err := os.ReadFile("testdata/printf.txt")
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for _, c := range printfCases {
		got.WriteString(Printf(unescape(c.format), printfArgs(c.args)))
	}
	gl, wl := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
	for i := range max(len(gl), len(wl)) {
		if i >= len(gl) || i >= len(wl) || gl[i] != wl[i] {
			t.Errorf("line %d (%s):\n got %q\nwant %q", i+1, printfCases[min(i, len(printfCases)-1)].format, at(gl, i), at(wl, i))
		}
	}
}

// TestPrintfTxtIsBpftraces: testdata/printf.txt is bpftrace's output of
// the table as a program, run here (CI fails without bpftrace).
func TestPrintfTxtIsBpftraces(t *testing.T) {
	path, err := exec.LookPath("bpftrace")
	if err != nil || os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bpftrace as root is needed here (make test installs Debian's bpftrace): %v", err)
		}
		t.Skip("needs bpftrace, as root")
	}
	out, err := exec.Command(path, "-e", printfScript()).Output()
	if err != nil {
		t.Fatalf("bpftrace: %v\n%s", err, printfScript())
	}
	// Less the "Attaching" line, and the two empty lines bpftrace ends a
	// run with before its maps (none here).
	got, ok := strings.CutPrefix(string(out), "Attaching 1 probe...\n")
	got, ok2 := strings.CutSuffix(got, "\n\n")
	ok = ok && ok2
	if os.Getenv("TK_UPDATE_PRINTF") == "1" {
		os.WriteFile("testdata/printf.txt", []byte(got), 0o644)
	}
	want, _ := os.ReadFile("testdata/printf.txt")
	if !ok || got != string(want) {
		t.Errorf("bpftrace printed:\n%s\ntestdata/printf.txt has:\n%s", out, want)
	}
}
