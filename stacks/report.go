package stacks

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/tracekit/tracekit/internal/lazy"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/stacks/prog"
	"github.com/tracekit/tracekit/terminal"
)

// fpFrames is the most user frames bpf_get_stack gives a key of n:
// the kernel cuts its walks at kernel.perf_event_max_stack (127 unless
// raised).
func fpFrames(n int) int {
	b, err := os.ReadFile("/proc/sys/kernel/perf_event_max_stack")
	if err != nil {
		return min(n, 127)
	}
	if m, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && m > 0 {
		return min(n, m)
	}
	return min(n, 127)
}

// contextLabels are the labels of the context a key carries.
func (r *reporter) contextLabels(pid uint32, raw []byte) []LabelValue {
	if !r.cfg.Context {
		return nil
	}
	id := binary.LittleEndian.Uint64(raw[r.cfg.ContextOffset():])
	if id == 0 {
		return nil
	}
	c, ok := r.contexts[id]
	if !ok {
		// New ids: read the table again.
		var k []byte
		var v uint64
		it := r.coll.Maps["contexts"].Iterate()
		for it.Next(&k, &v) {
			r.contexts[v] = bytes.Clone(k)
		}
		if c, ok = r.contexts[id]; !ok {
			return nil
		}
	}
	return contextLabels(c, r.ps.otelKeyNames(pid))
}

// stack is one counted stack, named.
type stack struct {
	Pid    uint32
	Comm   string
	Count  uint64
	User   []string // leaf first
	Kernel []string // leaf first
	// UserPC and KernelPC are the addresses of the frames, when the stack
	// is one key's (byAddress), for --pprof's locations.
	UserPC, KernelPC []uint64
	End              string // why the user stack ends: "" when complete (or unknown, with frame pointers)
	Labels           []LabelValue
}

// readAfterFP ends a stack whose walk could not read the stack after it
// stepped a frame by its frame pointer (auto).
const readAfterFP = "[unwind error: read after a frame-pointer step]"

// ends names each stop reason as the report shows it.
var ends = map[int32]string{
	prog.StopNoRow:       "[unwind error: no unwind row]",
	prog.StopUnsupported: "[unwind error: unsupported unwind rule]",
	prog.StopNoTable:     "[unwind error: no table]",
	prog.StopRead:        "[unwind error: read]",
	prog.StopTruncated:   "[truncated]",
	prog.StopNoRegs:      "[no user registers]",
}

// sigreturnNames are the signal return trampolines' names: glibc's and
// musl's (named by their code where no symbol names them), and arm64's
// and riscv64's vdso's.
var sigreturnNames = map[string]bool{"__restore_rt": true, "__kernel_rt_sigreturn": true, "__vdso_rt_sigreturn": true}

// IsSigreturn says whether a user frame's name is a signal return
// trampoline's: the frame above it is the one the signal interrupted.
func IsSigreturn(name string) bool { return sigreturnNames[name] }

// userFrames names a key's user frames, innermost first, and says how the
// walk ended ("" when whole).
func (r *reporter) userFrames(k decodedKey) (user []string, end string) {
	end = ends[int32(k.Stop)]
	if int32(k.Stop) == prog.StopNoRow && len(k.User) > 1 && r.ps.afterEntry(k.Pid, k.User[len(k.User)-1]) {
		end = "" // the process's first frame: its loader's _start has no row
	}
	switch {
	case end == "" && k.FP:
		end = "[frame pointers]" // whole, if the frame pointers were what they seemed
	case int32(k.Stop) == prog.StopFP && r.fpFrames > 0 && len(k.User) >= r.fpFrames:
		end = ends[prog.StopTruncated]
	case int32(k.Stop) == prog.StopRead && k.FP:
		// auto stepped a frame of a file whose table is not loaded (yet)
		// by its frame pointer, and what it took for one was not.
		end = readAfterFP
	}
	for i, pc := range k.User {
		// The sampled pc, and the one a signal interrupted (after the
		// trampoline's frame), are the instruction itself.
		ret := i > 0 && !sigreturnNames[user[i-1]]
		user = append(user, r.ps.symbolize(k.Pid, pc, ret))
	}
	return user, end
}

