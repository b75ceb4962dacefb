package kernel

import (
	"bufio"
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/procfs"
)

// TestSymbolNames: the kernel's own naming (bpf_snprintf's %ps) gives the
// names one pass over /proc/kallsyms gives, for addresses at, inside and
// past every 50th code symbol, modules' included; an alias (two names at
// one address) may be the other name of the same address.
func TestSymbolNames(t *testing.T) {
	privtest.Require(t)
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	at := map[string][]uint64{} // name [module] -> its addresses (a name may be given twice)
	var probe []uint64
	sc := bufio.NewScanner(f)
	for n := 0; sc.Scan(); {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 || !strings.Contains("tTwW", fields[1]) {
			continue // code symbols only, as procfs takes them
		}
		a, err := strconv.ParseUint(fields[0], 16, 64)
		if err != nil || a == 0 {
			continue
		}
		name := fields[2]
		if len(fields) > 3 {
			name += " " + fields[3]
		}
		at[name] = append(at[name], a)
		if n++; n%50 == 0 && fields[1] != "w" && fields[1] != "W" {
			probe = append(probe, a, a+1, a+7)
		}
	}
	if len(probe) < 300 {
		t.Fatalf("%d addresses sampled from kallsyms (hidden? not root?)", len(probe))
	}
	got, err := SymbolNames(probe)
	if err != nil {
		if features.HaveProgramHelper(ebpf.SocketFilter, bpf.FnSnprintf) != nil {
			t.Skipf("no bpf_snprintf (5.13+) here: %v", err)
		}
		t.Fatal(err)
	}
	want, _, err := procfs.KernelFunctions(context.Background(), probe)
	if err != nil {
		t.Fatal(err)
	}
	same, aliases := 0, 0
	for _, a := range probe {
		switch {
		case got[a] == want[a]:
			same++
		case slices.ContainsFunc(at[got[a]], func(x uint64) bool { return slices.Contains(at[want[a]], x) }):
			aliases++
		default:
			t.Errorf("%#x: %q from the kernel, %q from kallsyms", a, got[a], want[a])
		}
	}
	t.Logf("%d addresses: %d named alike, %d by another name of the same address", len(probe), same, aliases)
}
