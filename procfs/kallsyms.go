package procfs

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
)

// Symbols maps kernel addresses to the nearest preceding symbol, from
// /proc/kallsyms.
type Symbols struct {
	syms []ksym
	// Hidden is true when every address reads as zero (kptr_restrict, or
	// not root): nothing can be symbolized.
	Hidden bool
	// lazy: known holds the addresses Resolve has named ("" below every
	// symbol); nothing else of kallsyms is kept.
	lazy  bool
	known map[uint64]string
	file  *os.File // lazy: /proc/kallsyms, open since LazyKallsyms
}

// LazyKallsyms is Symbols that reads /proc/kallsyms only when Resolve
// names addresses, in one pass that keeps only those: a tool that names a
// few addresses at report time needs neither the tens of milliseconds of
// reading all 150,000 symbols at start nor the memory they hold. Whether
// addresses are hidden is known at once, from the first code symbol.
//
// The file stays open and is read again from its start: the kernel decides
// whether a reader sees addresses when it opens the file, so a run that
// has since dropped its capabilities (CAP_SYSLOG) still names them.
func LazyKallsyms() (*Symbols, error) {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return nil, fmt.Errorf("read kernel symbols: %w", err)
	}
	s := &Symbols{lazy: true, known: map[uint64]string{}, Hidden: true, file: f}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if addr, code, _, _, ok := kallsymsLine(sc.Bytes()); ok && code {
			s.Hidden = addr == 0
			break
		}
	}
	if err := sc.Err(); err != nil {
		f.Close()
		return nil, fmt.Errorf("read kernel symbols: %w", err)
	}
	return s, nil
}

// Close closes lazy Symbols' file.
func (s *Symbols) Close() error {
	if s == nil || s.file == nil {
		return nil
	}
	return s.file.Close()
}

// Resolve names the addresses Symbolize will be asked for, for lazy
// Symbols (one pass over /proc/kallsyms for those not named yet); other
// Symbols have every name already.
func (s *Symbols) Resolve(addrs []uint64) error {
	if s == nil || !s.lazy || s.Hidden {
		return nil
	}
	var need []uint64
	for _, a := range addrs {
		if _, ok := s.known[a]; !ok {
			need = append(need, a)
		}
	}
	if len(need) == 0 {
		return nil
	}
	if _, err := s.file.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("read kernel symbols: %w", err)
	}
	found, _, err := nearestSymbols(s.file, need)
	if err != nil {
		return err
	}
	for _, a := range need {
		s.known[a] = ""
		if sym, ok := found[a]; ok {
			s.known[a] = sym.format(a)
		}
	}
	return nil
}

func (sym ksym) format(addr uint64) string {
	out := fmt.Sprintf("%s+0x%x", sym.name, addr-sym.addr)
	if sym.module != "" {
		out += " [" + sym.module + "]"
	}
	return out
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
		addr, code, name, mod, ok := kallsymsLine(sc.Bytes())
		if !ok {
			continue
		}
		if addr != 0 {
			nonzero = true
		}
		if !code {
			continue // only code: data symbols would shadow functions
		}
		s.syms = append(s.syms, ksym{addr: addr, name: string(name), module: string(mod)})
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
// Lazy Symbols name only the addresses given to Resolve.
func (s *Symbols) Symbolize(addr uint64) string {
	if s == nil || s.Hidden {
		return ""
	}
	if s.lazy {
		return s.known[addr]
	}
	i := sort.Search(len(s.syms), func(i int) bool { return s.syms[i].addr > addr }) - 1
	if i < 0 {
		return ""
	}
	return s.syms[i].format(addr)
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

// KernelFunctions names kernel code addresses by their functions ("name",
// or "name [module]"), in one pass over /proc/kallsyms that keeps nothing
// else: a tool that names a few hundred addresses at report time need not
// hold 150,000 symbols (and their garbage) for the whole run. An address
// below every symbol, or every address when kallsyms hides them, is left
// out of the map; hidden reports the latter.
//
// A done ctx ends the pass at its next read with ctx's error: on a starved
// machine the pass takes seconds (10 to 20 in a 1-CPU guest beside busy
// processes), and a run that was asked to end need not wait for it.
func KernelFunctions(ctx context.Context, addrs []uint64) (names map[uint64]string, hidden bool, err error) {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return nil, false, fmt.Errorf("read kernel symbols: %w", err)
	}
	defer f.Close()
	return kernelFunctions(ctxReader{ctx, f}, addrs)
}

// ctxReader reads r until ctx is done.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(b)
}

func kernelFunctions(r io.Reader, addrs []uint64) (map[uint64]string, bool, error) {
	found, hidden, err := nearestSymbols(r, addrs)
	if err != nil || hidden {
		return map[uint64]string{}, hidden, err
	}
	out := make(map[uint64]string, len(found))
	for a, sym := range found {
		out[a] = sym.name
		if sym.module != "" {
			out[a] += " [" + sym.module + "]"
		}
	}
	return out, false, nil
}

