package golden

import "testing"

func TestDiff(t *testing.T) {
	for _, c := range []struct{ want, got, diff string }{
		{"a\nb\nc\nd", "a\nb\nc\nd", ""},
		// One line inserted: one line marked, not every line after it.
		{"a\nb\nc\nd\ne", "a\nb\nX\nc\nd\ne", "@@ want line 2, got line 2\n b\n+X\n c\n"},
		{"a\nb\nc", "a\nc", "@@ want line 1, got line 1\n a\n-b\n c\n"},
		{"a\nb\nc\nd", "a\nB\nc\nD", "@@ want line 1, got line 1\n a\n-b\n+B\n c\n@@ want line 3, got line 3\n c\n-d\n+D\n"},
		{"", "x", "@@ want line 1, got line 1\n-\n+x\n"},
	} {
		if d := Diff(c.want, c.got); d != c.diff {
			t.Errorf("Diff(%q, %q):\n%s\nwant:\n%s", c.want, c.got, d, c.diff)
		}
	}
}
