package bpftrace

import "testing"

// An address kallsyms does not name (below its first symbol, hidden, a
// frame the lazy pass never saw) prints as its hex, as bpftrace's does;
// it once indexed an empty field list (armv7's kernel stacks).
func TestSymbolOfAnUnknownAddress(t *testing.T) {
	k := &kernelNames{} // no kallsyms: Symbolize names nothing
	if name, off := k.symbol(0xc0de); name != "0xc0de" || off != -1 {
		t.Errorf("symbol(0xc0de) = %q, %d; want 0xc0de, -1", name, off)
	}
}
