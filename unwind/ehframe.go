// Package unwind turns a file's call frame information (.eh_frame, or
// .debug_frame where that is all there is) into the rows an in-kernel
// unwinder walks: for each address range, where the canonical frame address
// (CFA) is, and where the caller's return address and frame pointer were
// saved. The sections come from files the tool does not trust: malformed
// input is an error, never a panic and never an endless loop.
package unwind

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// DWARF register numbers on x86-64 (System V psABI, figure 3.36),
// arm64 (DWARF for the Arm 64-bit Architecture, 4.1: x29 the frame
// pointer, x30 the link register, 31 sp) and riscv64 (the RISC-V ELF
// psABI: x1 ra, x2 sp, x8 s0, the frame pointer).
const (
	RegRBP = 6
	RegRSP = 7
	RegRA  = 16

	RegX29 = 29
	RegX30 = 30
	RegSP  = 31

	RegRVRA = 1
	RegRVSP = 2
	RegRVS0 = 8
)

// Arch is what the rows depend on besides the section: the DWARF numbers
// of the frame pointer and the stack pointer, and how a row becomes a
// rule word (see table.go).
type Arch struct {
	Machine elf.Machine
	FP, SP  uint64
}

// The architectures whose frames the package reads.
var (
	X86_64 = Arch{Machine: elf.EM_X86_64, FP: RegRBP, SP: RegRSP}
	ARM64  = Arch{Machine: elf.EM_AARCH64, FP: RegX29, SP: RegSP}
	// RISCV64's rows take arm64's rule word: the return address in ra
	// until saved, the CFA from sp or s0, ra saved 8 bytes above s0.
	RISCV64 = Arch{Machine: elf.EM_RISCV, FP: RegRVS0, SP: RegRVSP}
)

// ArchOf is the Arch of an ELF machine, false for one the package does
// not read.
func ArchOf(m elf.Machine) (Arch, bool) {
	switch m {
	case elf.EM_X86_64:
		return X86_64, true
	case elf.EM_AARCH64:
		return ARM64, true
	case elf.EM_RISCV:
		return RISCV64, true
	}
	return Arch{}, false
}

func (a Arch) orDefault() Arch {
	if a.Machine == 0 {
		return X86_64
	}
	return a
}

// CFA says how the canonical frame address is computed at an address.
type CFA struct {
	Kind   CFAKind
	Reg    uint64 // CFAReg: the DWARF register
	Offset int64  // CFAReg: added to the register
	// PLTCut is, for CFAPLT, the low four bits of the address from which
	// the entry has pushed its argument (x86-64 lazy binding stubs).
	PLTCut int64
}

// CFAKind is the shape of a CFA rule.
type CFAKind uint8

const (
	CFAUndefined  CFAKind = iota // no rule yet (an FDE without instructions)
	CFAReg                       // register + offset
	CFAPLT                       // the PLT expression: rsp + 8 + ((rip & 15) >= cut) * 8
	CFAExpression                // another DWARF expression (signal frames): not followed
	// CFADeref is *(rbp + Offset): gcc's realigned frame with a dynamic
	// realign argument pointer (DRAP), which keeps the CFA on the stack
	// below the saved rbp (DW_OP_breg6 N; DW_OP_deref).
	CFADeref
)

// Rule says where a register of the caller was saved.
type Rule struct {
	Kind   RuleKind
	Offset int64 // RuleOffset: saved at CFA + Offset
}

// RuleKind is the shape of a register rule.
type RuleKind uint8

const (
	RuleSame      RuleKind = iota // unchanged in the callee (the default for rbp)
	RuleUndefined                 // no value: for the return address, the end of the stack
	RuleOffset                    // saved at CFA + Offset
	RuleOther                     // in another register, or an expression: not followed
	RuleAtRBP                     // saved at rbp + Offset (DW_OP_breg6 N: a DRAP frame's rbp)
)

