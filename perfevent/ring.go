package perfevent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// Rings are the perf ring buffers of one event on every CPU: the way a
// filter program's kept events reach user space. The program is attached
// once (to the first CPU's perf event); it then runs for the event on every
// CPU and each kept event is stored in that CPU's ring
// (kernel/trace/bpf_trace.c: trace_call_bpf, "1 - store").
type Rings struct {
	what   string
	events *PerCPU
	mmaps  [][]byte
	heads  []uint64 // each ring's head when a Read began
	// Lost counts the event's records the kernel dropped because a ring
	// was full, as it reports them (PERF_RECORD_LOST).
	Lost uint64
	// OnComm learns task names as tasks exec (PERF_RECORD_COMM), from
	// rings of their own (FollowNames).
	OnComm func(pid uint32, comm string)

	names     *PerCPU
	nameMmaps [][]byte
	namesLost uint64
	pending   []name   // names read, applied in time order
	batch     []Sample // ReadInOrder's
	keys      []uint64 // ReadInOrder's: each record's run's first time
	order     []int    // ReadInOrder's: the records' indices, sorted

	drain *drain // the Drain reading the rings, if any
}

// drainWait bounds how long Close waits for a Drain's goroutine to end.
const drainWait = time.Second

// Sample is one PERF_RECORD_SAMPLE with TID, TIME, CPU and RAW.
type Sample struct {
	Pid, Tid uint32
	Time     uint64 // the perf clock (local_clock), ns
	CPU      uint32
	Raw      []byte // the trace event record, as the format file lays it out
}

// DefaultRingPages is each CPU's ring size in pages, a power of two: 256
// KiB with 4 KiB pages.
const DefaultRingPages = 64

// RingWake is when a ring wakes its reader.
type RingWake int

const (
	// WakeEach wakes the reader at every record: for rare records that
	// must be acted on at once (profile's new processes).
	WakeEach RingWake = iota
	// WakeBatch wakes it once a quarter of the ring is full: a wake-up per
	// record costs the traced task a reschedule of the reader each time
	// (dd under filter ran 25x slower). Drain's tick shows a trickle
	// of records within it.
	WakeBatch
)

// OpenRings opens the event id (a tracepoint, or a probe event in tracefs)
// on every CPU with a ring buffer of pages pages each, attaches prog once
// and enables them.
func OpenRings(prog *ebpf.Program, what string, id uint64, pages int, wake RingWake) (*Rings, error) {
	return openRings(what, perfAttr(unix.PERF_TYPE_TRACEPOINT, id), prog, pages, wake, nil)
}

// OpenOutputRings opens a BPF output event on every CPU with a ring buffer
// of pages pages each and stores each CPU's in events (a
// PERF_EVENT_ARRAY, indexed by CPU): where a program's
// bpf_perf_event_output(ctx, events, BPF_F_CURRENT_CPU, ...) records go.
// The kernel fills in the pid, tid, time and CPU of each as for any sample.
func OpenOutputRings(events *ebpf.Map, what string, pages int, wake RingWake) (*Rings, error) {
	attr := perfAttr(unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_BPF_OUTPUT)
	return openRings(what, attr, nil, pages, wake, func(cpu, fd int) error {
		if err := events.Put(uint32(cpu), uint32(fd)); err != nil {
			return fmt.Errorf("store the ring of %s on CPU %d: %w", what, cpu, err)
		}
		return nil
	})
}

