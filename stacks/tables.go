package stacks

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tracekit/tracekit/internal/regular"
	"github.com/tracekit/tracekit/ldso"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/symbols"
	"github.com/tracekit/tracekit/unwind"
	"golang.org/x/sys/unix"
)

// rowTable is the unwinder's table of rows in the kernel (rows, in
// chunks, each file's a block: first, rows) with the fences and the
// mappings trie that point into it, and the background parsers that read
// the files' frame sections for it.
type rowTable struct {
	rows        *rowChunks // nil with --unwind=fp
	fences, lpm bpfMap     // nil with --unwind=fp
	fenceCopy   []uint32   // the fences value, written whole
	capacity    int        // rows the table holds
	next        int        // its first free row, at a block's start
	full        int        // files left out: the row table was full
	refused     []string   // files past the parse's limits or with a malformed frame section, and why
	loadTime    time.Duration
	preloaded   int // files of the -c command read before its release

	// The background parsers, one a lane (small files, big ones), each a
	// file at a time, their results on done (a buffer a lane: a parser
	// never waits), which the run's owner takes in as they come.
	lanes   [2]parseLane
	gcWas   int // GOGC before the big files' lane began, 0 when it is idle
	done    chan parseResult
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
	var limit *unwind.LimitError
	if res.err != nil && !errors.As(res.err, &limit) && !errors.Is(res.err, errNoRows) && !errors.Is(res.err, errClosing) {
		// A frame section that is there and cannot be read: its
		// samples end at "no table", and the report says why.
		ps.refused = append(ps.refused, fmt.Sprintf("%s: malformed frame section: %v", res.f.name, res.err))
	}
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
		err = errNoRows
	}
	return table, err
}

// errNoRows: a frame section without a row (a library of data alone,
// libicudata's): nothing to load, and nothing malformed.
var errNoRows = errors.New("no unwind rows")

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
