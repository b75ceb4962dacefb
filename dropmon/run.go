package dropmon

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/counts"
	"github.com/tracekit/tracekit/dropmon/prog"
	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/internal/usage"
	"github.com/tracekit/tracekit/kbtf"
	"github.com/tracekit/tracekit/kernel"
	"github.com/tracekit/tracekit/loader"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/tracefs"
)

// protocols are the EtherTypes --protocol knows by name.
var protocols = map[string]int{"ip": 0x0800, "ipv4": 0x0800, "ipv6": 0x86dd, "arp": 0x0806, "vlan": 0x8100}

func validate(o *options) error {
	o.top, o.proto = 0, -1
	if err := hook.Validate(o.Attach); err != nil {
		return err
	}
	if err := o.CheckServe(); err != nil {
		return err
	}
	if o.ServeTop < 1 {
		return usage.Errorf("invalid --serve-top %d: want the number of locations with series of their own, 1 or more", o.ServeTop)
	}
	if o.Top != "" {
		n, err := strconv.Atoi(o.Top)
		if err != nil || n < 1 {
			return usage.Errorf("invalid -n %q: want the number of rows to show, 1 or more", o.Top)
		}
		o.top = n
	}
	if o.Protocol != "" {
		if p, ok := protocols[strings.ToLower(o.Protocol)]; ok {
			o.proto = p
		} else if n, err := strconv.ParseUint(o.Protocol, 0, 16); err == nil {
			o.proto = int(n)
		} else {
			return usage.Errorf("unknown protocol %q: want ip, ipv6, arp, vlan, or an EtherType number such as 0x0800", o.Protocol)
		}
	}
	return nil
}

func trace(ctx context.Context, s *run.Session, o *options) error {
	format, err := tracefs.ReadFormat("skb", "kfree_skb")
	if err != nil {
		return err
	}
	l, err := prog.LayoutOf(format, o.NoReason)
	if err != nil {
		return err
	}
	syms, err := procfs.LazyKallsyms()
	if err != nil {
		return err
	}
	s.OnClose("", syms.Close)
	if syms.Hidden {
		fmt.Fprintln(s.Stderr, "dropmon: kernel addresses are hidden (kptr_restrict, or not root): printing addresses only")
	}
	if why := kernel.TracepointStackLimit(); o.Stacks && why != "" {
		fmt.Fprintf(s.Stderr, "dropmon: --stacks: %s: the stacks show no path to the drop\n", why)
	}
	cfg := prog.Config{Layout: l, Protocol: o.proto, Stacks: o.Stacks, ProbeRead: kernel.Readers().Kernel}
	// Only --protocol reads through skb: without it, a raw tracepoint is as
	// cheap as a BTF one and parses no BTF at start; with it, a BTF
	// tracepoint reads skb directly.
	protoOff := func() (err error) {
		if o.proto >= 0 {
			if cfg.ProtoOff, err = kbtf.MemberOffset("sk_buff", "protocol"); err != nil {
				return fmt.Errorf("--protocol: %w", err)
			}
		}
		return nil
	}
	raw := hook.Offer{Hook: hook.Raw, Have: hook.HasRaw, Build: protoOff}
	perf := hook.Offer{Hook: hook.Perf} // the record has the protocol
	btf := hook.Offer{Hook: hook.BTF, Have: hook.HasBTF("kfree_skb"), Build: protoOff}
	offers := []hook.Offer{raw, perf, btf}
	if o.proto >= 0 {
		offers = []hook.Offer{btf, raw, perf}
	}
	if cfg.Hook, err = hook.Choose(o.Attach, "skb:kfree_skb", offers...); err != nil {
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
	program := coll.Programs[prog.Name]
	if err := s.AttachHook(program, cfg.Hook, "skb", "kfree_skb"); err != nil {
		return err
	}

	r := &reporter{s: s, o: o, coll: coll, syms: syms, reasons: format.Symbolic["reason"], hasReason: l.Reason != nil}
	// Each run of the program is a drop, and a run the kernel skipped a
	// lost one; with --protocol, not each: those the end of the run tells.
	if o.proto >= 0 {
		s.ReportSkips("the drops of this protocol among them are not counted", program)
	} else {
		r.prog = program
	}
	r.counts.Cumulative, r.lost.Cumulative = o.Cumulative, o.Cumulative
	if o.Serve != "" {
		c := &collector{r: r, series: run.StickySeries[uint64]{Max: o.ServeTop}}
		// Names of its own: the scrapes run beside the reports.
		if c.syms, err = procfs.LazyKallsyms(); err != nil {
			return err
		}
		s.OnClose("", c.syms.Close)
		if err := s.ServeMetrics(o.Serve, c.families); err != nil {
			return err
		}
	}
	return s.Loop(ctx, "packet drops", func(final bool) error { return r.report(time.Now()) })
}

type dropKey struct {
	Location uint64
	Reason   uint32
	Stack    int32
}

type site struct {
	Location uint64
	Reason   uint32
}

type row struct {
	site
	Count  uint64
	Stacks []stackCount
}

type stackCount struct {
	ID    int32
	Count uint64
}

type reporter struct {
	s         *run.Session
	o         *options
	coll      *ebpf.Collection
	syms      *procfs.Symbols
	reasons   map[uint64]string
	hasReason bool
	counts    counts.KeyedDeltas[dropKey]
	lost      counts.Deltas
	prog      *ebpf.Program // its skipped runs are lost drops (loader.Misses); nil with --protocol
}

// counts reads the drops since the start, and the drops that could not be
// counted.
func (r *reporter) readCounts() (map[dropKey]uint64, uint64, error) {
	cur, err := counts.DumpHash[dropKey, uint64](r.coll.Maps["drops"])
	if err != nil {
		return nil, 0, fmt.Errorf("read drops: %w", err)
	}
	if err := readCache(r.coll.Maps["cache"], cur); err != nil {
		return nil, 0, err
	}
	lost, err := counts.ReadPerCPUCounter(r.coll.Maps["lost"])
	if err != nil {
		return nil, 0, err
	}
	return cur, lost + loader.Misses(r.prog), nil
}

// rows reads the drops map into rows sorted by count, largest first.
func (r *reporter) rows() ([]row, uint64, error) {
	cur, lost, err := r.readCounts()
	if err != nil {
		return nil, 0, err
	}
	bySite := map[site]*row{}
	for k, n := range r.counts.Step(cur) {
		st := site{k.Location, k.Reason}
		rw := bySite[st]
		if rw == nil {
			rw = &row{site: st}
			bySite[st] = rw
		}
		rw.Count += n
		if k.Stack != prog.NoStack {
			rw.Stacks = append(rw.Stacks, stackCount{k.Stack, n})
		}
	}
	rows := make([]row, 0, len(bySite))
	for _, rw := range bySite {
		sort.Slice(rw.Stacks, func(i, j int) bool {
			a, b := rw.Stacks[i], rw.Stacks[j]
			return a.Count > b.Count || a.Count == b.Count && a.ID < b.ID
		})
		if len(rw.Stacks) > 3 {
			rw.Stacks = rw.Stacks[:3]
		}
		rows = append(rows, *rw)
	}
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.Count != b.Count {
			return a.Count > b.Count
		}
		if a.Location != b.Location {
			return a.Location < b.Location
		}
		return a.Reason < b.Reason
	})
	return rows, r.lost.Counter(lost), nil
}

