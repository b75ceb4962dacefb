package stacks

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/stacks/prog"
	"github.com/tracekit/tracekit/symbols"
)

// TestBias: the address in the file is found through the PT_LOAD segment
// that holds the mapping's offset, for a PIE (segment offset and address
// differ) and a non-PIE (mapped at its own addresses).
func TestBias(t *testing.T) {
	pie := &elf.File{Progs: []*elf.Prog{
		{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Flags: elf.PF_R, Off: 0, Vaddr: 0, Filesz: 0x1000}},
		{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Flags: elf.PF_R | elf.PF_X, Off: 0x1000, Vaddr: 0x1000, Filesz: 0x4000}},
	}}
	lib := &elf.File{Progs: []*elf.Prog{
		{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Flags: elf.PF_R | elf.PF_X, Off: 0x28000, Vaddr: 0x29000, Filesz: 0x100000}},
	}}
	nopie := &elf.File{Progs: []*elf.Prog{
		{ProgHeader: elf.ProgHeader{Type: elf.PT_LOAD, Flags: elf.PF_R | elf.PF_X, Off: 0x1000, Vaddr: 0x401000, Filesz: 0x2000}},
	}}
	for _, c := range []struct {
		f          *elf.File
		m          mapping
		addr, want uint64
	}{
		{pie, mapping{Start: 0x55d0c5a8e000, End: 0x55d0c5a93000, Off: 0x1000}, 0x55d0c5a8e123, 0x1123},
		{lib, mapping{Start: 0x7f0000100000, End: 0x7f0000200000, Off: 0x28000}, 0x7f0000100010, 0x29010},
		{nopie, mapping{Start: 0x401000, End: 0x403000, Off: 0x1000}, 0x401234, 0x401234},
	} {
		bias, ok := biasOf(c.f, c.m)
		if !ok || c.addr-bias != c.want {
			t.Errorf("%+v: 0x%x maps to 0x%x (ok %v), want 0x%x", c.m, c.addr, c.addr-bias, ok, c.want)
		}
	}
}

// TestPrefixes: the trie prefixes of a range cover exactly the range.
func TestPrefixes(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	for i := 0; i < 200; i++ {
		start := uint64(rng.Int63n(1<<47)) &^ 0xfff
		end := start + uint64(1+rng.Intn(1<<20))<<12
		keys := prefixes(4242, start, end)
		next := start
		for _, k := range keys {
			if binary.BigEndian.Uint32(k.Pid[:]) != 4242 {
				t.Fatal("wrong pid")
			}
			addr := binary.BigEndian.Uint64(k.Addr[:])
			size := uint64(1) << (96 - k.Prefixlen)
			if addr != next || addr%size != 0 {
				t.Fatalf("[0x%x, 0x%x): prefix 0x%x/%d after 0x%x", start, end, addr, k.Prefixlen, next)
			}
			next = addr + size
		}
		if next != end || len(keys) > 2*64 {
			t.Fatalf("[0x%x, 0x%x): covered to 0x%x in %d prefixes", start, end, next, len(keys))
		}
	}
}

// TestKeyOf: a file is known by device and inode; [vdso] by its name.
func TestKeyOf(t *testing.T) {
	maps, err := procfs.ParseMaps(strings.NewReader("55d0c5a8e000-55d0c5a93000 r-xp 00002000 fd:01 1835234   /usr/bin/cat\n7ffd5e3f2000-7ffd5e3f4000 r-xp 00000000 00:00 0    [vdso]\n"))
	if err != nil {
		t.Fatal(err)
	}
	if keyOf(maps[1]) != (fileKey{Name: "[vdso]"}) || keyOf(maps[0]) != (fileKey{Dev: "fd:01", Inode: 1835234}) {
		t.Errorf("keys: %+v %+v", keyOf(maps[1]), keyOf(maps[0]))
	}
}

