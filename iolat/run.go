package iolat

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gdamore/tcell/v2"

	"github.com/tracekit/tracekit/counts"
	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/internal/slots"
	"github.com/tracekit/tracekit/internal/usage"
	"github.com/tracekit/tracekit/iolat/prog"
	"github.com/tracekit/tracekit/kernel"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/terminal"
	"github.com/tracekit/tracekit/tracefs"
)

func validate(o *options) error {
	if err := hook.Validate(o.Attach); err != nil {
		return err
	}
	if o.Disks && o.Flags {
		return usage.Errorf("-D and -F cannot be combined: choose per disk or per operation")
	}
	if err := o.CheckServe(); err != nil {
		return err
	}
	if o.Serve != "" && o.Heatmap {
		return usage.Errorf("--serve exposes latency histograms: leave out --heatmap")
	}
	if !o.Heatmap {
		for flag, set := range map[string]bool{"--text": o.Text, "--full": o.Full, "--scale": o.Scale != "row"} {
			if set {
				return usage.Errorf("%s goes with --heatmap", flag)
			}
		}
	} else {
		if o.JSON && (o.Text || o.Scale != "row") {
			return usage.Errorf("--json prints the heatmap's rows as numbers: --text and --scale shade a drawn one")
		}
		if o.Timestamp {
			return usage.Errorf("--heatmap and -T cannot be used together: the heatmap's rows are dated already")
		}
		if o.Flags {
			return usage.Errorf("--heatmap draws latency per disk (-D) or for all IO, not per operation (-F)")
		}
		if o.Millis {
			return usage.Errorf("--heatmap spans 1 ns to seconds already: -m is for histograms")
		}
		if o.Cumulative {
			return usage.Errorf("--heatmap draws one row per interval: --cumulative is for histograms")
		}
		o.DefaultInterval(time.Second)
	}
	if o.Slots == "" {
		o.Slots = "auto" // the flag's default
	}
	if o.Slots != "auto" {
		n, err := strconv.ParseUint(o.Slots, 10, 32)
		if err != nil || n > 1<<16 || n&(n-1) != 0 {
			return usage.Errorf("--slots %q: a power of two up to 65536, 0 for the hash alone, or auto", o.Slots)
		}
		if o.Queued {
			return usage.Errorf("--slots goes without -Q: with -Q the insert time must win over the issue time, which only the hash keeps")
		}
		o.slots = uint32(n)
	}
	if o.Disk != "" {
		dev, err := procfs.DevOf(o.Disk)
		if err != nil {
			return usage.Errorf("%v", err)
		}
		o.dev = dev
	}
	return nil
}

// slotsFor is how many direct-mapped slots hold start times: --slots,
// where auto is prog.NSlots with BPF_ATOMIC compare-and-exchange (5.12+)
// and none before, where the hash holds them all.
func slotsFor(o *options) (uint32, error) {
	if o.Slots == "auto" {
		if !kernel.HaveAtomicCmpXchg() {
			return 0, nil
		}
		return prog.NSlots, nil
	}
	n := o.slots
	if n > 0 && !kernel.HaveAtomicCmpXchg() {
		return 0, fmt.Errorf("--slots %d: the slots are claimed with BPF compare-and-exchange, which this kernel lacks (5.12+); use --slots 0", n)
	}
	return n, nil
}

