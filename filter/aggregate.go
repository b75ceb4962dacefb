package filter

import (
	"context"
	"encoding/binary"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/counts"
	"github.com/tracekit/tracekit/filter/compile"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/terminal"
)

// count reports the passing events per interval.
func count(ctx context.Context, s *run.Session, ev event, coll *ebpf.Collection) error {
	d := counts.Deltas{Cumulative: s.Opts.Cumulative}
	return s.Loop(ctx, "events of "+ev.String(), func(final bool) error {
		n, err := counts.ReadPerCPUCounter(coll.Maps["count"])
		if err != nil {
			return err
		}
		n = d.Counter(n)
		now := time.Now()
		if s.Opts.JSON {
			return s.WriteJSON(map[string]any{"tool": "filter", "time": run.JSONTime(now), "event": ev.String(), "count": n})
		}
		var b strings.Builder
		s.BeginText(&b, now)
		fmt.Fprintf(&b, "%d events of %s passed\n", n, ev)
		_, err = fmt.Fprint(s.Stdout, b.String())
		return err
	})
}

// histUnit is a histogram's column head: the expression, and its unit
// where the expression is one whose unit the tool knows (a call's
// duration is in nanoseconds; BCC's funclatency heads its column
// "nsecs").
func histUnit(expr string) string {
	if strings.TrimSpace(expr) == "duration" {
		return "duration (nsecs)"
	}
	return expr
}

// hist reports the log2 histogram of an expression per interval.
func hist(ctx context.Context, s *run.Session, ev event, coll *ebpf.Collection, prog *compile.Program, expr string) error {
	d := counts.Deltas{Cumulative: s.Opts.Cumulative}
	below := counts.Deltas{Cumulative: s.Opts.Cumulative}
	return s.Loop(ctx, "events of "+ev.String(), func(final bool) error {
		h, err := counts.ReadLog2Array(coll.Maps["hist"])
		if err != nil {
			return err
		}
		rep := &run.HistReport{Unit: histUnit(expr), Hists: []*terminal.Log2Hist{d.Hist(0, &h)}}
		if prog.Signed {
			n, err := counts.ReadPerCPUCounter(coll.Maps["neg"])
			if err != nil {
				return err
			}
			n = below.Counter(n)
			rep.Below = &n
		}
		if rep.Hists[0].Total() == 0 {
			rep.Hists = nil
		}
		return s.WriteHist(rep, time.Now())
	})
}

// keyCount is one row of a --count-by table: the key's columns, decoded.
type keyCount struct {
	cells []cell
	count uint64
}

// cell is one decoded column: its JSON value and its text.
type cell struct {
	value any
	text  string
}

// kernelSyms is the kernel's symbol table, read once, the first time an
// address is named (nil when unreadable: addresses stay numbers).
var kernelSyms = sync.OnceValue(func() *procfs.Symbols {
	s, _ := procfs.LoadKallsyms()
	return s
})

// decodeColumn decodes a column of a key or record.
func decodeColumn(col compile.Column, raw []byte) cell {
	if col.Offset+col.Size > len(raw) {
		return cell{nil, "?"}
	}
	b := raw[col.Offset : col.Offset+col.Size]
	if col.String {
		str := unix.ByteSliceToString(b)
		return cell{str, str}
	}
	u := binary.LittleEndian.Uint64(b)
	if col.Stack {
		return cell{int64(u), fmt.Sprintf("stack %d", int64(u))} // named by resolveStacks
	}
	if col.Ksym {
		if name := kernelSyms().Symbolize(u); name != "" {
			return cell{name, name}
		}
	}
	if col.Usym {
		name := userName(b)
		return cell{name, name}
	}
	switch {
	case col.Pointer:
		t := fmt.Sprintf("0x%x", u)
		return cell{t, t}
	case col.Symbols[u] != "":
		return cell{col.Symbols[u], col.Symbols[u]}
	case col.Signed:
		return cell{int64(u), strconv.FormatInt(int64(u), 10)}
	}
	return cell{u, strconv.FormatUint(u, 10)}
}

