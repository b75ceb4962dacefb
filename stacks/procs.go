package stacks

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/stacks/prog"
	"github.com/tracekit/tracekit/symbols"
)

// file is what the profiler keeps of one mapped ELF file: the file itself,
// held open so that it can be read after its processes are gone; its
// program headers (for the load bias); its symbols, read when a report
// first needs them; and where its unwind rows sit in the shared row table,
// loaded when the unwinder first needs them.
type file struct {
	name  string
	elf   *elf.File
	osf   *os.File // nil for [vdso], read from memory
	progs []*elf.Prog
	syms  []symbols.Symbol
	named bool // syms read
	first int  // index of its first row in the table; -1 if not loaded
	rows  int
	tried bool  // loading its rows was tried
	err   error // why its rows are not loaded
	// deferrals counts its samples deferred while its table is read;
	// held: past maxDeferredPerFile of them, its mappings say "no rows"
	// until the table comes, and the unwinder defers no more of them.
	deferrals int
	held      bool
	big       bool // its table is read in the big files' lane

	labelSyms    map[string]elf.Symbol // the --label and context symbols it defines
	labelSymsErr error                 // why its symbols are unreadable
	tls          []tlsReloc            // its dynamic relocations of thread-locals
	tlsErr       error                 // why they are not read
	tlsRead      bool

	sigreturn map[uint64]bool // addresses past every symbol: the signal return trampoline?
}

// procMapping is an executable mapping of a process and its file.
type procMapping struct {
	mapping
	bias uint64
	file *file
}

type process struct {
	comm     string
	maps     []procMapping
	anon     []mapping  // executable mappings of no file (JIT code)
	prefixes []lpmKey   // in the mappings trie
	spans    []lpmValue // what point put there: each span's every prefix, with it
	scanned  time.Time
	every    time.Duration // the least time to the next rescan
	gone     bool
	exited   bool // its last thread exited (the exit program said so)
	denied   bool // its files (or maps) are not ours to read: counted once
	// labelsLate: a label's GOT slot was not filled in yet at the last
	// placing: place them again at the next scan. labelsMissing: a label's
	// symbol is in none of its files yet (a library the loader, or a
	// dlopen, has not mapped yet): rescan it as a process asked for is.
	labelsLate, labelsMissing bool
	labelTries                int       // rescans at the first pace for them
	otelKeys                  []string  // its OpenTelemetry attributes' key names
	otelKeysTried             time.Time // when they were last looked for at a report
	otelKeysWait              bool      // it has a record and no key names yet: looked for at each rescan
}

// labelTriesFast is how many rescans at the first pace labels that wait
// for the loader get: a second of ticks.
const labelTriesFast = int(time.Second / rescanFirst)

// processes records the processes seen during the run: their mappings and
// names, captured when each is first seen so that a process gone by report
// time is still named, and (unwinding by tables) loads the rows of their
// files: all of them for the processes asked for (-p, -c), else a file's
// when the unwinder first meets an address in it.
type processes struct {
	procs     map[uint32]*process
	files     map[fileKey]*file // every file mapped, opened once for all
	eager     bool              // the processes asked for (-p, -c): their files' tables loaded at once
	mode      string            // the unwind mode (prog.Unwind*)
	arch      prog.Arch         // whose rule words and registers
	denied    int               // processes whose maps the kernel would not let us read
	deferLost uint64            // deferred samples the kernel could not send: their ring was full
	// changes counts what may let a deferred sample go on: a table
	// loaded (or refused), a process's mappings read anew, a process gone.
	changes uint64

	rowTable // the files' rows in the kernel's table, and their parsers (tables.go)
	labeling // --label and the context (labels.go)
	namer    // names of user addresses (symbolize.go)
}

func newProcesses(rows *rowChunks, fences, lpm *ebpf.Map, capacity int, eager bool) *processes {
	ps := &processes{eager: eager, files: map[fileKey]*file{}, procs: map[uint32]*process{}}
	ps.rowTable = rowTable{rows: rows, fences: mapOrNil(fences), lpm: mapOrNil(lpm), capacity: capacity, done: make(chan parseResult, len(rowTable{}.lanes))}
	if fences != nil {
		ps.fenceCopy = make([]uint32, fences.ValueSize()/4)
	}
	return ps
}

// A process is rescanned when the unwinder meets an address outside its
// known files (a library just mapped, dlopen): at most every rescanFirst,
// twice as long after each rescan that found nothing new (JIT code is in
// no file), up to rescanMost.
const (
	rescanFirst = 50 * time.Millisecond
	rescanMost  = 5 * time.Second
)

