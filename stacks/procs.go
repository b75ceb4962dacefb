package stacks

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/bits"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/internal/regular"
	"github.com/tracekit/tracekit/ldso"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/stacks/prog"
	"github.com/tracekit/tracekit/symbols"
	"github.com/tracekit/tracekit/unwind"
	"golang.org/x/sys/unix"
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

// lpmKey and lpmValue are the mappings trie's: {pid, address} big-endian,
// the longest prefix wins.
type lpmKey struct {
	Prefixlen uint32
	Pid       [4]byte
	Addr      [8]byte
}

// lpmValue is the trie's value as the unwinder reads it (prog.MappingSize
// bytes: the index below is out of range otherwise).
var _ = [1]struct{}{}[unsafe.Sizeof(lpmValue{})-prog.MappingSize]

type lpmValue struct {
	First, Count uint32
	Bias         uint64
	// Start and End are the mapping's (every prefix of it has them): the
	// unwinder caches the last frame's and looks up no other frame in it.
	Start, End uint64
}

// processes records the processes seen during the run: their mappings and
// names, captured when each is first seen so that a process gone by report
// time is still named, and (unwinding by tables) loads the rows of their
// files: all of them for the processes asked for (-p, -c), else a file's
// when the unwinder first meets an address in it.
type processes struct {
	rows        *rowChunks // nil with --unwind=fp
	fences, lpm bpfMap     // nil with --unwind=fp
	fenceCopy   []uint32   // the fences value, written whole
	eager       bool
	short       bool              // --no-params: names without parameters
	mode        string            // the unwind mode (prog.Unwind*)
	arch        prog.Arch         // whose rule words and registers
	names       map[string]string // demangled names by symbol
	capacity    int               // rows the table holds
	next        int               // its first free row, at a block's start
	files       map[fileKey]*file
	procs       map[uint32]*process
	full        int      // files left out: the row table was full
	denied      int      // processes whose maps the kernel would not let us read
	refused     []string // files past the parse's limits, and why
	deferLost   uint64   // deferred samples the kernel could not send: their ring was full
	// changes counts what may let a deferred sample go on: a table
	// loaded (or refused), a process's mappings read anew, a process gone.
	changes   uint64
	loadTime  time.Duration
	preloaded int // files of the -c command read before its release

	labels     []LabelSpec     // --label
	context    bool            // not --no-context: the OpenTelemetry context and custom labels
	wanted     map[string]bool // the symbols of the labels and the context
	labelMap   bpfMap          // pid -> the labels' locations in it
	labelNotes []string        // why labels are unset, once each

	// The background parsers, one a lane (small files, big ones), each a
	// file at a time, their results on done, each waking the reader
	// that collects them through wake (once it is there).
	lanes   [2]parseLane
	gcWas   int // GOGC before the big files' lane began, 0 when it is idle
	done    chan parseResult
	wake    atomic.Pointer[func()]
	closing atomic.Bool
	parsed  sync.WaitGroup
}

// parseLane is a background parser's queue.
type parseLane struct {
	queue []parseJob
	busy  bool
}

// The lanes: a small file's table (libc's) is not read behind a big one
// (libLLVM's, a hostile file's) parsed for seconds.
const (
	laneSmall = iota
	laneBig
)

func newProcesses(rows *rowChunks, fences, lpm *ebpf.Map, capacity int, eager bool) *processes {
	ps := &processes{rows: rows, fences: mapOrNil(fences), lpm: mapOrNil(lpm), capacity: capacity, eager: eager, files: map[fileKey]*file{}, procs: map[uint32]*process{}, done: make(chan parseResult, len(processes{}.lanes))}
	if fences != nil {
		ps.fenceCopy = make([]uint32, fences.ValueSize()/4)
	}
	return ps
}

// bpfMap is what process tracking does to its BPF maps (the mappings
// trie, the fences, the labels' places): an *ebpf.Map in a run, a map in
// memory in the tests of its logic, which then need no root.
type bpfMap interface {
	Put(key, value any) error
	Delete(key any) error
	Lookup(key, valueOut any) error
}