// Row is the rule in force from PC up to the next row (or the end of its
// FDE). RBP is the frame pointer's rule (x29's on arm64). On arm64 the
// return address's default (RuleSame) is the link register x30, which
// holds it until the function saves it.
type Row struct {
	PC  uint64
	CFA CFA
	RBP Rule
	RA  Rule
	// RASigned: arm64's return address is signed from here
	// (DW_CFA_AARCH64_negate_ra_state toggles it): its pointer
	// authentication code is in its top bits, stripped before use.
	RASigned bool
}

// FDE is one function's (or code range's) rows.
type FDE struct {
	Begin, End uint64
	Rows       []Row
	Signal     bool // the CIE's "S": a signal trampoline
}

// Section is a frame section to parse.
type Section struct {
	Data []byte
	Addr uint64 // the section's virtual address, for pc-relative pointers
	// Debug is set for .debug_frame: CIE ids are 0xffffffff and CIE
	// pointers are section offsets.
	Debug bool
	// Arch: X86_64 when zero.
	Arch Arch
}

// Limits bound the work and the memory one section may cause, whatever
// its size: an entry is read whole into a window of the section, never the
// section itself.
const (
	maxRowsPerFDE = 1 << 14
	maxStates     = 64      // DW_CFA_remember_state depth
	maxEntry      = 1 << 20 // bytes of one CIE or FDE
	maxInitial    = 256     // bytes of a CIE's initial instructions, run for each of its FDEs
	maxCIEs       = 4096
	windowSize    = 64 << 10
)

var errTruncated = errors.New("truncated")

// LimitError is a section refused for a limit of the parse (its size, not
// a fault in it).
type LimitError struct{ What string }

func (e *LimitError) Error() string { return e.What }

func limitf(format string, args ...any) error { return &LimitError{fmt.Sprintf(format, args...)} }

type cie struct {
	codeAlign  uint64
	dataAlign  int64
	raReg      uint64
	fdeEnc     byte
	signal     bool
	hasAugData bool
	initial    []byte
	addrSize   int
}

