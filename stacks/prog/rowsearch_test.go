package prog

import (
	"fmt"
	"testing"

	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/internal/golden"
)

// TestRowSearchGolden pins the row search's bytecode: a change to it
// shows here as one diff, not in every variant's golden.
func TestRowSearchGolden(t *testing.T) {
	golden.Check(t, "row_search", fmt.Sprintf("%v", rowSearch("search", "rows", "fences", 1<<14-1, 13, bpf.R6, bpf.R7, bpf.R8, -4, "fail")))
}