// countBy reports the counts by key per interval, largest first: through
// table where the counts are swapped, else read in place, the kernel's
// hash holding every key of the run.
func countBy(ctx context.Context, s *run.Session, ev event, coll *ebpf.Collection, prog *compile.Program, table *keyTable, folded bool) error {
	why := fmt.Sprintf("more than %d keys in the run: --max-keys raises it", prog.MaxKeys)
	if table != nil {
		if !s.Opts.Cumulative {
			why = fmt.Sprintf("more than %d keys in an interval: --max-keys raises it", prog.MaxKeys)
		}
		return s.Loop(ctx, "events of "+ev.String(), func(final bool) error {
			rows, lost, err := table.take()
			if err != nil {
				return err
			}
			resolveStacks(rows, prog.Columns, coll.Maps[compile.StacksMap])
			return writeCounts(s, ev, prog.Columns, rows, lost, why, time.Now(), folded)
		})
	}
	prev := map[string]uint64{}
	lostDeltas := counts.Deltas{Cumulative: s.Opts.Cumulative}
	return s.Loop(ctx, "events of "+ev.String(), func(final bool) error {
		rows, err := readCounts(coll.Maps["counts"], prog.Columns)
		if err != nil {
			return err
		}
		lost, err := counts.ReadPerCPUCounter(coll.Maps["lost"])
		if err != nil {
			return err
		}
		lost = lostDeltas.Counter(lost)
		var shown []keyCount
		for _, r := range rows {
			k := rowKey(r)
			n := r.count
			if !s.Opts.Cumulative {
				n -= prev[k]
			}
			prev[k] = r.count
			if n > 0 {
				r.count = n
				shown = append(shown, r)
			}
		}
		sort.SliceStable(shown, func(i, j int) bool { return shown[i].count > shown[j].count })
		resolveStacks(shown, prog.Columns, coll.Maps[compile.StacksMap])
		return writeCounts(s, ev, prog.Columns, shown, lost, why, time.Now(), folded)
	})
}

// resolveStacks names the frames of each kstack key, innermost first,
// from the stacks map and kallsyms: the cell's value is the list, its text
// the lines.
func resolveStacks(rows []keyCount, cols []compile.Column, m *ebpf.Map) {
	for i, col := range cols {
		if !col.Stack || m == nil {
			continue
		}
		for r := range rows {
			id, _ := rows[r].cells[i].value.(int64)
			frames := stackFrames(m, id)
			rows[r].cells[i] = cell{frames, strings.Join(frames, "\n")}
		}
	}
}

// stackFrames are the symbols of stack id's frames.
func stackFrames(m *ebpf.Map, id int64) []string {
	switch {
	case id == -int64(unix.EFAULT):
		// No kernel frames: the event's registers are user space's (a
		// syscall's tracepoint through perf, on 5.10).
		return []string{"[no kernel stack]"}
	case id == -int64(unix.EEXIST):
		return []string{"[stack not recorded: its slot of the stack map held another's]"}
	case id < 0:
		return []string{fmt.Sprintf("[stack not recorded: %v]", unix.Errno(-id))}
	}
	pcs := make([]uint64, compile.StackDepth)
	if err := m.Lookup(uint32(id), &pcs); err != nil {
		return []string{fmt.Sprintf("[stack %d: %v]", id, err)}
	}
	return kernelFrames(pcs)
}

// kernelFrames names return addresses, up to the first 0. The innermost
// frames in code the kernel generated for tracing, which kallsyms puts in
// "[bpf]" (at fentry, filter's own program and its trampoline) or a
// "[__builtin__...]" module (6.1's ftrace_trampoline, kprobes' slots), are
// the tracer's, not the traced code's: they are left out, as perf leaves
// out its own.
func kernelFrames(pcs []uint64) []string {
	var frames []string
	for _, pc := range pcs {
		if pc == 0 {
			break
		}
		name := kernelSyms().Symbolize(pc)
		if name == "" {
			name = fmt.Sprintf("0x%x", pc)
		}
		if len(frames) == 0 && (strings.HasSuffix(name, " [bpf]") || strings.Contains(name, " [__builtin__")) {
			continue
		}
		frames = append(frames, name)
	}
	return frames
}

// readCounts reads the counts hash (see decodeRows).
func readCounts(m *ebpf.Map, cols []compile.Column) ([]keyCount, error) {
	rows, err := readRaw(m, cols)
	return rows, err
}

// decodeRows decodes a counts hash's keys and counts. Keys that decode
// alike (a string's bytes after its NUL are not part of it) are summed;
// rows come sorted by key text.
func decodeRows(keys [][]byte, vals []uint64, cols []compile.Column) []keyCount {
	byKey := map[string]*keyCount{}
	for i, key := range keys {
		r := keyCount{count: vals[i]}
		for _, col := range cols {
			r.cells = append(r.cells, decodeColumn(col, key))
		}
		k := rowKey(r)
		if have, ok := byKey[k]; ok {
			have.count += vals[i]
			continue
		}
		byKey[k] = &r
	}
	names := make([]string, 0, len(byKey))
	for k := range byKey {
		names = append(names, k)
	}
	sort.Strings(names)
	rows := make([]keyCount, 0, len(names))
	for _, k := range names {
		rows = append(rows, *byKey[k])
	}
	return rows
}

