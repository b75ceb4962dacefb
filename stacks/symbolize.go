package stacks

import (
	"fmt"
	"sort"
	"strings"

	"github.com/tracekit/tracekit/symbols"
)

// symbols reads the file's symbols the first time a report needs them.
func (f *file) symbols() []symbols.Symbol {
	if !f.named {
		f.named, f.syms = true, symbols.Of(f.elf)
	}
	return f.syms
}

// namer names user addresses by a process's mappings and its files'
// symbols: what a report needs of process tracking, and all that
// filter's usym() needs (UserSymbols).
type namer struct {
	short bool              // --no-params: names without parameters
	names map[string]string // demangled names by symbol
}

// symbolize names a user address of a process by what the run recorded
// of it (namer.name).
func (ps *processes) symbolize(pid uint32, addr uint64, ret bool) string {
	p := ps.procs[pid]
	if p == nil {
		return "[unknown]"
	}
	return ps.name(p.maps, addr, ret)
}

// name names a user address of a process whose executable mappings are
// maps: "function", or "file+0xADDR" past every symbol's end, or
// "[unknown]" outside every mapped file. ret: the address is a return
// address (every frame but the sampled one and the one a signal
// interrupted).
func (n *namer) name(maps []procMapping, addr uint64, ret bool) string {
	for _, m := range maps {
		if addr < m.Start || addr >= m.End {
			continue
		}
		v := addr - m.bias
		// A return address is named by the call before it, as perf
		// names callers: after a call of a function that never returns
		// (exit, abort, a throw) it is the next function's first byte.
		look := v
		if ret {
			look = v - 1
		}
		syms := m.file.symbols()
		in := func(i int, v uint64) bool {
			return i >= 0 && (v >= syms[i].Value && v < syms[i].Value+syms[i].Size || syms[i].Size == 0 && v == syms[i].Value)
		}
		i := sort.Search(len(syms), func(i int) bool { return syms[i].Value > look }) - 1
		// A signal handler returns to the trampoline's first byte: the
		// address itself is looked at where the call's is not also
		// the return address's function.
		if ret && !in(i, v) && m.file.isSigreturn(v) {
			return "__restore_rt"
		}
		if in(i, look) {
			return n.demangled(syms[i].Name)
		}
		if !ret && m.file.isSigreturn(v) {
			return "__restore_rt"
		}
		return fmt.Sprintf("%s+0x%x", m.file.name, v)
	}
	return "[unknown]"
}

// demangled is demangle's name for a symbol, remembered: a report names
// the same frames again and again.
func (n *namer) demangled(name string) string {
	if d, ok := n.names[name]; ok {
		return d
	}
	if n.names == nil {
		n.names = map[string]string{}
	}
	d := symbols.Demangle(name, n.short)
	if base, ok := strings.CutSuffix(name, "@plt"); ok {
		d = symbols.Demangle(base, n.short) + "@plt"
	}
	n.names[name] = d
	return d
}

func (ps *processes) comm(pid uint32) string {
	if p := ps.procs[pid]; p != nil && p.comm != "" {
		return p.comm
	}
	return "?"
}
