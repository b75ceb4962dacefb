package loader

import "testing"

func TestMemlockCharged(t *testing.T) {
	for release, want := range map[string]bool{
		"5.10.0-32-cloud-amd64":    true,
		"4.19.0":                   true,
		"5.11.0":                   false,
		"5.15.0-91-generic":        false,
		"6.18.0-1-cloud-amd64":     false,
		"7.2.13+deb14-cloud-amd64": false,
		"10.0":                     false,
		"":                         true,
		"x.y":                      true,
		"6":                        true,
	} {
		if got := memlockCharged(release); got != want {
			t.Errorf("%q: %v, want %v", release, got, want)
		}
	}
}