func openRings(what string, attr unix.PerfEventAttr, prog *ebpf.Program, pages int, wake RingWake, prepare func(cpu, fd int) error) (*Rings, error) {
	if pages < 1 || pages&(pages-1) != 0 {
		return nil, fmt.Errorf("ring buffer of %d pages: not a power of two", pages)
	}
	r := &Rings{what: what}
	page := os.Getpagesize()
	attr.Sample_type |= unix.PERF_SAMPLE_TID | unix.PERF_SAMPLE_TIME | unix.PERF_SAMPLE_CPU
	if wake == WakeBatch {
		attr.Bits |= unix.PerfBitWatermark
		attr.Wakeup = uint32(pages * page / 4) // bytes: wakeup_watermark
	}
	if lostReadable() {
		attr.Read_format |= perfFormatLost
	}
	events, err := OpenPerCPU(what, attr, prog, AttachOnce, func(cpu, fd int) error {
		m, err := mapRing(what, cpu, fd, pages)
		if err != nil {
			return err
		}
		r.mmaps = append(r.mmaps, m)
		if prepare != nil {
			return prepare(cpu, fd)
		}
		return nil
	})
	if err != nil {
		return nil, errors.Join(err, r.unmap())
	}
	r.events = events
	return r, nil
}

func mapRing(what string, cpu, fd, pages int) ([]byte, error) {
	m, err := unix.Mmap(fd, 0, (1+pages)*os.Getpagesize(), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("map the ring buffer of %s on CPU %d: %w", what, cpu, err)
	}
	return m, nil
}

// namePages is each CPU's ring of task names: 16 KiB with 4 KiB pages,
// about 300 execs between two reads. A name that met a full ring is
// missed, never an event.
const namePages = 4

// FollowNames hands fn the name of every task that execs from now on
// (PERF_RECORD_COMM; a short-lived process is often gone before its
// events are read), each before the first record Read hands over of the
// program it runs. The names come through rings of their own, one dummy
// perf event per CPU, so that the event's rings hold its records alone:
// a lost count (Lost, LostEvents) is then the event's records, exactly,
// where names in the same rings made it count the names that met a full
// ring too. Close closes them.
func (r *Rings) FollowNames(fn func(pid uint32, comm string)) error {
	// Each name carries its time (sample_id_all, TIME): an exec and a
	// rename of one process on two CPUs are applied in the order they
	// happened, not in the order of the CPUs.
	attr := unix.PerfEventAttr{
		Type:        unix.PERF_TYPE_SOFTWARE,
		Config:      unix.PERF_COUNT_SW_DUMMY,
		Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample_type: unix.PERF_SAMPLE_TIME,
		Bits:        unix.PerfBitComm | unix.PerfBitSampleIDAll,
	}
	what := "the task names of " + r.what
	names, err := OpenPerCPU(what, attr, nil, AttachEach, func(cpu, fd int) error {
		m, err := mapRing(what, cpu, fd, namePages)
		if err != nil {
			return err
		}
		r.nameMmaps = append(r.nameMmaps, m)
		return nil
	})
	if err != nil {
		return errors.Join(err, unmap(what, &r.nameMmaps))
	}
	r.names, r.OnComm = names, fn
	return nil
}

// perfFormatLost is PERF_FORMAT_LOST (6.0+): read() on the event also
// returns how many of its samples met a full ring.
const perfFormatLost = 1 << 4

// lostReadable reports whether the kernel takes PERF_FORMAT_LOST: a
// software event opened with it, and closed.
var lostReadable = sync.OnceValue(func() bool {
	attr := perfAttr(unix.PERF_TYPE_SOFTWARE, unix.PERF_COUNT_SW_DUMMY)
	attr.Read_format = perfFormatLost
	attr.Bits = unix.PerfBitDisabled
	fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
})

// LostEvents is the number of the event's records lost to full rings. The
// kernel counts them per event where it takes PERF_FORMAT_LOST (6.0+,
// exact true); elsewhere it reports them in a LOST record with the next
// record that fits a ring, so a loss in a run's last moments may not be
// reported yet (exact false).
func (r *Rings) LostEvents() (n uint64, exact bool) {
	if !lostReadable() || r.events == nil {
		return r.Lost, false
	}
	buf := make([]byte, 16) // u64 value, u64 lost
	for _, fd := range r.events.FDs {
		if m, err := unix.Read(fd, buf); err == nil && m == 16 {
			n += binary.LittleEndian.Uint64(buf[8:])
		}
	}
	return n, true
}

