package lazy

import "testing"

func TestRegexpCompilesOnceOnFirstUse(t *testing.T) {
	bad := Regexp(`(`) // not compiled yet: no panic here
	re := Regexp(`^a+$`)
	if first, second := re(), re(); first != second || !first.MatchString("aaa") || first.MatchString("b") {
		t.Errorf("%p %p", first, second)
	}
	defer func() {
		if recover() == nil {
			t.Error("a bad pattern compiled")
		}
	}()
	bad()
}
