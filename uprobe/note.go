package uprobe

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"sort"
	"strings"
)

// Site is one call site of a USDT probe.
type Site struct {
	Addr   uint64 // virtual address of the probe's nop
	Offset uint64 // its file offset: where the uprobe goes
	Args   []Arg
}

// Probe is a USDT probe: every call site of one provider:name.
type Probe struct {
	Provider, Name string
	Sites          []Site
	// Semaphore is the file offset of the counter that guards the probe
	// (the kernel raises it while a uprobe with ref_ctr_offset is on); 0
	// for none.
	Semaphore uint64
}

func (p Probe) String() string { return p.Provider + ":" + p.Name }

// note is one .note.stapsdt entry before grouping.
type note struct {
	provider, name, args string
	loc, base, sem       uint64
}

// The most a file's USDT notes may cost: filter reads at most MaxSites
// stapsdt notes (libjvm has about 500), from a section of at most
// maxNoteSection bytes; names and argument specs repeated across sites are
// kept once.
const (
	MaxSites       = 1 << 16
	maxNoteSection = 16 << 20
)

// parseNotes reads the notes of a .note.stapsdt section: for each, namesz,
// descsz and type (4 bytes each), the name ("stapsdt") and the description
// (three address-sized words: location, base, semaphore; then provider,
// name and arguments, each NUL-terminated), both padded to 4 bytes.
// Notes of other names or types are skipped.
func parseNotes(data []byte, order binary.ByteOrder, addrSize int) ([]note, error) {
	// Counted first, so that the notes take one allocation of their size.
	count := 0
	for rest := data; len(rest) >= 12; {
		namesz, descsz := order.Uint32(rest), order.Uint32(rest[4:])
		end := 12 + align4(uint64(namesz)) + align4(uint64(descsz))
		if end > uint64(len(rest)) {
			break // reported below
		}
		if namesz == 8 && string(rest[12:20]) == "stapsdt\x00" && order.Uint32(rest[8:]) == 3 {
			count++
		}
		rest = rest[end:]
	}
	if count > MaxSites {
		return nil, fmt.Errorf("%d USDT sites, more than the %d filter reads", count, MaxSites)
	}
	notes := make([]note, 0, count)
	strs := map[string]string{} // each provider, name and argument spec once
	intern := func(b []byte) string {
		if s, ok := strs[string(b)]; ok {
			return s
		}
		s := string(b)
		strs[s] = s
		return s
	}
	for len(data) > 0 {
		if len(data) < 12 {
			return nil, fmt.Errorf("a truncated note header")
		}
		namesz, descsz, typ := order.Uint32(data), order.Uint32(data[4:]), order.Uint32(data[8:])
		data = data[12:]
		nameEnd, descEnd := align4(uint64(namesz)), align4(uint64(namesz))+align4(uint64(descsz))
		if descEnd > uint64(len(data)) || nameEnd < uint64(namesz) {
			return nil, fmt.Errorf("a note of %d+%d bytes overruns the section", namesz, descsz)
		}
		name := bytes.TrimRight(data[:namesz], "\x00")
		desc := data[nameEnd : nameEnd+uint64(descsz)]
		data = data[descEnd:]
		if string(name) != "stapsdt" || typ != 3 {
			continue
		}
		if len(desc) < 3*addrSize {
			return nil, fmt.Errorf("a stapsdt note of %d bytes: too short for its addresses", len(desc))
		}
		word := func(i int) uint64 {
			if addrSize == 4 {
				return uint64(order.Uint32(desc[i*4:]))
			}
			return order.Uint64(desc[i*8:])
		}
		n := note{loc: word(0), base: word(1), sem: word(2)}
		rest := desc[3*addrSize:]
		var fields [3]string
		for i := range fields {
			end := bytes.IndexByte(rest, 0)
			if end < 0 {
				return nil, fmt.Errorf("a stapsdt note without provider, name and arguments")
			}
			fields[i], rest = intern(rest[:end]), rest[end+1:]
		}
		n.provider, n.name, n.args = fields[0], fields[1], fields[2]
		if n.provider == "" || n.name == "" {
			return nil, fmt.Errorf("a stapsdt note with an empty provider or name")
		}
		notes = append(notes, n)
	}
	return notes, nil
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

// USDT lists the file's USDT probes, sorted by provider and name, with
// every site's file offset and parsed arguments.
func (f *File) USDT() (probes []Probe, err error) {
	defer func() {
		if r := recover(); r != nil {
			probes, err = nil, fmt.Errorf("%s: malformed ELF file (%v)", f.Path, r)
		}
	}()
	sec := f.elf.Section(".note.stapsdt")
	if sec == nil {
		return nil, nil
	}
	if sec.Size > maxNoteSection {
		return nil, fmt.Errorf("%s: a .note.stapsdt of %d MiB, more than the %d MiB filter reads", f.Path, sec.Size>>20, maxNoteSection>>20)
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("%s: read .note.stapsdt: %w", f.Path, err)
	}
	addrSize := 8
	if f.elf.Class == elf.ELFCLASS32 {
		addrSize = 4
	}
	notes, err := parseNotes(data, f.elf.ByteOrder, addrSize)
	if err != nil {
		return nil, fmt.Errorf("%s: .note.stapsdt: %w", f.Path, err)
	}
	// Prelinked files moved .stapsdt.base; the notes still hold where it
	// was: shift each location by the difference.
	var baseAddr uint64
	if b := f.elf.Section(".stapsdt.base"); b != nil {
		baseAddr = b.Addr
	}
	byName := map[string]*Probe{}
	var order []string
	parsed := map[string][]Arg{} // sites with the same spec share its arguments
	for _, n := range notes {
		loc := n.loc
		if baseAddr != 0 && n.base != 0 {
			loc += baseAddr - n.base
		}
		off, err := f.Offset(loc)
		if err != nil {
			return nil, fmt.Errorf("%s:%s: %w", n.provider, n.name, err)
		}
		args, ok := parsed[n.args]
		if !ok {
			if args, err = f.resolveArgs(n); err != nil {
				return nil, err
			}
			parsed[n.args] = args
		}
		var sem uint64
		if n.sem != 0 {
			if sem, err = f.Offset(n.sem); err != nil {
				return nil, fmt.Errorf("%s:%s: semaphore: %w", n.provider, n.name, err)
			}
		}
		key := n.provider + ":" + n.name
		p := byName[key]
		if p == nil {
			p = &Probe{Provider: n.provider, Name: n.name, Semaphore: sem}
			byName[key] = p
			order = append(order, key)
		} else if p.Semaphore != sem {
			return nil, fmt.Errorf("%s: sites with different semaphores", key)
		}
		p.Sites = append(p.Sites, Site{Addr: loc, Offset: off, Args: args})
	}
	sort.Strings(order)
	for _, k := range order {
		probes = append(probes, *byName[k])
	}
	return probes, nil
}

// resolveArgs parses a note's argument specs and finds the symbols they
// name in the file.
func (f *File) resolveArgs(n note) ([]Arg, error) {
	args, err := ParseArgs(n.args, f.elf.Machine)
	if err != nil {
		return nil, fmt.Errorf("%s:%s: %w", n.provider, n.name, err)
	}
	for i, a := range args {
		if a.Sym == "" {
			continue
		}
		if a.Kind != ArgGlobal && f.elf.Type != elf.ET_EXEC {
			return nil, fmt.Errorf("%s:%s: argument %s: an absolute address in a position-independent file", n.provider, n.name, a.Text)
		}
		v, ok := f.symbolValue(a.Sym)
		if !ok {
			return nil, fmt.Errorf("%s:%s: argument %s: no symbol %s in the file", n.provider, n.name, a.Text, a.Sym)
		}
		args[i].SymAddr = v
	}
	return args, nil
}

// FindUSDT finds a probe by name, and provider when not "". A miss lists
// the file's probes.
func (f *File) FindUSDT(provider, name string) (Probe, error) {
	probes, err := f.USDT()
	if err != nil {
		return Probe{}, err
	}
	var found []Probe
	for _, p := range probes {
		if p.Name == name && (provider == "" || p.Provider == provider) {
			found = append(found, p)
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case len(found) > 1:
		return Probe{}, NoSuch("%s: %d providers have a probe %s (%s, %s): name the provider", f.Path, len(found), name, found[0], found[1])
	case len(probes) == 0:
		return Probe{}, NoSuch("%s has no USDT probes (no .note.stapsdt section)", f.Path)
	}
	var names []string
	for _, p := range probes {
		names = append(names, p.String())
	}
	if len(names) > 12 {
		names = append(names[:12], "...")
	}
	want := name
	if provider != "" {
		want = provider + ":" + name
	}
	return Probe{}, NoSuch("%s has no USDT probe %s (probes: %s)", f.Path, want, strings.Join(names, ", "))
}