// TestAnnouncedAfterExit: a process announced again after its exit's
// notice, with no mapping left to read (a sample in its last thread's
// exit), keeps its record and its frames' names; a pid that maps files
// again is a new process, whose record starts afresh.
func TestAnnouncedAfterExit(t *testing.T) {
	gone := uint32(1<<22 - 1) // above every pid_max: no such process
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", gone)); err == nil {
		t.Skipf("pid %d exists here", gone)
	}
	f := &file{name: "tls", first: -1, syms: []symbols.Symbol{{Name: "spin", Value: 0x1000, Size: 0x100}}, named: true}
	old := &process{comm: "tls", exited: true, gone: true, maps: []procMapping{{mapping: mapping{Start: 0x1000, End: 0x2000}, file: f}}}
	ps := &processes{files: map[fileKey]*file{}, procs: map[uint32]*process{gone: old}}
	ps.announced(gone)
	if got := ps.symbolize(gone, 0x1010, false); got != "spin" {
		t.Errorf("after a late announcement of the exited process: %q, want spin (its record kept)", got)
	}
	// Our own pid maps files: a new process of an exited one's pid.
	self := uint32(os.Getpid())
	ps.procs[self] = &process{comm: "old", exited: true, gone: true, maps: old.maps}
	ps.announced(self)
	if p := ps.procs[self]; p.exited || len(p.maps) == 0 || p.maps[0].file == f {
		t.Errorf("a pid announced again with files mapped: exited %v, %d mappings; want a fresh record of them", p.exited, len(p.maps))
	}
}

// TestNoFrameSectionPointed: a file with no frame section (a Go binary)
// is settled the moment it is tried, and the processes that map it are
// pointed at no rows in the mappings trie at once. They were not: its
// mappings never entered the trie, and every sample of theirs was
// deferred to user space for the whole run (profile's own threads, in the
// off-CPU bench: 100,000 deferrals a run, twice the BPF time).
func TestNoFrameSectionPointed(t *testing.T) {
	privtest.Require(t)
	lpm, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.LPMTrie, KeySize: 16, ValueSize: prog.MappingSize, MaxEntries: 64, Flags: unix.BPF_F_NO_PREALLOC})
	if err != nil {
		t.Fatal(err)
	}
	defer lpm.Close()
	f := &file{name: "gobin", elf: &elf.File{FileHeader: elf.FileHeader{Machine: hostMachine()}}, first: -1}
	const pid, start, end, pc = 1<<22 - 1, 0x400000, 0x9ac000, 0x48f483
	ps := &processes{rowTable: rowTable{lpm: lpm}, files: map[fileKey]*file{}, procs: map[uint32]*process{
		pid: {maps: []procMapping{{mapping: mapping{Start: start, End: end}, file: f}}},
	}}
	if m := ps.miss(pid, pc); m == nil || !m.file.settled() {
		t.Fatalf("miss at %#x: mapping %v; want the file's, settled", pc, m)
	}
	k := lpmKey{Prefixlen: 96}
	binary.BigEndian.PutUint32(k.Pid[:], pid)
	binary.BigEndian.PutUint64(k.Addr[:], pc)
	var v lpmValue
	if err := lpm.Lookup(&k, &v); err != nil {
		t.Fatalf("%#x of the process is not in the trie (%v): the unwinder defers its samples", pc, err)
	}
	if v != (lpmValue{Start: start, End: end}) {
		t.Errorf("trie value %+v, want no rows over [%#x, %#x)", v, start, end)
	}
}

// TestAfterEntry: the return address of a process's first calls, just
// past its loader's entry point (glibc's ld.so: entry+8, _dl_start; and
// entry+0x30, _dl_init, the libraries' constructors), is where its stack
// ends whole; an address before the entry, or past its start code, is not.
func TestAfterEntry(t *testing.T) {
	const pid, base, entry = 7, 0x7f0000000000, 0x1ab70
	ld := &file{name: "ld-linux-x86-64.so.2", elf: &elf.File{FileHeader: elf.FileHeader{Entry: entry}}, first: -1}
	ps := &processes{procs: map[uint32]*process{
		pid: {maps: []procMapping{{mapping: mapping{Start: base, End: base + 0x40000}, bias: base, file: ld}}},
	}}
	for _, c := range []struct {
		ret  uint64
		want bool
	}{
		{base + entry + 8, true},
		{base + entry + 1, true},
		{base + entry, false}, // its call is before the entry
		{base + entry + 0x30, true},
		{base + entry + 65, false},
		{base + 0x1465b, false},
		{0x1000, false}, // in no mapping
	} {
		if got := ps.afterEntry(pid, c.ret); got != c.want {
			t.Errorf("afterEntry(%#x) = %v, want %v", c.ret, got, c.want)
		}
	}
}

