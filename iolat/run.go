package iolat

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gdamore/tcell/v2"

	"github.com/tracekit/tracekit/internal/slots"
	"github.com/tracekit/tracekit/terminal"
	"github.com/tracekit/tracekit/tools"
	"github.com/tracekit/tracekit/tracefs"
)

func validate(o *options) error {
	if err := tools.ValidateAttach(o.Attach); err != nil {
		return err
	}
	if o.Disks && o.Flags {
		return tools.Usagef("-D and -F cannot be combined: choose per disk or per operation")
	}
	if err := o.CheckServe(); err != nil {
		return err
	}
	if o.Serve != "" && o.Heatmap {
		return tools.Usagef("--serve exposes latency histograms: leave out --heatmap")
	}
	if !o.Heatmap {
		for flag, set := range map[string]bool{"--text": o.Text, "--full": o.Full, "--scale": o.Scale != "row"} {
			if set {
				return tools.Usagef("%s goes with --heatmap", flag)
			}
		}
	} else {
		if o.JSON && (o.Text || o.Scale != "row") {
			return tools.Usagef("--json prints the heatmap's rows as numbers: --text and --scale shade a drawn one")
		}
		if o.Timestamp {
			return tools.Usagef("--heatmap and -T cannot be used together: the heatmap's rows are dated already")
		}
		if o.Flags {
			return tools.Usagef("--heatmap draws latency per disk (-D) or for all IO, not per operation (-F)")
		}
		if o.Millis {
			return tools.Usagef("--heatmap spans 1 ns to seconds already: -m is for histograms")
		}
		if o.Cumulative {
			return tools.Usagef("--heatmap draws one row per interval: --cumulative is for histograms")
		}
		o.DefaultInterval(time.Second)
	}
	if o.Disk != "" {
		dev, err := tools.DevOf(o.Disk)
		if err != nil {
			return tools.Usagef("%v", err)
		}
		o.dev = dev
	}
	return nil
}

