package crash

import (
	"regexp"
	"testing"
)

func index(s []int, i int) int { return s[i] }

func TestErrorNamesThePanickingFrame(t *testing.T) {
	var err error
	func() {
		defer func() {
			if p := recover(); p != nil {
				err = Error("internal error in a test", p)
			}
		}()
		index(nil, 0)
	}()
	want := regexp.MustCompile(`^internal error in a test: runtime error: index out of range \[0\] with length 0 \(at crash\.index crash_test\.go:8\)$`)
	if err == nil || !want.MatchString(err.Error()) {
		t.Errorf("got %v, want %s", err, want)
	}
}

func TestErrorOfAnExplicitPanic(t *testing.T) {
	var err error
	func() {
		defer func() {
			err = Error("internal error", recover())
		}()
		panic("boom")
	}()
	want := regexp.MustCompile(`^internal error: boom \(at crash\.TestErrorOfAnExplicitPanic\.func1 crash_test\.go:32\)$`)
	if err == nil || !want.MatchString(err.Error()) {
		t.Errorf("got %v, want %s", err, want)
	}
}
