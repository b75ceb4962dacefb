package perfevent

import (
	"os"
	"testing"
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
