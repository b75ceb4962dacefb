package tracefs

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestNearEvents: a tracepoint misspelt gets its group's nearest events,
// a group misspelt the nearest groups, a name far from all none.
func TestNearEvents(t *testing.T) {
	root := t.TempDir()
	for _, ev := range []string{
		"syscalls/sys_enter_openat", "syscalls/sys_enter_open", "syscalls/sys_exit_openat",
		"syscalls/sys_enter_read", "sched/sched_switch", "sched/sched_wakeup", "net/netif_receive_skb",
	} {
		if err := os.MkdirAll(filepath.Join(root, "events", ev), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		group, name string
		want        []string
	}{
		{"syscalls", "sys_enter_opnat", []string{"syscalls:sys_enter_openat"}}, // not sys_enter_open, 3 away
		{"syscalls", "sys_enter_reed", []string{"syscalls:sys_enter_read"}},
		{"sched", "switch", []string{"sched:sched_switch"}}, // a part of the name
		{"shced", "sched_switch", []string{"sched:*"}},
		{"syscalls", "zzzzzz", nil},
		{"nosuchgroup", "x", nil},
	} {
		if got := nearEvents(root, tc.group, tc.name); !slices.Equal(got, tc.want) {
			t.Errorf("%s:%s: %q, want %q", tc.group, tc.name, got, tc.want)
		}
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b  string
		limit int
		want  int
	}{
		{"kitten", "sitting", 5, 3}, {"", "abc", 5, 3}, {"abc", "abc", 1, 0},
		{"sys_enter_opnat", "sys_enter_openat", 5, 1}, {"abcdef", "uvwxyz", 2, 3}, {"a", "abcdefgh", 3, 4},
	} {
		if got := editDistance(tc.a, tc.b, tc.limit); got != tc.want {
			t.Errorf("editDistance(%q, %q, %d) = %d, want %d", tc.a, tc.b, tc.limit, got, tc.want)
		}
	}
}