func trace(ctx context.Context, s *run.Session, o *options) error {
	cfg := prog.Config{Dev: o.dev, Heatmap: o.Heatmap, Divisor: 1000}
	if o.Millis {
		cfg.Divisor = 1000000
	}
	switch {
	case o.Disks:
		cfg.By = prog.ByDisk
	case o.Flags:
		cfg.By = prog.ByFlags
	}
	var err error
	if cfg.Issue, err = fields("block_rq_issue"); err != nil {
		return err
	}
	if cfg.Complete, err = fields("block_rq_complete"); err != nil {
		return err
	}
	if o.Queued {
		ins, err := fields("block_rq_insert")
		if err != nil {
			return err
		}
		cfg.Insert = &ins
	} else if cfg.Slots, err = slotsFor(o); err != nil {
		return err
	}
	// Only -d, -D and -F read through the request; without them a raw
	// tracepoint needs no BTF at all (its start parses none), and with
	// them a BTF tracepoint reads the request directly. The perf hook's
	// records have what iolat needs.
	deref := o.Disk != "" || o.Disks || o.Flags
	argsFor := func(h hook.Hook) func() error {
		return func() (err error) {
			cfg.Args, err = prog.ArgsFor(h, o.Queued, deref)
			return err
		}
	}
	raw := hook.Offer{Hook: hook.Raw, Have: hook.HasRaw, Build: argsFor(hook.Raw)}
	perf := hook.Offer{Hook: hook.Perf, Build: func() error { cfg.Args = nil; return nil }}
	btf := hook.Offer{Hook: hook.BTF, Have: hook.HasBTF("block_rq_issue"), Build: argsFor(hook.BTF)}
	offers := []hook.Offer{raw, perf, btf}
	if deref {
		offers = []hook.Offer{btf, raw, perf}
	}
	h, err := hook.Choose(o.Attach, "block:block_rq_issue", offers...)
	if err != nil {
		return err
	}
	spec, err := prog.Collection(cfg)
	if err != nil {
		return err
	}
	coll, err := s.Load(spec)
	if err != nil {
		return err
	}
	// Completion first: a request issued before its completion program is
	// attached would leave a start time behind for nothing to collect.
	order := []string{"complete", "issue"}
	if cfg.Insert != nil {
		order = append(order, "insert")
	}
	var progs []*ebpf.Program
	for _, p := range order {
		if err := s.AttachHook(coll.Programs[p], h, "block", "block_rq_"+p); err != nil {
			return err
		}
		progs = append(progs, coll.Programs[p])
	}
	// A skipped run costs the measure of at most one IO, and none where
	// it was another disk's (-d) or where -Q's issue program had a start
	// from the insert already: said at the end, not counted.
	s.ReportSkips("up to as many IOs are not measured", progs...)

	r := &reader{coll: coll, o: o, names: procfs.Disks{}}
	r.deltas.Cumulative = o.Cumulative
	if o.Serve != "" {
		c := &collector{coll: coll, o: o, names: procfs.Disks{}}
		if err := s.ServeMetrics(o.Serve, c.families); err != nil {
			return err
		}
	}
	if o.Heatmap {
		return r.heatmap(ctx, s)
	}
	return s.Loop(ctx, "block IO latency", func(final bool) error {
		rep, err := r.histReport()
		if err != nil {
			return err
		}
		return s.WriteHist(rep, time.Now())
	})
}

func fields(event string) (prog.Fields, error) {
	f, err := tracefs.ReadFormat("block", event)
	if err != nil {
		if errors.Is(err, tracefs.ErrNoAccess) {
			return prog.Fields{}, err
		}
		return prog.Fields{}, fmt.Errorf("%w (iolat needs the block tracepoints: CONFIG_BLK_DEV and tracing)", err)
	}
	return prog.FieldsOf(f)
}

// reader turns the kernel's maps into reports.
type reader struct {
	coll   *ebpf.Collection
	o      *options
	names  procfs.Disks
	deltas counts.Deltas
}

var opNames = map[uint32]string{'R': "read", 'W': "write", 'F': "flush", 'D': "discard", 'E': "secure erase", 'N': "none"}

func (r *reader) label(id uint32) string {
	switch {
	case r.o.Disks:
		return r.names.Name(id)
	case r.o.Flags:
		if n, ok := opNames[id]; ok {
			return n
		}
		return fmt.Sprintf("op %q", rune(id))
	}
	return ""
}

// slots reads the counts since the last report, per id (0 without -D/-F).
func (r *reader) slots(n int) (map[uint32][]uint64, uint64, error) {
	lost, err := counts.ReadPerCPUCounter(r.coll.Maps["lost"])
	if err != nil {
		return nil, 0, err
	}
	lost = r.deltas.Counter(lost)
	var cur map[uint32][]uint64
	if r.o.Disks || r.o.Flags {
		if cur, err = counts.ReadSlotHash(r.coll.Maps["hist"], n); err != nil {
			return nil, 0, err
		}
	} else {
		all, err := counts.ReadSlotArray(r.coll.Maps["hist"])
		if err != nil {
			return nil, 0, err
		}
		cur = map[uint32][]uint64{0: all}
	}
	out := map[uint32][]uint64{}
	for id, c := range cur {
		out[id] = r.deltas.Slots(id, c)
	}
	return out, lost, nil
}

// sortedIDs orders ids by their labels.
func (r *reader) sortedIDs(m map[uint32][]uint64) []uint32 {
	ids := make([]uint32, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return r.label(ids[i]) < r.label(ids[j]) })
	return ids
}

// lostWhy names the causes of the IOs counted as lost.
const lostWhy = "in-flight map full or negative delta"

func (r *reader) histReport() (*run.HistReport, error) {
	per, lost, err := r.slots(slots.Log2)
	if err != nil {
		return nil, err
	}
	rep := &run.HistReport{Unit: "usecs", Lost: lost, LostWhy: lostWhy}
	if r.o.Millis {
		rep.Unit = "msecs"
	}
	switch {
	case r.o.Disks:
		rep.LabelKind = "disk"
	case r.o.Flags:
		rep.LabelKind = "operation"
	}
	for _, id := range r.sortedIDs(per) {
		h := &terminal.Log2Hist{Label: r.label(id)}
		copy(h.Counts[:], per[id])
		if rep.LabelKind != "" && h.Total() == 0 {
			continue
		}
		rep.Hists = append(rep.Hists, h)
	}
	return rep, nil
}

