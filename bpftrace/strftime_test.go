package bpftrace

import (
	"testing"
	"time"
)

// TestStrftimeConversions: the conversions of strftime(3) scripts use,
// as glibc writes them in the C locale.
func TestStrftimeConversions(t *testing.T) {
	at := time.Date(2026, time.March, 5, 14, 7, 9, 123456789, time.FixedZone("CET", 3600))
	for format, want := range map[string]string{
		"%Y-%m-%d %H:%M:%S": "2026-03-05 14:07:09",
		"%T %F %D %R":       "14:07:09 2026-03-05 03/05/26 14:07",
		"%a %A %b %h %B":    "Thu Thursday Mar Mar March",
		"%e|%j|%y|%I %p":    " 5|064|26|02 PM",
		"%Z %z %s":          "CET +0100 1772716029",
		"100%% %q":          "100% %q",
		"a%nb%tc":           "a\nb\tc",
	} {
		if got := strftime(format, at); got != want {
			t.Errorf("strftime(%q) = %q, want %q", format, got, want)
		}
	}
}
