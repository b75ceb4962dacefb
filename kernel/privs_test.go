package kernel

import "testing"

func TestInitialUserNS(t *testing.T) {
	for _, c := range []struct {
		uidMap string
		want   bool
	}{
		{"         0          0 4294967295\n", true},
		{"0 0 4294967295", true},
		{"         0          0          1\n", false},     // unshare -Ur
		{"         0     100000      65536\n", false},     // a rootless container
		{"0 0 4294967294\n", false},                       // not every uid
		{"0 0 1\n1 1 4294967294\n", false},                // two ranges
		{"", false},                                       // no map written yet
		{"\x00\xff garbage 0 0 4294967295 more\n", false}, // not the kernel's
	} {
		if got := InitialUserNS([]byte(c.uidMap)); got != c.want {
			t.Errorf("InitialUserNS(%q) = %v, want %v", c.uidMap, got, c.want)
		}
	}
}
