package filter

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/counts"
	"github.com/tracekit/tracekit/filter/compile"
	"github.com/tracekit/tracekit/run"
)

// stat is a key's statistics, its CPUs' slots merged.
type stat struct {
	cells         []cell
	count         uint64
	sum, min, max uint64 // two's complement where signed
	value         any    // the one reported
	text          string
}

// stats reports --sum, --min, --max or --avg, per --count-by key when
// given, cumulative since the start: each CPU's slots of the kernel's
// per-CPU hash (asm.StatsUpdate) and of its fast path's slots
// (asm.StatsCache) merged.
func stats(ctx context.Context, s *run.Session, ev event, coll *ebpf.Collection, prog *compile.Program, act compile.Action) error {
	why := fmt.Sprintf("more than %d keys in the run: --max-keys raises it", prog.MaxKeys)
	return s.Loop(ctx, "events of "+ev.String(), func(final bool) error {
		rows, err := readStats(coll.Maps[compile.StatsMap], coll.Maps[compile.StatsCacheMap], prog, act.Stat)
		if err != nil {
			return err
		}
		lost, err := counts.ReadPerCPUCounter(coll.Maps["lost"])
		if err != nil {
			return err
		}
		return writeStats(s, ev, prog, act, rows, lost, why, time.Now())
	})
}

// readStats reads every key's slots and merges them, largest value first.
// Keys that decode alike are one (a string's bytes after its NUL, which
// some kernels leave as the stack had them, are not part of it): their
// slots are merged as one key's.
func readStats(m, cache *ebpf.Map, prog *compile.Program, name string) ([]stat, error) {
	byKey := map[string]*stat{}
	var order []string
	add := func(key []byte, slots [][]byte) {
		var cells []cell
		for _, col := range prog.Columns {
			cells = append(cells, decodeColumn(col, key))
		}
		k := rowKey(keyCount{cells: cells})
		st, ok := byKey[k]
		if !ok {
			st = &stat{cells: cells}
			byKey[k] = st
			order = append(order, k)
		}
		first := st.count == 0
		for _, b := range slots {
			if len(b) < 32 {
				continue
			}
			n := binary.NativeEndian.Uint64(b)
			if n == 0 {
				continue // a CPU that counted none of this key
			}
			lo, hi := binary.NativeEndian.Uint64(b[16:]), binary.NativeEndian.Uint64(b[24:])
			if first || less(lo, st.min, prog.StatsSigned) {
				st.min = lo
			}
			if first || less(st.max, hi, prog.StatsSigned) {
				st.max = hi
			}
			first = false
			st.count += n
			st.sum += binary.NativeEndian.Uint64(b[8:])
		}
	}
	var key []byte
	var slots [][]byte
	it := m.Iterate()
	for seen := 0; seen < int(prog.MaxKeys) && it.Next(&key, &slots); seen++ {
		add(key, slots)
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read the statistics: %w", err)
	}
	if cache != nil {
		// Each CPU's slot {key0, key1, statistics}: a claimed one (key0
		// not 0) is that key's statistics on that CPU.
		for i := uint32(0); i < cache.MaxEntries(); i++ {
			if err := cache.Lookup(i, &slots); err != nil {
				return nil, fmt.Errorf("read the statistics: %w", err)
			}
			for _, b := range slots {
				if len(b) >= asm.StatsCacheSize && binary.NativeEndian.Uint64(b) != 0 {
					add(b[:16], [][]byte{b[16:]})
				}
			}
		}
	}
	var rows []stat
	for _, k := range order {
		st := byKey[k]
		if st.count == 0 {
			continue
		}
		st.value, st.text = statValue(*st, name, prog.StatsSigned)
		rows = append(rows, *st)
	}
	sort.SliceStable(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		va, vb := pick(a, name), pick(b, name)
		if va != vb {
			return less(vb, va, prog.StatsSigned)
		}
		return rowKey(keyCount{cells: a.cells}) < rowKey(keyCount{cells: b.cells})
	})
	return rows, nil
}

// less compares two values as their type says.
func less(a, b uint64, signed bool) bool {
	if signed {
		return int64(a) < int64(b)
	}
	return a < b
}

// pick is the reported value's bits (avg: the mean).
func pick(st stat, name string) uint64 {
	switch name {
	case "min":
		return st.min
	case "max":
		return st.max
	case "avg":
		if st.count == 0 {
			return 0
		}
		return uint64(int64(st.sum) / int64(st.count))
	}
	return st.sum
}

// statValue is the reported value, for JSON and for text: avg, as
// bpftrace's, is the sum divided by the count, rounded toward zero.
func statValue(st stat, name string, signed bool) (any, string) {
	v := pick(st, name)
	if name == "avg" && !signed {
		v = st.sum / st.count
	}
	if signed {
		return int64(v), strconv.FormatInt(int64(v), 10)
	}
	return v, strconv.FormatUint(v, 10)
}

// writeStats prints the table, one column per key and the statistic, or
// one JSON object with each key's count too.
func writeStats(s *run.Session, ev event, prog *compile.Program, act compile.Action, rows []stat, lost uint64, why string, now time.Time) error {
	cols := prog.Columns
	if s.Opts.JSON {
		names := make([]string, len(cols))
		for i, c := range cols {
			names[i] = c.Name
		}
		out := make([]map[string]any, 0, len(rows))
		for _, r := range rows {
			key := map[string]any{}
			for i, c := range r.cells {
				key[cols[i].Name] = c.value
			}
			out = append(out, map[string]any{"key": key, act.Stat: r.value, "count": r.count})
		}
		return s.WriteJSON(map[string]any{"tool": "filter", "time": run.JSONTime(now), "event": ev.String(),
			"keys": names, "stat": act.Stat, "of": act.StatSource, "values": out, "lost": lost})
	}
	var b strings.Builder
	s.BeginText(&b, now)
	if len(rows) == 0 {
		b.WriteString("(no events)\n")
	} else {
		header := make([]string, 0, len(cols)+1)
		for _, c := range cols {
			header = append(header, c.Name)
		}
		header = append(header, fmt.Sprintf("%s(%s)", act.Stat, act.StatSource))
		table := [][]string{header}
		for _, r := range rows {
			table = append(table, keyLine(r.cells, r.text))
		}
		writeKeyTable(&b, cols, table)
	}
	return finishKeyReport(s, &b, lost, why)
}