func (r *reporter) reasonName(v uint32) string {
	if !r.hasReason {
		return ""
	}
	if name, ok := r.reasons[uint64(v)]; ok {
		return name
	}
	return strconv.FormatUint(uint64(v), 10)
}

// resolve names the addresses the report shows, the locations and their
// stacks' frames, in one pass over kallsyms for those not named before.
func (r *reporter) resolve(rows []row) error {
	var addrs []uint64
	for _, rw := range rows {
		addrs = append(addrs, rw.Location)
		for _, st := range rw.Stacks {
			pcs, err := prog.Stack(r.coll, st.ID)
			if err != nil {
				continue
			}
			for _, pc := range pcs {
				if pc == 0 {
					break
				}
				addrs = append(addrs, pc)
			}
		}
	}
	return r.syms.Resolve(addrs)
}

// frames symbolizes a kernel stack, innermost first, from the traced code's
// first frame.
func (r *reporter) frames(id int32) []string {
	if id < 0 {
		return []string{fmt.Sprintf("[stack lost: error %d]", id)}
	}
	pcs, err := prog.Stack(r.coll, id)
	if err != nil {
		return []string{"[stack gone: " + err.Error() + "]"}
	}
	var out []string
	for _, pc := range pcs {
		if pc == 0 {
			break
		}
		if sym := r.syms.Symbolize(pc); sym != "" {
			out = append(out, sym)
		} else {
			out = append(out, fmt.Sprintf("0x%x", pc))
		}
	}
	// On the raw and BTF hooks the stack is taken inside the program:
	// its first frames are the tracer's (the program, bpf_trace_run4).
	return procfs.TrimTracer(out)
}

