// Package output prints bpftrace's maps as bpftrace 0.17 prints them, in
// its text format and in -f json: what a user's scripts, eyes and
// parsers expect at a program's end and from print(). The values come in already read from the
// kernel's maps and summed over CPUs; this package decides the order,
// the layout and the numbers' forms only.
package output

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// Kind is what a map holds.
type Kind int

const (
	Int   Kind = iota // an integer assigned (signed, 64 bits)
	Count             // count()
	Sum               // sum()
	Min               // min()
	Max               // max()
	Avg               // avg()
	Stats             // stats()
	Hist              // hist()
	Lhist             // lhist()
	Str               // a string
	Tuple             // a tuple
)

// Value is one value or key element. Which fields count depends on the
// map's Kind (or, for a key or a tuple's element, on IsStr).
type Value struct {
	Int   int64  // Int, Sum, Min, Max; a key's or a tuple's integer
	Count uint64 // Count; Avg's and Stats' count
	Total int64  // Avg's and Stats' total
	Str   string // Str; a key's or a tuple's string
	IsStr bool   // a key's or a tuple's element is a string
	Elems []Value
	// Buckets are hist's and lhist's counts. hist: index 0 counts the
	// negative values, 1 zero, 2 one, and i >= 3 the values in [2^(i-2),
	// 2^(i-1)). lhist: index 0 counts those below Min, i from 1 those in
	// [Min+(i-1)*Step, Min+i*Step), the last those at Max and above.
	Buckets []uint64
}

// Map is a map to print: its name with the '@' ("@bytes", "@"), what it
// holds, lhist's parameters, and its elements in any order.
type Map struct {
	Name string
	Kind Kind
	// Unsigned: an Int's or a Sum's values are of an unsigned type,
	// printed and sorted as uint64.
	Unsigned       bool
	Min, Max, Step int64 // lhist's
	Elems          []Elem
	// Top and Div are print(@map, top, div)'s, 0 for none, as bpftrace
	// 0.17's print takes them: only the last Top elements of the map's
	// order are printed (the largest; a stats map prints them all), and
	// integers, counts, averages and hist's counts are printed divided by
	// Div (lhist's and stats's are not; bars are the undivided counts').
	Top, Div uint64
}

// Elem is one element: its keys (none for a map without) and value.
type Elem struct {
	Keys  []Value
	Value Value
}

// WriteMaps prints maps by name, as bpftrace prints all of them at the
// end of a run.
func WriteMaps(w io.Writer, maps []*Map) error { return writeByName(w, maps, WriteMap) }

// writeByName writes maps with write, by name.
func writeByName(w io.Writer, maps []*Map, write func(io.Writer, *Map) error) error {
	sorted := slices.Clone(maps)
	slices.SortStableFunc(sorted, func(a, b *Map) int { return strings.Compare(a.Name, b.Name) })
	for _, m := range sorted {
		if err := write(w, m); err != nil {
			return err
		}
	}
	return nil
}

