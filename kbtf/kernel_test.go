package kbtf

import (
	"errors"
	"testing"

	"github.com/tracekit/tracekit/internal/privtest"
)

// sk_buff's protocol is in an anonymous struct group from 5.17 on: found
// either way, at a 2-byte aligned offset past the list pointers.
func TestMemberOffset(t *testing.T) {
	privtest.Require(t)
	if privtest.NoBTF(t) {
		if _, err := MemberOffset("sk_buff", "protocol"); !errors.Is(err, ErrNoKernelBTF) {
			t.Errorf("without BTF: %v, want ErrNoKernelBTF", err)
		}
		return
	}
	off, err := MemberOffset("sk_buff", "protocol")
	if err != nil || off < 16 || off%2 != 0 {
		t.Errorf("sk_buff.protocol at %d (%v)", off, err)
	}
	if _, err := MemberOffset("sk_buff", "no_such_member"); err == nil {
		t.Error("a missing member was found")
	}
}
