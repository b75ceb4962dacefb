package procfs

import "testing"

func TestParseStat(t *testing.T) {
	for in, want := range map[string]Stat{
		"42 (sh) S 1 42 42 0 -1":             {'S', 1, 42},
		"43 (a) b) (c) Z 42 7 7 0":           {'Z', 42, 7},
		"44 ((sd-pam)) R 2 0 0 0 -1 4194368": {'R', 2, 0},
	} {
		got, err := ParseStat([]byte(in))
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1 (x)", "1 (x) SS 1 1", "1 (x) S one 1", ")"} {
		if _, err := ParseStat([]byte(in)); err == nil {
			t.Errorf("%q: parsed", in)
		}
	}
	if st, err := ReadStat(1); err != nil || !st.Live() {
		t.Errorf("init: %+v, %v", st, err)
	}
}

func FuzzParseStat(f *testing.F) {
	f.Add([]byte("43 (a) b) (c) Z 42 7 7 0"))
	f.Fuzz(func(t *testing.T, b []byte) { ParseStat(b) })
}
