package filter

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/filter/compile"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
)

// printed is one --json event of filter.
type printed struct {
	Fields map[string]any `json:"fields"`
}

func printedEvents(t *testing.T, r tooltest.Result) []printed {
	t.Helper()
	var evs []printed
	for _, l := range lines(r.Stdout) {
		var e printed
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		evs = append(evs, e)
	}
	return evs
}

// A socket buffer printed whole from BTF, at a tracepoint whose field is
// cast: its len member is the record's len, and the text, longer than
// its room, is cut with "...".
func TestStructDump(t *testing.T) {
	privtest.Require(t)
	privtest.NeedBTF(t) // struct sk_buff
	const n = 5
	dump := "*((struct sk_buff *)skbaddr)"
	r := filter(t, "--json", "net:netif_receive_skb", "--where", `len == 328 && name == "lo"`, "--fields", "len,"+dump, "-a", "-c", tooltest.UDPSizes(t, fmt.Sprintf("300x%d", n)))
	evs := printedEvents(t, r)
	if r.Status != 0 || len(evs) != n {
		t.Fatalf("exit %d, %d events, want %d: %s", r.Status, len(evs), n, r.Stderr)
	}
	for _, e := range evs {
		text, _ := e.Fields[dump].(string)
		if !strings.HasPrefix(text, "(struct sk_buff){") || !strings.Contains(text, ".len = (unsigned int)328,") {
			t.Errorf("len %v, the structure: %q", e.Fields["len"], text)
		}
		// Whole (5.10's sk_buff: 987 bytes), or cut at its room with "...".
		whole := len(text) < compile.DumpSize-1 && strings.HasSuffix(text, "}")
		cut := len(text) == compile.DumpSize-1 && strings.HasSuffix(text, "...")
		if !whole && !cut {
			t.Errorf("%d bytes ending in %q: want fewer than %d ending in }, or %d ending in ...", len(text), text[max(0, len(text)-20):], compile.DumpSize-1, compile.DumpSize-1)
		}
	}
}

// do_sys_openat2's struct open_how, printed whole beside one of its
// members read through the pointer: the same flags, and a structure short
// enough to end in its own closing brace. As a call (ksnoop's entry judged
// by its return): the structure as the entry saw it, printed for the calls
// that failed, exactly those.
func TestStructDumpKprobe(t *testing.T) {
	privtest.RequireKprobes(t)
	privtest.NeedBTF(t) // the function's arguments and struct sk_buff
	tooltest.ForEachFunctionHook(t, func(t *testing.T) {
		dir := t.TempDir()
		a := dir + "/a"
		openFiles(t, a)
		const n = 3
		r := filter(t, "--json", "kprobe:do_sys_openat2", "--where", fmt.Sprintf(`filename == "%s"`, a), "--fields", "how->flags,*how", "-c", tooltest.Opens(t, "", tooltest.Open{Path: a, Times: n}))
		evs := printedEvents(t, r)
		if r.Status != 0 || len(evs) != n {
			t.Fatalf("exit %d, %d events, want %d: %s", r.Status, len(evs), n, r.Stderr)
		}
		for _, e := range evs {
			text, _ := e.Fields["*how"].(string)
			flags, _ := e.Fields["how->flags"].(float64)
			m := regexp.MustCompile(`^\(struct open_how\)\{\.flags = \(__u64\)(\d+),\}$`).FindStringSubmatch(text)
			if m == nil || m[1] != fmt.Sprint(uint64(flags)) {
				t.Errorf("how->flags %v, *how %q: want (struct open_how){.flags = (__u64)%v,}", flags, text, uint64(flags))
			}
		}
		missing := dir + "/missing"
		const nm = 4
		work := tooltest.Opens(t, "", tooltest.Open{Path: a, Times: n}, tooltest.Open{Path: missing, Times: nm, Missing: true})
		r = filter(t, "--json", "kprobe:do_sys_openat2", "--where", fmt.Sprintf(`ret == -2 && filename ~ "%s/*"`, dir), "--fields", "filename,how->flags,*how,ret", "-c", work)
		evs = printedEvents(t, r)
		if r.Status != 0 || len(evs) != nm {
			t.Fatalf("a call: exit %d, %d events, want %d: %s", r.Status, len(evs), nm, r.Stderr)
		}
		for _, e := range evs {
			text, _ := e.Fields["*how"].(string)
			flags, _ := e.Fields["how->flags"].(float64)
			if e.Fields["filename"] != missing || e.Fields["ret"] != float64(-2) || text != fmt.Sprintf("(struct open_how){.flags = (__u64)%d,}", uint64(flags)) {
				t.Errorf("a call: %v", e.Fields)
			}
		}
	}, "do_sys_openat2")
}