// TestSweep: a process gone but still in the kernel's seen map (sampled
// in its exit after the exit program's notice) leaves seen, its labels
// and its prefixes in the mappings trie; its record goes unless a count
// held refers to it. A live process stays.
func TestSweep(t *testing.T) {
	privtest.Require(t)
	lpm, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.LPMTrie, KeySize: 16, ValueSize: prog.MappingSize, MaxEntries: 64, Flags: unix.BPF_F_NO_PREALLOC})
	if err != nil {
		t.Fatal(err)
	}
	defer lpm.Close()
	seen, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 8, MaxEntries: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer seen.Close()
	const gone, held = 1<<22 - 1, 1<<22 - 2 // above every pid_max: no such processes
	self := uint32(os.Getpid())
	f := &file{name: "gobin", first: -1, tried: true, err: errors.New("no frame section")}
	ps := &processes{rowTable: rowTable{lpm: lpm}, files: map[fileKey]*file{}, procs: map[uint32]*process{}}
	for _, pid := range []uint32{gone, held, self} {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); (err == nil) != (pid == self) {
			t.Skipf("pid %d: %v", pid, err)
		}
		p := &process{comm: "p", maps: []procMapping{{mapping: mapping{Start: 0x400000, End: 0x500000}, file: f}}}
		ps.procs[pid] = p
		ps.point(pid, p)
		if len(p.prefixes) == 0 {
			t.Fatalf("pid %d: no prefixes in the trie", pid)
		}
		if err := seen.Put(pid, uint64(1)); err != nil {
			t.Fatal(err)
		}
	}
	ps.sweep(seen, nil, func(pid uint32) bool { return pid == held })
	var pid uint32
	var v uint64
	var left []uint32
	for it := seen.Iterate(); it.Next(&pid, &v); {
		left = append(left, pid)
	}
	if len(left) != 1 || left[0] != self {
		t.Errorf("seen holds %v after the sweep; want only the live %d", left, self)
	}
	if ps.procs[gone] != nil || ps.procs[held] == nil || ps.procs[self] == nil || ps.procs[self].exited {
		t.Errorf("records: gone %v, held %v, self %v; want gone dropped, held kept (a count names it), self alive", ps.procs[gone], ps.procs[held], ps.procs[self])
	}
	var k lpmKey
	n := 0
	for it := lpm.Iterate(); it.Next(&k, new(lpmValue)); {
		if p := binary.BigEndian.Uint32(k.Pid[:]); p != self {
			t.Errorf("a prefix of pid %d is still in the trie", p)
		}
		n++
	}
	if n != len(ps.procs[self].prefixes) {
		t.Errorf("%d prefixes in the trie, want the live process's %d", n, len(ps.procs[self].prefixes))
	}
}

// TestPoint: after each rescan or table read, the mappings trie holds
// exactly the prefixes of the process's mappings with tables or settled
// (none of those gone), each with its mapping's value; and a mapping
// pointed before with the same value is not put again (its prefix
// removed behind point's back stays removed).
func TestPoint(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		m := newMemMap()
		testPoint(t, m, func() map[lpmKey]lpmValue {
			got := map[lpmKey]lpmValue{}
			for _, kb := range m.keys() {
				var k lpmKey
				var v lpmValue
				if err := binary.Read(strings.NewReader(kb), binary.LittleEndian, &k); err != nil {
					t.Fatal(err)
				}
				if err := m.Lookup(&k, &v); err != nil {
					t.Fatal(err)
				}
				got[k] = v
			}
			return got
		})
	})
	t.Run("kernel", func(t *testing.T) {
		privtest.Require(t)
		lpm, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.LPMTrie, KeySize: 16, ValueSize: prog.MappingSize, MaxEntries: 1024, Flags: unix.BPF_F_NO_PREALLOC})
		if err != nil {
			t.Fatal(err)
		}
		defer lpm.Close()
		testPoint(t, lpm, func() map[lpmKey]lpmValue {
			got := map[lpmKey]lpmValue{}
			var k lpmKey
			var v lpmValue
			it := lpm.Iterate()
			for it.Next(&k, &v) {
				got[k] = v
			}
			if err := it.Err(); err != nil {
				t.Fatal(err)
			}
			return got
		})
	})
}

