package stacks

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"

	"github.com/tracekit/tracekit/internal/regular"
	"github.com/tracekit/tracekit/internal/usage"
	"github.com/tracekit/tracekit/stacks/prog"
	"github.com/tracekit/tracekit/symbols"
)

// labeling is what a run reads of the sampled threads' own data: the
// --label values and the OpenTelemetry context, their symbols, and the
// map that tells the sampler where each process keeps them.
type labeling struct {
	labels     []LabelSpec     // --label
	context    bool            // not --no-context: the OpenTelemetry context and custom labels
	wanted     map[string]bool // the symbols of the labels and the context
	labelMap   bpfMap          // pid -> the labels' locations in it
	labelNotes []string        // why labels are unset, once each
}

// LabelSpec is one --label NAME=SOURCE: a value the sampled thread keeps
// in its memory, read at each sample (seed 000).
type LabelSpec struct {
	Name   string
	TLS    bool   // tls: a thread-local; else var: a global
	File   string // the file that defines Symbol, "" for the first that does
	Symbol string
	Type   string
	Label  prog.Label
	Signed bool // an integer read as signed
}

var labelNameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]{0,31}$`) })

// labelTypes are the TYPEs of a SOURCE.
var labelTypes = map[string]struct {
	label  prog.Label
	signed bool
}{
	"int":    {prog.Label{Kind: prog.LabelInt, Size: 8}, true},
	"int8":   {prog.Label{Kind: prog.LabelInt, Size: 1}, true},
	"int16":  {prog.Label{Kind: prog.LabelInt, Size: 2}, true},
	"int32":  {prog.Label{Kind: prog.LabelInt, Size: 4}, true},
	"int64":  {prog.Label{Kind: prog.LabelInt, Size: 8}, true},
	"uint8":  {prog.Label{Kind: prog.LabelInt, Size: 1}, false},
	"uint16": {prog.Label{Kind: prog.LabelInt, Size: 2}, false},
	"uint32": {prog.Label{Kind: prog.LabelInt, Size: 4}, false},
	"uint64": {prog.Label{Kind: prog.LabelInt, Size: 8}, false},
	"str":    {prog.Label{Kind: prog.LabelStr}, false},
	"chars":  {prog.Label{Kind: prog.LabelChars}, false},

	"strobe-int": {prog.Label{Kind: prog.LabelStrobeInt, Size: 8}, true},
	"strobe-str": {prog.Label{Kind: prog.LabelStrobeStr}, false},
	"strobe-map": {prog.Label{Kind: prog.LabelStrobeMap}, false},
}

const labelTypeList = "int, int8, int16, int32, int64, uint8, uint16, uint32, uint64, str, chars, strobe-int, strobe-str, strobe-map"

// ParseLabels reads the --label arguments.
func ParseLabels(args []string) ([]LabelSpec, error) {
	if len(args) > prog.MaxLabels {
		return nil, usage.Errorf("%d labels: at most %d", len(args), prog.MaxLabels)
	}
	var out []LabelSpec
	names := map[string]bool{}
	for _, a := range args {
		name, src, ok := strings.Cut(a, "=")
		if !ok {
			return nil, usage.Errorf("--label %q: want NAME=SOURCE, as req=tls:request_id:int", a)
		}
		if !labelNameRE().MatchString(name) {
			return nil, usage.Errorf("--label %q: a name is a letter or _, then up to 31 letters, digits, _ or .", a)
		}
		if names[name] {
			return nil, usage.Errorf("--label %q: %s is named twice", a, name)
		}
		names[name] = true
		parts := strings.Split(src, ":")
		if len(parts) != 3 && len(parts) != 4 || parts[0] != "tls" && parts[0] != "var" {
			return nil, usage.Errorf("--label %q: want a SOURCE of tls:[FILE:]SYMBOL:TYPE or var:[FILE:]SYMBOL:TYPE", a)
		}
		l := LabelSpec{Name: name, TLS: parts[0] == "tls", Symbol: parts[len(parts)-2], Type: parts[len(parts)-1]}
		if len(parts) == 4 {
			l.File = parts[1]
			if l.File == "" {
				return nil, usage.Errorf("--label %q: the FILE is empty", a)
			}
		}
		if l.Symbol == "" {
			return nil, usage.Errorf("--label %q: the SYMBOL is empty", a)
		}
		t, ok := labelTypes[l.Type]
		if !ok {
			return nil, usage.Errorf("--label %q: unknown TYPE %q: one of %s", a, l.Type, labelTypeList)
		}
		l.Label, l.Signed = t.label, t.signed
		out = append(out, l)
	}
	return out, nil
}

// CheckLabelFiles looks up the symbol of each label that names its file
// by a path, before the run: a symbol that is not there, or not of the
// label's kind, is a usage error. A base name (libfoo.so) names a file
// among each process's mapped ones, found as they are scanned.
func CheckLabelFiles(labels []LabelSpec) error {
	for _, l := range labels {
		if !strings.Contains(l.File, "/") {
			continue
		}
		f, err := regular.Open(l.File) // never a FIFO's open that blocks
		if err != nil {
			return usage.Errorf("--label %s: %v", l.Name, err)
		}
		ef, err := symbols.NewELF(f)
		if err == nil {
			_, err = findLabelSymbol(ef, l)
		}
		f.Close()
		if err != nil {
			return usage.Errorf("--label %s: %s: %v", l.Name, l.File, err)
		}
	}
	return nil
}

// CheckLabelKinds looks up, before the run, the labels that do not name
// their file by a path, in the files known before it starts: the -p
// process's mapped files (its executable first), or the -c command's
// executable when the command line starts with one. The first of those
// files that defines a label's symbol is the one the run would read: a
// symbol of the other kind there (a global asked as tls:) is a usage
// error. Files that cannot be read are left to the run.
func CheckLabelKinds(labels []LabelSpec, pid int, command string) error {
	type candidate struct{ name, path string } // as the run names it; where to open it
	var files []candidate
	switch {
	case pid != 0:
		maps, _ := readMaps(uint32(pid))
		exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		exe = strings.TrimSuffix(exe, " (deleted)")
		seen := map[fileKey]bool{}
		for _, m := range maps {
			if m.Inode == 0 || seen[keyOf(m)] {
				continue
			}
			seen[keyOf(m)] = true
			name := strings.TrimSuffix(m.Path, " (deleted)")
			c := candidate{name, fmt.Sprintf("/proc/%d/root%s", pid, name)}
			if name == exe {
				files = append([]candidate{c}, files...)
			} else {
				files = append(files, c)
			}
		}
	case command != "":
		if path := commandExecutable(command); path != "" {
			files = append(files, candidate{path, path})
		}
	}
	wanted := map[string]bool{}
	for _, l := range labels {
		wanted[l.Symbol] = true
	}
	decided := make([]bool, len(labels)) // a file defines the symbol: the one the run would read
	for _, c := range files {
		f, err := regular.Open(c.path) // never a FIFO's open that blocks
		if err != nil {
			continue
		}
		var syms map[string]elf.Symbol
		if ef, err := symbols.NewELF(f); err == nil {
			syms, _ = indexSymbols(ef, wanted)
		}
		f.Close()
		for i, l := range labels {
			if decided[i] || strings.Contains(l.File, "/") || l.File != "" && !sameFile(c.name, l.File) {
				continue // CheckLabelFiles has those with a path
			}
			_, err := kindOf(syms, l)
			if err == errNoSymbol {
				continue
			}
			decided[i] = true
			var kind wrongKind
			if errors.As(err, &kind) {
				return usage.Errorf("--label %s: %s: %v", l.Name, c.name, err)
			}
		}
	}
	return nil
}

// commandExecutable is the file a -c command line runs, when its first
// word (after VAR=value assignments and exec) is a plain word: a path,
// or a name found in PATH; "" when the line starts with anything the
// shell would expand or treat specially.
func commandExecutable(line string) string {
	words := strings.Fields(line)
	for len(words) > 0 && (words[0] == "exec" || assignmentRE().MatchString(words[0])) {
		words = words[1:]
	}
	if len(words) == 0 || strings.ContainsAny(words[0], "$`'\"\\(){}[]*?~;&|<>!#=") {
		return ""
	}
	path, err := exec.LookPath(words[0])
	if err != nil {
		return ""
	}
	return path
}

var assignmentRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`) })

// errNoSymbol: the file does not define the symbol (another may).
var errNoSymbol = fmt.Errorf("defines no such symbol")

// wrongKind: the file defines the symbol, of the other kind than the
// label's.
type wrongKind string

func (w wrongKind) Error() string { return string(w) }

// findLabelSymbol finds l's symbol among ef's definitions: a thread-local
// for tls:, anything else for var:.
func findLabelSymbol(ef *elf.File, l LabelSpec) (elf.Symbol, error) {
	syms, err := indexSymbols(ef, map[string]bool{l.Symbol: true})
	if err != nil {
		return elf.Symbol{}, err
	}
	return kindOf(syms, l)
}

// indexSymbols is the definitions in ef of the names wanted, in one pass
// over its symbol tables: the first of each, .symtab's before .dynsym's.
func indexSymbols(ef *elf.File, wanted map[string]bool) (out map[string]elf.Symbol, err error) {
	defer func() {
		if recover() != nil {
			out, err = nil, fmt.Errorf("unreadable symbol table")
		}
	}()
	out = map[string]elf.Symbol{}
	symbols.Each(ef, func(s symbols.Raw) {
		name, _, _ := strings.Cut(s.Name, "@")
		if _, have := out[name]; have || !wanted[name] || s.Section == elf.SHN_UNDEF {
			return
		}
		// Copies: the names would keep the whole string table.
		out[strings.Clone(name)] = elf.Symbol{Name: strings.Clone(s.Name), Info: s.Info, Other: s.Other, Section: s.Section, Value: s.Value, Size: s.Size}
	})
	return out, nil
}

// kindOf is l's symbol among syms, when it is of l's kind.
func kindOf(syms map[string]elf.Symbol, l LabelSpec) (elf.Symbol, error) {
	s, ok := syms[l.Symbol]
	if !ok {
		return s, errNoSymbol
	}
	tls := elf.ST_TYPE(s.Info) == elf.STT_TLS
	switch {
	case l.TLS && !tls:
		return s, wrongKind(l.Symbol + " is not a thread-local (use var:)")
	case !l.TLS && tls:
		return s, wrongKind(l.Symbol + " is a thread-local (use tls:)")
	}
	return s, nil
}

// labelLocations finds where process pid keeps each label: in the file
// the label names, else the first of its mapped files (the executable
// first) that defines the symbol; then, reading the context, where it
// keeps its OpenTelemetry record and its custom labels. A label it cannot place is LocUnset;
// why, once per label and file, goes to note. late: a label's slot was
// not filled in by the loader yet (place them again later); missing: a
// label's symbol is in none of the files mapped yet.
func (ps *processes) labelLocations(pid uint32, p *process) (locs []prog.LabelLoc, late, missing bool) {
	locs = make([]prog.LabelLoc, len(ps.labels), len(ps.labels)+2)
	exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	exe = strings.TrimSuffix(exe, " (deleted)")
	order := make([]*procMapping, 0, len(p.maps))
	for i := range p.maps {
		if strings.TrimSuffix(p.maps[i].Path, " (deleted)") == exe {
			order = append([]*procMapping{&p.maps[i]}, order...)
		} else {
			order = append(order, &p.maps[i])
		}
	}
	mem := &procMem{pid: pid}
	defer mem.Close()
	var others []tlsReloc // the relocations of all files, at their addresses in the process
	othersRead := false
	readOthers := func() []tlsReloc {
		if !othersRead {
			others, othersRead = processRelocs(order), true
		}
		return others
	}
	// place finds where the process keeps l: LocUnset when nowhere;
	// defined: a file defines its symbol.
	place := func(l LabelSpec) (loc prog.LabelLoc, defined bool) {
		seen := map[*file]bool{}
		for _, m := range order {
			if seen[m.file] || m.file.osf == nil || l.File != "" && !sameFile(m.Path, l.File) {
				continue
			}
			seen[m.file] = true
			sym, err := m.file.labelSymbol(l, ps.symbolsWanted())
			if err == errNoSymbol {
				continue
			}
			if err != nil {
				ps.noteLabel(l, m.file, err.Error())
				return loc, true
			}
			if !l.TLS {
				return prog.LabelLoc{Mode: prog.LocAbs, A: m.bias + sym.Value}, true
			}
			if strings.TrimSuffix(m.Path, " (deleted)") == exe {
				off, err := tpOffset(m.file.elf, sym.Value)
				if err != nil {
					ps.noteLabel(l, m.file, err.Error())
					return loc, true
				}
				return prog.LabelLoc{Mode: prog.LocTP, A: uint64(off)}, true
			}
			relocs, err := m.file.tlsRelocs()
			if err != nil {
				ps.noteLabel(l, m.file, err.Error())
				return loc, true
			}
			loc, err = libraryTLS(mem, m.bias, sym.Value, l.Symbol, relocs, readOthers, func() (dtvLayout, error) { return libcOf(p.maps) })
			if err == errNotYet {
				late = true
			} else if err != nil {
				ps.noteLabel(l, m.file, err.Error())
			}
			return loc, true
		}
		return loc, false
	}
	for i, l := range ps.labels {
		var defined bool
		locs[i], defined = place(l)
		missing = missing || !defined
	}
	if ps.context {
		// A context's symbols missing is the common case: not waited for.
		otel, _ := place(LabelSpec{Name: "otel", TLS: true, Symbol: otelSymbol})
		locs = append(locs, otel, ps.customLabels(mem, place))
		if otel.Mode != prog.LocUnset && p.otelKeys == nil {
			p.otelKeys, _ = readOTelKeys(pid)
			p.otelKeysWait = p.otelKeys == nil
		}
	}
	return locs, late, missing
}

// customLabels is where a process keeps its custom label set: by the ABI
// version its custom_labels_abi_version says, v0's in place, v1's
// through a pointer (LocIndirect). Other versions are not read.
func (ps *processes) customLabels(mem *procMem, place func(LabelSpec) (prog.LabelLoc, bool)) prog.LabelLoc {
	version, _ := place(LabelSpec{Name: "custom labels", Symbol: customVersionSym})
	if version.Mode != prog.LocAbs {
		return prog.LabelLoc{}
	}
	var b [4]byte
	if mem.read(version.A, b[:]) != nil {
		return prog.LabelLoc{}
	}
	switch binary.LittleEndian.Uint32(b[:]) {
	case 0:
		loc, _ := place(LabelSpec{Name: "custom labels", TLS: true, Symbol: customV0Symbol})
		return loc
	case 1:
		loc, _ := place(LabelSpec{Name: "custom labels", TLS: true, Symbol: customV1Symbol})
		if loc.Mode != prog.LocUnset {
			loc.Mode |= prog.LocIndirect
		}
		return loc
	}
	return prog.LabelLoc{}
}

// processRelocs is the thread-local relocations of a process's files, each
// at its address in the process.
func processRelocs(order []*procMapping) []tlsReloc {
	var out []tlsReloc
	seen := map[*file]bool{}
	for _, m := range order {
		if seen[m.file] || m.file.osf == nil {
			continue
		}
		seen[m.file] = true
		relocs, _ := m.file.tlsRelocs()
		for _, r := range relocs {
			if !r.local {
				r.got += m.bias
				out = append(out, r)
			}
		}
	}
	return out
}

// sameFile reports whether a mapped path is the file a label names: the
// same path, or the same base name when the label gives no directory.
func sameFile(path, name string) bool {
	path = strings.TrimSuffix(path, " (deleted)")
	if strings.Contains(name, "/") {
		return path == name
	}
	return path[strings.LastIndex(path, "/")+1:] == name
}

// noteLabel records once why a label is unset in a file's processes.
func (ps *processes) noteLabel(l LabelSpec, f *file, why string) {
	msg := fmt.Sprintf("label %s: %s: %s", l.Name, f.name, why)
	for _, have := range ps.labelNotes {
		if have == msg {
			return
		}
	}
	if len(ps.labelNotes) < 32 {
		ps.labelNotes = append(ps.labelNotes, msg)
	}
}

// labelSymbol looks up a label's symbol in the file once.
// labelSymbol looks up a label's symbol in the file: the symbols of every
// label and of the context are indexed on the first lookup.
func (f *file) labelSymbol(l LabelSpec, wanted map[string]bool) (elf.Symbol, error) {
	if f.labelSyms == nil {
		f.labelSyms, f.labelSymsErr = indexSymbols(f.elf, wanted)
	}
	if f.labelSymsErr != nil {
		return elf.Symbol{}, f.labelSymsErr
	}
	return kindOf(f.labelSyms, l)
}

// symbolsWanted is the names labelSymbol indexes: the labels', and the
// context's when it is read.
func (ps *processes) symbolsWanted() map[string]bool {
	if ps.wanted == nil {
		ps.wanted = map[string]bool{}
		for _, l := range ps.labels {
			ps.wanted[l.Symbol] = true
		}
		if ps.context {
			for _, s := range []string{otelSymbol, customVersionSym, customV0Symbol, customV1Symbol} {
				ps.wanted[s] = true
			}
		}
	}
	return ps.wanted
}

// tpOffset is where the executable's thread-local at value (its offset in
// the PT_TLS block) sits from the thread pointer, for the static TLS
// block of the executable, module 1, as glibc and musl place it: below the
// thread pointer on x86-64 (TLS variant II), above a 16-byte TCB on arm64
// (variant I).
func tpOffset(ef *elf.File, value uint64) (int64, error) {
	for _, p := range ef.Progs {
		if p.Type != elf.PT_TLS {
			continue
		}
		align := max(p.Align, 1)
		if align&(align-1) != 0 || align > 1<<20 || p.Memsz > 1<<30 {
			return 0, fmt.Errorf("a PT_TLS segment of alignment %d and %d bytes", p.Align, p.Memsz)
		}
		firstbyte := -p.Vaddr & (align - 1)
		switch runtime.GOARCH {
		case "amd64":
			block := (p.Memsz+firstbyte+align-1)&^(align-1) - firstbyte
			return int64(value) - int64(block), nil
		case "arm64":
			const tcb = 16
			block := (tcb-firstbyte+align-1)&^(align-1) + firstbyte
			return int64(block + value), nil
		}
		return 0, fmt.Errorf("thread-locals are read on x86-64 and arm64 only")
	}
	return 0, fmt.Errorf("no PT_TLS segment")
}

// labelsName is the labels as one string, for grouping stacks.
func labelsName(ls []LabelValue) string {
	var b strings.Builder
	for _, l := range ls {
		fmt.Fprintf(&b, "%s=%q ", l.Name, l.Value)
	}
	return b.String()
}

// LabelValue is a label as a sample had it.
type LabelValue struct {
	Name  string
	Value string
	Num   *int64 // integers: the number (pprof's NumLabel)
}

// decodeLabels reads the labels from a key: the set ones, in order.
func decodeLabels(labels []LabelSpec, cfg prog.Config, key []byte) []LabelValue {
	if len(labels) == 0 || len(key) < cfg.KeySize() {
		return nil
	}
	mask := key[6]
	var out []LabelValue
	for i, l := range labels {
		if mask&(1<<i) == 0 {
			continue
		}
		b := key[cfg.LabelOffset(i):]
		v := LabelValue{Name: l.Name}
		switch l.Label.Kind {
		case prog.LabelInt, prog.LabelStrobeInt:
			n := binary.LittleEndian.Uint64(b)
			bits := uint(8 * l.Label.Size)
			if bits < 64 {
				n &= 1<<bits - 1
			}
			if l.Signed && bits < 64 && n&(1<<(bits-1)) != 0 {
				n |= ^uint64(0) << bits
			}
			num := int64(n)
			if l.Signed {
				v.Value = strconv.FormatInt(num, 10)
			} else {
				v.Value = strconv.FormatUint(n, 10)
			}
			v.Num = &num
		case prog.LabelStrobeMap:
			out = append(out, strobeMapLabels(l.Name, b[:prog.StrobeMapSlot])...)
			continue
		default:
			v.Value = cString(b[:prog.LabelStrLen])
		}
		out = append(out, v)
	}
	return out
}

// cString is b up to its terminator.
func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// strobeMapLabels are a strobe map's labels from its slot in a key:
// NAME.id, NAME.tag when it has one, and NAME.KEY for each entry read
// (the entries with an empty key are left out; a key given twice keeps
// its first value).
func strobeMapLabels(name string, b []byte) []LabelValue {
	id := int64(binary.LittleEndian.Uint64(b))
	out := []LabelValue{{Name: name + ".id", Value: strconv.FormatInt(id, 10), Num: &id}}
	const n = prog.StrobeMapStrLen
	if tag := cString(b[8 : 8+n]); tag != "" {
		out = append(out, LabelValue{Name: name + ".tag", Value: tag})
	}
	seen := map[string]bool{"id": true, "tag": true}
	for e := 0; e < prog.StrobeMapEntries; e++ {
		at := 8 + n + 2*n*e
		key := cString(b[at : at+n])
		if key == "" || seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, LabelValue{Name: name + "." + key, Value: cString(b[at+n : at+2*n])})
	}
	return out
}