// mapOrNil is m as a bpfMap: nil when m is (an interface holding a nil
// pointer is not nil).
func mapOrNil(m *ebpf.Map) bpfMap {
	if m == nil {
		return nil
	}
	return m
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
	var found []procMapping
	var anon []mapping
	for _, m := range maps {
		if m.Exec() && (m.Path == "" || strings.HasPrefix(m.Path, "[anon")) {
			anon = append(anon, m)
		}
		if !m.Exec() || m.Path == "" || strings.HasPrefix(m.Path, "[") && m.Path != "[vdso]" {
			continue
		}
		f, err := ps.fileOf(pid, m)
		ps.noteDenied(p, err)
		if f == nil {
			continue
		}
		bias, ok := biasOf(&elf.File{Progs: f.progs}, m)
		if !ok {
			continue
		}
		found = append(found, procMapping{mapping: m, bias: bias, file: f})
	}
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

func (ps *processes) mappingAt(pid uint32, addr uint64) *procMapping {
	p := ps.procs[pid]
	if p == nil {
		return nil
	}
	for i := range p.maps {
		if addr >= p.maps[i].Start && addr < p.maps[i].End {
			return &p.maps[i]
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
func (ps *processes) fileOf(pid uint32, m mapping) (*file, error) {
	key := keyOf(m)
	if f, ok := ps.files[key]; ok {
		return f, nil
	}
	ef, osf, err := openMapped(pid, m)
	var denied *procfs.DeniedError
	if errors.As(err, &denied) {
		return nil, err // not remembered: another process may reach the file
	} else if err != nil {
		ps.files[key] = nil
		return nil, err
	}
	f := &file{name: filepath.Base(m.Path), elf: ef, osf: osf, progs: ef.Progs, first: -1}
	ps.files[key] = f
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
	for _, f := range ps.files {
		if f != nil && f.osf != nil {
			f.osf.Close()
		}
	}
	if ps.rows != nil {
		ps.rows.close()
	}
}

// rowChunks is the row table: blocks of unwind.BlockRows rows, numbered
// from 0 across chunks of spec.MaxEntries blocks each, which it makes
// (kernel memory) only as rows are stored, and puts in the array of maps
// the unwinder looks them up through (prog.Config.RowChunk).
type rowChunks struct {
	outer  *ebpf.Map
	spec   *ebpf.MapSpec
	chunks []*ebpf.Map
	// read holds the blocks block read (a block, once stored, never
	// changes): the samples unwound in user space read the same few
	// blocks of libc and their programs frame after frame, a map lookup
	// each without it. Emptied when it holds readBlocks of them.
	read map[int]*[unwind.BlockRows]unwind.Entry
}

// readBlocks bounds rowChunks.read: 256 blocks, 128 KiB.
const readBlocks = 256

func newRowChunks(outer *ebpf.Map, spec *ebpf.MapSpec) *rowChunks {
	return &rowChunks{outer: outer, spec: spec}
}

func (t *rowChunks) per() int { return int(t.spec.MaxEntries) }

// chunk is the chunk of block b, made if it is not yet.
func (t *rowChunks) chunk(b int) (*ebpf.Map, error) {
	for len(t.chunks) <= b/t.per() {
		m, err := ebpf.NewMap(t.spec)
		if err != nil {
			return nil, fmt.Errorf("make a chunk of the row table: %w", err)
		}
		if err := t.outer.Put(uint32(len(t.chunks)), m); err != nil {
			m.Close()
			return nil, fmt.Errorf("add a chunk to the row table: %w", err)
		}
		t.chunks = append(t.chunks, m)
	}
	return t.chunks[b/t.per()], nil
}

// put writes blocks at block first on, in batches (5.6+) or one by one,
// within each chunk.
func (t *rowChunks) put(first int, blocks [][unwind.BlockRows]unwind.Entry) error {
	keys := make([]uint32, 0, storeBatch)
	for len(blocks) > 0 {
		m, err := t.chunk(first)
		if err != nil {
			return err
		}
		n := min(len(blocks), storeBatch, t.per()-first%t.per())
		keys = keys[:0]
		for j := range n {
			keys = append(keys, uint32((first+j)%t.per()))
		}
		if _, err := m.BatchUpdate(keys, blocks[:n], nil); err != nil {
			if !errors.Is(err, ebpf.ErrNotSupported) {
				return err
			}
			for k := range keys {
				if err := m.Put(keys[k], blocks[k]); err != nil {
					return err
				}
			}
		}
		first, blocks = first+n, blocks[n:]
	}
	return nil
}

// block reads block b (made already).
func (t *rowChunks) block(b int, to *[unwind.BlockRows]unwind.Entry) error {
	if r := t.read[b]; r != nil {
		*to = *r
		return nil
	}
	if b/t.per() >= len(t.chunks) {
		return fmt.Errorf("block %d: no chunk of the row table holds it", b)
	}
	if err := t.chunks[b/t.per()].Lookup(uint32(b%t.per()), to); err != nil {
		return err
	}
	if len(t.read) >= readBlocks || t.read == nil {
		t.read = make(map[int]*[unwind.BlockRows]unwind.Entry, readBlocks)
	}
	r := *to
	t.read[b] = &r
	return nil
}

func (t *rowChunks) close() {
	for _, m := range t.chunks {
		m.Close()
	}
	t.chunks, t.read = nil, nil
}

// A frame section larger than this is parsed in the big files' lane, one
// file at a time, while the samples of other processes' files go on being
// read and their tables loaded; a smaller one (libc's is 0.2 MiB,
// python3.11's 0.6) in the small files' lane. Neither parse holds up the
// reading of the rings: a starved profile that parsed libc in its reader
// (one to two seconds in the 1-CPU guests beside TestHostileFrames'
// parse) let the deferred samples' ring overflow meanwhile. The parse of
// any one file allocates at most
// unwind.ParseMemory (43 MiB), whatever its size; a file past the parse's
// limits (unwind.MaxFDEs FDEs, unwind.MaxRows rows) is refused and named in
// the report.
const (
	inlineFrames        = 1 << 20
	maxCompressedFrames = 16 << 20 // a compressed .debug_frame is read whole: at most this
)

// frameSource is where a file's frame section is read from.
type frameSource struct {
	arch  unwind.Arch
	extra []unwind.FDE // rows the section lacks (arm64's and riscv64's PLT)
	src   io.ReaderAt
	size  int64
	addr  uint64
	debug bool
}

// frames finds a file's .eh_frame (else .debug_frame).
func frames(ef *elf.File) (fs frameSource, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed ELF file (%v)", p)
		}
	}()
	if want := hostMachine(); ef.Machine != want {
		// The rule words are the running unwinder's architecture's.
		return fs, fmt.Errorf("%v: the unwinder here reads %v frames only", ef.Machine, want)
	}
	fs.arch, _ = unwind.ArchOf(ef.Machine)
	if plt := ef.Section(".plt"); plt != nil && plt.Type == elf.SHT_PROGBITS && plt.Addr+plt.Size < 1<<32 {
		switch ef.Machine {
		case elf.EM_AARCH64:
			fs.extra = append(fs.extra, unwind.PLTARM64(plt.Addr, plt.Size))
		case elf.EM_RISCV:
			fs.extra = append(fs.extra, unwind.PLTRISCV64(plt.Addr, plt.Size))
		}
	}
	for _, p := range ef.Progs {
		if p.Type == elf.PT_LOAD && p.Vaddr+p.Memsz > 1<<32 {
			return fs, errors.New("addresses above 4 GiB")
		}
	}
	sec := ef.Section(".eh_frame")
	if sec == nil || sec.Type == elf.SHT_NOBITS {
		if sec = ef.Section(".debug_frame"); sec == nil || sec.Type == elf.SHT_NOBITS {
			return fs, errors.New("no .eh_frame or .debug_frame")
		}
		fs.debug = true
	}
	fs.addr = sec.Addr
	if sec.Flags&elf.SHF_COMPRESSED == 0 {
		fs.src, fs.size = sec.ReaderAt, int64(sec.Size)
		return fs, nil
	}
	// Compressed (Go's .debug_frame): read whole, within a bound.
	if sec.Size > maxCompressedFrames {
		return fs, fmt.Errorf("a compressed %s of %d MiB, more than the %d MiB profile reads", sec.Name, sec.Size>>20, maxCompressedFrames>>20)
	}
	data := make([]byte, sec.Size)
	if _, err := io.ReadFull(sec.Open(), data); err != nil {
		return fs, fmt.Errorf("read %s: %w", sec.Name, err)
	}
	fs.src, fs.size = bytes.NewReader(data), int64(len(data))
	return fs, nil
}

// hostMachine is the ELF machine of the architecture profile runs on:
// the one whose frames the in-kernel unwinder steps.
func hostMachine() elf.Machine {
	switch runtime.GOARCH {
	case "arm64":
		return elf.EM_AARCH64
	case "riscv64":
		return elf.EM_RISCV
	}
	return elf.EM_X86_64
}

// load has a file's unwind rows read into the table, once, by the
// background parser of its lane; collect loads them when they are read.
func (ps *processes) load(f *file) {
	if f.tried {
		return
	}
	f.tried = true
	fs, err := frames(f.elf)
	if err != nil {
		// No frame section (a Go binary, stripped or not): settled now,
		// and the processes that map it are pointed at no rows. Without
		// that, their trie never had the mapping, and every sample of
		// theirs was deferred to user space for the whole run (profile's
		// own threads, each deferral waking profile to read it: 100,000
		// of them in a run of the off-CPU bench, twice its BPF time).
		ps.loaded(f, nil, err)
		return
	}
	lane := laneSmall
	if fs.size > inlineFrames {
		lane, f.big = laneBig, true
	}
	ps.lanes[lane].queue = append(ps.lanes[lane].queue, parseJob{f, fs})
	ps.startParse(lane)
}

// parseJob is a file for the background parser.
type parseJob struct {
	f  *file
	fs frameSource
}

type parseResult struct {
	lane  int
	f     *file
	table *unwind.Table
	err   error
	took  time.Duration
}

// startParse hands a lane's next queued file to its parser, if it is
// idle.
func (ps *processes) startParse(lane int) {
	l := &ps.lanes[lane]
	if l.busy || len(l.queue) == 0 {
		return
	}
	job := l.queue[0]
	l.queue = l.queue[1:]
	l.busy = true
	if lane == laneBig && ps.gcWas == 0 {
		// Collected sooner while a big file is read: the table it
		// builds (libLLVM-14's 7.6 MiB) would otherwise let the heap grow
		// to twice the rest before the next collection.
		if was := debug.SetGCPercent(bigParseGC); was > bigParseGC {
			ps.gcWas = was
		} else {
			debug.SetGCPercent(was) // GOGC=off, or lower already
		}
	}
	ps.parsed.Add(1)
	go func() {
		defer ps.parsed.Done()
		start := time.Now()
		table, err := readFrames(job.fs, &ps.closing)
		ps.done <- parseResult{lane, job.f, table, err, time.Since(start)}
		if wake := ps.wake.Load(); wake != nil {
			(*wake)() // collected now, not at the reader's next due work
		}
	}()
}

// parsing says whether a lane's parser (laneSmall, laneBig; -1: either)
// is at work.
func (ps *processes) parsing(lane int) bool {
	if lane >= 0 {
		return ps.lanes[lane].busy
	}
	return ps.lanes[laneSmall].busy || ps.lanes[laneBig].busy
}

// collect loads the tables the parsers have read, and starts their next
// files.
func (ps *processes) collect() {
	for {
		select {
		case res := <-ps.done:
			ps.collected(res)
		default:
			return
		}
	}
}

// await loads the tables the parsers read (of one lane, or -1: both) until
// the lane is idle or the wait is over; it says whether the lane is idle.
func (ps *processes) await(lane int, wait time.Duration) bool {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for ps.parsing(lane) {
		select {
		case res := <-ps.done:
			ps.collected(res)
		case <-deadline.C:
			return false
		}
	}
	return true
}

func (ps *processes) collected(res parseResult) {
	ps.lanes[res.lane].busy = false
	ps.loadTime += res.took
	ps.loaded(res.f, res.table, res.err)
	ps.startParse(res.lane)
	if res.lane == laneBig && !ps.lanes[laneBig].busy && ps.gcWas != 0 {
		debug.SetGCPercent(ps.gcWas)
		ps.gcWas = 0
		debug.FreeOSMemory() // the big tables' garbage, given back
	}
}

// bigParseGC is the garbage collector's GOGC while a big file's table is
// read (see startParse).
const bigParseGC = 25

// preloadWait bounds how long the -c command waits for the tables of
// its files (the largest libraries' take longest).
const preloadWait = 2 * time.Second

// finalWait bounds how long the final report waits for the small files'
// tables still being read: the samples deferred for them are unwound
// whole, not cut short at the end.
const finalWait = time.Second

// preload reads the tables of the files a -c command will map before it
// is released (its executable, its interpreter and libraries as
// ldso.Files finds them): its first samples find them loaded, none
// deferred to user space while they are read. The shell that runs the
// line is the command's process already, its files loaded by its scan.
// A file the process maps under another key (another device or inode
// than stat says: a btrfs subvolume, an overlay) is read again then.
func (ps *processes) preload(line string) {
	exe := commandExecutable(line)
	if exe == "" || ps.lpm == nil {
		return
	}
	paths, err := ldso.Files(exe, nil)
	if err != nil {
		return // not ELF (a script): the shell runs it, its interpreter found at its exec
	}
	for _, path := range paths {
		if real, err := filepath.EvalSymlinks(path); err == nil {
			path = real // the name the mapping will have
		}
		osf, err := regular.Open(path)
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(int(osf.Fd()), &st) != nil {
			osf.Close()
			continue
		}
		key := fileKey{Dev: procfs.MapsDev(st.Dev), Inode: st.Ino}
		if _, ok := ps.files[key]; ok {
			osf.Close()
			continue
		}
		ef, err := symbols.NewELF(osf)
		if err != nil {
			osf.Close()
			continue
		}
		f := &file{name: filepath.Base(path), elf: ef, osf: osf, progs: ef.Progs, first: -1}
		ps.files[key] = f
		ps.preloaded++
		ps.load(f)
	}
	ps.await(-1, preloadWait)
}

// readFrames parses a frame section; a closing flag set ends it at its
// next read of the file.
func readFrames(fs frameSource, closing *atomic.Bool) (table *unwind.Table, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed ELF file (%v)", p)
		}
	}()
	src := fs.src
	if closing != nil {
		src = stoppable{src, closing}
	}
	table, err = fs.arch.Read(src, fs.size, fs.addr, fs.debug, fs.extra...)
	if err == nil && table.Len() == 0 {
		err = errors.New("no unwind rows")
	}
	return table, err
}