// perf_event_mmap_page: data_head at 1024, data_tail at 1032,
// data_offset at 1040, data_size at 1048 (include/uapi/linux/perf_event.h).
const (
	offHead = 1024
	offTail = 1032
)

// unread says whether a ring holds a record not read yet (as read reads
// them: up to the head).
func (r *Rings) unread() bool {
	for _, m := range r.mmaps {
		if atomic.LoadUint64((*uint64)(unsafe.Pointer(&m[offHead]))) > atomic.LoadUint64((*uint64)(unsafe.Pointer(&m[offTail]))) {
			return true
		}
	}
	return false
}

// Read hands every complete record of every ring to fn, and frees it.
// The names (FollowNames) are read after the rings' heads are taken and
// before their records: an exec writes its name before the new program
// runs, so every name a record handed over needs is known by then.
func (r *Rings) Read(fn func(Sample)) {
	r.heads = r.heads[:0]
	for _, m := range r.mmaps {
		r.heads = append(r.heads, atomic.LoadUint64((*uint64)(unsafe.Pointer(&m[offHead]))))
	}
	if len(r.nameMmaps) > 0 {
		r.pending = r.pending[:0]
		for _, m := range r.nameMmaps {
			r.read(m, atomic.LoadUint64((*uint64)(unsafe.Pointer(&m[offHead]))), nil, &r.namesLost)
		}
		sort.SliceStable(r.pending, func(i, j int) bool { return r.pending[i].time < r.pending[j].time })
		for _, n := range r.pending {
			r.OnComm(n.pid, n.comm)
		}
	}
	for i, m := range r.mmaps {
		r.read(m, r.heads[i], fn, &r.Lost)
	}
}

// EventGap is how far apart in time two records of one CPU may be and
// still be taken for one event's (a program's printf records: time()'s
// and printf's, a few instructions apart, tens of microseconds under
// emulation at most): ReadInOrder keeps them together.
const EventGap = 200 * time.Microsecond

// ReadInOrder is Read with the records of all rings handed over in the
// order of their time, as a reader that prints each record (one line an
// event) must: each CPU's ring is in time order, but Read hands over one
// ring's records after another's, so a tick's worth of lines from two
// CPUs came out as two runs, a thread that moved between them seen going
// back in time. An event's records stay together: a CPU's records less
// than EventGap apart are one run, ordered by its first's time (a line
// that time() and printf() write as two records was split by another
// CPU's record in between). Records written after the heads were read
// come in the next call.
func (r *Rings) ReadInOrder(fn func(Sample)) {
	r.batch = r.batch[:0]
	r.Read(func(s Sample) { r.batch = append(r.batch, s) })
	// Each record's key: its run's first time. A ring's records come
	// together, in order, so a run is a stretch of one CPU's.
	r.keys = r.keys[:0]
	var key uint64
	for i, s := range r.batch {
		if i == 0 || s.CPU != r.batch[i-1].CPU || s.Time-r.batch[i-1].Time > uint64(EventGap) {
			key = s.Time
		}
		r.keys = append(r.keys, key)
	}
	order := r.order[:0]
	for i := range r.batch {
		order = append(order, i)
	}
	r.order = order
	sort.SliceStable(order, func(i, j int) bool { return r.keys[order[i]] < r.keys[order[j]] })
	for _, i := range order {
		fn(r.batch[i])
	}
	clear(r.batch) // the records' bytes are not kept past the call
}

// name is a task's name from a name ring, with its time.
type name struct {
	pid  uint32
	comm string
	time uint64
}

