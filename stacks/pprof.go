package stacks

import (
	"compress/gzip"
	"fmt"
	"io"
	"time"

	"github.com/tracekit/tracekit/symbols"
)

// The field numbers of profile.proto (github.com/google/pprof), the format
// go tool pprof, speedscope and Pyroscope read. Written here rather than
// through the pprof package: its init compiles some 20 regular expressions
// for the legacy text formats, about 0.6 ms at the start of every tool of
// this binary, profiling or not. Its tests read what this writes back with
// that package.
const (
	profSampleType    = 1
	profSample        = 2
	profMapping       = 3
	profLocation      = 4
	profFunction      = 5
	profStringTable   = 6
	profTimeNanos     = 9
	profDurationNanos = 10
	profPeriodType    = 11
	profPeriod        = 12
	profComment       = 13

	valueTypeType = 1
	valueTypeUnit = 2

	sampleLocationID = 1
	sampleValue      = 2
	sampleLabel      = 3

	labelKey = 1
	labelStr = 2
	labelNum = 3

	mappingID           = 1
	mappingStart        = 2
	mappingLimit        = 3
	mappingOffset       = 4
	mappingFilename     = 5
	mappingBuildID      = 6
	mappingHasFunctions = 7

	locationID      = 1
	locationMapping = 2
	locationAddress = 3
	locationLine    = 4
	lineFunction    = 1

	functionID         = 1
	functionName       = 2
	functionSystemName = 3
)

// pb builds a protobuf message: varints and length-delimited fields.
type pb struct{ b []byte }

func (m *pb) varint(v uint64) {
	for v >= 0x80 {
		m.b = append(m.b, byte(v)|0x80)
		v >>= 7
	}
	m.b = append(m.b, byte(v))
}

func (m *pb) tag(field, wire int) { m.varint(uint64(field)<<3 | uint64(wire)) }

// int64 writes a varint field; proto3 leaves zeros out.
func (m *pb) int64(field int, v int64) {
	if v != 0 {
		m.tag(field, 0)
		m.varint(uint64(v))
	}
}

func (m *pb) bytes(field int, b []byte) {
	m.tag(field, 2)
	m.varint(uint64(len(b)))
	m.b = append(m.b, b...)
}

// packed writes a repeated varint field packed, as proto3 does.
func (m *pb) packed(field int, vs []uint64) {
	var p pb
	for _, v := range vs {
		p.varint(v)
	}
	m.bytes(field, p.b)
}