type stoppable struct {
	io.ReaderAt
	closing *atomic.Bool
}

var errClosing = errors.New("profile is exiting")

func (s stoppable) ReadAt(b []byte, off int64) (int, error) {
	if s.closing.Load() {
		return 0, errClosing
	}
	return s.ReaderAt.ReadAt(b, off)
}

// loaded puts a file's parsed rows in the table, and points every process
// that maps the file at them.
func (ps *processes) loaded(f *file, table *unwind.Table, err error) {
	if err == nil {
		err = ps.storeRows(f, table)
	}
	f.held = false
	ps.changes++
	if f.err = err; err != nil {
		var limit *unwind.LimitError
		if errors.As(err, &limit) {
			ps.refused = append(ps.refused, fmt.Sprintf("%s: %v", f.name, err))
		}
	}
	// Its rows, or (refused, unreadable) none: either way the unwinder
	// stops deferring its samples now, not at the processes' next scans.
	ps.repoint(f)
}

// settled says whether the file's table is known: its rows loaded, or
// refused or unreadable. Else it is being read (or not yet tried).
func (f *file) settled() bool { return f.first >= 0 || f.tried && f.err != nil }

// repoint points the processes that map f anew (see point).
func (ps *processes) repoint(f *file) {
	if ps.lpm == nil {
		return
	}
	for pid, p := range ps.procs {
		if p.exited {
			continue // its prefixes went with it
		}
		for _, pm := range p.maps {
			if pm.file == f {
				ps.point(pid, p)
				break
			}
		}
	}
}

