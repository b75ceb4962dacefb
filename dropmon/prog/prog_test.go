package prog

import (
	"fmt"
	"testing"

	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/internal/loadtest"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/kbtf"
	"github.com/tracekit/tracekit/kernel"
	"github.com/tracekit/tracekit/tracefs"
)

func format(t *testing.T, name string) *tracefs.Format { return tooltest.Format(t, name) }

func TestLayouts(t *testing.T) {
	for _, tc := range []struct {
		file                  string
		location, reason, pro int // reason -1: none
		locSize               int
		reason3               string
	}{
		{"kfree_skb.6.18.format", 16, 36, 32, 8, "NO_SOCKET"},
		{"kfree_skb.5.19.format", 16, 28, 24, 8, "PKT_TOO_SMALL"}, // 1-based table then
		{"kfree_skb.32bit.format", 12, 20, 16, 4, "NO_SOCKET"},
		{"kfree_skb.pre-5.17.format", 16, -1, 24, 8, ""},
	} {
		f := format(t, tc.file)
		l, err := LayoutOf(f, false)
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if l.Location.Offset != tc.location || l.Location.Size != tc.locSize || l.Protocol.Offset != tc.pro {
			t.Errorf("%s: location %+v protocol %+v", tc.file, l.Location, l.Protocol)
		}
		if tc.reason < 0 {
			if l.Reason != nil {
				t.Errorf("%s: reason %+v on a kernel without one", tc.file, l.Reason)
			}
		} else if l.Reason == nil || l.Reason.Offset != tc.reason {
			t.Errorf("%s: reason %+v, want offset %d", tc.file, l.Reason, tc.reason)
		}
		if got := f.Symbolic["reason"][3]; got != tc.reason3 {
			t.Errorf("%s: reason 3 = %q, want %q", tc.file, got, tc.reason3)
		}
		if l, _ := LayoutOf(f, true); l.Reason != nil {
			t.Errorf("%s: --no-reason still reads the reason", tc.file)
		}
	}
	if _, err := LayoutOf(format(t, "sys_enter_write.6.18.format"), false); err == nil {
		t.Error("a format without location was accepted")
	}
}

// variants are the program configurations the goldens pin and the load
// test proves: one line per variant.
func variants(t *testing.T) map[string]Config {
	now, _ := LayoutOf(format(t, "kfree_skb.6.18.format"), false)
	old, _ := LayoutOf(format(t, "kfree_skb.pre-5.17.format"), false)
	return map[string]Config{
		"prog_reason":    {Layout: now, Protocol: -1},
		"prog_no_reason": {Layout: old, Protocol: -1},
		"prog_stacks":    {Layout: now, Protocol: -1, Stacks: true},
		"prog_protocol":  {Layout: now, Protocol: 0x0800},
		"prog_32bit":     {Layout: mustLayout(t, "kfree_skb.32bit.format"), Protocol: 0x86dd},
		// The arguments' programs, for a kernel with skb->protocol at 180.
		"prog_raw":          {Layout: now, Protocol: -1, Hook: hook.Raw},
		"prog_raw_protocol": {Layout: now, Protocol: 0x0800, Hook: hook.Raw, ProtoOff: 180, ProbeRead: bpf.FnProbeReadKernel},
		"prog_btf_protocol": {Layout: old, Protocol: 0x86dd, Hook: hook.BTF, ProtoOff: 180, Stacks: true},
	}
}

// hostLayout is kfree_skb's Layout on this kernel, from its format file.
func hostLayout(t *testing.T) Layout {
	t.Helper()
	f, err := tracefs.ReadFormat("skb", "kfree_skb")
	if err != nil {
		t.Fatal(err)
	}
	l, err := LayoutOf(f, false)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// argsVariants are the raw and BTF tracepoint programs as this kernel
// needs them (a BTF program is checked against kfree_skb's own arguments
// and sk_buff's Layout when it loads), for every hook the kernel has.
func argsVariants(t *testing.T) map[string]Config {
	l := hostLayout(t)
	off, err := kbtf.MemberOffset("sk_buff", "protocol")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]Config{}
	for _, h := range []hook.Hook{hook.Raw, hook.BTF} {
		if h == hook.Raw && !hook.HaveRawTracepoints() || h == hook.BTF && !hook.HaveBTFTracepoint("kfree_skb") {
			continue
		}
		for _, stacks := range []bool{false, true} {
			out[fmt.Sprintf("%s stacks=%v", h, stacks)] = Config{Layout: l, Protocol: 0x0800, Stacks: stacks, Hook: h, ProtoOff: off, ProbeRead: kernel.Readers().Kernel}
		}
	}
	return out
}

func TestProgramGoldens(t *testing.T) {
	for name, cfg := range variants(t) {
		insns, err := Program(cfg)
		if err != nil {
			t.Fatal(err)
		}
		golden.Check(t, name, fmt.Sprintf("%v", insns))
	}
}

// TestProgramsLoad hands every variant, with its maps, to the verifier:
// the record's programs as pinned, the arguments' ones as this kernel
// needs them.
func TestProgramsLoad(t *testing.T) {
	all := map[string]Config{}
	for name, cfg := range variants(t) {
		if cfg.Hook == "" {
			all[name] = cfg
		}
	}
	privtest.Require(t)
	if !privtest.NoBTF(t) {
		for name, cfg := range argsVariants(t) {
			all[name] = cfg
		}
	}
	loadtest.Variants(t, all, Collection)
}

func mustLayout(t *testing.T, file string) Layout {
	l, err := LayoutOf(format(t, file), false)
	if err != nil {
		t.Fatal(err)
	}
	return l
}
