package tools

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Symbols maps kernel addresses to the nearest preceding symbol, from
// /proc/kallsyms.
type Symbols struct {
	syms []ksym
	// Hidden is true when every address reads as zero (kptr_restrict, or
	// not root): nothing can be symbolized.
	Hidden bool
}

type ksym struct {
	addr   uint64
	name   string
	module string
}

// LoadKallsyms reads /proc/kallsyms.
func LoadKallsyms() (*Symbols, error) {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return nil, fmt.Errorf("read kernel symbols: %w", err)
	}
	defer f.Close()
	return ParseKallsyms(f)
}

// ParseKallsyms parses kallsyms text: "ffffffff81000000 T _stext" with an
// optional "\t[module]". The file is not always sorted (modules), so the
// symbols are sorted here.
func ParseKallsyms(r io.Reader) (*Symbols, error) {
	s := &Symbols{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	nonzero := false
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 3 {
			continue
		}
		addr, err := strconv.ParseUint(fields[0], 16, 64)
		if err != nil {
			continue
		}
		if addr != 0 {
			nonzero = true
		}
		switch fields[1] {
		case "t", "T", "w", "W":
		default:
			continue // only code: data symbols would shadow functions
		}
		sym := ksym{addr: addr, name: fields[2]}
		if len(fields) > 3 {
			sym.module = strings.Trim(fields[3], "[]")
		}
		s.syms = append(s.syms, sym)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read kernel symbols: %w", err)
	}
	s.Hidden = !nonzero
	sort.SliceStable(s.syms, func(i, j int) bool { return s.syms[i].addr < s.syms[j].addr })
	return s, nil
}

// Symbolize returns "name+0xoff" (with " [module]" for modules), or "" when
// addr is below the first symbol or the addresses are hidden.
func (s *Symbols) Symbolize(addr uint64) string {
	if s == nil || s.Hidden {
		return ""
	}
	i := sort.Search(len(s.syms), func(i int) bool { return s.syms[i].addr > addr }) - 1
	if i < 0 {
		return ""
	}
	sym := s.syms[i]
	out := fmt.Sprintf("%s+0x%x", sym.name, addr-sym.addr)
	if sym.module != "" {
		out += " [" + sym.module + "]"
	}
	return out
}

// Has reports whether a function of that name is in the symbol table.
func (s *Symbols) Has(name string) bool {
	for _, sym := range s.syms {
		if sym.name == name {
			return true
		}
	}
	return false
}