// named turns counted keys into stacks of frame names. Keys differ by
// every address; stacks are reported by their names (two samples at
// different instructions of one function are one stack), but byAddress
// keeps each key a stack of its own, with its addresses.
func (r *reporter) named(counts map[stackKey]uint64, byAddress bool) []stack {
	byName := map[string]*stack{}
	for packed, n := range counts {
		if n == 0 {
			continue
		}
		raw := packed.raw(r.cfg)
		k := decodeKey(raw, r.cfg)
		user, end := r.userFrames(k)
		st := stack{Pid: k.Pid, Comm: r.ps.comm(k.Pid), Count: n, End: end, User: user,
			Labels: append(decodeLabels(r.o.Labels, r.cfg, raw), r.contextLabels(k.Pid, raw)...)}
		for _, pc := range k.Kernel {
			// The function, not the instruction: "vfs_read", as BCC and perf.
			name := r.kernel[pc]
			if name == "" {
				name = "[unknown]"
			}
			st.Kernel = append(st.Kernel, name)
		}
		if k.KernErr != 0 {
			st.Kernel = append(st.Kernel, "[kernel stack lost]")
		}
		if r.o.UserOnly {
			st.Kernel = nil
			k.Kernel = nil
		}
		if r.o.KernelOnly {
			st.User, st.End = nil, ""
			k.User = nil
		}
		name := string(packed)
		if byAddress && (r.o.UserOnly || r.o.KernelOnly) {
			// One part of the addresses: keys that differ in the other
			// part are one stack here.
			name = fmt.Sprint(st.Pid, k.User, k.Kernel, st.End, labelsName(st.Labels))
		}
		if byAddress {
			st.UserPC, st.KernelPC = k.User, k.Kernel
		} else {
			name = fmt.Sprint(st.Pid, st.User, st.Kernel, st.End, labelsName(st.Labels))
		}
		if have := byName[name]; have != nil {
			have.Count += n
			continue
		}
		byName[name] = &st
	}
	out := make([]stack, 0, len(byName))
	for _, st := range byName {
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Count != b.Count {
			return a.Count < b.Count
		}
		if a.Pid != b.Pid {
			return a.Pid < b.Pid
		}
		return strings.Join(a.User, ";")+strings.Join(a.Kernel, ";") < strings.Join(b.User, ";")+strings.Join(b.Kernel, ";")
	})
	return out
}

