package filter

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/big"
	"sort"
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
	cells    []cell
	count    uint64
	min, max uint64   // two's complement where signed
	sum      *big.Int // the true sum, past 64 bits where it is (trueSum)
	overflow bool     // a CPU's sum wrapped past recovering: sum and avg unknown
	value    any      // the one reported
	text     string
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
			st = &stat{cells: cells, sum: new(big.Int)}
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
			if sum, ok := trueSum(n, binary.NativeEndian.Uint64(b[8:]), lo, hi, prog.StatsSigned); ok {
				st.sum.Add(st.sum, sum)
			} else {
				st.overflow = true
			}
			if first || less(lo, st.min, prog.StatsSigned) {
				st.min = lo
			}
			if first || less(st.max, hi, prog.StatsSigned) {
				st.max = hi
			}
			first = false
			st.count += n
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
		if c := pick(b, name, prog.StatsSigned).Cmp(pick(a, name, prog.StatsSigned)); c != 0 {
			return c < 0
		}
		return rowKey(keyCount{cells: a.cells}) < rowKey(keyCount{cells: b.cells})
	})
	return rows, nil
}

var two64 = new(big.Int).Lsh(big.NewInt(1), 64)

// toBig is a value's bits as the number they are.
func toBig(v uint64, signed bool) *big.Int {
	if signed {
		return big.NewInt(int64(v))
	}
	return new(big.Int).SetUint64(v)
}

// trueSum is a CPU's sum of n values, each between lo and hi, from the
// 64 bits the kernel kept of it, which wrap (3 times INT64_MAX is -3
// there): the one number in [n*lo, n*hi] those bits stand for. ok is
// false where two or more would do (the range is 2^64 wide or more, and
// the bits fall twice in it). Bits none would give (a slot read while
// its CPU updated it) are taken as they are.
func trueSum(n, sum, lo, hi uint64, signed bool) (total *big.Int, ok bool) {
	count := new(big.Int).SetUint64(n)
	low := new(big.Int).Mul(count, toBig(lo, signed))
	high := new(big.Int).Mul(count, toBig(hi, signed))
	c := new(big.Int).Sub(new(big.Int).SetUint64(sum), low)
	c.Mod(c, two64).Add(c, low) // Mod is Euclidean: low <= c < low+2^64
	switch {
	case c.Cmp(high) > 0:
		return toBig(sum, signed), true
	case new(big.Int).Add(c, two64).Cmp(high) <= 0:
		return nil, false
	}
	return c, true
}

// less compares two values as their type says.
func less(a, b uint64, signed bool) bool {
	if signed {
		return int64(a) < int64(b)
	}
	return a < b
}

// pick is the reported value (avg: the mean, the sum divided by the
// count rounded toward zero, as bpftrace's); a sum or mean not known
// (overflow) sorts as 0.
func pick(st stat, name string, signed bool) *big.Int {
	switch name {
	case "min":
		return toBig(st.min, signed)
	case "max":
		return toBig(st.max, signed)
	}
	if st.overflow || st.sum == nil {
		return new(big.Int)
	}
	if name == "avg" && st.count > 0 {
		return new(big.Int).Quo(st.sum, new(big.Int).SetUint64(st.count))
	}
	return st.sum
}

// statValue is the reported value, for JSON and for text: a number (past
// 64 bits, a sum of large values, as it is), or, where a sum wrapped past
// recovering, null and "overflow".
func statValue(st stat, name string, signed bool) (any, string) {
	if st.overflow && (name == "sum" || name == "avg") {
		return nil, "overflow"
	}
	v := pick(st, name, signed)
	switch {
	case v.IsInt64():
		return v.Int64(), v.String()
	case v.IsUint64():
		return v.Uint64(), v.String()
	}
	return v, v.String()
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
