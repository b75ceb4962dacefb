package uprobe

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// stapsdtNotes builds a .note.stapsdt section of n notes over a few
// probes, each site with its own location and the same argument specs.
func stapsdtNotes(n int) []byte {
	le := binary.LittleEndian
	var b []byte
	for i := 0; i < n; i++ {
		desc := le.AppendUint64(nil, 0x2000+uint64(i%0x3d00)) // in /bin/true's text
		desc = le.AppendUint64(desc, 0)
		desc = le.AppendUint64(desc, 0)
		desc = append(desc, fmt.Sprintf("tk\x00probe%d\x00-4@%%edi 8@%%rsi\x00", i%7)...)
		b = le.AppendUint32(b, 8)
		b = le.AppendUint32(b, uint32(len(desc)))
		b = le.AppendUint32(b, 3)
		b = append(b, "stapsdt\x00"...)
		b = append(b, desc...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
	}
	return b
}

// TestNotesBounded: a million notes (590 MB for filter --info once) are
// refused at MaxSites; MaxSites of them cost 72 bytes a site, names kept
// once.
func TestNotesBounded(t *testing.T) {
	if _, err := parseNotes(stapsdtNotes(1_000_000), binary.LittleEndian, 8); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("1000000 USDT sites, more than the %d filter reads", MaxSites)) {
		t.Fatalf("a million notes: %v, want the site limit", err)
	}
	data := stapsdtNotes(MaxSites)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	notes, err := parseNotes(data, binary.LittleEndian, 8)
	runtime.ReadMemStats(&after)
	if err != nil || len(notes) != MaxSites {
		t.Fatalf("%d notes, %v; want %d", len(notes), err, MaxSites)
	}
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("%d notes: %.1f MiB allocated", len(notes), float64(alloc)/(1<<20))
	if alloc > 2*72*MaxSites+1<<20 {
		t.Errorf("%d notes allocated %d bytes: their strings are not shared", len(notes), alloc)
	}
	if notes[0].args != "-4@%edi 8@%rsi" || notes[7].name != "probe0" || notes[3].provider != "tk" {
		t.Errorf("notes read wrong: %+v %+v", notes[0], notes[7])
	}
}