func (r *reporter) report(now time.Time) error {
	rows, lost, err := r.rows()
	if err != nil {
		return err
	}
	var total uint64
	for _, rw := range rows {
		total += rw.Count
	}
	if r.o.top > 0 && len(rows) > r.o.top {
		rows = rows[:r.o.top]
	}
	if err := r.resolve(rows); err != nil {
		return err
	}
	if r.o.JSON {
		return r.writeJSON(now, rows, total, lost)
	}
	return r.writeText(now, rows, total, lost)
}

type jsonStack struct {
	Count  uint64   `json:"count"`
	Frames []string `json:"frames"`
}

type jsonDrop struct {
	Location string      `json:"location"`
	Symbol   string      `json:"symbol"`
	Reason   string      `json:"reason"`
	Count    uint64      `json:"count"`
	Stacks   []jsonStack `json:"stacks,omitempty"`
}

func (r *reporter) writeJSON(now time.Time, rows []row, total, lost uint64) error {
	out := struct {
		Tool  string     `json:"tool"`
		Time  string     `json:"time"`
		Total uint64     `json:"total"`
		Lost  uint64     `json:"lost"`
		Drops []jsonDrop `json:"drops"`
	}{Tool: "dropmon", Time: run.JSONTime(now), Total: total, Lost: lost, Drops: []jsonDrop{}}
	for _, rw := range rows {
		d := jsonDrop{Location: fmt.Sprintf("0x%x", rw.Location), Symbol: r.syms.Symbolize(rw.Location), Reason: r.reasonName(rw.Reason), Count: rw.Count}
		for _, st := range rw.Stacks {
			d.Stacks = append(d.Stacks, jsonStack{Count: st.Count, Frames: r.frames(st.ID)})
		}
		out.Drops = append(out.Drops, d)
	}
	return r.s.WriteJSON(out)
}

func (r *reporter) writeText(now time.Time, rows []row, total, lost uint64) error {
	var b strings.Builder
	r.s.BeginText(&b, now)
	writeTable(&b, rows, r.syms, r.reasonName, r.frames)
	fmt.Fprintf(&b, "%d drop%s", total, map[bool]string{true: "", false: "s"}[total == 1])
	if lost > 0 {
		why := "map full"
		if r.prog != nil {
			why += "; or " + run.SkippedWhy
		}
		fmt.Fprintf(&b, ", %d more lost (%s)", lost, why)
	}
	b.WriteString("\n")
	_, err := io.WriteString(r.s.Stdout, b.String())
	return err
}

// writeTable prints the rows with columns sized to their contents. Without
// symbols (hidden addresses) the LOCATION column is left out.
func writeTable(w io.Writer, rows []row, syms *procfs.Symbols, reason func(uint32) string, frames func(int32) []string) {
	if len(rows) == 0 {
		return
	}
	countW, symW := len("COUNT"), len("LOCATION")
	for _, rw := range rows {
		countW = max(countW, len(strconv.FormatUint(rw.Count, 10)))
		symW = max(symW, len(syms.Symbolize(rw.Location)))
	}
	showSym := !syms.Hidden
	header := fmt.Sprintf("%*s  ", countW, "COUNT")
	if showSym {
		header += fmt.Sprintf("%-*s  ", symW, "LOCATION")
	}
	header += fmt.Sprintf("%-18s  %s", "ADDRESS", "REASON")
	fmt.Fprintln(w, strings.TrimRight(header, " "))
	for _, rw := range rows {
		line := fmt.Sprintf("%*d  ", countW, rw.Count)
		if showSym {
			line += fmt.Sprintf("%-*s  ", symW, syms.Symbolize(rw.Location))
		}
		line += fmt.Sprintf("0x%016x  %s", rw.Location, reason(rw.Reason))
		fmt.Fprintln(w, strings.TrimRight(line, " "))
		for _, st := range rw.Stacks {
			times := "times"
			if st.Count == 1 {
				times = "time"
			}
			fmt.Fprintf(w, "%*s  %d %s:\n", countW, "", st.Count, times)
			for _, f := range frames(st.ID) {
				fmt.Fprintf(w, "%*s    %s\n", countW, "", f)
			}
		}
	}
}

// cacheSlot is a slot of the per-CPU fast-path cache (asm.CacheIncrement).
type cacheSlot struct {
	Key   dropKey
	Count uint64
}

// readCache adds the counts of every CPU's claimed cache slots to cur.
func readCache(m *ebpf.Map, cur map[dropKey]uint64) error {
	var perCPU []cacheSlot
	for i := uint32(0); i < m.MaxEntries(); i++ {
		if err := m.Lookup(i, &perCPU); err != nil {
			return fmt.Errorf("read drop cache slot %d: %w", i, err)
		}
		for _, s := range perCPU {
			if s.Key.Location != 0 {
				cur[s.Key] += s.Count
			}
		}
	}
	return nil
}