func rowKey(r keyCount) string {
	var parts []string
	for _, c := range r.cells {
		parts = append(parts, c.text)
	}
	return strings.Join(parts, "\x00")
}

// writeCounts prints a --count-by table: one column per key (strings to the
// left, numbers to the right) and the count, or one JSON object.
func writeCounts(s *run.Session, ev event, cols []compile.Column, rows []keyCount, lost uint64, why string, now time.Time, folded bool) error {
	if s.Opts.JSON {
		names := make([]string, len(cols))
		for i, c := range cols {
			names[i] = c.Name
		}
		counts := make([]map[string]any, 0, len(rows))
		var total uint64
		for _, r := range rows {
			key := map[string]any{}
			for i, c := range r.cells {
				key[cols[i].Name] = c.value
			}
			counts = append(counts, map[string]any{"key": key, "count": r.count})
			total += r.count
		}
		return s.WriteJSON(map[string]any{"tool": "filter", "time": run.JSONTime(now), "event": ev.String(),
			"keys": names, "counts": counts, "total": total, "lost": lost})
	}
	var b strings.Builder
	s.BeginText(&b, now)
	stacks := false
	for _, c := range cols {
		stacks = stacks || c.Stack
	}
	if folded && stacks {
		// A flame graph's input (Brendan Gregg's stackcollapse form): the
		// frames' functions outermost first, joined by ';', the other keys
		// after them, then the count.
		for _, r := range rows {
			var parts []string
			for i, c := range r.cells {
				if cols[i].Stack {
					frames := strings.Split(c.text, "\n")
					for k := len(frames) - 1; k >= 0; k-- {
						// A function, not its offset: one box per function.
						fn, _, _ := strings.Cut(frames[k], "+0x")
						parts = append(parts, terminal.Printable(strings.ReplaceAll(fn, ";", ":")))
					}
					continue
				}
				parts = append(parts, terminal.Printable(strings.ReplaceAll(c.text, ";", ":")))
			}
			fmt.Fprintf(&b, "%s %d\n", strings.Join(parts, ";"), r.count)
		}
	} else if len(rows) == 0 {
		b.WriteString("(no events)\n")
	} else if stacks {
		// As bpftrace prints @[kstack]: a stack's frames, innermost first,
		// indented; then the key's other columns and the count.
		for _, r := range rows {
			var rest []string
			for i, c := range r.cells {
				if cols[i].Stack {
					for _, f := range strings.Split(c.text, "\n") {
						fmt.Fprintf(&b, "    %s\n", terminal.Printable(f))
					}
					continue
				}
				rest = append(rest, cols[i].Name+"="+terminal.Printable(c.text))
			}
			rest = append(rest, strconv.FormatUint(r.count, 10))
			fmt.Fprintf(&b, "  %s\n\n", strings.Join(rest, " "))
		}
	} else {
		header := make([]string, len(cols)+1)
		table := [][]string{header}
		for i, c := range cols {
			header[i] = c.Name
		}
		header[len(cols)] = "count"
		for _, r := range rows {
			table = append(table, keyLine(r.cells, strconv.FormatUint(r.count, 10)))
		}
		writeKeyTable(&b, cols, table)
	}
	return finishKeyReport(s, &b, lost, why)
}

// keyLine is a table row: a key's cells, then its value.
func keyLine(cells []cell, value string) []string {
	line := make([]string, 0, len(cells)+1)
	for _, c := range cells {
		line = append(line, terminal.Printable(c.text))
	}
	return append(line, value)
}

// writeKeyTable writes a table of keys and a value: numbers to the right,
// strings and names to the left.
func writeKeyTable(b *strings.Builder, cols []compile.Column, table [][]string) {
	right := make([]bool, len(cols)+1)
	for i, c := range cols {
		right[i] = !c.String && c.Symbols == nil && !c.Ksym && !c.Usym
	}
	right[len(cols)] = true
	terminal.WriteTable(b, table, right)
}

// finishKeyReport says what a full map lost, and prints the report.
func finishKeyReport(s *run.Session, b *strings.Builder, lost uint64, why string) error {
	if lost > 0 {
		fmt.Fprintf(b, "lost: %d events could not be counted (%s)\n", lost, why)
	}
	_, err := fmt.Fprint(s.Stdout, b.String())
	return err
}