// storeRows appends a file's rows to the table, from a block's start, its
// last block padded.
func (ps *processes) storeRows(f *file, table *unwind.Table) error {
	padded := table.Blocks() * unwind.BlockRows
	if ps.next+padded > ps.capacity {
		ps.full++
		return fmt.Errorf("the row table is full (%d of %d rows used)", ps.next, ps.capacity)
	}
	if err := ps.store(table); err != nil {
		return fmt.Errorf("load unwind rows: %w", err)
	}
	f.first, f.rows = ps.next, table.Len()
	ps.next += padded
	return nil
}

// storeBatch is how many blocks store writes in one call.
const storeBatch = 512

// store writes whole blocks of rows at ps.next, storeBatch blocks a call
// (5.6+) or one at a time, then the fences value whole. (Not through a
// mapping of the table into memory: every page of a mapped BPF array is
// resident, the whole table counted in the tool's RSS.)
func (ps *processes) store(table *unwind.Table) error {
	block := ps.next / unwind.BlockRows
	blocks := table.Blocks()
	values := make([][unwind.BlockRows]unwind.Entry, 0, min(blocks, storeBatch))
	for i := 0; i < blocks; i += storeBatch {
		values = values[:0]
		for j := i; j < min(i+storeBatch, blocks); j++ {
			values = append(values, table.Block(j))
			ps.fenceCopy[block+j] = values[len(values)-1][0].PC
		}
		if err := ps.rows.put(block+i, values); err != nil {
			return err
		}
	}
	return ps.fences.Put(uint32(0), ps.fenceCopy)
}

