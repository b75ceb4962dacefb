package perfevent

import (
	"os"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/tracefs"
)

func TestPMUBits(t *testing.T) {
	dir := t.TempDir()
	for text, want := range map[string][2]uint{"config:0\n": {0, 1}, "config:32-63\n": {32, 32}, "config:5-7": {5, 3}} {
		p := dir + "/f"
		if err := writeFile(p, text); err != nil {
			t.Fatal(err)
		}
		shift, width, err := pmuBits(p)
		if err != nil || shift != want[0] || width != want[1] {
			t.Errorf("%q: %d %d %v", text, shift, width, err)
		}
	}
	for _, bad := range []string{"config1:0", "config:x", "config:9-3", ""} {
		p := dir + "/f"
		writeFile(p, bad)
		if _, _, err := pmuBits(p); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestParseCPUList(t *testing.T) {
	got, err := parseCPUList("0-3,5,7-8")
	if err != nil || len(got) != 7 || got[4] != 5 || got[6] != 8 {
		t.Errorf("%v %v", got, err)
	}
	for _, bad := range []string{"", "a", "3-1", "-1", "0-"} {
		if _, err := parseCPUList(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func writeFile(path, text string) error { return os.WriteFile(path, []byte(text), 0o644) }

// A probe guarded by a USDT semaphore is refused, in one line that says
// why, where uprobe_events takes no semaphore offset (before 4.20), and
// that is asked only of such probes.
func TestRefCtrRefused(t *testing.T) {
	guarded := tracefs.Probe{Type: tracefs.Uprobe, Path: "/bin/fx", Offset: 0x1130, RefCtrOffset: 0x4010}
	old := tracefs.RefCtrIn("uprobe_events\t\t- Create/append/... probe: <path>:<offset>[%return]\n")
	now := tracefs.RefCtrIn("  place (uprobe): <path>:<offset>[%return][(ref_ctr_offset)]\n")
	if old || !now {
		t.Fatalf("RefCtrIn: old README %v, new %v", old, now)
	}
	err := checkRefCtr(guarded, func() bool { return old })
	if err == nil || !strings.Contains(err.Error(), "guarded by a semaphore, and this kernel's uprobe_events takes no semaphore offset") || strings.Contains(err.Error(), "\n") {
		t.Errorf("before 4.20: %v", err)
	}
	if err := checkRefCtr(guarded, func() bool { return now }); err != nil {
		t.Errorf("4.20+: %v", err)
	}
	plain := guarded
	plain.RefCtrOffset = 0
	if err := checkRefCtr(plain, func() bool { t.Error("asked without a semaphore"); return false }); err != nil {
		t.Errorf("no semaphore: %v", err)
	}
}
