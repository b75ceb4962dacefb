package tools

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
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
		// "ffffffff81000000 T _stext" or "... t name\t[module]"; parsed
		// without splitting into fields: the file has ~150k lines, and
		// garbage made here would be collected while the tool traces.
		line := sc.Bytes()
		sp := bytes.IndexByte(line, ' ')
		if sp < 0 || sp+3 > len(line) || line[sp+2] != ' ' {
			continue
		}
		addr, err := strconv.ParseUint(string(line[:sp]), 16, 64)
		if err != nil {
			continue
		}
		if addr != 0 {
			nonzero = true
		}
		switch line[sp+1] {
		case 't', 'T', 'w', 'W':
		default:
			continue // only code: data symbols would shadow functions
		}
		rest := line[sp+3:]
		name, mod, hasMod := bytes.Cut(rest, []byte("\t"))
		sym := ksym{addr: addr, name: string(bytes.TrimSpace(name))}
		if hasMod {
			sym.module = string(bytes.Trim(bytes.TrimSpace(mod), "[]"))
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