// point replaces the process's prefixes in the mappings trie with those of
// its mappings whose files have rows: the new ones first (a key already
// there is replaced in place), then the stale ones deleted, so that the
// unwinder never misses a mapping that stays. A span put whole before,
// with the same value, is there still: it is not put again (a process's
// rescan after its loader mapped its libraries, a file's table read: each
// a few updates, not one a prefix of every mapping).
func (ps *processes) point(pid uint32, p *process) {
	var keep []lpmKey
	var spans []lpmValue
	kept := map[lpmKey]bool{}
	add := func(start, end uint64, v lpmValue) {
		if deferAll {
			return
		}
		v.Start, v.End = start, end
		there := slices.Contains(p.spans, v)
		whole := true
		for _, k := range prefixes(pid, start, end) {
			if there || ps.lpm.Put(k, v) == nil {
				keep = append(keep, k)
				kept[k] = true
			} else {
				whole = false
			}
		}
		if whole {
			spans = append(spans, v)
		}
	}
	for _, m := range p.maps {
		f := m.file
		switch {
		case f.first >= 0 && m.End-m.bias <= 1<<32 && m.Start >= m.bias:
			add(m.Start, m.End, lpmValue{First: uint32(f.first), Count: uint32(f.rows), Bias: m.bias})
		case f.settled() || f.held:
			// Known to have no table (or none the unwinder can use: past
			// 4 GiB), or held (see deferredIn): no rows (Count 0), so
			// that the unwinder does not defer its samples to user space.
			add(m.Start, m.End, lpmValue{})
		}
		// Else not read yet: its samples are deferred until it is.
	}
	for _, m := range p.anon {
		add(m.Start, m.End, lpmValue{}) // JIT code: no rows
	}
	for _, k := range p.prefixes {
		if !kept[k] {
			_ = ps.lpm.Delete(k)
		}
	}
	p.prefixes, p.spans = keep, spans
}

