package tracefs

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readFormat(t *testing.T, name string) *Format {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	f, err := ParseFormat(string(b))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return f
}

func TestParseFormatFields(t *testing.T) {
	for _, tc := range []struct {
		file  string
		name  string
		id    uint64
		field Field
		own   []string
	}{
		{"sys_enter_write.6.18.format", "sys_enter_write", 840,
			Field{Name: "count", Type: "size_t", Offset: 32, Size: 8},
			[]string{"__syscall_nr", "fd", "buf", "count"}},
		{"sys_enter_write.6.18-next.format", "sys_enter_write", 758,
			Field{Name: "__buf_val", Type: "char[]", Offset: 40, Size: 4, DataLoc: true},
			[]string{"__syscall_nr", "fd", "buf", "count", "__buf_val"}},
		// A 2.6-era layout: common_padding pushes every field along.
		{"sched_kthread_stop.2.6.format", "sched_kthread_stop", 55,
			Field{Name: "pid", Type: "pid_t", Offset: 28, Size: 4, Signed: true},
			[]string{"comm", "pid"}},
		{"sched_kthread_stop.2.6.format", "sched_kthread_stop", 55,
			Field{Name: "comm", Type: "char[16]", Offset: 12, Size: 16, Signed: true, ArrayLen: 16},
			[]string{"comm", "pid"}},
		{"kfree_skb.6.18.format", "kfree_skb", 2310,
			Field{Name: "reason", Type: "enum skb_drop_reason", Offset: 36, Size: 4},
			[]string{"skbaddr", "location", "rx_sk", "protocol", "reason"}},
		{"block_rq_complete.6.18.format", "block_rq_complete", 2107,
			Field{Name: "cmd", Type: "char[]", Offset: 44, Size: 4, DataLoc: true},
			[]string{"dev", "sector", "nr_sector", "error", "ioprio", "rwbs", "cmd"}},
	} {
		f := readFormat(t, tc.file)
		if f.Name != tc.name || f.ID != tc.id {
			t.Errorf("%s: name, id = %q, %d; want %q, %d", tc.file, f.Name, f.ID, tc.name, tc.id)
		}
		got, ok := f.Field(tc.field.Name)
		if !ok {
			t.Errorf("%s: no field %s", tc.file, tc.field.Name)
			continue
		}
		if got != tc.field {
			t.Errorf("%s: field = %+v, want %+v", tc.file, got, tc.field)
		}
		if own := strings.Join(f.FieldNames(), ","); own != strings.Join(tc.own, ",") {
			t.Errorf("%s: own fields = %s, want %s", tc.file, own, strings.Join(tc.own, ","))
		}
	}
}

func TestOffsetsDifferAcrossKernels(t *testing.T) {
	// The same kind of field sits at different offsets in old and new
	// layouts; nothing may assume where.
	old := readFormat(t, "sched_kthread_stop.2.6.format")
	pad, ok := old.Field("common_padding")
	if !ok || pad.Offset != 8 || !pad.Common {
		t.Fatalf("common_padding = %+v, %v", pad, ok)
	}
	if comm, _ := old.Field("comm"); comm.Offset != 12 {
		t.Errorf("comm offset %d, want 12", comm.Offset)
	}
}

func TestMustFieldListsFields(t *testing.T) {
	f := readFormat(t, "sys_enter_write.6.18.format")
	_, err := f.MustField("size")
	want := `event sys_enter_write has no field "size" (fields: __syscall_nr, fd, buf, count)`
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
}

