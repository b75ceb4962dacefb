package perfevent

import (
	"encoding/binary"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fakeRing lays records out as the kernel does in a perf mmap: the meta
// page, then a data area of size bytes that records wrap around.
type fakeRing struct {
	m    []byte
	head uint64
}

func newFakeRing(size int, start uint64) *fakeRing {
	page := os.Getpagesize()
	r := &fakeRing{m: make([]byte, page+size), head: start}
	*(*uint64)(unsafe.Pointer(&r.m[offTail])) = start
	return r
}

func (r *fakeRing) put(rec []byte) {
	data := r.m[os.Getpagesize():]
	for i, b := range rec {
		data[(r.head+uint64(i))%uint64(len(data))] = b
	}
	r.head += uint64(len(rec))
	*(*uint64)(unsafe.Pointer(&r.m[offHead])) = r.head
}

func sampleRecord(pid, cpu uint32, t uint64, raw []byte) []byte {
	body := make([]byte, 28+len(raw))
	binary.LittleEndian.PutUint32(body[0:], pid)
	binary.LittleEndian.PutUint32(body[4:], pid)
	binary.LittleEndian.PutUint64(body[8:], t)
	binary.LittleEndian.PutUint32(body[16:], cpu)
	binary.LittleEndian.PutUint32(body[24:], uint32(len(raw)))
	copy(body[28:], raw)
	for len(body)%8 != 4 { // records are 8-byte aligned with the header
		body = append(body, 0)
	}
	return header(unix.PERF_RECORD_SAMPLE, body)
}

func header(typ uint32, body []byte) []byte {
	h := make([]byte, 8, 8+len(body))
	binary.LittleEndian.PutUint32(h[0:], typ)
	binary.LittleEndian.PutUint16(h[6:], uint16(8+len(body)))
	return append(h, body...)
}

func TestRingReadWrapsAndCountsLost(t *testing.T) {
	// Start 40 bytes before the end of a 256-byte area: the second record
	// wraps.
	fr := newFakeRing(256, 216)
	fr.put(sampleRecord(42, 1, 1000, []byte("first")))
	fr.put(sampleRecord(43, 0, 2000, []byte("second, wrapping around the end")))
	lost := make([]byte, 16)
	binary.LittleEndian.PutUint64(lost[8:], 7) // id, then the lost count
	fr.put(header(unix.PERF_RECORD_LOST, lost))
	comm := append([]byte{44, 0, 0, 0, 44, 0, 0, 0}, []byte("dd\x00\x00\x00\x00\x00\x00")...)
	fr.put(header(unix.PERF_RECORD_COMM, comm))

	r := &Rings{mmaps: [][]byte{fr.m}}
	var comms []string
	r.OnComm = func(pid uint32, c string) { comms = append(comms, c) }
	var got []Sample
	r.Read(func(s Sample) { got = append(got, s) })
	if len(got) != 2 || string(got[0].Raw) != "first" || string(got[1].Raw) != "second, wrapping around the end" {
		t.Fatalf("samples %+v", got)
	}
	if got[0].Pid != 42 || got[0].CPU != 1 || got[0].Time != 1000 || got[1].Pid != 43 {
		t.Errorf("sample fields %+v", got)
	}
	if r.Lost != 7 || len(comms) != 1 || comms[0] != "dd" {
		t.Errorf("lost %d, comms %q", r.Lost, comms)
	}
	if tail := *(*uint64)(unsafe.Pointer(&fr.m[offTail])); tail != fr.head {
		t.Errorf("tail %d, want head %d: records not freed", tail, fr.head)
	}
	// Nothing new: nothing read.
	r.Read(func(s Sample) { t.Errorf("read again: %+v", s) })
}

// A record shorter than its header is none the kernel writes: the rest of
// the ring is dropped, and the ring is not left unread (its reader would
// be woken for it at once, again and again).
func TestRingReadDropsBadRecord(t *testing.T) {
	fr := newFakeRing(256, 0)
	fr.put(sampleRecord(42, 1, 1000, []byte("first")))
	fr.put(header(unix.PERF_RECORD_SAMPLE, nil)[:4]) // size 0
	fr.put(make([]byte, 4))
	fr.put(sampleRecord(43, 1, 2000, []byte("after it")))
	r := &Rings{mmaps: [][]byte{fr.m}}
	if !r.unread() {
		t.Fatal("records put, none unread")
	}
	var got []string
	r.Read(func(s Sample) { got = append(got, string(s.Raw)) })
	if strings.Join(got, ",") != "first" {
		t.Errorf("read %q, want the first record alone", got)
	}
	if r.unread() {
		t.Errorf("tail %d, head %d: the ring left unread", *(*uint64)(unsafe.Pointer(&fr.m[offTail])), fr.head)
	}
}

// Names from the name rings reach OnComm in the order they happened, across
// CPUs, before the samples read with them, and a loss in the name rings is not a loss of the event's records.
func TestRingReadNamesFirst(t *testing.T) {
	samples, names := newFakeRing(256, 0), newFakeRing(256, 0)
	samples.put(sampleRecord(44, 0, 1000, []byte("after exec")))
	// CPU 1's ring holds the later name: applied last.
	names1 := newFakeRing(256, 0)
	nameRecord := func(comm string, time uint64) []byte {
		body := append([]byte{44, 0, 0, 0, 44, 0, 0, 0}, comm...)
		for len(body)%8 != 0 {
			body = append(body, 0)
		}
		return header(unix.PERF_RECORD_COMM, binary.LittleEndian.AppendUint64(body, time))
	}
	names.put(nameRecord("late", 900))
	names1.put(nameRecord("dd", 500))
	lost := make([]byte, 16)
	binary.LittleEndian.PutUint64(lost[8:], 3)
	names.put(header(unix.PERF_RECORD_LOST, lost))
	var order []string
	r := &Rings{mmaps: [][]byte{samples.m}, nameMmaps: [][]byte{names.m, names1.m}}
	r.OnComm = func(pid uint32, c string) { order = append(order, c) }
	r.Read(func(s Sample) { order = append(order, string(s.Raw)) })
	if strings.Join(order, ",") != "dd,late,after exec" {
		t.Errorf("read %q, want the names first, in time order", order)
	}
	if r.Lost != 0 || r.namesLost != 3 {
		t.Errorf("lost %d, names lost %d; want 0 and 3", r.Lost, r.namesLost)
	}
}

// ReadInOrder hands the records of all rings over in time order: a thread
// that moved from CPU 0 to CPU 1 and back is seen in the order it ran,
// where Read gives CPU 0's records, then CPU 1's.
func TestRingReadInOrder(t *testing.T) {
	const ms = uint64(time.Millisecond)
	cpu0, cpu1 := newFakeRing(512, 0), newFakeRing(512, 0)
	cpu0.put(sampleRecord(42, 0, 1*ms, []byte("a")))
	cpu1.put(sampleRecord(42, 1, 2*ms, []byte("b")))
	cpu0.put(sampleRecord(42, 0, 3*ms, []byte("c")))
	cpu1.put(sampleRecord(42, 1, 3*ms, []byte("d"))) // a tie keeps ring order
	r := &Rings{mmaps: [][]byte{cpu0.m, cpu1.m}}
	var got []string
	r.ReadInOrder(func(s Sample) { got = append(got, string(s.Raw)) })
	if strings.Join(got, "") != "abcd" {
		t.Errorf("read %q, want a b c d", got)
	}
	cpu1.put(sampleRecord(42, 1, 4*ms, []byte("e")))
	got = got[:0]
	r.ReadInOrder(func(s Sample) { got = append(got, string(s.Raw)) })
	if strings.Join(got, "") != "e" {
		t.Errorf("second read %q, want e alone", got)
	}
	// One event's two records (time()'s, then printf's), 3 µs apart on
	// CPU 0, stay together though CPU 1 wrote one between them.
	cpu0.put(sampleRecord(42, 0, 5*ms, []byte("f")))
	cpu1.put(sampleRecord(42, 1, 5*ms+1000, []byte("x")))
	cpu0.put(sampleRecord(42, 0, 5*ms+3000, []byte("g")))
	cpu1.put(sampleRecord(42, 1, 5*ms+4000, []byte("y")))
	got = got[:0]
	r.ReadInOrder(func(s Sample) { got = append(got, string(s.Raw)) })
	if strings.Join(got, "") != "fgxy" {
		t.Errorf("third read %q, want f g (one event's) then x y", got)
	}
}