func (r *reporter) report(now time.Time, final bool, counted *held) error {
	stacks, lost, err := r.stacks(counted)
	if err != nil {
		return err
	}
	if final {
		whole, all := counted, stacks
		if r.whole != nil {
			whole, all = r.whole, r.named(r.whole.keys, false)
		}
		// The files hold the whole run, whatever the interval reports showed.
		if r.pprof != nil {
			var comments []string
			if line, ok := r.completeness(all); ok {
				comments = append(comments, line)
			}
			if err := r.pprof.write(func(w io.Writer) error {
				return writePprof(w, r.named(whole.keys, true), r.ps, r.o.Frequency, r.o.OffCPU, r.start, now.Sub(r.start), comments...)
			}); err != nil {
				return err
			}
		}
		if r.svg != nil {
			title := fmt.Sprintf("profile: %d Hz, %s", r.o.Frequency, now.Sub(r.start).Round(time.Millisecond))
			unit := "samples"
			if r.o.OffCPU {
				title = fmt.Sprintf("profile --off-cpu: %s, in microseconds", now.Sub(r.start).Round(time.Millisecond))
				unit = "us"
			}
			drawn := r.weighed(all)
			if len(r.o.SVGLabels) > 0 {
				drawn = withLabels(all, r.o.SVGLabels)
				title += ", " + labelsTitle(r.o.SVGLabels)
				if len(drawn) == 0 {
					fmt.Fprintf(r.s.Stderr, "profile: --svg-label %s: no sample carried it; %s has an empty graph\n", labelsTitle(r.o.SVGLabels), r.o.SVG)
				}
			}
			if err := r.svg.write(func(w io.Writer) error { return writeSVG(w, drawn, title, unit) }); err != nil {
				return err
			}
		}
	}
	line, complete := r.completeness(stacks)
	stacks = r.weighed(stacks)
	var b strings.Builder
	switch {
	case r.o.JSON:
		err = r.writeJSON(now, stacks, lost)
	case r.o.Folded:
		writeFolded(&b, stacks)
	default:
		r.s.BeginText(&b, now)
		writeStacks(&b, stacks)
		r.summary(&b, stacks, lost)
		complete = false // the summary says it
	}
	if err == nil && b.Len() > 0 {
		_, err = io.WriteString(r.s.Stdout, b.String())
	}
	if err == nil && complete {
		// Every output says how whole its stacks are (issue 62): the
		// folded lines and the JSON on stdout, this on stderr.
		fmt.Fprintf(r.s.Stderr, "%s: %s\n", r.o.tool(), line)
	}
	return err
}

// completeness is the line every output's summary carries: how many
// user stacks the walk took whole, of the samples (or events), or of the
// time waited off the CPU, where the counts are nanoseconds, not stacks.
// None with frame pointers only, where a walk cannot tell.
func (r *reporter) completeness(stacks []stack) (string, bool) {
	if r.o.Unwind == prog.UnwindFP {
		return "", false
	}
	var total, complete uint64
	for _, st := range stacks {
		total += st.Count
		if st.End == "" {
			complete += st.Count
		}
	}
	if total == 0 {
		return "", false
	}
	pct := 100 * float64(complete) / float64(total)
	if r.o.OffCPU {
		return fmt.Sprintf("user stacks complete: %.1f%% of the time waited", pct), true
	}
	return fmt.Sprintf("user stacks complete: %d of %d %s (%.1f%%)", complete, total, r.o.unit(), pct), true
}

// weighed gives stacks their reports' weights: off-CPU, the counts are
// nanoseconds, reported in microseconds (as offcputime), and a stack of
// less than one is left out; samples are samples.
func (r *reporter) weighed(stacks []stack) []stack {
	if !r.o.OffCPU {
		return stacks
	}
	out := make([]stack, 0, len(stacks))
	for _, st := range stacks {
		st.Count = (st.Count + 500) / 1000
		if st.Count > 0 {
			out = append(out, st)
		}
	}
	return out
}

// writeStacks prints each stack as BCC's profile does: kernel frames, "--",
// user frames (each leaf first), then "- comm (pid)" and the count; the
// hottest stack last, nearest the prompt.
func writeStacks(w *strings.Builder, stacks []stack) {
	for _, st := range stacks {
		for _, f := range st.Kernel {
			fmt.Fprintf(w, "    %s\n", terminal.Printable(f))
		}
		if len(st.Kernel) > 0 && (len(st.User) > 0 || st.End != "") {
			w.WriteString("    --\n")
		}
		for _, f := range st.User {
			fmt.Fprintf(w, "    %s\n", terminal.Printable(f))
		}
		if st.End != "" {
			fmt.Fprintf(w, "    %s\n", st.End)
		}
		if len(st.Labels) > 0 {
			fmt.Fprintf(w, "    [%s]\n", labelsText(st.Labels))
		}
		fmt.Fprintf(w, "    %-16s %s (%d)\n        %d\n\n", "-", terminal.Printable(st.Comm), st.Pid, st.Count)
	}
}