// announced rescans a process its first sample, or its exec, announced.
// A pid whose process exited belongs to another process now: it starts
// afresh (its labels, their key names), but for its prefixes in the
// mappings trie, which the scan replaces. Unless the scan finds no
// mapping there: then the announcement was the exited process's own, a
// sample taken in its last thread's exit after the exit's notice (which
// made it new to the kernel's seen map again), and it keeps its record.
// Replaced, its every frame was "[unknown]" at the report.
func (ps *processes) announced(pid uint32) {
	p := ps.procs[pid]
	if p == nil || !p.exited {
		ps.scan(pid, true)
		return
	}
	fresh := &process{comm: p.comm, prefixes: p.prefixes}
	ps.procs[pid] = fresh
	ps.scan(pid, true)
	if len(fresh.maps) == 0 {
		p.prefixes, p.spans = fresh.prefixes, fresh.spans
		ps.procs[pid] = p
	}
}

// exited marks a process whose last thread exited: it is not rescanned,
// its prefixes leave the mappings trie, and the pid's next process starts
// afresh.
func (ps *processes) exited(pid uint32) {
	if p := ps.procs[pid]; p != nil {
		p.gone, p.exited = true, true
		if ps.lpm != nil {
			for _, k := range p.prefixes {
				_ = ps.lpm.Delete(k)
			}
		}
		p.prefixes, p.spans = nil, nil
		ps.changes++
	}
}

// sweepEvery is how often the processes gone are looked for (sweep).
const sweepEvery = 10 * time.Second

// sweep forgets the processes that are gone but still in the kernel's
// seen map: a process seen before profile's exit program was attached,
// or where there is none (see taskExit), or sampled in its exit after
// the program's notice, which makes it new to seen again. Without it the
// map (and the trie's prefixes of each) filled over a long run. Then it
// drops the records of the exited processes that no count held refers
// to (counted): what profile keeps of processes is bounded by the counts
// it holds and the processes alive.
func (ps *processes) sweep(seen, labels *ebpf.Map, counted func(uint32) bool) {
	var dead []uint32
	var pid uint32
	var v uint64
	it := seen.Iterate()
	for it.Next(&pid, &v) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); errors.Is(err, fs.ErrNotExist) {
			dead = append(dead, pid)
		}
	}
	for _, pid := range dead {
		_ = seen.Delete(pid)
		if labels != nil {
			_ = labels.Delete(pid)
		}
		ps.exited(pid)
	}
	for pid, p := range ps.procs {
		if p.exited && !counted(pid) {
			delete(ps.procs, pid)
		}
	}
}

// scan (re)reads a process's mappings and name. A process that is gone
// keeps what an earlier scan recorded.
func (ps *processes) scan(pid uint32, force bool) {
	p := ps.procs[pid]
	if p != nil && !force && time.Since(p.scanned) < p.every {
		return
	}
	maps, err := readMaps(pid)
	if err != nil {
		if p == nil {
			p = &process{comm: "?"}
			ps.procs[pid] = p
		}
		ps.noteDenied(p, err)
		p.gone = true // exited (or not ours to read): keep what an earlier scan recorded
		ps.changes++
		if p.denied && p.maps == nil && ps.lpm != nil {
			// Its maps are not ours to read: every address of it is known
			// to have no table (else each of its samples would be deferred
			// to user space, which cannot unwind it either).
			var k lpmKey
			k.Prefixlen = 32
			binary.BigEndian.PutUint32(k.Pid[:], pid)
			if ps.lpm.Put(k, lpmValue{}) == nil {
				p.prefixes = append(p.prefixes, k)
			}
		}
		return
	}
	if p == nil {
		p = &process{}
		ps.procs[pid] = p
	}
	p.scanned = time.Now()
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
		p.comm = strings.TrimSpace(string(b))
	}
	found, anon := execMappings(pid, maps, ps.files, func(err error) { ps.noteDenied(p, err) })
	if len(found) == 0 && p.maps != nil {
		return // an exec in progress, or a zombie: keep what we had
	}
	if !force && sameMappings(p.maps, found) && slices.Equal(p.anon, anon) {
		// Labels waiting for the loader are looked for at every tick for
		// a second, then as the backoff allows (symbols not mapped yet:
		// in the processes asked for only, not in every process of the
		// machine).
		if p.otelKeysWait {
			p.otelKeys, _ = readOTelKeys(pid)
			p.otelKeysWait = p.otelKeys == nil
		}
		waiting := p.labelsLate || p.labelsMissing && ps.eager
		if waiting {
			p.labelTries++
		}
		if p.labelsLate {
			ps.placeLabels(pid, p)
		}
		if !waiting || p.labelTries > labelTriesFast {
			p.every = min(2*p.every, rescanMost)
		}
		return
	}
	p.every = rescanFirst
	p.maps, p.anon = found, anon
	ps.changes++
	if ps.labelMap != nil {
		ps.placeLabels(pid, p)
	}
	if ps.lpm == nil {
		return
	}
	if ps.eager {
		for _, m := range p.maps {
			ps.load(m.file)
		}
	}
	ps.point(pid, p)
}