// Parse reads every FDE of the section, with its rows.
func Parse(s Section) ([]FDE, error) {
	var fdes []FDE
	err := walk(bytes.NewReader(s.Data), int64(len(s.Data)), s.Addr, s.Debug, s.Arch.orDefault(), func(f FDE) error {
		if f.End > f.Begin {
			f.Rows = slices.Clone(f.Rows)
			fdes = append(fdes, f)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return fdes, nil
}

// window holds the part of a section last read from src: an entry at a
// time, read ahead by windowSize.
type window struct {
	src  io.ReaderAt
	size uint64
	buf  []byte
	base uint64
}

// at returns the n bytes at off. They stay valid until the next call.
func (w *window) at(off, n uint64) ([]byte, error) {
	if off >= w.base && off-w.base <= uint64(len(w.buf)) && n <= uint64(len(w.buf))-(off-w.base) {
		return w.buf[off-w.base : off-w.base+n], nil
	}
	if off > w.size || n > w.size-off {
		return nil, errTruncated
	}
	want := min(max(n, windowSize), w.size-off)
	if uint64(cap(w.buf)) < want {
		w.buf = make([]byte, want)
	}
	w.buf = w.buf[:want]
	got, err := w.src.ReadAt(w.buf, int64(off))
	if uint64(got) < want {
		w.buf = w.buf[:0]
		if err == nil || err == io.EOF {
			err = errTruncated
		}
		return nil, err
	}
	w.base = off
	return w.buf[:n], nil
}

// walk reads the section's entries in order and calls fn with each FDE.
// The FDE's rows are valid until fn returns.
func walk(src io.ReaderAt, size int64, addr uint64, debug bool, arch Arch, fn func(FDE) error) error {
	k, err := newWalker(src, size, addr, debug, arch)
	if err != nil {
		return err
	}
	for off := uint64(0); off < k.w.size; {
		next, f, isFDE, err := k.entry(off, true)
		if err != nil || next == 0 {
			return err
		}
		off = next
		if isFDE {
			if err := fn(f); err != nil {
				return err
			}
		}
	}
	return nil
}

// walker reads a section's entries, in order or where an FDE is.
type walker struct {
	w, cw *window // the entries; the CIEs, read where an FDE points
	cies  map[uint64]*cie
	addr  uint64
	debug bool
	arch  Arch
	rows  []Row // the machine's, reused
}

func newWalker(src io.ReaderAt, size int64, addr uint64, debug bool, arch Arch) (*walker, error) {
	if size < 0 {
		return nil, errTruncated
	}
	return &walker{w: &window{src: src, size: uint64(size)}, cw: &window{src: src, size: uint64(size)}, cies: map[uint64]*cie{}, addr: addr, debug: debug, arch: arch}, nil
}

// entry reads the entry at off: next is the next entry's offset (0 at the
// .eh_frame terminator), and an FDE (isFDE) its range, and with full its
// rows too (valid until the next call).
func (k *walker) entry(off uint64, full bool) (next uint64, f FDE, isFDE bool, err error) {
	w, start := k.w, off
	b, err := w.at(off, 4)
	if err != nil {
		return 0, f, false, fmt.Errorf("entry at 0x%x: %w", start, err)
	}
	length := binary.LittleEndian.Uint32(b)
	if length == 0 {
		if k.debug {
			return 0, f, false, fmt.Errorf("entry at 0x%x: zero length", start)
		}
		return 0, f, false, nil // the .eh_frame terminator
	}
	head, n := uint64(4), uint64(length)
	long := length == 0xffffffff
	if long {
		if b, err = w.at(off+4, 8); err != nil {
			return 0, f, false, fmt.Errorf("entry at 0x%x: %w", start, err)
		}
		head, n = 12, binary.LittleEndian.Uint64(b)
	}
	if n > w.size-start-head {
		return 0, f, false, fmt.Errorf("entry at 0x%x: length 0x%x runs past the section", start, n)
	}
	if n > maxEntry {
		return 0, f, false, limitf("entry at 0x%x: %d bytes, more than the %d an entry may have", start, n, maxEntry)
	}
	entry, err := w.at(start, head+n)
	if err != nil {
		return 0, f, false, fmt.Errorf("entry at 0x%x: %w", start, err)
	}
	r := reader{b: entry, off: head}
	var id uint64
	if long {
		id, err = r.u64()
	} else {
		var v uint32
		v, err = r.u32()
		id = uint64(v)
		if k.debug && v == 0xffffffff {
			id = ^uint64(0)
		}
	}
	if err != nil {
		return 0, f, false, fmt.Errorf("entry at 0x%x: %w", start, err)
	}
	next = start + head + n
	if id == 0 && !k.debug || k.debug && id == ^uint64(0) {
		return next, f, false, nil // a CIE: parsed when an FDE points at it
	}
	cieOff := id // .debug_frame: a section offset
	if !k.debug {
		// .eh_frame: the distance back from the id field.
		if id > start+head {
			return 0, f, false, fmt.Errorf("FDE at 0x%x: CIE pointer 0x%x points before the section", start, id)
		}
		cieOff = start + head - id
	}
	c, ok := k.cies[cieOff]
	if !ok {
		if len(k.cies) == maxCIEs {
			return 0, f, false, limitf("FDE at 0x%x: more than %d CIEs", start, maxCIEs)
		}
		if c, err = parseCIEAt(k.cw, cieOff, k.debug); err != nil {
			return 0, f, false, fmt.Errorf("FDE at 0x%x: %w", start, err)
		}
		k.cies[cieOff] = c
	}
	f, err = parseFDE(&r, Section{Data: entry, Addr: k.addr + start, Debug: k.debug, Arch: k.arch}, c, k.rows[:0], full)
	if err != nil {
		return 0, f, false, fmt.Errorf("FDE at 0x%x: %w", start, err)
	}
	if full {
		k.rows = f.Rows
	}
	return next, f, true, nil
}

// parseCIEAt parses the CIE at off, keeping a copy of its initial
// instructions.
func parseCIEAt(w *window, off uint64, debug bool) (*cie, error) {
	b, err := w.at(off, 4)
	if err != nil {
		return nil, fmt.Errorf("no CIE at 0x%x", off)
	}
	length := uint64(binary.LittleEndian.Uint32(b))
	if length == 0 || length == 0xffffffff || length > maxEntry {
		return nil, fmt.Errorf("no CIE at 0x%x", off)
	}
	entry, err := w.at(off, 4+length)
	if err != nil {
		return nil, fmt.Errorf("no CIE at 0x%x", off)
	}
	r := reader{b: entry, off: 4}
	id, err := r.u32()
	if err != nil || (!debug && id != 0) || (debug && id != 0xffffffff) {
		return nil, fmt.Errorf("no CIE at 0x%x", off)
	}
	c, err := parseCIE(&r, debug)
	if err != nil {
		return nil, fmt.Errorf("CIE at 0x%x: %w", off, err)
	}
	if len(c.initial) > maxInitial {
		return nil, limitf("CIE at 0x%x: %d bytes of initial instructions, more than %d", off, len(c.initial), maxInitial)
	}
	c.initial = bytes.Clone(c.initial)
	return c, nil
}

func parseCIE(r *reader, debug bool) (*cie, error) {
	c := &cie{fdeEnc: peAbsptr, addrSize: 8}
	version, err := r.u8()
	if err != nil {
		return nil, err
	}
	if version != 1 && version != 3 && version != 4 {
		return nil, fmt.Errorf("version %d", version)
	}
	aug, err := r.cstring()
	if err != nil {
		return nil, err
	}
	if version == 4 {
		as, err := r.u8()
		if err != nil {
			return nil, err
		}
		if as != 4 && as != 8 {
			return nil, fmt.Errorf("address size %d", as)
		}
		c.addrSize = int(as)
		if _, err := r.u8(); err != nil { // segment selector size
			return nil, err
		}
	}
	if c.codeAlign, err = r.uleb(); err != nil {
		return nil, err
	}
	if c.dataAlign, err = r.sleb(); err != nil {
		return nil, err
	}
	if version == 1 {
		b, err := r.u8()
		if err != nil {
			return nil, err
		}
		c.raReg = uint64(b)
	} else if c.raReg, err = r.uleb(); err != nil {
		return nil, err
	}
	if len(aug) > 0 && aug[0] == 'z' {
		c.hasAugData = true
		n, err := r.uleb()
		if err != nil {
			return nil, err
		}
		if n > uint64(len(r.b))-r.off {
			return nil, errTruncated
		}
		ar := reader{b: r.b[:r.off+n], off: r.off}
		for _, ch := range aug[1:] {
			switch ch {
			case 'R':
				if c.fdeEnc, err = ar.u8(); err != nil {
					return nil, err
				}
			case 'L':
				if _, err = ar.u8(); err != nil {
					return nil, err
				}
			case 'P':
				enc, err := ar.u8()
				if err != nil {
					return nil, err
				}
				// The personality routine's address: read to step over it.
				if _, err = ar.pointer(enc&^0x80, Section{}, c.addrSize); err != nil {
					return nil, err
				}
			case 'S':
				c.signal = true
			case 'B', 'G':
			default:
				// Unknown augmentation: its data length ('z') lets us skip it.
			}
		}
		r.off += n
	} else if aug == "eh" {
		// Ancient gcc: an exception table pointer follows.
		if _, err := r.pointer(peUdata8, Section{}, 8); err != nil {
			return nil, err
		}
	} else if aug != "" {
		return nil, fmt.Errorf("augmentation %q", aug)
	}
	if c.codeAlign == 0 {
		return nil, errors.New("code alignment factor 0")
	}
	c.initial = r.b[r.off:]
	return c, nil
}

// parseFDE reads an FDE and runs its instructions, appending its rows to
// rows. An FDE with an empty range has no rows: its instructions are not run.
func parseFDE(r *reader, s Section, c *cie, rows []Row, full bool) (FDE, error) {
	var f FDE
	enc := c.fdeEnc
	if s.Debug {
		enc = peAbsptr
	}
	begin, err := r.pointer(enc, s, c.addrSize)
	if err != nil {
		return f, err
	}
	// The range is a plain number in the same format, never relative.
	rng, err := r.pointer(enc&0x0f, Section{}, c.addrSize)
	if err != nil {
		return f, err
	}
	if begin+rng < begin {
		return f, fmt.Errorf("range 0x%x+0x%x wraps", begin, rng)
	}
	f.Begin, f.End, f.Signal = begin, begin+rng, c.signal
	if f.End <= f.Begin || !full {
		return f, nil
	}
	if c.hasAugData {
		n, err := r.uleb()
		if err != nil {
			return f, err
		}
		if n > uint64(len(r.b))-r.off {
			return f, errTruncated
		}
		r.off += n
	}
	m := machine{c: c, arch: s.Arch.orDefault(), loc: begin, end: f.End, rows: rows}
	m.row = Row{PC: begin, RBP: Rule{Kind: RuleSame}, RA: Rule{Kind: RuleSame}}
	if err := m.run(c.initial, 0, true); err != nil {
		return f, fmt.Errorf("CIE instructions: %w", err)
	}
	m.initial = m.row
	if err := m.run(r.b[r.off:], s.Addr+r.off, false); err != nil {
		return f, err
	}
	m.emit()
	f.Rows = m.rows
	return f, nil
}

// machine runs call frame instructions (DWARF 5, section 6.4.2).
type machine struct {
	c       *cie
	arch    Arch
	loc     uint64
	end     uint64
	row     Row
	initial Row
	rows    []Row
	saved   []Row
}

// emit records the row in force from m.row.PC.
func (m *machine) emit() {
	if m.row.PC >= m.end && len(m.rows) > 0 {
		return
	}
	if n := len(m.rows); n > 0 && m.rows[n-1].PC == m.row.PC {
		m.rows[n-1] = m.row
		return
	}
	m.rows = append(grow(m.rows, maxRowsPerFDE+1), m.row)
}

func (m *machine) advance(delta uint64) error {
	if delta > 0 && m.c.codeAlign > ^uint64(0)/delta {
		return errors.New("location advance overflows")
	}
	return m.setLoc(m.loc + delta*m.c.codeAlign)
}

func (m *machine) setLoc(loc uint64) error {
	if loc < m.loc {
		return fmt.Errorf("location moves back to 0x%x", loc)
	}
	if loc == m.loc {
		return nil
	}
	if len(m.rows) >= maxRowsPerFDE {
		return limitf("more than %d rows", maxRowsPerFDE)
	}
	m.emit()
	m.loc = loc
	m.row.PC = loc
	return nil
}

func (m *machine) setReg(reg uint64, r Rule) {
	switch reg {
	case m.arch.FP:
		m.row.RBP = r
	case m.c.raReg:
		m.row.RA = r
	}
}

func (m *machine) restoreReg(reg uint64) {
	switch reg {
	case m.arch.FP:
		m.row.RBP = m.initial.RBP
	case m.c.raReg:
		m.row.RA = m.initial.RA
	}
}

// run runs code, whose first byte is at address addr (for DW_CFA_set_loc's
// pc-relative pointers).
func (m *machine) run(code []byte, addr uint64, initial bool) error {
	r := reader{b: code}
	at := Section{Addr: addr}
	for r.off < uint64(len(code)) {
		if m.loc >= m.end && !initial {
			return nil // anything past the FDE's range never applies
		}
		op, _ := r.u8()
		switch op >> 6 {
		case 1: // DW_CFA_advance_loc
			if err := m.advance(uint64(op & 0x3f)); err != nil {
				return err
			}
			continue
		case 2: // DW_CFA_offset
			off, err := r.uleb()
			if err != nil {
				return err
			}
			m.setReg(uint64(op&0x3f), Rule{Kind: RuleOffset, Offset: int64(off) * m.c.dataAlign})
			continue
		case 3: // DW_CFA_restore
			m.restoreReg(uint64(op & 0x3f))
			continue
		}
		var err error
		switch op {
		case 0x00: // nop
		case 0x01: // set_loc
			var loc uint64
			if loc, err = r.pointer(m.c.fdeEnc, at, m.c.addrSize); err == nil {
				err = m.setLoc(loc)
			}
		case 0x02, 0x03, 0x04: // advance_loc1, 2, 4
			var d uint64
			switch op {
			case 0x02:
				var v uint8
				v, err = r.u8()
				d = uint64(v)
			case 0x03:
				var v uint16
				v, err = r.u16()
				d = uint64(v)
			default:
				var v uint32
				v, err = r.u32()
				d = uint64(v)
			}
			if err == nil {
				err = m.advance(d)
			}
		case 0x05: // offset_extended
			var reg, off uint64
			if reg, err = r.uleb(); err == nil {
				if off, err = r.uleb(); err == nil {
					m.setReg(reg, Rule{Kind: RuleOffset, Offset: int64(off) * m.c.dataAlign})
				}
			}
		case 0x11: // offset_extended_sf
			var reg uint64
			var off int64
			if reg, err = r.uleb(); err == nil {
				if off, err = r.sleb(); err == nil {
					m.setReg(reg, Rule{Kind: RuleOffset, Offset: off * m.c.dataAlign})
				}
			}
		case 0x2f: // GNU_negative_offset_extended
			var reg, off uint64
			if reg, err = r.uleb(); err == nil {
				if off, err = r.uleb(); err == nil {
					m.setReg(reg, Rule{Kind: RuleOffset, Offset: -int64(off) * m.c.dataAlign})
				}
			}
		case 0x06: // restore_extended
			var reg uint64
			if reg, err = r.uleb(); err == nil {
				m.restoreReg(reg)
			}
		case 0x07: // undefined
			var reg uint64
			if reg, err = r.uleb(); err == nil {
				m.setReg(reg, Rule{Kind: RuleUndefined})
			}
		case 0x08: // same_value
			var reg uint64
			if reg, err = r.uleb(); err == nil {
				m.setReg(reg, Rule{Kind: RuleSame})
			}
		case 0x09: // register
			var reg uint64
			if reg, err = r.uleb(); err == nil {
				if _, err = r.uleb(); err == nil {
					m.setReg(reg, Rule{Kind: RuleOther})
				}
			}
		case 0x0a: // remember_state
			if len(m.saved) >= maxStates {
				return errors.New("remember_state nested too deep")
			}
			m.saved = append(m.saved, m.row)
		case 0x0b: // restore_state
			if len(m.saved) == 0 {
				return errors.New("restore_state without remember_state")
			}
			pc := m.row.PC
			m.row = m.saved[len(m.saved)-1]
			m.row.PC = pc
			m.saved = m.saved[:len(m.saved)-1]
		case 0x0c: // def_cfa
			var reg, off uint64
			if reg, err = r.uleb(); err == nil {
				if off, err = r.uleb(); err == nil {
					m.row.CFA = CFA{Kind: CFAReg, Reg: reg, Offset: int64(off)}
				}
			}
		case 0x12: // def_cfa_sf
			var reg uint64
			var off int64
			if reg, err = r.uleb(); err == nil {
				if off, err = r.sleb(); err == nil {
					m.row.CFA = CFA{Kind: CFAReg, Reg: reg, Offset: off * m.c.dataAlign}
				}
			}
		case 0x0d: // def_cfa_register
			var reg uint64
			if reg, err = r.uleb(); err == nil {
				switch m.row.CFA.Kind {
				case CFAReg:
					m.row.CFA.Reg = reg
				case CFAUndefined:
					// riscv64's CIEs start with it ("sp"): the offset
					// is 0, as readelf and libgcc take it.
					m.row.CFA = CFA{Kind: CFAReg, Reg: reg}
				default:
					return errors.New("def_cfa_register without a register rule")
				}
			}
		case 0x0e: // def_cfa_offset
			var off uint64
			if off, err = r.uleb(); err == nil {
				if m.row.CFA.Kind != CFAReg {
					return errors.New("def_cfa_offset without a register rule")
				}
				m.row.CFA.Offset = int64(off)
			}
		case 0x13: // def_cfa_offset_sf
			var off int64
			if off, err = r.sleb(); err == nil {
				if m.row.CFA.Kind != CFAReg {
					return errors.New("def_cfa_offset_sf without a register rule")
				}
				m.row.CFA.Offset = off * m.c.dataAlign
			}
		case 0x0f: // def_cfa_expression
			var expr []byte
			if expr, err = r.block(); err == nil {
				m.row.CFA = cfaExpression(expr, m.arch)
			}
		case 0x10, 0x16: // expression, val_expression
			var reg uint64
			if reg, err = r.uleb(); err == nil {
				var expr []byte
				if expr, err = r.block(); err == nil {
					rule := Rule{Kind: RuleOther}
					if off, ok := bregRBP(expr, false); ok && op == 0x10 && m.arch.Machine == elf.EM_X86_64 {
						rule = Rule{Kind: RuleAtRBP, Offset: off}
					}
					m.setReg(reg, rule)
				}
			}
		case 0x14: // val_offset
			var reg uint64
			if reg, err = r.uleb(); err == nil {
				if _, err = r.uleb(); err == nil {
					m.setReg(reg, Rule{Kind: RuleOther})
				}
			}
		case 0x15: // val_offset_sf
			var reg uint64
			if reg, err = r.uleb(); err == nil {
				if _, err = r.sleb(); err == nil {
					m.setReg(reg, Rule{Kind: RuleOther})
				}
			}
		case 0x2e: // GNU_args_size
			_, err = r.uleb()
		case 0x2d: // AARCH64_negate_ra_state (SPARC's GNU_window_save elsewhere)
			if m.arch.Machine != elf.EM_AARCH64 {
				return fmt.Errorf("call frame instruction 0x2d (GNU_window_save) outside arm64")
			}
			m.row.RASigned = !m.row.RASigned
		default:
			return fmt.Errorf("unknown call frame instruction 0x%02x", op)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// The x86-64 PLT's CFA expression, as binutils writes it for lazy binding
// stubs: DW_OP_breg7 (rsp) 8; DW_OP_breg16 (rip) 0; DW_OP_lit15; DW_OP_and;
// DW_OP_litN; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus. N (10 or 11) is
// where in the 16-byte entry the push has happened.
var pltPrefix = []byte{0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a}
var pltSuffix = []byte{0x2a, 0x33, 0x24, 0x22}

func cfaExpression(e []byte, arch Arch) CFA {
	if arch.Machine != elf.EM_X86_64 {
		return CFA{Kind: CFAExpression}
	}
	n := len(pltPrefix)
	if len(e) == n+1+len(pltSuffix) && string(e[:n]) == string(pltPrefix) && string(e[n+1:]) == string(pltSuffix) &&
		e[n] >= 0x30 && e[n] <= 0x4f {
		return CFA{Kind: CFAPLT, PLTCut: int64(e[n] - 0x30)}
	}
	if off, ok := bregRBP(e, true); ok {
		return CFA{Kind: CFADeref, Reg: RegRBP, Offset: off}
	}
	return CFA{Kind: CFAExpression}
}

// bregRBP reads the expression DW_OP_breg6 (rbp) N, followed by
// DW_OP_deref if deref, and nothing else: N.
func bregRBP(e []byte, deref bool) (int64, bool) {
	const opBreg6, opDeref = 0x76, 0x06
	r := reader{b: e}
	if op, err := r.u8(); err != nil || op != opBreg6 {
		return 0, false
	}
	off, err := r.sleb()
	if err != nil {
		return 0, false
	}
	if deref {
		if op, err := r.u8(); err != nil || op != opDeref {
			return 0, false
		}
	}
	return off, r.off == uint64(len(e))
}

// Pointer encodings (DW_EH_PE_*), LSB 4.1, "DWARF Extensions".
const (
	peAbsptr  = 0x00
	peUleb128 = 0x01
	peUdata2  = 0x02
	peUdata4  = 0x03
	peUdata8  = 0x04
	peSleb128 = 0x09
	peSdata2  = 0x0a
	peSdata4  = 0x0b
	peSdata8  = 0x0c
	pePcrel   = 0x10
	peDatarel = 0x30
	peOmit    = 0xff
)

type reader struct {
	b   []byte
	off uint64
}

func (r *reader) take(n uint64) ([]byte, error) {
	if n > uint64(len(r.b)) || r.off > uint64(len(r.b))-n {
		return nil, errTruncated
	}
	b := r.b[r.off : r.off+n]
	r.off += n
	return b, nil
}

func (r *reader) u8() (uint8, error) {
	b, err := r.take(1)
	if err != nil {
		return 0, err
	}
	return b[0], nil
}

func (r *reader) u16() (uint16, error) {
	b, err := r.take(2)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint16(b), nil
}

func (r *reader) u32() (uint32, error) {
	b, err := r.take(4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b), nil
}

func (r *reader) u64() (uint64, error) {
	b, err := r.take(8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (r *reader) uleb() (uint64, error) {
	var v uint64
	for shift := uint(0); ; shift += 7 {
		b, err := r.u8()
		if err != nil {
			return 0, err
		}
		if shift < 64 {
			v |= uint64(b&0x7f) << shift
		}
		if b&0x80 == 0 {
			return v, nil
		}
		if shift > 70 {
			return 0, errors.New("LEB128 number too long")
		}
	}
}

func (r *reader) sleb() (int64, error) {
	var v int64
	var shift uint
	for {
		b, err := r.u8()
		if err != nil {
			return 0, err
		}
		if shift < 64 {
			v |= int64(b&0x7f) << shift
		}
		shift += 7
		if b&0x80 == 0 {
			if shift < 64 && b&0x40 != 0 {
				v |= -1 << shift
			}
			return v, nil
		}
		if shift > 70 {
			return 0, errors.New("LEB128 number too long")
		}
	}
}

func (r *reader) cstring() (string, error) {
	for i := r.off; i < uint64(len(r.b)); i++ {
		if r.b[i] == 0 {
			s := string(r.b[r.off:i])
			r.off = i + 1
			return s, nil
		}
	}
	return "", errTruncated
}

func (r *reader) block() ([]byte, error) {
	n, err := r.uleb()
	if err != nil {
		return nil, err
	}
	return r.take(n)
}

// pointer reads an encoded pointer; s gives the section address for
// pc-relative encodings.
func (r *reader) pointer(enc byte, s Section, addrSize int) (uint64, error) {
	if enc == peOmit {
		return 0, nil
	}
	pos := s.Addr + r.off
	var v uint64
	var err error
	switch enc & 0x0f {
	case peAbsptr:
		if addrSize == 4 {
			var u uint32
			u, err = r.u32()
			v = uint64(u)
		} else {
			v, err = r.u64()
		}
	case peUleb128:
		v, err = r.uleb()
	case peUdata2:
		var u uint16
		u, err = r.u16()
		v = uint64(u)
	case peUdata4:
		var u uint32
		u, err = r.u32()
		v = uint64(u)
	case peUdata8, peSdata8:
		v, err = r.u64()
	case peSleb128:
		var i int64
		i, err = r.sleb()
		v = uint64(i)
	case peSdata2:
		var u uint16
		u, err = r.u16()
		v = uint64(int64(int16(u)))
	case peSdata4:
		var u uint32
		u, err = r.u32()
		v = uint64(int64(int32(u)))
	default:
		return 0, fmt.Errorf("pointer encoding 0x%02x", enc)
	}
	if err != nil {
		return 0, err
	}
	switch enc & 0x70 {
	case 0:
	case pePcrel:
		v += pos
	case peDatarel:
		// Only used in .eh_frame_hdr on x86-64; nothing here is data-relative.
		return 0, fmt.Errorf("pointer encoding 0x%02x", enc)
	default:
		return 0, fmt.Errorf("pointer encoding 0x%02x", enc)
	}
	if enc&0x80 != 0 {
		return 0, fmt.Errorf("indirect pointer encoding 0x%02x", enc)
	}
	return v, nil
}
