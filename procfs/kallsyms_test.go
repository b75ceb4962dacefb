package procfs

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/privtest"
)

const kallsyms = `ffffffffc0a01000 t udp_tunnel_xmit	[udp_tunnel]
ffffffff81000000 T _stext
ffffffff81e91000 T __udp4_lib_rcv
ffffffff81e90000 t udp_queue_rcv_skb
ffffffff82000000 D some_data
ffffffffc0a00000 T udp_tunnel_sock_release	[udp_tunnel]
ffffffff81e92000 W weak_fn
ffffffffc0a00200 t .L0 	[udp_tunnel]
ffffffffc0a00300 t $x	[udp_tunnel]
`

func TestSymbolize(t *testing.T) {
	s, err := ParseKallsyms(strings.NewReader(kallsyms))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		addr uint64
		want string
	}{
		{0xffffffff81e91234, "__udp4_lib_rcv+0x234"},
		{0xffffffff81e90010, "udp_queue_rcv_skb+0x10"}, // listed after a higher address
		{0xffffffff81e91000, "__udp4_lib_rcv+0x0"},
		{0xffffffff82000010, "weak_fn+0x16e010"}, // data symbols are not code
		{0xffffffffc0a01008, "udp_tunnel_xmit+0x8 [udp_tunnel]"},
		{0xffffffffc0a00100, "udp_tunnel_sock_release+0x100 [udp_tunnel]"},
		{0xffffffffc0a00310, "udp_tunnel_sock_release+0x310 [udp_tunnel]"}, // past a local label and a mapping symbol, which are no functions
		{0xffffffff80000000, ""},                                           // below the first symbol
	} {
		if got := s.Symbolize(tc.addr); got != tc.want {
			t.Errorf("Symbolize(%#x) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}

func TestSymbolizeHidden(t *testing.T) {
	zeroed := regexp.MustCompile(`(?m)^[0-9a-f]{16}`).ReplaceAllString(kallsyms, "0000000000000000")
	s, err := ParseKallsyms(strings.NewReader(zeroed))
	if err != nil {
		t.Fatal(err)
	}
	if !s.Hidden || s.Symbolize(0xffffffff81e91234) != "" {
		t.Errorf("hidden %v, symbol %q", s.Hidden, s.Symbolize(0xffffffff81e91234))
	}
}

// TestKernelFunctions checks the one-pass resolver against Symbolize: on
// the sample above, and as root on this kernel's kallsyms at every hundredth
// symbol's address, one past it and one before it.
func TestKernelFunctions(t *testing.T) {
	checkKernelFunctions(t, kallsyms, []uint64{0xffffffff81e91234, 0xffffffff81e90010, 0xffffffff81e91000, 0xffffffff82000010, 0xffffffffc0a01008, 0xffffffffc0a00100, 0xffffffffc0a00310, 0xffffffff80000000})
	privtest.Require(t)
	b, err := os.ReadFile("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	var addrs []uint64
	for i, line := range strings.Split(string(b), "\n") {
		if a, ok := parseHex([]byte(strings.SplitN(line, " ", 2)[0])); ok && i%100 == 0 && a > 0 {
			addrs = append(addrs, a, a+1, a-1)
		}
	}
	checkKernelFunctions(t, string(b), addrs)
	t.Logf("%d addresses of this kernel checked", len(addrs))
}

// checkKernelFunctions asks kernelFunctions and Symbolize to name addrs
// in text, and fails where they differ.
func checkKernelFunctions(t *testing.T, text string, addrs []uint64) {
	t.Helper()
	s, err := ParseKallsyms(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	got, hidden, err := kernelFunctions(strings.NewReader(text), addrs)
	if err != nil || hidden != s.Hidden {
		t.Fatalf("hidden %v, %v", hidden, err)
	}
	for _, a := range addrs {
		want, _, _ := strings.Cut(s.Symbolize(a), "+")
		if mod := strings.Index(s.Symbolize(a), " ["); mod >= 0 {
			want += s.Symbolize(a)[mod:]
		}
		if got[a] != want {
			t.Fatalf("0x%x: %q, Symbolize says %q", a, got[a], want)
		}
	}
}

// FuzzKernelFunctions holds the one-pass resolver to Symbolize on
// symbol tables in any order, with equal addresses (the last listed
// wins), data symbols and modules, and targets on, between and around
// them. Each byte pair is a symbol: an address among 16 and a kind.
func FuzzKernelFunctions(f *testing.F) {
	f.Add([]byte{3, 0, 1, 1, 3, 2, 9, 0, 0, 3, 15, 1})
	f.Add([]byte{5, 0, 5, 1, 5, 2, 2, 0, 12, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		var text strings.Builder
		for i := 0; i+1 < len(b) && i < 64; i += 2 {
			addr := 0xffffffff81000000 + uint64(b[i]%16)*0x100
			kind, mod := "T", ""
			switch b[i+1] % 4 {
			case 1:
				kind = "t"
			case 2:
				kind = "D"
			case 3:
				mod = "\t[m]"
			}
			fmt.Fprintf(&text, "%016x %s f%d%s\n", addr, kind, i, mod)
		}
		var addrs []uint64
		for a := uint64(0xffffffff81000000 - 0x80); a < 0xffffffff81001100; a += 0x80 {
			addrs = append(addrs, a)
		}
		checkKernelFunctions(t, text.String(), addrs)
	})
}

// LazyKallsyms names what LoadKallsyms names, for the addresses given to
// Resolve, in two rounds (the second only reads for the new ones).
func TestLazyKallsyms(t *testing.T) {
	privtest.Require(t)
	full, err := LoadKallsyms()
	if err != nil {
		t.Fatal(err)
	}
	lazy, err := LazyKallsyms()
	if err != nil {
		t.Fatal(err)
	}
	if lazy.Hidden != full.Hidden {
		t.Fatalf("hidden: lazy %v, full %v", lazy.Hidden, full.Hidden)
	}
	var addrs []uint64
	for i := 0; i < len(full.syms); i += 97 {
		a := full.syms[i].addr
		addrs = append(addrs, a, a+5, a-1)
	}
	half := len(addrs) / 2
	for _, round := range [][]uint64{addrs[:half], addrs} {
		if err := lazy.Resolve(round); err != nil {
			t.Fatal(err)
		}
		for _, a := range round {
			if got, want := lazy.Symbolize(a), full.Symbolize(a); got != want {
				t.Fatalf("0x%x: lazy %q, full %q", a, got, want)
			}
		}
	}
	if lazy.Symbolize(addrs[0]+12345) != "" && !lazy.Hidden {
		t.Error("an address never resolved was named")
	}
	t.Logf("%d addresses checked", len(addrs))
}

func TestTrimTracer(t *testing.T) {
	for _, c := range []struct{ in, want []string }{
		{
			[]string{"bpf_prog_6deef7357e7b4530_dropmon+0x4b [bpf]", "bpf_trace_run4+0x80", "__bpf_trace_kfree_skb+0x9", "__traceiter_kfree_skb+0x2f", "sk_skb_reason_drop+0x7e", "udp_queue_rcv_one_skb+0x1c"},
			[]string{"sk_skb_reason_drop+0x7e", "udp_queue_rcv_one_skb+0x1c"},
		},
		{[]string{"kfree_skb_reason+0x4e", "bpf_prog_run+0x1"}, []string{"kfree_skb_reason+0x4e", "bpf_prog_run+0x1"}},
		{[]string{"bpf_prog_aa_x+0x1 [bpf]"}, []string{"bpf_prog_aa_x+0x1 [bpf]"}},
		{nil, nil},
	} {
		if got := TrimTracer(c.in); !slices.Equal(got, c.want) {
			t.Errorf("TrimTracer(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestKernelFunctionsCancelled: a done context ends the pass with its
// error, before /proc/kallsyms is read through.
func TestKernelFunctionsCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	names, _, err := kernelFunctions(ctxReader{ctx, strings.NewReader(kallsyms)}, []uint64{0xffffffff81e91234})
	if !errors.Is(err, context.Canceled) || len(names) != 0 {
		t.Errorf("%d names, error %v; want none and context.Canceled", len(names), err)
	}
	names, _, err = kernelFunctions(ctxReader{context.Background(), strings.NewReader(kallsyms)}, []uint64{0xffffffff81e91234})
	if err != nil || names[0xffffffff81e91234] != "__udp4_lib_rcv" {
		t.Errorf("%v, %v; want __udp4_lib_rcv", names, err)
	}
}
