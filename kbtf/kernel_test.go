package kbtf

import (
	"testing"

	"github.com/tracekit/tracekit/internal/privtest"
)

// sk_buff's protocol is in an anonymous struct group from 5.17 on: found
// either way, at a 2-byte aligned offset past the list pointers.
func TestMemberOffset(t *testing.T) {
	privtest.Require(t)
	off, err := MemberOffset("sk_buff", "protocol")
	if err != nil || off < 16 || off%2 != 0 {
		t.Errorf("sk_buff.protocol at %d (%v)", off, err)
	}
	if _, err := MemberOffset("sk_buff", "no_such_member"); err == nil {
		t.Error("a missing member was found")
	}
}
