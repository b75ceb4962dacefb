package kernel

import (
	"fmt"
	"testing"

	"github.com/tracekit/tracekit/internal/golden"
)

// The program SymbolNames loads (TestSymbolNames runs it in the kernel),
// its maps as descriptors 3, 4 and 5.
func TestSymbolProgramGolden(t *testing.T) {
	golden.Check(t, "symbol_program", fmt.Sprintf("%v", symbolProgram(3, 4, 5)))
}