// rqArgsFor finds, in the kernel's BTF, where the raw or BTF tracepoint
// programs find the request and what they read through it. A raw program
// that reads nothing through it (deref false) needs only the request's
// place among the arguments, found without BTF: the queue comes first
// where block_rq_issue and block_rq_insert pass two (before 5.11).
func rqArgsFor(hook tools.Hook, queued, deref bool) (*rqArgs, error) {
	a := &rqArgs{Hook: hook, RqDisk: -1, ProbeRead: tools.Readers().Kernel}
	var err error
	if hook == tools.HookRaw && !deref {
		n, err := tools.RawTracepointArgs("block_rq_issue", 2)
		if err != nil {
			return nil, err
		}
		a.IssueArg, a.InsertArg = n-1, n-1
		return a, nil
	}
	if a.IssueArg, err = tools.TracepointArg("block_rq_issue", "request"); err != nil {
		return nil, err
	}
	if a.CompleteArg, err = tools.TracepointArg("block_rq_complete", "request"); err != nil {
		return nil, err
	}
	if queued {
		if a.InsertArg, err = tools.TracepointArg("block_rq_insert", "request"); err != nil {
			return nil, err
		}
	}
	if off, err := tools.MemberOffset("request", "rq_disk"); err == nil {
		a.RqDisk = off // before 5.16
	} else {
		if a.Q, err = tools.MemberOffset("request", "q"); err != nil {
			return nil, err
		}
		if a.QDisk, err = tools.MemberOffset("request_queue", "disk"); err != nil {
			return nil, err
		}
	}
	for _, m := range []struct {
		st, name string
		off      *int
	}{{"gendisk", "major", &a.Major}, {"gendisk", "first_minor", &a.FirstMinor}, {"request", "cmd_flags", &a.CmdFlags}} {
		if *m.off, err = tools.MemberOffset(m.st, m.name); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// slotsFor is how many direct-mapped slots hold start times on this
// kernel: none before BPF_ATOMIC compare-and-exchange (5.12), where the
// hash holds them all. TRACEKIT_IOLAT_SLOTS=N sets it (0: the hash alone;
// the tests make requests collide with 1).
func slotsFor() uint32 {
	if !tools.HaveAtomicCmpXchg() {
		return 0
	}
	if v, ok := os.LookupEnv("TRACEKIT_IOLAT_SLOTS"); ok {
		n, err := strconv.ParseUint(v, 10, 16)
		if err == nil && n&(n-1) == 0 {
			return uint32(n)
		}
	}
	return nSlots
}

func run(ctx context.Context, s *tools.Session, o *options) error {
	cfg := progConfig{Dev: o.dev, Heatmap: o.Heatmap, Divisor: 1000}
	if o.Millis {
		cfg.Divisor = 1000000
	}
	switch {
	case o.Disks:
		cfg.By = byDisk
	case o.Flags:
		cfg.By = byFlags
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
	} else {
		cfg.Slots = slotsFor()
	}
	// Only -d, -D and -F read through the request; without them a raw
	// tracepoint needs no BTF at all (its start parses none).
	deref := o.Disk != "" || o.Disks || o.Flags
	hook, err := tools.PickHook(o.Attach, "block_rq_issue", deref)
	if err != nil {
		return err
	}
	if hook != tools.HookPerf {
		a, err := rqArgsFor(hook, o.Queued, deref)
		switch {
		case err == nil:
			cfg.Args = a
		case tools.AttachForced(o.Attach):
			return fmt.Errorf("--attach=%s: %w", hook, err)
		default:
			hook = tools.HookPerf // the records have what iolat needs
		}
	}
	spec, err := collection(cfg)
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
	for _, p := range order {
		if err := s.AttachHook(coll.Programs[p], hook, "block", "block_rq_"+p); err != nil {
			return err
		}
	}

	r := &reader{coll: coll, o: o, names: tools.Disks{}}
	r.deltas.Cumulative = o.Cumulative
	if o.Serve != "" {
		c := &collector{coll: coll, o: o, names: tools.Disks{}}
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

func fields(event string) (rqFields, error) {
	f, err := tracefs.ReadFormat("block", event)
	if err != nil {
		if errors.Is(err, tracefs.ErrNoAccess) {
			return rqFields{}, err
		}
		return rqFields{}, fmt.Errorf("%w (iolat needs the block tracepoints: CONFIG_BLK_DEV and tracing)", err)
	}
	return rqFieldsOf(f)
}

// reader turns the kernel's maps into reports.
type reader struct {
	coll   *ebpf.Collection
	o      *options
	names  tools.Disks
	deltas tools.Deltas
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
	lost, err := tools.ReadPerCPUCounter(r.coll.Maps["lost"])
	if err != nil {
		return nil, 0, err
	}
	lost = r.deltas.Counter(lost)
	var cur map[uint32][]uint64
	if r.o.Disks || r.o.Flags {
		if cur, err = tools.ReadSlotHash(r.coll.Maps["hist"], n); err != nil {
			return nil, 0, err
		}
	} else {
		all, err := tools.ReadSlotArray(r.coll.Maps["hist"])
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

func (r *reader) histReport() (*tools.HistReport, error) {
	per, lost, err := r.slots(slots.Log2)
	if err != nil {
		return nil, err
	}
	rep := &tools.HistReport{Unit: "usecs", Lost: lost}
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

func (r *reader) heatmap(ctx context.Context, s *tools.Session) error {
	view := terminal.HeatView{First: 30, Global: r.o.Scale == "global"}
	if r.o.Full {
		view.First = 0
	}
	if r.o.Disks {
		view.LabelWidth = 8
	}
	if !r.o.JSON && !r.o.Text && tools.IsTerminal(1) {
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
			fmt.Fprintf(s.Stderr, "iolat: %d IOs could not be measured (in-flight map full or negative delta)\n", lost)
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
	return heatRowJSON{Tool: "iolat", Time: tools.JSONTime(row.Time), Unit: "ns", Label: row.Label,
		Total: row.Total(), Lost: lost, Slots: row.Counts[:]}
}

// live runs the full-screen view until the user quits, the command exits
// or count rows were drawn. The session restores the terminal.
func (r *reader) live(ctx context.Context, s *tools.Session, view terminal.HeatView) error {
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
