package perfevent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
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
	// Lost counts records the kernel dropped because a ring was full.
	Lost uint64
	// OnComm, if set, learns task names as tasks exec (PERF_RECORD_COMM):
	// a short-lived process is often gone before its events are printed.
	OnComm func(pid uint32, comm string)
}

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
	attr.Bits = unix.PerfBitComm
	if wake == WakeBatch {
		attr.Bits |= unix.PerfBitWatermark
		attr.Wakeup = uint32(pages * page / 4) // bytes: wakeup_watermark
	}
	if lostReadable() {
		attr.Read_format |= perfFormatLost
	}
	events, err := OpenPerCPU(what, attr, prog, AttachOnce, func(cpu, fd int) error {
		m, err := unix.Mmap(fd, 0, (1+pages)*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return fmt.Errorf("map the ring buffer of %s on CPU %d: %w", what, cpu, err)
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

// LostEvents is the number of the event's own records (samples) lost to
// full rings, exactly, where the kernel counts them per event (6.0+,
// exact true). Elsewhere it is the count of the kernel's LOST records,
// reported with the next record that fits, which also counts the
// process-name records of any exec on the ring's CPU.
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

// Read hands every complete record of every ring to fn, and frees it.
func (r *Rings) Read(fn func(Sample)) {
	page := os.Getpagesize()
	for _, m := range r.mmaps {
		head := atomic.LoadUint64((*uint64)(unsafe.Pointer(&m[offHead])))
		tail := *(*uint64)(unsafe.Pointer(&m[offTail]))
		data := m[page:]
		var rec []byte
		for tail < head {
			hdr := readWrapped(data, tail, 8, nil)
			typ := binary.LittleEndian.Uint32(hdr[0:])
			n := uint64(binary.LittleEndian.Uint16(hdr[6:]))
			if n < 8 {
				break
			}
			rec = readWrapped(data, tail, n, rec[:0])
			tail += n
			switch typ {
			case unix.PERF_RECORD_SAMPLE:
				if s, ok := parseSample(rec[8:]); ok {
					fn(s)
				}
			case unix.PERF_RECORD_COMM:
				if len(rec) > 16 && r.OnComm != nil {
					r.OnComm(binary.LittleEndian.Uint32(rec[8:]), unix.ByteSliceToString(rec[16:]))
				}
			case unix.PERF_RECORD_LOST:
				if len(rec) >= 24 {
					r.Lost += binary.LittleEndian.Uint64(rec[16:])
				}
			}
		}
		atomic.StoreUint64((*uint64)(unsafe.Pointer(&m[offTail])), tail)
	}
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
// and unmaps the rings; every step is tried. Twice is harmless.
func (r *Rings) Close() error {
	var err error
	if r.events != nil {
		err = r.events.Close()
	}
	return errors.Join(err, r.unmap())
}

func (r *Rings) unmap() error {
	var errs []error
	for _, m := range r.mmaps {
		errs = append(errs, unix.Munmap(m))
	}
	r.mmaps = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("unmap the rings of %s: %w", r.what, err)
	}
	return nil
}