// refresh rescans the processes asked for (-p, -c) as their backoff
// allows: the libraries the loader maps after an exec get their tables
// before the process first runs code in them.
//
// Other processes are rescanned while their labels wait for the loader:
// a slot not filled in yet, or a symbol not mapped yet, or the key names
// of an OpenTelemetry record not published yet (until the backoff
// reaches its longest, some 6 s of rescans: a library opened later is
// found at the next scan a miss or an exec makes).
//
// It returns when the next of these rescans is due (zero if none is).
func (ps *processes) refresh() (next time.Time) {
	for pid, p := range ps.procs {
		if !ps.rescanned(p) {
			continue
		}
		ps.scan(pid, false)
		if due := p.scanned.Add(p.every); ps.rescanned(p) && (next.IsZero() || due.Before(next)) {
			next = due
		}
	}
	return next
}

// rescanned says whether refresh rescans a process.
func (ps *processes) rescanned(p *process) bool {
	return !p.gone && (ps.eager || p.labelsLate || (p.labelsMissing || p.otelKeysWait) && p.every < rescanMost)
}

// miss loads the table of the file at addr in a process, which the
// unwinder met without one, and points every known process that maps the
// file at it. It returns the mapping there, if one is known.
func (ps *processes) miss(pid uint32, addr uint64) *procMapping {
	m := ps.mappingAt(pid, addr)
	if ps.lpm == nil {
		return m
	}
	if m == nil {
		ps.scan(pid, false) // a library mapped since the last scan, or JIT code
		if m = ps.mappingAt(pid, addr); m == nil {
			return nil
		}
	}
	ps.load(m.file) // once; it points the processes that map the file at its rows
	return m
}

// mappingAt is the mapping of process pid that holds addr, or nil.
func (ps *processes) mappingAt(pid uint32, addr uint64) *procMapping {
	if p := ps.procs[pid]; p != nil {
		return mappingIn(p.maps, addr)
	}
	return nil
}

// mappingIn is the mapping of maps that holds addr, or nil.
func mappingIn(maps []procMapping, addr uint64) *procMapping {
	for i := range maps {
		if addr >= maps[i].Start && addr < maps[i].End {
			return &maps[i]
		}
	}
	return nil
}

// afterEntry says whether ret, a return address of a process, is one of
// its first calls: in the code at the entry point of its file (within
// entryCode bytes). There the dynamic loader's _start has no unwind row:
// glibc's ld.so calls _dl_start (x86-64: mov %rsp,%rdi; call _dl_start,
// ret = entry+8; arm64's the same in a few instructions), then, as
// _dl_start_user with rbp cleared "to mark the outermost frame even for
// constructors", _dl_init (ret = entry+0x30 on x86-64), which runs the
// libraries' constructors: a stack taken in the loader's first work or in
// a constructor ends with "no unwind row" where it is whole. (An
// executable's _start marks its return address undefined, and ends
// complete by its row.)
func (ps *processes) afterEntry(pid uint32, ret uint64) bool {
	m := ps.mappingAt(pid, ret-1)
	if m == nil || m.file.elf == nil || m.file.elf.Entry == 0 || ret-1 < m.bias {
		return false
	}
	at := ret - 1 - m.bias
	return at >= m.file.elf.Entry && at < m.file.elf.Entry+entryCode
}

// entryCode is how far past the entry point the loader's start code calls
// (glibc 2.36's x86-64 _start and _dl_start_user: 61 bytes, its second
// call's return address at 48; arm64's and riscv64's are as short).
const entryCode = 64

func sameMappings(a, b []procMapping) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].mapping != b[i].mapping {
			return false
		}
	}
	return true
}

// fileOf opens a mapped file once (its program headers only; the rest is
// read when needed).
// closeFiles closes the files opened for files' mappings.
func closeFiles(files map[fileKey]*file) {
	for _, f := range files {
		if f != nil && f.osf != nil {
			f.osf.Close()
		}
	}
}

// execMappings is what a process's maps say of its code: the mappings
// of executable files, each with its file (opened once for all
// processes: files) and its bias, and the executable mappings of no file
// (JIT code). A file that cannot be read is left out, and its error
// handed to failed.
func execMappings(pid uint32, maps []mapping, files map[fileKey]*file, failed func(error)) (found []procMapping, anon []mapping) {
	for _, m := range maps {
		if m.Exec() && (m.Path == "" || strings.HasPrefix(m.Path, "[anon")) {
			anon = append(anon, m)
		}
		if !m.Exec() || m.Path == "" || strings.HasPrefix(m.Path, "[") && m.Path != "[vdso]" {
			continue
		}
		f, err := fileOf(files, pid, m)
		failed(err)
		if f == nil {
			continue
		}
		bias, ok := biasOf(&elf.File{Progs: f.progs}, m)
		if !ok {
			continue
		}
		found = append(found, procMapping{mapping: m, bias: bias, file: f})
	}
	return found, anon
}

