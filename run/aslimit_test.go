package run

import (
	"strings"
	"testing"
)

func TestLimitAddressSpace(t *testing.T) {
	var set int64 = -1
	record := func(n int64) int64 { set = n; return 0 }
	err := limitAddressSpace(800<<20, record)
	if err == nil || !strings.Contains(err.Error(), "the address-space limit (ulimit -v) is 800 MiB: a run needs 1024 MiB") || set != -1 {
		t.Errorf("800 MiB: %v, memory limit %d; want a refusal and no limit set", err, set)
	}
	if err := limitAddressSpace(2<<30, record); err != nil || set != 2<<30-800<<20 {
		t.Errorf("2 GiB: %v, memory limit %d; want none and %d", err, set, 2<<30-800<<20)
	}
}