// read hands fn the samples of ring m up to head, and OnComm its names;
// reported losses are added to lost.
func (r *Rings) read(m []byte, head uint64, fn func(Sample), lost *uint64) {
	page := os.Getpagesize()
	tail := *(*uint64)(unsafe.Pointer(&m[offTail]))
	data := m[page:]
	var rec []byte
	for tail < head {
		hdr := readWrapped(data, tail, 8, nil)
		typ := binary.LittleEndian.Uint32(hdr[0:])
		n := uint64(binary.LittleEndian.Uint16(hdr[6:]))
		if n < 8 {
			// Not a record the kernel writes: the rest is dropped, so that
			// the ring is not left unread for its reader to wake for again
			// and again (see unread).
			tail = head
			break
		}
		rec = readWrapped(data, tail, n, rec[:0])
		tail += n
		switch typ {
		case unix.PERF_RECORD_SAMPLE:
			if s, ok := parseSample(rec[8:]); ok && fn != nil {
				fn(s)
			}
		case unix.PERF_RECORD_COMM:
			switch {
			case len(rec) <= 16 || r.OnComm == nil:
			case fn != nil: // a name in the event's own ring (a test's)
				r.OnComm(binary.LittleEndian.Uint32(rec[8:]), unix.ByteSliceToString(rec[16:]))
			case len(rec) >= 32: // pid, tid, comm, then the time
				r.pending = append(r.pending, name{
					pid:  binary.LittleEndian.Uint32(rec[8:]),
					comm: unix.ByteSliceToString(rec[16 : len(rec)-8]),
					time: binary.LittleEndian.Uint64(rec[len(rec)-8:]),
				})
			}
		case unix.PERF_RECORD_LOST:
			if len(rec) >= 24 {
				*lost += binary.LittleEndian.Uint64(rec[16:])
			}
		}
	}
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&m[offTail])), tail)
}

// readWrapped copies n bytes at ring position pos, which may wrap.
func readWrapped(data []byte, pos, n uint64, buf []byte) []byte {
	size := uint64(len(data))
	start := pos % size
	if start+n <= size {
		return append(buf, data[start:start+n]...)
	}
	buf = append(buf, data[start:]...)
	return append(buf, data[:n-(size-start)]...)
}

// parseSample reads TID, TIME, CPU, RAW in that order (perf_event.h).
func parseSample(b []byte) (Sample, bool) {
	if len(b) < 28 {
		return Sample{}, false
	}
	s := Sample{
		Pid:  binary.LittleEndian.Uint32(b[0:]),
		Tid:  binary.LittleEndian.Uint32(b[4:]),
		Time: binary.LittleEndian.Uint64(b[8:]),
		CPU:  binary.LittleEndian.Uint32(b[16:]),
	}
	n := int(binary.LittleEndian.Uint32(b[24:]))
	if 28+n > len(b) {
		return Sample{}, false
	}
	s.Raw = append([]byte(nil), b[28:28+n]...)
	return s, true
}

// Close disables and closes every CPU's event (which detaches the program)
// and the name events, and unmaps the rings; every step is tried. Twice is
// harmless. A Drain still reading them is ended first: if it does not end
// within drainWait (its fn blocked, as when the run's own ending hangs and
// the watchdog closes the run under it), the rings stay mapped, for the
// process's exit to unmap: unmapped, its next read faulted.
func (r *Rings) Close() error {
	var errs []error
	if r.events != nil {
		errs = append(errs, r.events.Close())
	}
	if r.names != nil {
		errs = append(errs, r.names.Close())
	}
	if r.drain != nil && !r.drain.ended(drainWait) {
		return errors.Join(errs...)
	}
	errs = append(errs, r.unmap(), unmap("the task names of "+r.what, &r.nameMmaps))
	return errors.Join(errs...)
}

func (r *Rings) unmap() error { return unmap(r.what, &r.mmaps) }

func unmap(what string, mmaps *[][]byte) error {
	var errs []error
	for _, m := range *mmaps {
		errs = append(errs, unix.Munmap(m))
	}
	*mmaps = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("unmap the rings of %s: %w", what, err)
	}
	return nil
}