// WriteMap prints one map: integers, counts, sums, minima and maxima
// ordered by value, histograms by their total count, averages and stats
// by their average, the rest by key (integers as unsigned, strings as
// bytes, the last key first so that the first key decides), each
// element "@name[k1, k2]: value". Histograms, averages and stats end
// with an empty line, as bpftrace's do.
func WriteMap(w io.Writer, m *Map) error {
	elems := sortedElems(m)
	var b strings.Builder
	for i, e := range elems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(m.Name)
		if len(e.Keys) > 0 {
			b.WriteString("[" + join(e.Keys) + "]")
		}
		b.WriteString(": ")
		switch m.Kind {
		case Int, Sum, Min, Max:
			b.WriteString(m.intText(e.Value.Int))
		case Count:
			b.WriteString(strconv.FormatUint(e.Value.Count/m.div(), 10))
		case Avg:
			b.WriteString(strconv.FormatInt(average(e.Value)/int64(m.div()), 10))
		case Stats:
			fmt.Fprintf(&b, "count %d, average %d, total %d", int64(e.Value.Count), average(e.Value), e.Value.Total)
		case Hist:
			b.WriteByte('\n')
			writeHist(&b, e.Value.Buckets, m.div())
		case Lhist:
			b.WriteByte('\n')
			writeLhist(&b, e.Value.Buckets, m.Min, m.Max, m.Step)
		case Str:
			b.WriteString(e.Value.Str)
		case Tuple:
			b.WriteString("(" + join(e.Value.Elems) + ")")
		}
	}
	// A histogram's last row ends its line, and the map's end adds an
	// empty one; averages and stats get an empty line of their own.
	b.WriteByte('\n')
	if m.Kind == Avg || m.Kind == Stats {
		b.WriteByte('\n')
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// unsigned says whether m's integers print as unsigned: an Int's or a
// Sum's of an unsigned type.
func (m *Map) unsigned() bool { return m.Unsigned && (m.Kind == Int || m.Kind == Sum) }

// intText is an Int's, Sum's, Min's or Max's value as bpftrace prints it,
// divided by print's Div.
func (m *Map) intText(v int64) string {
	if m.unsigned() {
		return strconv.FormatUint(uint64(v)/m.div(), 10)
	}
	return strconv.FormatInt(v/int64(m.div()), 10)
}

// div is print's divisor, 1 for none.
func (m *Map) div() uint64 {
	if m.Div == 0 {
		return 1
	}
	return m.Div
}

// sortedElems are m's elements in bpftrace's order for its kind.
func sortedElems(m *Map) []Elem {
	elems := slices.Clone(m.Elems)
	switch m.Kind {
	case Int, Sum, Min, Max:
		slices.SortStableFunc(elems, func(a, b Elem) int {
			if m.unsigned() {
				return cmp.Compare(uint64(a.Value.Int), uint64(b.Value.Int))
			}
			return cmp.Compare(a.Value.Int, b.Value.Int)
		})
	case Count:
		slices.SortStableFunc(elems, func(a, b Elem) int { return cmp.Compare(a.Value.Count, b.Value.Count) })
	case Hist, Lhist:
		slices.SortStableFunc(elems, func(a, b Elem) int { return cmp.Compare(total(a.Value.Buckets), total(b.Value.Buckets)) })
	case Avg, Stats:
		slices.SortStableFunc(elems, func(a, b Elem) int { return cmp.Compare(average(a.Value), average(b.Value)) })
	default:
		sortByKey(elems)
	}
	if m.Top > 0 && uint64(len(elems)) > m.Top && m.Kind != Stats {
		elems = elems[uint64(len(elems))-m.Top:]
	}
	return elems
}

func total(buckets []uint64) int64 {
	var t int64
	for _, n := range buckets {
		t += int64(n)
	}
	return t
}

// average is total/count in integers, 0 for no count.
func average(v Value) int64 {
	if v.Count == 0 {
		return 0
	}
	return v.Total / int64(v.Count)
}

// sortByKey orders by the keys, the first deciding.
func sortByKey(elems []Elem) {
	slices.SortStableFunc(elems, func(a, b Elem) int {
		for i := range min(len(a.Keys), len(b.Keys)) {
			ka, kb := a.Keys[i], b.Keys[i]
			var c int
			if ka.IsStr {
				c = strings.Compare(ka.Str, kb.Str)
			} else {
				c = cmp.Compare(uint64(ka.Int), uint64(kb.Int))
			}
			if c != 0 {
				return c
			}
		}
		return 0
	})
}

func join(vs []Value) string {
	var parts []string
	for _, v := range vs {
		switch {
		case v.IsStr:
			parts = append(parts, v.Str)
		case v.Elems != nil:
			parts = append(parts, "("+join(v.Elems)+")")
		default:
			parts = append(parts, strconv.FormatInt(v.Int, 10))
		}
	}
	return strings.Join(parts, ", ")
}

// barWidth is bpftrace's bars' width: 52 '@' for the largest count.
const barWidth = 52

// row writes one bucket: its label left in 16 columns, the count divided
// by div right in 8, and the bar of the count.
func row(b *strings.Builder, label string, n, most, div uint64) {
	bar := int(float32(n) / float32(most) * barWidth)
	fmt.Fprintf(b, "%-16s%8d |%-52s|\n", label, n/div, strings.Repeat("@", bar))
}

// writeHist writes the buckets from the first to the last that counted.
func writeHist(b *strings.Builder, buckets []uint64, div uint64) {
	first, last := span(buckets, len(buckets))
	most := slices.Max(append([]uint64{0}, buckets...))
	for i := first; i >= 0 && i <= last; i++ {
		var label string
		switch i {
		case 0:
			label = "(..., 0)"
		case 1:
			label = "[0]"
		case 2:
			label = "[1]"
		default:
			label = "[" + powerLabel(i-2) + ", " + powerLabel(i-1) + ")"
		}
		row(b, label, buckets[i], most, div)
	}
}

// powerLabel is 2^p with K, M, G or T for 2^10, 2^20, ...
func powerLabel(p int) string {
	suffix := ""
	for _, s := range []struct {
		at     int
		suffix string
	}{{40, "T"}, {30, "G"}, {20, "M"}, {10, "K"}} {
		if p >= s.at {
			p -= s.at
			suffix = s.suffix
			break
		}
	}
	return strconv.FormatInt(1<<p, 10) + suffix
}

// writeLhist writes the buckets from the first to the last that counted.
func writeLhist(b *strings.Builder, buckets []uint64, lo, hi, step int64) {
	if step <= 0 {
		return
	}
	n := int((hi - lo) / step) // buckets between the two ends
	first, last := span(buckets, n+2)
	most := slices.Max(append([]uint64{0}, buckets[:min(n+2, len(buckets))]...))
	for i := first; i >= 0 && i <= last; i++ {
		var label string
		switch {
		case i == 0:
			label = "(..., " + linearLabel(lo) + ")"
		case i == n+1:
			label = "[" + linearLabel(hi) + ", ...)"
		default:
			label = "[" + linearLabel(int64(i-1)*step+lo) + ", " + linearLabel(int64(i)*step+lo) + ")"
		}
		row(b, label, buckets[i], most, 1)
	}
}

// linearLabel is n, in M or K where it is a whole number of them.
func linearLabel(n int64) string {
	switch {
	case n == 0:
		return "0"
	case n%(1<<20) == 0:
		return strconv.FormatInt(n/(1<<20), 10) + "M"
	case n%(1<<10) == 0:
		return strconv.FormatInt(n/(1<<10), 10) + "K"
	}
	return strconv.FormatInt(n, 10)
}