// labelsText is a stack's labels on the text report's line: name=value,
// a string value quoted (strconv.Quote, which escapes what a terminal
// would act on, once), a name quoted too where it is not a plain word (a
// context's keys come from the process: "a b=c" would read as two).
func labelsText(ls []LabelValue) string {
	parts := make([]string, 0, len(ls))
	for _, l := range ls {
		name, v := l.Name, l.Value
		if !plainName().MatchString(name) {
			name = strconv.Quote(name)
		}
		if l.Num == nil {
			v = strconv.Quote(v)
		}
		parts = append(parts, name+"="+v)
	}
	return strings.Join(parts, " ")
}

// plainName is a label's name printed as it is.
var plainName = lazy.Regexp(`^[A-Za-z_][A-Za-z0-9_.]*$`)

// writeFolded prints "comm;root;...;leaf count" lines, user frames then
// kernel frames (suffixed _[k], as flamegraph.pl colours them); a stack that
// ended early starts with its marker.
func writeFolded(w *strings.Builder, stacks []stack) {
	for _, st := range stacks {
		frames := []string{foldName(st.Comm)}
		for _, l := range st.Labels {
			frames = append(frames, foldName("["+l.Name+"="+l.Value+"]"))
		}
		if st.End != "" {
			frames = append(frames, st.End)
		}
		for i := len(st.User) - 1; i >= 0; i-- {
			frames = append(frames, foldName(st.User[i]))
		}
		for i := len(st.Kernel) - 1; i >= 0; i-- {
			frames = append(frames, foldName(st.Kernel[i])+"_[k]")
		}
		fmt.Fprintf(w, "%s %d\n", strings.Join(frames, ";"), st.Count)
	}
}

// foldName keeps a frame on its line and out of the separators.
func foldName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == ';' || r == '\n' || r == '\r' || r == ' ' || r < 0x20 || r == 0x7f {
			return '_'
		}
		return r
	}, s)
}

// summary says how many samples were counted and how their user stacks
// ended.
func (r *reporter) summary(w *strings.Builder, stacks []stack, lost uint64) {
	var samples, complete uint64
	byEnd := map[string]uint64{}
	for _, st := range stacks {
		samples += st.Count
		if st.End == "" {
			complete += st.Count
		} else {
			byEnd[st.End] += st.Count
		}
	}
	full := fmt.Sprintf("more stacks than a table holds: %d a second, %d a report", prog.MaxStacks, maxHeld)
	if r.cfg.ShortKeySize() > 0 {
		full = fmt.Sprintf("more stacks than a table holds: %d a second (%d of over %d user frames), %d a report", prog.MaxStacks, prog.MaxDeepStacks, prog.ShortUserFrames, maxHeld)
	}
	unit := r.o.unit()
	if r.o.OffCPU {
		// Counts are microseconds waited; what is lost is waits.
		unit, full = "us waited", full+"; or the table of waiting threads is full"
	}
	fmt.Fprintf(w, "%d %s, %d stacks", samples, unit, len(stacks))
	if r.o.Unwind != prog.UnwindFP && samples > 0 {
		if r.o.OffCPU { // microseconds, not stacks
			fmt.Fprintf(w, "; user stacks complete: %.1f%% of the time waited", 100*float64(complete)/float64(samples))
		} else {
			fmt.Fprintf(w, "; user stacks complete: %d (%.1f%%)", complete, 100*float64(complete)/float64(samples))
		}
	}
	if lost > 0 {
		fmt.Fprintf(w, "; %d more lost (%s)", lost, full)
	}
	w.WriteString("\n")
	var names []string
	for e := range byEnd {
		names = append(names, e)
	}
	sort.Strings(names)
	for _, e := range names {
		fmt.Fprintf(w, "  %s: %d\n", e, byEnd[e])
	}
	for _, why := range r.ps.labelNotes {
		fmt.Fprintf(w, "  unset: %s\n", terminal.Printable(why))
	}
	if r.o.Unwind != prog.UnwindFP {
		files, rows, used := r.ps.tableStats()
		fmt.Fprintf(w, "unwind tables: %d files, %d rows (%.1f of %d MiB), read in %d ms",
			files, rows, float64(used*8)/(1<<20), r.o.Budget, r.ps.loadTime.Milliseconds())
		if r.ps.preloaded > 0 {
			fmt.Fprintf(w, "; %d files of the command read before it started", r.ps.preloaded)
		}
		if r.ps.full > 0 {
			fmt.Fprintf(w, "; %d files left out: the table is full (--table-mib)", r.ps.full)
		}
		w.WriteString("\n")
		if r.ps.deferLost > 0 {
			fmt.Fprintf(w, "  %d samples not deferred: profile read the deferred samples too slowly (their ring was full); counted as far as the kernel walked them\n", r.ps.deferLost)
		}
		if r.ps.denied > 0 {
			n := fmt.Sprintf("%d processes", r.ps.denied)
			if r.ps.denied == 1 {
				n = "1 process"
			}
			fmt.Fprintf(w, "  %s unreadable: another user's, or holding capabilities profile lacks (CAP_SYS_PTRACE, or root, reads them): user stacks by frame pointers, unnamed\n", n)
		}
		for _, why := range r.ps.refused {
			fmt.Fprintf(w, "  table refused: %s\n", terminal.Printable(why))
		}
	}
}