// prefixes covers [start, end) of a process with aligned power-of-two
// blocks, each a trie prefix of 32 (pid) + 64-k (address) bits.
func prefixes(pid uint32, start, end uint64) []lpmKey {
	var out []lpmKey
	for start < end {
		k := bits.TrailingZeros64(start)
		if start == 0 {
			k = 64
		}
		for k > 0 && (k >= 64 || end-start < 1<<k) {
			k--
		}
		var key lpmKey
		key.Prefixlen = uint32(32 + 64 - k)
		binary.BigEndian.PutUint32(key.Pid[:], pid)
		binary.BigEndian.PutUint64(key.Addr[:], start)
		out = append(out, key)
		start += 1 << k
	}
	return out
}

// symbols reads the file's symbols the first time a report needs them.
func (f *file) symbols() []symbols.Symbol {
	if !f.named {
		f.named, f.syms = true, symbols.Of(f.elf)
	}
	return f.syms
}

// symbolize names a user address of a process: "function", or
// "file+0xADDR" past every symbol's end, or "[unknown]" outside every
// mapped file. ret: the address is a return address (every frame but
// the sampled one and the one a signal interrupted).
func (ps *processes) symbolize(pid uint32, addr uint64, ret bool) string {
	p := ps.procs[pid]
	if p == nil {
		return "[unknown]"
	}
	for _, m := range p.maps {
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
			return ps.demangled(syms[i].Name)
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
func (ps *processes) demangled(name string) string {
	if d, ok := ps.names[name]; ok {
		return d
	}
	if ps.names == nil {
		ps.names = map[string]string{}
	}
	d := symbols.Demangle(name, ps.short)
	if base, ok := strings.CutSuffix(name, "@plt"); ok {
		d = symbols.Demangle(base, ps.short) + "@plt"
	}
	ps.names[name] = d
	return d
}

func (ps *processes) comm(pid uint32) string {
	if p := ps.procs[pid]; p != nil && p.comm != "" {
		return p.comm
	}
	return "?"
}

// tableStats says what the row table holds: the files' rows, and the
// table's rows in use (theirs, and the padding of their last blocks).
func (ps *processes) tableStats() (files, rows, used int) {
	for _, f := range ps.files {
		if f != nil && f.first >= 0 {
			files++
			rows += f.rows
		}
	}
	return files, rows, ps.next
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