// writePprof writes the stacks as a gzipped pprof profile: one sample per
// stack with its count and its CPU time (count / frequency) and labels
// comm and pid, frames leaf first, kernel frames above the user ones; a
// function per distinct frame name. A stack with addresses (named
// byAddress) has a location per address, in the mapping of its process
// that holds it (file, offset, build id; ps says which), so that go tool
// pprof -raw lists them and others can symbolize; the address is the
// frame's as unwound (a caller's return address). Without, a location
// per name. Off-CPU, a sample's one value is its time blocked, in
// nanoseconds.
func writePprof(w io.Writer, stacks []stack, ps *processes, hz int, offCPU bool, start time.Time, d time.Duration, comments ...string) error {
	period := int64(1)
	if !offCPU {
		period = int64(time.Second) / int64(hz)
	}
	strs := map[string]int64{"": 0}
	table := []string{""}
	str := func(s string) int64 {
		i, ok := strs[s]
		if !ok {
			i = int64(len(table))
			strs[s] = i
			table = append(table, s)
		}
		return i
	}
	var out pb
	valueType := func(field int, typ, unit string) {
		var v pb
		v.int64(valueTypeType, str(typ))
		v.int64(valueTypeUnit, str(unit))
		out.bytes(field, v.b)
	}
	kind := "cpu"
	if offCPU {
		kind = "off-cpu"
	} else {
		valueType(profSampleType, "samples", "count")
	}
	valueType(profSampleType, kind, "nanoseconds")
	var tail pb // the mappings, locations and functions, after the samples
	funcs := map[string]uint64{}
	function := func(name string) uint64 {
		id, fresh := interned(funcs, name)
		if !fresh {
			return id
		}
		var f pb
		f.int64(functionID, int64(id))
		f.int64(functionName, str(name))
		f.int64(functionSystemName, str(name))
		tail.bytes(profFunction, f.b)
		return id
	}
	type mapKey struct {
		pid   uint32
		start uint64
	}
	maps := map[mapKey]uint64{}
	mapping := func(pid uint32, pc uint64) uint64 {
		if ps == nil {
			return 0
		}
		m := ps.mappingAt(pid, pc)
		if m == nil {
			return 0
		}
		id, fresh := interned(maps, mapKey{pid, m.Start})
		if !fresh {
			return id
		}
		var mp pb
		mp.int64(mappingID, int64(id))
		mp.int64(mappingStart, int64(m.Start))
		mp.int64(mappingLimit, int64(m.End))
		mp.int64(mappingOffset, int64(m.Off))
		mp.int64(mappingFilename, str(m.Path))
		if m.file != nil && m.file.elf != nil {
			if b := symbols.BuildID(m.file.elf); len(b) > 0 {
				mp.int64(mappingBuildID, str(fmt.Sprintf("%x", b)))
			}
		}
		mp.int64(mappingHasFunctions, 1)
		tail.bytes(profMapping, mp.b)
		return id
	}
	type locKey struct {
		mapping, addr uint64
		name          string
	}
	locs := map[locKey]uint64{}
	loc := func(name string, mapping, addr uint64) uint64 {
		id, fresh := interned(locs, locKey{mapping, addr, name})
		if !fresh {
			return id
		}
		fn := function(name)
		var line, l pb
		line.int64(lineFunction, int64(fn))
		l.int64(locationID, int64(id))
		l.int64(locationMapping, int64(mapping))
		l.int64(locationAddress, int64(addr))
		l.bytes(locationLine, line.b)
		tail.bytes(profLocation, l.b)
		return id
	}
	// pprof takes the first mapping for the main binary ("File:"): the
	// lowest one, the executable's, of the process with the most samples.
	if ps != nil && len(stacks) > 0 {
		var hot *stack
		for i := range stacks {
			if hot == nil || stacks[i].Count > hot.Count {
				hot = &stacks[i]
			}
		}
		if p := ps.procs[hot.Pid]; p != nil && len(p.maps) > 0 {
			mapping(hot.Pid, p.maps[0].Start)
		}
	}
	for _, st := range stacks {
		var ids []uint64
		for i, f := range st.Kernel {
			var pc uint64
			if i < len(st.KernelPC) {
				pc = st.KernelPC[i]
			}
			ids = append(ids, loc(f+" [kernel]", 0, pc))
		}
		for i, f := range st.User {
			var m, pc uint64
			if i < len(st.UserPC) {
				pc = st.UserPC[i]
				m = mapping(st.Pid, pc)
			}
			ids = append(ids, loc(f, m, pc))
		}
		if st.End != "" {
			ids = append(ids, loc(st.End, 0, 0))
		}
		var s, comm, pid pb
		s.packed(sampleLocationID, ids)
		if offCPU {
			s.packed(sampleValue, []uint64{st.Count})
		} else {
			s.packed(sampleValue, []uint64{st.Count, st.Count * uint64(period)})
		}
		comm.int64(labelKey, str("comm"))
		comm.int64(labelStr, str(st.Comm))
		s.bytes(sampleLabel, comm.b)
		pid.int64(labelKey, str("pid"))
		pid.int64(labelNum, int64(st.Pid))
		s.bytes(sampleLabel, pid.b)
		for _, l := range st.Labels {
			var lb pb
			lb.int64(labelKey, str(l.Name))
			if l.Num != nil {
				lb.int64(labelNum, *l.Num)
			} else {
				lb.int64(labelStr, str(l.Value))
			}
			s.bytes(sampleLabel, lb.b)
		}
		out.bytes(profSample, s.b)
	}
	out.b = append(out.b, tail.b...)
	out.int64(profTimeNanos, start.UnixNano())
	out.int64(profDurationNanos, d.Nanoseconds())
	valueType(profPeriodType, kind, "nanoseconds")
	out.int64(profPeriod, period)
	for _, c := range comments {
		out.int64(profComment, str(c))
	}
	for _, s := range table {
		out.bytes(profStringTable, []byte(s))
	}
	z := gzip.NewWriter(w)
	if _, err := z.Write(out.b); err != nil {
		return err
	}
	return z.Close()
}

// interned is k's id in ids (counted from 1, in the order of first use),
// and whether k is new there.
func interned[K comparable](ids map[K]uint64, k K) (id uint64, fresh bool) {
	if id, ok := ids[k]; ok {
		return id, false
	}
	id = uint64(len(ids) + 1)
	ids[k] = id
	return id, true
}