// fileOf is the file mapping m of process pid maps, from files, or
// opened and added to them (nil, and remembered as such, where it cannot
// be read, but for a file the kernel denies this process: another may
// reach it).
func fileOf(files map[fileKey]*file, pid uint32, m mapping) (*file, error) {
	key := keyOf(m)
	if f, ok := files[key]; ok {
		return f, nil
	}
	ef, osf, err := openMapped(pid, m)
	var denied *procfs.DeniedError
	if errors.As(err, &denied) {
		return nil, err
	} else if err != nil {
		files[key] = nil
		return nil, err
	}
	f := &file{name: filepath.Base(m.Path), elf: ef, osf: osf, progs: ef.Progs, first: -1}
	files[key] = f
	return f, nil
}

// maxDeferredPerFile is how many of the samples waiting for one file's
// table may be deferred (of maxDeferred): a process whose huge table is
// parsed for a minute (a hostile file, a slow machine) sent every sample
// to user space, up to 10 KiB each, and when profile read them too slowly
// the ring dropped other processes' deferrals with them. (A ring that
// overflows all the same holds every file being read: holdReading.)
const maxDeferredPerFile = 64

// deferredIn counts a sample deferred in mapping m (nil: none known)
// against its file, if its table is being read in the big files' lane; at
// maxDeferredPerFile the file is held: its samples are counted as far as
// the loaded tables go (frame pointers in auto mode), not deferred, until
// its table comes. A small file is never held: its table comes in a
// moment (in the 1-CPU guests, starved, libc's took 2 s: held, a new
// process's samples in it were cut short meanwhile), and its samples wait
// for it in the queue.
func (ps *processes) deferredIn(m *procMapping) {
	if m == nil {
		return
	}
	f := m.file
	if !f.big || f.settled() || f.held {
		return
	}
	if f.deferrals++; f.deferrals >= maxDeferredPerFile {
		f.held = true
		ps.repoint(f)
	}
}

// holdReading holds every big file whose table is still being read (see
// deferredIn): the deferred samples' ring overflowed, profile reads it
// too slowly, and the samples of files parsed for seconds (a big library
// on a starved machine, a hostile file) took the room a new process's
// first samples need. Lost records name no file: all of those are held.
// (Not the small files': read in a moment, their samples are the first
// ones of new processes, which the deferral is for.)
func (ps *processes) holdReading() {
	for _, f := range ps.files {
		if f != nil && f.big && !f.settled() && !f.held {
			f.held = true
			ps.repoint(f)
		}
	}
}

// noteDenied counts p, once, where err says the kernel would not let us
// read its maps or files.
func (ps *processes) noteDenied(p *process, err error) {
	var denied *procfs.DeniedError
	if errors.As(err, &denied) && !p.denied {
		p.denied = true
		ps.denied++
	}
}

// close ends the background parser and closes every file held open, and
// the row table's chunks.
func (ps *processes) close() {
	ps.closing.Store(true)
	ps.parsed.Wait()
	closeFiles(ps.files)
	if ps.rows != nil {
		ps.rows.close()
	}
}

// placeLabels writes where process pid keeps the labels for the sampler.
func (ps *processes) placeLabels(pid uint32, p *process) {
	locs, late, missing := ps.labelLocations(pid, p)
	if late && p.labelTries == labelTriesFast+1 && len(ps.labelNotes) < 32 {
		ps.labelNotes = append(ps.labelNotes, fmt.Sprintf("labels of %s (%d): a library's GOT slot not filled in after %v (still tried as the backoff allows)", p.comm, pid, time.Duration(labelTriesFast)*rescanFirst))
	}
	p.labelsLate, p.labelsMissing = late, missing
	b := make([]byte, 0, prog.LabelLocSize*len(locs))
	unset := true
	for _, l := range locs {
		b = l.AppendTo(b)
		unset = unset && l.Mode == prog.LocUnset
	}
	if unset {
		ps.labelMap.Delete(pid) // none: the program does not even read the thread pointer
		return
	}
	if err := ps.labelMap.Put(pid, b); err != nil && len(ps.labelNotes) < 32 {
		ps.labelNotes = append(ps.labelNotes, fmt.Sprintf("labels of pid %d: %v", pid, err))
	}
}
