package compile

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/bpftrace/check"
	"github.com/tracekit/tracekit/bpftrace/parse"
	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/tracefs"
)

// toolTargets resolves a tool's attach points as testdataTargets does,
// a tracepoint glob against testdata's formats (sys_enter_exec*).
func toolTargets(ap *parse.AttachPoint) ([]Target, error) {
	if ap.Provider != "tracepoint" || !strings.ContainsAny(ap.Parts[1], "*?") {
		return testdataTargets(ap)
	}
	files, err := filepath.Glob(filepath.Join("testdata", ap.Parts[1]+".6.18.format"))
	if err != nil {
		return nil, err
	}
	var out []Target
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, err
		}
		f, err := tracefs.ParseFormat(string(b))
		if err != nil {
			return nil, err
		}
		out = append(out, Target{Provider: "tracepoint", Group: ap.Parts[0], Name: strings.TrimSuffix(filepath.Base(file), ".6.18.format"), Format: f})
	}
	return out, nil
}

// toolsNotPinned are the tools the goldens cannot compile without a
// kernel, and what they need of it (the tools run, and load, in
// TestDebianTools, on the kernels that have it).
var toolsNotPinned = map[string]string{
	"biosnoop":   "struct request", // the kernel's BTF's, beyond fakeTypes
	"dcsnoop":    "struct nameidata",
	"loads":      "avenrun", // kallsyms's address
	"mdflush":    "struct bio",
	"oomkill":    "struct oom_control",
	"runqlen":    "no member se",
	"tcpaccept":  "no member skc_daddr",
	"tcpconnect": "no member skc_daddr",
	"tcpdrop":    "SKB_DROP_REASON_NOT_SPECIFIED", // the kernel's enumerators
	"tcplife":    "TCP_FIN_WAIT1",
	"tcpretrans": "no member skc_daddr",
	"tcpsynbl":   "no member sk_ack_backlog",
	"undump":     "struct sk_buff",
}

// TestToolGoldens pins the programs of Debian's bpftrace tools
// (/usr/sbin/*.bt, bpftrace 0.17's package, which make test installs),
// each compiled as ours compiles it on a kernel with BTF, from 6.18's
// tracepoint formats (testdata), for x86-64. A tool whose programs need
// more of a kernel than the test's types is in toolsNotPinned, with what
// it needs: the refusal must name it.
func TestToolGoldens(t *testing.T) {
	files, _ := filepath.Glob("/usr/sbin/*.bt")
	if len(files) == 0 {
		if os.Getenv("CI") != "" || os.Getenv("REQUIRE_PRIVILEGED") != "" {
			t.Fatal("no /usr/sbin/*.bt: make test installs Debian's bpftrace, whose tools these are")
		}
		t.Skip("no /usr/sbin/*.bt (Debian's bpftrace is not installed)")
	}
	regs, err := asm.PtRegs("amd64")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range files {
		name := strings.TrimSuffix(filepath.Base(file), ".bt")
		t.Run(name, func(t *testing.T) {
			src, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			prog, err := parse.Parse(file, string(src), []string{"BPFTRACE_HAVE_BTF"})
			if err == nil {
				err = check.Check(file, prog, check.Options{Const: func(name string) bool { _, ok := Macros[name]; return ok }})
			}
			var res *Result
			if err == nil {
				kaddr := func(string) (uint64, bool) { return 0, false }
				res, err = Compile(prog, Options{File: file, Resolve: toolTargets, Readers: newReaders, Regs: regs, CPid: 4242, Start: 1e9,
					Const: func(string) (int64, bool) { return 0, false }, Types: Types(fakeTypes()), Kaddr: kaddr})
			}
			need, unpinned := toolsNotPinned[name]
			switch {
			case err != nil && unpinned && strings.Contains(err.Error(), need):
				t.Skipf("needs %s of a kernel (%v): run and loaded by TestDebianTools", need, err)
			case err != nil:
				t.Fatal(err)
			case unpinned:
				t.Fatalf("compiles now: take it off toolsNotPinned")
			}
			golden.Check(t, "tool-"+name, goldenText(res))
		})
	}
}