// heatRows reads one interval as heatmap rows (one per disk with -D).
func (r *reader) heatRows(now time.Time) ([]terminal.HeatRow, uint64, error) {
	per, lost, err := r.slots(slots.Decade)
	if err != nil {
		return nil, 0, err
	}
	var rows []terminal.HeatRow
	for _, id := range r.sortedIDs(per) {
		row := terminal.HeatRow{Time: now, Label: r.label(id)}
		copy(row.Counts[:], per[id])
		if r.o.Disks && row.Total() == 0 {
			continue
		}
		rows = append(rows, row)
	}
	return rows, lost, nil
}

func (r *reader) heatmap(ctx context.Context, s *run.Session) error {
	view := terminal.HeatView{First: 30, Global: r.o.Scale == "global"}
	if r.o.Full {
		view.First = 0
	}
	if r.o.Disks {
		view.LabelWidth = 8
	}
	if !r.o.JSON && !r.o.Text && run.IsTerminal(1) {
		return r.live(ctx, s, view)
	}
	stream := &terminal.HeatStream{W: s.Stdout, View: view, ANSI: !r.o.Text}
	return s.Loop(ctx, "block IO latency", func(final bool) error {
		rows, lost, err := r.heatRows(time.Now())
		if err != nil {
			return err
		}
		if r.o.JSON {
			for _, row := range rows {
				if err := s.WriteJSON(heatJSON(row, lost)); err != nil {
					return err
				}
			}
			return nil
		}
		if lost > 0 {
			fmt.Fprintf(s.Stderr, "iolat: %d IOs could not be measured (%s)\n", lost, lostWhy)
		}
		return stream.Write(rows...)
	})
}

type heatRowJSON struct {
	Tool  string   `json:"tool"`
	Time  string   `json:"time"`
	Unit  string   `json:"unit"`
	Label string   `json:"label"`
	Total uint64   `json:"total"`
	Lost  uint64   `json:"lost"`
	Slots []uint64 `json:"slots"`
}

// heatJSON is one heatmap row as JSON: slots[k] counts latencies from
// ceil(10^(k/10)) ns (slot 30 = 1 us) to the next slot's start.
func heatJSON(row terminal.HeatRow, lost uint64) heatRowJSON {
	return heatRowJSON{Tool: "iolat", Time: run.JSONTime(row.Time), Unit: "ns", Label: row.Label,
		Total: row.Total(), Lost: lost, Slots: row.Counts[:]}
}

// live runs the full-screen view until the user quits, the command exits
// or count rows were drawn. The session restores the terminal.
func (r *reader) live(ctx context.Context, s *run.Session, view terminal.HeatView) error {
	var l *terminal.Live
	err := s.LiveScreen(func(screen tcell.Screen) func(tcell.Event) bool {
		l = terminal.NewLive(screen, view)
		return l.Handle
	})
	if err != nil {
		return err
	}
	l.Add(terminal.HeatRow{Time: time.Now()}, "waiting for the first interval...")
	var lostTotal uint64
	interval := s.Opts.Interval().Seconds()
	return s.Loop(ctx, "block IO latency", func(final bool) error {
		rows, lost, err := r.heatRows(time.Now())
		if err != nil {
			return err
		}
		lostTotal += lost // per interval: --cumulative is refused with --heatmap
		for _, row := range rows {
			l.Add(row, status(row, interval, lostTotal))
		}
		if len(rows) == 0 {
			l.Add(terminal.HeatRow{Time: time.Now()}, fmt.Sprintf("0 IO/s   lost %d", lostTotal))
		}
		return nil
	})
}

// status is the live view's bottom line for the newest row.
func status(row terminal.HeatRow, interval float64, lost uint64) string {
	slowest := "-"
	for k := slots.Decade - 1; k >= 0; k-- {
		if row.Counts[k] != 0 {
			slowest = ">= " + formatNs(slots.DecadeStart(k))
			break
		}
	}
	var label string
	if row.Label != "" {
		label = row.Label + ": "
	}
	return fmt.Sprintf("%s%.0f IO/s   slowest %s   lost %d", label, float64(row.Total())/interval, slowest, lost)
}

func formatNs(ns uint64) string {
	switch {
	case ns >= 1e9:
		return fmt.Sprintf("%.2fs", float64(ns)/1e9)
	case ns >= 1e6:
		return fmt.Sprintf("%.2fms", float64(ns)/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.2fus", float64(ns)/1e3)
	}
	return fmt.Sprintf("%dns", ns)
}
