package output

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// WriteMapsJSON prints maps by name, each as one line of bpftrace's -f
// json output.
func WriteMapsJSON(w io.Writer, maps []*Map) error { return writeByName(w, maps, WriteMapJSON) }

// WriteMapJSON prints one map as bpftrace 0.17's -f json does, in the
// order WriteMap prints it: {"type": "map", "data": {"@name": VALUE}}
// for a map without keys, {"@name": {"k1,k2": VALUE, ...}} with them;
// the type "hist" for hist and lhist (a list of buckets with their
// bounds), "stats" for avg and stats. An empty map prints nothing.
//
// One divergence, on purpose: bpftrace computes hist's bounds in 32-bit
// ints, so the buckets from 2^31 up print wrapped ({"min": -2147483648,
// "max": 0} for [2G, 4G)); here they are the true bounds.
func WriteMapJSON(w io.Writer, m *Map) error {
	if len(m.Elems) == 0 {
		return nil
	}
	typ := "map"
	switch m.Kind {
	case Hist, Lhist:
		typ = "hist"
	case Avg, Stats:
		typ = "stats"
	}
	var b strings.Builder
	fmt.Fprintf(&b, `{"type": "%s", "data": {"%s": `, typ, jsonEscape(m.Name))
	keyed := len(m.Elems[0].Keys) > 0
	if keyed {
		b.WriteByte('{')
	}
	for i, e := range sortedElems(m) {
		if i > 0 {
			b.WriteString(", ")
		}
		if keyed {
			var ks []string
			for _, k := range e.Keys {
				ks = append(ks, join([]Value{k}))
			}
			b.WriteString(`"` + jsonEscape(strings.Join(ks, ",")) + `": `)
		}
		switch m.Kind {
		case Int, Sum, Min, Max:
			b.WriteString(m.intText(e.Value.Int))
		case Count:
			b.WriteString(strconv.FormatUint(e.Value.Count/m.div(), 10))
		case Avg:
			b.WriteString(strconv.FormatInt(average(e.Value)/int64(m.div()), 10))
		case Stats:
			fmt.Fprintf(&b, `{"count": %d, "average": %d, "total": %d}`, int64(e.Value.Count), average(e.Value), e.Value.Total)
		case Hist:
			histJSON(&b, e.Value.Buckets, m.div())
		case Lhist:
			lhistJSON(&b, e.Value.Buckets, m.Min, m.Max, m.Step)
		case Str:
			b.WriteString(`"` + jsonEscape(e.Value.Str) + `"`)
		case Tuple:
			tupleJSON(&b, e.Value.Elems)
		}
	}
	if keyed {
		b.WriteByte('}')
	}
	b.WriteString("}}\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func tupleJSON(b *strings.Builder, elems []Value) {
	b.WriteByte('[')
	for i, v := range elems {
		if i > 0 {
			b.WriteByte(',')
		}
		switch {
		case v.IsStr:
			b.WriteString(`"` + jsonEscape(v.Str) + `"`)
		case v.Elems != nil:
			tupleJSON(b, v.Elems)
		default:
			b.WriteString(strconv.FormatInt(v.Int, 10))
		}
	}
	b.WriteByte(']')
}

func histJSON(b *strings.Builder, buckets []uint64, div uint64) {
	first, last := span(buckets, len(buckets))
	b.WriteByte('[')
	for i := first; i >= 0 && i <= last; i++ {
		if i > first {
			b.WriteString(", ")
		}
		switch i {
		case 0:
			b.WriteString(`{"max": -1, `)
		case 1:
			b.WriteString(`{"min": 0, "max": 0, `)
		case 2:
			b.WriteString(`{"min": 1, "max": 1, `)
		default:
			fmt.Fprintf(b, `{"min": %d, "max": %d, `, uint64(1)<<(i-2), uint64(1)<<(i-1)-1)
		}
		fmt.Fprintf(b, `"count": %d}`, buckets[i]/div)
	}
	b.WriteByte(']')
}

func lhistJSON(b *strings.Builder, buckets []uint64, lo, hi, step int64) {
	if step <= 0 {
		b.WriteString("[]")
		return
	}
	n := int((hi - lo) / step)
	first, last := span(buckets, n+2)
	b.WriteByte('[')
	for i := first; i >= 0 && i <= last; i++ {
		if i > first {
			b.WriteString(", ")
		}
		switch {
		case i == 0:
			fmt.Fprintf(b, `{"max": %d, `, lo-1)
		case i == n+1:
			fmt.Fprintf(b, `{"min": %d, `, hi)
		default:
			fmt.Fprintf(b, `{"min": %d, "max": %d, `, int64(i-1)*step+lo, int64(i)*step+lo-1)
		}
		fmt.Fprintf(b, `"count": %d}`, buckets[i])
	}
	b.WriteByte(']')
}

// span is the first and last of the first n buckets that counted (-1,
// -1: none).
func span(buckets []uint64, n int) (first, last int) {
	first, last = -1, -1
	for i := 0; i < n && i < len(buckets); i++ {
		if buckets[i] > 0 {
			if first < 0 {
				first = i
			}
			last = i
		}
	}
	return first, last
}

// jsonEscape escapes as bpftrace does: quotes, backslashes, \n, \r, \t,
// and the other control bytes as \u00XX.
func jsonEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			b.WriteString(`\"`)
		case c == '\\':
			b.WriteString(`\\`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '\t':
			b.WriteString(`\t`)
		case c < 0x20:
			fmt.Fprintf(&b, `\u%04x`, c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}