// testPoint: after a scan, a table read, a remap and an unmap the trie
// holds exactly the mappings' prefixes and values; a prefix removed
// behind point's back in an unchanged span stays removed; an exit
// leaves nothing.
func testPoint(t *testing.T, lpm bpfMap, entries func() map[lpmKey]lpmValue) {
	const pid = 4242
	exe := &file{name: "exe", first: 0, rows: 100}
	lib := &file{name: "lib", first: -1} // its table not read yet
	other := &file{name: "other", first: 500, rows: 7}
	p := &process{maps: []procMapping{
		{mapping: mapping{Start: 0x401000, End: 0x4a3000}, file: exe},
		{mapping: mapping{Start: 0x7f0000001000, End: 0x7f0000157000}, file: lib, bias: 0x7f0000000000},
	}}
	ps := &processes{rowTable: rowTable{lpm: lpm}, files: map[fileKey]*file{}, procs: map[uint32]*process{pid: p}}

	check := func(when string) {
		t.Helper()
		want := map[lpmKey]lpmValue{}
		for _, m := range p.maps {
			if m.file.first < 0 {
				continue
			}
			for _, k := range prefixes(pid, m.Start, m.End) {
				want[k] = lpmValue{First: uint32(m.file.first), Count: uint32(m.file.rows), Bias: m.bias, Start: m.Start, End: m.End}
			}
		}
		got := entries()
		if len(got) != len(want) {
			t.Errorf("%s: %d prefixes in the trie, want %d", when, len(got), len(want))
		}
		for k, w := range want {
			if g, ok := got[k]; !ok || g != w {
				t.Errorf("%s: prefix /%d at %x: %+v (there: %v), want %+v", when, k.Prefixlen, k.Addr, g, ok, w)
			}
		}
	}
	ps.point(pid, p)
	check("first scan")
	lib.first, lib.rows = 100, 40
	ps.repoint(lib)
	check("the library's table read")
	p.maps = append(p.maps, procMapping{mapping: mapping{Start: 0x7f0000200000, End: 0x7f0000209000}, file: other, bias: 0x7f0000200000})
	p.maps[0].End = 0x4a2000 // remapped shorter
	ps.point(pid, p)
	check("a library mapped, the executable's mapping changed")
	p.maps = p.maps[1:]
	ps.point(pid, p)
	check("the executable's mapping gone")

	// The library's mapping is unchanged: a rescan does not put it again.
	k := prefixes(pid, p.maps[0].Start, p.maps[0].End)[0]
	if err := lpm.Delete(&k); err != nil {
		t.Fatal(err)
	}
	ps.point(pid, p)
	if err := lpm.Lookup(&k, new(lpmValue)); !errors.Is(err, ebpf.ErrKeyNotExist) {
		t.Errorf("an unchanged mapping's prefix was put again (lookup: %v)", err)
	}

	ps.exited(pid)
	if left := entries(); len(left) > 0 {
		t.Errorf("%d prefixes left in the trie after the exit", len(left))
	}
	if p.spans != nil {
		t.Error("spans kept after the exit: a next process of the pid would not be put")
	}
}

// UserSymbols names this process's code by its own maps and files, with
// no run and no BPF maps: a function's first byte by its name, an
// address in no mapping as "".
func TestUserSymbols(t *testing.T) {
	name := UserSymbols()
	pid := uint32(os.Getpid())
	pc := uint64(reflect.ValueOf(UserSymbols).Pointer())
	if got, want := name(pid, pc), "github.com/tracekit/tracekit/stacks.UserSymbols"; got != want {
		t.Errorf("UserSymbols at %#x: %q, want %q", pc, got, want)
	}
	if got := name(pid, 0x10); got != "" {
		t.Errorf("an address in no mapping: %q, want \"\"", got)
	}
	if got := name(1<<31, pc); got != "" {
		t.Errorf("a process that does not exist: %q, want \"\"", got)
	}
}