// nearestSymbols finds, in one pass over kallsyms text, the code symbol at
// or below each address (of equal ones, the last listed, as Symbolize
// picks).
//
// A symbol is kept only at the lowest target at or above it (slot j); the
// answer for target k is then the highest of slots 0..k, taken in one
// sweep at the end. The pass costs a binary search per symbol whatever
// the order of the text and however many targets: updating every target
// above each symbol, as it once did, made sorted text (which kallsyms
// is) cost symbols times targets, 25 s in a 1-CPU guest of 7.2 for 5,600
// addresses.
func nearestSymbols(r io.Reader, addrs []uint64) (map[uint64]ksym, bool, error) {
	targets := append([]uint64(nil), addrs...)
	slices.Sort(targets)
	type slot struct {
		addr      uint64
		name, mod []byte // reused: a slot is overwritten as the text climbs
		found     bool
	}
	slots := make([]slot, len(targets))
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 256*1024), 1024*1024)
	nonzero := false
	for sc.Scan() {
		addr, code, fn, mod, ok := kallsymsLine(sc.Bytes())
		if !ok {
			continue
		}
		if addr != 0 {
			nonzero = true
		}
		if !code {
			continue
		}
		j, _ := slices.BinarySearch(targets, addr)
		if j == len(targets) {
			continue
		}
		if s := &slots[j]; !s.found || addr >= s.addr {
			s.addr, s.found = addr, true
			s.name = append(s.name[:0], fn...)
			s.mod = append(s.mod[:0], mod...)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, false, fmt.Errorf("read kernel symbols: %w", err)
	}
	out := map[uint64]ksym{}
	if !nonzero {
		return out, true, nil
	}
	best := -1
	for k, t := range targets {
		if slots[k].found && (best < 0 || slots[k].addr >= slots[best].addr) {
			best = k
		}
		if best >= 0 {
			if _, dup := out[t]; !dup {
				out[t] = ksym{addr: slots[best].addr, name: string(slots[best].name), module: string(slots[best].mod)}
			}
		}
	}
	return out, false, nil
}

// kallsymsLine takes apart "ffffffff81000000 T _stext" or "... t
// name\t[module]" without allocating (the file has ~150k lines): the
// address, whether it is code (t, T, w, W, and not a mapping symbol), the
// name and the module.
func kallsymsLine(line []byte) (addr uint64, code bool, name, module []byte, ok bool) {
	sp := bytes.IndexByte(line, ' ')
	if sp < 0 || sp+3 > len(line) || line[sp+2] != ' ' {
		return 0, false, nil, nil, false
	}
	if addr, ok = parseHex(line[:sp]); !ok {
		return 0, false, nil, nil, false
	}
	switch line[sp+1] {
	case 't', 'T', 'w', 'W':
		code = true
	}
	name, module, _ = bytes.Cut(line[sp+3:], []byte("\t"))
	name = bytes.TrimSpace(name)
	if bytes.HasPrefix(name, []byte("$")) || bytes.HasPrefix(name, []byte(".L")) {
		// A mapping symbol (ARM's $a, $x, $d) or a local label (riscv64's
		// .L0), which modules' symbols list and no function is: the
		// kernel's own lookups skip them (is_mapping_symbol).
		code = false
	}
	return addr, code, name, bytes.Trim(bytes.TrimSpace(module), "[]"), true
}

func parseHex(b []byte) (uint64, bool) {
	if len(b) == 0 || len(b) > 16 {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		case c >= 'A' && c <= 'F':
			c -= 'A' - 10
		default:
			return 0, false
		}
		v = v<<4 | uint64(c)
	}
	return v, true
}

// TracerFrame reports whether a symbolized kernel frame ("name+0xoff",
// maybe " [module]") is the tracer's own, not the traced code's: a BPF
// program (bpf_prog_TAG_NAME in [bpf]), its trampoline, or the way a raw
// or BTF tracepoint calls it (__traceiter_EVENT, __bpf_trace_EVENT,
// bpf_trace_runN, __bpf_trace_run). A stack taken inside such a program
// (bpf_get_stackid on a raw tracepoint) starts with them.
func TracerFrame(frame string) bool {
	name, _, _ := strings.Cut(frame, "+")
	name, _, _ = strings.Cut(name, " ")
	for _, p := range []string{"bpf_prog_", "bpf_trampoline_", "__traceiter_", "__bpf_trace_", "bpf_trace_run", "__bpf_prog_enter", "__bpf_prog_exit"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// TrimTracer drops a kernel stack's leading tracer frames (innermost
// first, see TracerFrame); a stack of nothing else is kept whole.
func TrimTracer(frames []string) []string {
	for i, f := range frames {
		if !TracerFrame(f) {
			return frames[i:]
		}
	}
	return frames
}

// KernelAddress is the address of the kernel's symbol called name (code
// or data, the first of that name), in one pass over /proc/kallsyms;
// found is false when there is none or the addresses are hidden.
func KernelAddress(name string) (addr uint64, found bool, err error) {
	f, err := os.Open("/proc/kallsyms")
	if err != nil {
		return 0, false, fmt.Errorf("read kernel symbols: %w", err)
	}
	defer f.Close()
	return kernelAddress(f, name)
}

func kernelAddress(r io.Reader, name string) (uint64, bool, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		a, _, n, _, ok := kallsymsLine(sc.Bytes())
		if ok && string(n) == name {
			return a, a != 0, nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, false, fmt.Errorf("read kernel symbols: %w", err)
	}
	return 0, false, nil
}
