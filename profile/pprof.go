package profile

import (
	"compress/gzip"
	"io"
	"time"
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
	profLocation      = 4
	profFunction      = 5
	profStringTable   = 6
	profTimeNanos     = 9
	profDurationNanos = 10
	profPeriodType    = 11
	profPeriod        = 12

	valueTypeType = 1
	valueTypeUnit = 2

	sampleLocationID = 1
	sampleValue      = 2
	sampleLabel      = 3

	labelKey = 1
	labelStr = 2
	labelNum = 3

	locationID   = 1
	locationLine = 4
	lineFunction = 1

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
// function and a location for each distinct frame name.
func writePprof(w io.Writer, stacks []stack, hz int, start time.Time, d time.Duration) error {
	period := int64(time.Second) / int64(hz)
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
	valueType(profSampleType, "samples", "count")
	valueType(profSampleType, "cpu", "nanoseconds")
	locs := map[string]uint64{}
	var funcs pb // the functions and locations, after the samples
	loc := func(name string) uint64 {
		if id, ok := locs[name]; ok {
			return id
		}
		id := uint64(len(locs) + 1)
		locs[name] = id
		var f pb
		f.int64(functionID, int64(id))
		f.int64(functionName, str(name))
		f.int64(functionSystemName, str(name))
		funcs.bytes(profFunction, f.b)
		var line, l pb
		line.int64(lineFunction, int64(id))
		l.int64(locationID, int64(id))
		l.bytes(locationLine, line.b)
		funcs.bytes(profLocation, l.b)
		return id
	}
	for _, st := range stacks {
		var ids []uint64
		for _, f := range st.Kernel {
			ids = append(ids, loc(f+" [kernel]"))
		}
		for _, f := range st.User {
			ids = append(ids, loc(f))
		}
		if st.End != "" {
			ids = append(ids, loc(st.End))
		}
		var s, comm, pid pb
		s.packed(sampleLocationID, ids)
		s.packed(sampleValue, []uint64{st.Count, st.Count * uint64(period)})
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
	out.b = append(out.b, funcs.b...)
	out.int64(profTimeNanos, start.UnixNano())
	out.int64(profDurationNanos, d.Nanoseconds())
	valueType(profPeriodType, "cpu", "nanoseconds")
	out.int64(profPeriod, period)
	for _, s := range table {
		out.bytes(profStringTable, []byte(s))
	}
	z := gzip.NewWriter(w)
	if _, err := z.Write(out.b); err != nil {
		return err
	}
	return z.Close()
}
