package filter

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/filter/compile"
	"github.com/tracekit/tracekit/run"
)

// lhist reports a linear histogram per interval (cumulative with
// --cumulative): each slot's count over the CPUs, in bpftrace's layout.
func lhist(ctx context.Context, s *run.Session, ev event, coll *ebpf.Collection, prog *compile.Program, act compile.Action) error {
	l := *act.Lhist
	prev := make([]uint64, prog.LhistSlots)
	return s.Loop(ctx, "events of "+ev.String(), func(final bool) error {
		cur := make([]uint64, prog.LhistSlots)
		for i := range cur {
			var per []uint64
			if err := coll.Maps["lhist"].Lookup(uint32(i), &per); err != nil {
				return fmt.Errorf("read the histogram: %w", err)
			}
			for _, n := range per {
				cur[i] += n
			}
		}
		shown := make([]uint64, len(cur))
		for i := range cur {
			shown[i] = cur[i]
			if !s.Opts.Cumulative {
				shown[i] -= prev[i]
			}
		}
		copy(prev, cur)
		return writeLhist(s, ev, l, act.Hist.Text, shown, time.Now())
	})
}

// lhistLabel is slot i's range as bpftrace writes it: (..., MIN), [LO, HI),
// [MAX, ...).
func lhistLabel(l compile.Lhist, i, slots int) (label string, lo, hi *int64) {
	switch {
	case i == 0:
		return fmt.Sprintf("(..., %d)", l.Min), nil, &l.Min
	case i == slots-1:
		return fmt.Sprintf("[%d, ...)", l.Max), &l.Max, nil
	}
	from := l.Min + int64(i-1)*l.Step
	to := min(from+l.Step, l.Max)
	return fmt.Sprintf("[%d, %d)", from, to), &from, &to
}

// writeLhist prints the slots from the first that counted to the last, as
// bpftrace prints an lhist() map: the range, the count, a bar of 52
// columns scaled to the largest; or one JSON object.
func writeLhist(s *run.Session, ev event, l compile.Lhist, expr string, counts []uint64, now time.Time) error {
	first, last, most := -1, -1, uint64(0)
	for i, n := range counts {
		if n > 0 {
			if first < 0 {
				first = i
			}
			last = i
			most = max(most, n)
		}
	}
	if s.Opts.JSON {
		rows := []map[string]any{}
		for i := first; first >= 0 && i <= last; i++ {
			label, lo, hi := lhistLabel(l, i, len(counts))
			row := map[string]any{"range": label, "count": counts[i]}
			if lo != nil {
				row["min"] = *lo
			}
			if hi != nil {
				row["max"] = *hi
			}
			rows = append(rows, row)
		}
		return s.WriteJSON(map[string]any{"tool": "filter", "time": run.JSONTime(now), "event": ev.String(), "lhist": expr, "slots": rows})
	}
	var b strings.Builder
	s.BeginText(&b, now)
	if first < 0 {
		b.WriteString("(no events)\n")
	}
	const width = 52
	for i := first; first >= 0 && i <= last; i++ {
		label, _, _ := lhistLabel(l, i, len(counts))
		bar := int(counts[i] * width / most)
		fmt.Fprintf(&b, "%-16s%8s |%s%s|\n", label, strconv.FormatUint(counts[i], 10), strings.Repeat("@", bar), strings.Repeat(" ", width-bar))
	}
	_, err := fmt.Fprint(s.Stdout, b.String())
	return err
}
