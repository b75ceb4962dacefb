package usage

import (
	"errors"
	"fmt"
	"testing"
)

func TestErrorIsTyped(t *testing.T) {
	var ue *Error
	if !errors.As(fmt.Errorf("wrapped: %w", Errorf("x %d", 1)), &ue) || ue.Error() != "x 1" {
		t.Error("Errorf")
	}
}