// JSONStack is a stack of a --json report, as the tools print it.
type JSONStack struct {
	Pid    uint32   `json:"pid"`
	Comm   string   `json:"comm"`
	Count  uint64   `json:"count"`
	User   []string `json:"user"`
	Kernel []string `json:"kernel"`
	End    string   `json:"end"`
	// Labels are the --label values the stack was sampled under, and its
	// context's: numbers for integers, strings for strings; unset ones are
	// left out.
	Labels map[string]any `json:"labels,omitempty"`
}

func (r *reporter) writeJSON(now time.Time, stacks []stack, lost uint64) error {
	// Off-CPU, counts are microseconds: "usecs" holds their sum, and
	// "lost" counts waits.
	out := struct {
		Tool    string      `json:"tool"`
		Time    string      `json:"time"`
		Samples *uint64     `json:"samples,omitempty"`
		Events  *uint64     `json:"events,omitempty"` // filter's --count-by ustack
		Usecs   *uint64     `json:"usecs,omitempty"`
		Lost    uint64      `json:"lost"`
		Stacks  []JSONStack `json:"stacks"`
		Refused []string    `json:"refused"` // files whose tables were past the parse's limits or malformed, and why
		// NotDeferred: samples the full deferred ring turned away since the
		// start (counted as far as the kernel walked them).
		NotDeferred uint64 `json:"not_deferred,omitempty"`
	}{Tool: r.o.tool(), Time: run.JSONTime(now), Lost: lost, Stacks: []JSONStack{}, Refused: append([]string{}, r.ps.refused...), NotDeferred: r.ps.deferLost}
	var total uint64
	if r.o.OffCPU {
		out.Usecs = &total
	} else if r.o.Event != nil {
		out.Events = &total
	} else {
		out.Samples = &total
	}
	for i := len(stacks) - 1; i >= 0; i-- {
		st := stacks[i]
		total += st.Count
		end := st.End
		if end == "[frame pointers]" {
			end = "frame pointers"
		}
		if end == "" {
			end = "complete"
			if r.o.Unwind == prog.UnwindFP {
				end = "frame pointers"
			}
		}
		js := JSONStack{Pid: st.Pid, Comm: st.Comm, Count: st.Count, User: nonNil(st.User), Kernel: nonNil(st.Kernel), End: end}
		if len(st.Labels) > 0 {
			js.Labels = map[string]any{}
			for _, l := range st.Labels {
				if l.Num != nil {
					js.Labels[l.Name] = *l.Num
				} else {
					js.Labels[l.Name] = l.Value
				}
			}
		}
		out.Stacks = append(out.Stacks, js)
	}
	return r.s.WriteJSON(out)
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