func TestSymbolicTable(t *testing.T) {
	f := readFormat(t, "kfree_skb.6.18.format")
	reasons := f.Symbolic["reason"]
	if reasons[3] != "NO_SOCKET" || reasons[2] != "NOT_SPECIFIED" || reasons[128] != "MAX" {
		t.Errorf("reasons 2,3,128 = %q %q %q", reasons[2], reasons[3], reasons[128])
	}
	if len(reasons) != 127 {
		t.Errorf("%d reasons, want 127", len(reasons))
	}
	// block_rq_complete's table is keyed by an expression and by enum
	// names: it is not a table of a plain field and must not be invented.
	b := readFormat(t, "block_rq_complete.6.18.format")
	if len(b.Symbolic) != 0 {
		t.Errorf("block_rq_complete symbolic = %v, want none", b.Symbolic)
	}
}

func TestParseFormatRejectsGarbage(t *testing.T) {
	if _, err := ParseFormat("name: x\nID: 1\n"); err == nil {
		t.Error("no error for a format without fields")
	}
	if _, err := ParseFormat("name: x\nID: one\n"); err == nil {
		t.Error("no error for a bad ID")
	}
}

func TestValidateName(t *testing.T) {
	for _, good := range []string{"syscalls", "sys_enter_write", "_x", "kfree_skb", "A9"} {
		if err := ValidateName("event", good); err != nil {
			t.Errorf("%q: %v", good, err)
		}
	}
	for _, bad := range []string{"", "../x", "a/b", "..", "9a", "a b", "a\nb", "a:b", "x*", "é"} {
		if err := ValidateName("event", bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestEventDirRejectsTraversalBeforeTouchingTracefs(t *testing.T) {
	if _, err := EventDir("..", "x"); err == nil || !strings.Contains(err.Error(), "invalid event group name") {
		t.Errorf("err = %v", err)
	}
	if _, err := EventID("syscalls", "../../../etc"); err == nil || !strings.Contains(err.Error(), "invalid event name") {
		t.Errorf("err = %v", err)
	}
}

func TestParseMountinfo(t *testing.T) {
	in := `22 1 0:21 / /sys rw,nosuid - sysfs sysfs rw
42 23 0:13 / /sys/kernel/my\040tracing rw,relatime - tracefs nodev rw
`
	if got := parseMountinfo(bufio.NewScanner(strings.NewReader(in))); got != "/sys/kernel/my tracing" {
		t.Errorf("got %q", got)
	}
	if got := parseMountinfo(bufio.NewScanner(strings.NewReader("22 1 0:21 / /sys rw - sysfs sysfs rw\n"))); got != "" {
		t.Errorf("got %q, want none", got)
	}
}

// A syscall tracepoint declares "int dfd" in an 8-byte unsigned slot: the
// value is the low 4 bytes, signed (AT_FDCWD is -100), as the C type says.
func TestFieldValueFollowsTheCType(t *testing.T) {
	f := readFormat(t, "sys_enter_openat.6.18.format")
	for _, tc := range []struct {
		field  string
		size   int
		signed bool
	}{
		{"dfd", 4, true},
		{"flags", 4, true},
		{"mode", 2, false}, // umode_t
		{"filename", 8, false},
		{"__syscall_nr", 4, true},
	} {
		fl, _ := f.Field(tc.field)
		if size, signed := fl.Value(); size != tc.size || signed != tc.signed {
			t.Errorf("%s (%s, size %d): value %d bytes signed=%v, want %d %v", tc.field, fl.Type, fl.Size, size, signed, tc.size, tc.signed)
		}
	}
	if fl, _ := f.Field("filename"); !fl.IsCharPointer() || !fl.IsPointer() {
		t.Errorf("filename (%s) is a char pointer", fl.Type)
	}
	// Where the format's size is the type's, nothing changes; an unknown
	// type keeps the format's size and sign.
	w := readFormat(t, "sched_switch.6.18.format")
	for _, name := range []string{"prev_pid", "prev_state", "prev_comm"} {
		fl, _ := w.Field(name)
		if size, signed := fl.Value(); size != fl.Size || signed != fl.Signed {
			t.Errorf("%s: %d %v, want the format's %d %v", name, size, signed, fl.Size, fl.Signed)
		}
	}
}
