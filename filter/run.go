package filter

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/bpftrace/parse"
	"github.com/tracekit/tracekit/filter/compile"
	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/internal/usage"
	"github.com/tracekit/tracekit/kbtf"
	"github.com/tracekit/tracekit/kernel"
	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/proctree"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/tracefs"
)

// event is a parsed EVENT argument.
type event struct {
	kind        string   // "tracepoint", "kprobe", "kretprobe", "uprobe", "uretprobe", "usdt"
	group, name string   // tracepoint
	symbol      string   // kprobe, uprobe: the function (or a uprobe's 0xADDR)
	path        string   // uprobe, usdt: the file
	provider    string   // usdt ("" until found: any)
	probeName   string   // usdt
	glob        bool     // kprobe: several functions, funcs (runGlob)
	funcs       []string // with glob: the functions, each a name or a glob
	items       []event  // a list's events, in their order (stack mode's)
	tpGlob      bool     // tracepoint: group and name are globs (runTracepoints)
}

func (e event) String() string {
	if len(e.items) > 0 {
		var names []string
		for _, it := range e.items {
			names = append(names, it.String())
		}
		return strings.Join(names, ",")
	}
	switch e.kind {
	case "tracepoint":
		return e.group + ":" + e.name
	case "uprobe", "uretprobe":
		return e.kind + ":" + e.path + ":" + e.symbol
	case "usdt":
		if e.provider != "" {
			return "usdt:" + e.path + ":" + e.provider + ":" + e.probeName
		}
		return "usdt:" + e.path + ":" + e.probeName
	}
	return e.kind + ":" + e.symbol
}

// shortName names the event in a printed line, as trace_pipe would.
func (e event) shortName() string {
	switch e.kind {
	case "tracepoint":
		return e.name
	case "usdt":
		return e.provider + ":" + e.probeName
	}
	return e.symbol
}

// user reports a user-space probe.
func (e event) user() bool { return e.kind == "uprobe" || e.kind == "uretprobe" || e.kind == "usdt" }

const eventForms = "GROUP:NAME (or tracepoint:GROUP:NAME), kprobe:FUNCTION, kretprobe:FUNCTION, uprobe:PATH:FUNCTION, uretprobe:PATH:FUNCTION or usdt:PATH:[PROVIDER:]NAME (bpftrace's short names too: t:, k:, kr:, u:, ur:, U:)"

// parseEvent parses EVENT; info allows a user-space probe without its
// target (a listing). A comma-separated list of kernel functions' entries
// (kprobe:A,kprobe:B_*) is one event over all their functions, as a glob is.
func parseEvent(s string, info bool) (event, error) {
	parts := strings.Split(s, ",")
	if len(parts) == 1 {
		return parseOne(s, info)
	}
	list := event{kind: "kprobe", glob: true}
	for _, part := range parts {
		ev, err := parseOne(part, info)
		if err != nil {
			if whole, err2 := parseOne(s, info); err2 == nil && whole.user() {
				return whole, nil // a file whose path holds a comma
			}
			return event{}, err
		}
		switch ev.kind {
		case "kprobe":
			if !ev.glob {
				ev.funcs = []string{ev.symbol}
			}
			list.funcs = append(list.funcs, ev.funcs...)
		case "uprobe":
			list.glob = false // a stack's (-s) only
		default:
			return event{}, fmt.Errorf("%s: several events in one run are functions' entries, each kprobe:FUNCTION or kprobe:GLOB (kprobe:ip_send_skb,kprobe:ip_rcv), and with -s uprobe:PATH:FUNCTION too", s)
		}
		if strings.Contains(ev.symbol, "+") {
			return event{}, fmt.Errorf("%s: in a list, a function is traced at its entry, not at an offset in it", part)
		}
		list.items = append(list.items, ev)
	}
	list.symbol = strings.Join(list.funcs, ",")
	return list, nil
}

func parseOne(s string, info bool) (event, error) {
	if s == "usdt" && info {
		return event{kind: "usdt"}, nil // every file a process maps (-p)
	}
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return event{}, fmt.Errorf("invalid event %q: want %s", s, eventForms)
	}
	// bpftrace's names of the probe types (tracepoint:, t:, k:, u:, U:,
	// ...) name the same events.
	if p, ok := parse.Provider(a); ok {
		switch p {
		case "tracepoint":
			if group, name, ok := strings.Cut(b, ":"); ok {
				a, b = group, name
			}
		case "kprobe", "kretprobe", "uprobe", "uretprobe", "usdt":
			a = p
		}
	}
	switch a {
	case "kprobe", "kretprobe":
		if tracefs.IsGlob(b) {
			if a == "kretprobe" {
				return event{}, fmt.Errorf("%s: a glob is traced at the functions' entries: name ret on kprobe:%s, and each call is seen whole, its return value with its arguments", s, b)
			}
			if err := tracefs.ValidateGlob(b); err != nil {
				return event{}, err
			}
			return event{kind: a, symbol: b, glob: true, funcs: []string{b}}, nil
		}
		if err := tracefs.ValidateSymbol(b); err != nil {
			return event{}, err
		}
		return event{kind: a, symbol: b}, nil
	case "uprobe", "uretprobe", "usdt":
		return parseUserEvent(a, b, info)
	}
	if b == "" && !strings.Contains(a, "/") {
		if !info {
			return event{}, fmt.Errorf("%s names a group, not an event: %s:NAME, or %s:* for every event of it (--info %s: lists them)", s, a, a, a)
		}
		b = "*" // --info GROUP: lists the group's events
	}
	if tracefs.IsGlob(a) || tracefs.IsGlob(b) {
		for _, g := range []string{a, b} {
			if err := tracefs.ValidateEventGlob(g); err != nil {
				return event{}, err
			}
		}
		return event{kind: "tracepoint", group: a, name: b, tpGlob: true}, nil
	}
	if err := tracefs.ValidateName("event group", a); err != nil {
		return event{}, err
	}
	if err := tracefs.ValidateName("event", b); err != nil {
		return event{}, err
	}
	return event{kind: "tracepoint", group: a, name: b}, nil
}

// eventErr is how a tracepoint that does not exist ends the run: the
// command line's mistake (exit 2), its near names said, as a uprobe's
// missing function is (userErr).
func eventErr(err error) error {
	if errors.Is(err, tracefs.ErrEventNotFound) {
		return usage.Errorf("%v", err)
	}
	return err
}

// maxKeys bounds --max-keys: the kernel preallocates the hashes, two of
// them with an interval or --serve, of up to a few hundred bytes a key.
const maxKeys = 1 << 20

func validate(o *options) error {
	if _, err := parseEvent(o.Lead(), o.Info); err != nil {
		return usage.Errorf("%v", err)
	}
	if o.Where != "" {
		if _, err := compile.Parse(o.Where); err != nil {
			return usage.Errorf("--where: %v", err)
		}
	}
	if err := o.CheckServe(); err != nil {
		return err
	}
	if err := o.CheckTree(); err != nil {
		return err
	}
	if o.All && o.Command == "" {
		return usage.Errorf("--all goes with -c: without -c every process is traced already")
	}
	if st, _ := o.stat(); st != "" && o.Serve != "" {
		return usage.Errorf("--serve and --%s: statistics are printed, not served yet; serve --count-by or --hist", st)
	}
	if o.Serve != "" && !o.Count && o.CountBy == "" && o.Hist == "" && !o.Info {
		return usage.Errorf("--serve exposes what filter counts in the kernel: add --count, --count-by KEYS or --hist EXPR")
	}
	if o.MaxKeys < 1 || o.MaxKeys > maxKeys {
		return usage.Errorf("invalid --max-keys %d: want from 1 to %d", o.MaxKeys, maxKeys)
	}
	if o.MaxKeys != compile.CountsEntries && o.CountBy == "" {
		return usage.Errorf("--max-keys sizes --count-by's table: add --count-by KEYS")
	}
	if o.ServeTop < 1 {
		return usage.Errorf("invalid --serve-top %d: want the number of keys with series of their own, 1 or more", o.ServeTop)
	}
	stat, _ := o.stat()
	var modes []string
	for name, set := range map[string]bool{"--count": o.Count, "--count-by": o.CountBy != "" && stat == "", "--hist": o.Hist != "", "--fields": o.Fields != "",
		"--sum": o.Sum != "", "--min": o.Min != "", "--max": o.Max != "", "--avg": o.Avg != "", "--lhist": o.Lhist != ""} {
		if set {
			modes = append(modes, name)
		}
	}
	sort.Strings(modes)
	if o.Info && (o.Where != "" || len(modes) > 0) {
		return usage.Errorf("--info prints the event's description: it takes no --where, --count, --count-by, --hist or --fields")
	}
	if len(modes) > 1 {
		return usage.Errorf("%s: choose one of printing (--fields), --count, --count-by, --hist and --sum, --min, --max or --avg (which --count-by keys)", strings.Join(modes, " and "))
	}
	if o.Lhist != "" {
		if _, _, err := parseLhist(o.Lhist); err != nil {
			return usage.Errorf("--lhist: %v", err)
		}
	}
	if o.Timestamp && !o.Count && o.CountBy == "" && o.Hist == "" && stat == "" && o.Lhist == "" && !o.Info {
		return usage.Errorf("-T dates --count, --count-by and --hist reports: printed events carry their own time")
	}
	for _, opt := range []struct {
		name, text string
		want       int
	}{{"--fields", o.Fields, 0}, {"--count-by", o.CountBy, 0}, {"--hist", o.Hist, 1}, {"--" + stat, o.statText(), 1}} {
		if opt.text == "" {
			continue
		}
		if _, err := compile.ParseOperands(opt.text, opt.want); err != nil {
			return usage.Errorf("%s: %v", opt.name, err)
		}
	}
	if err := procfs.CheckPid(o.Pid); err != nil {
		return err
	}
	if err := hook.Validate(o.Attach); err != nil {
		return err
	}
	ev, _ := parseEvent(o.Lead(), o.Info)
	switch {
	case o.Stack && len(ev.items) < 2:
		return usage.Errorf("-s: name the functions in their calling order, outermost first: kprobe:A,kprobe:B")
	case o.Stack && len(ev.items) > maxChain:
		return usage.Errorf("-s: %d functions: at most %d in a stack", len(ev.items), maxChain)
	case !o.Stack && len(ev.items) > 0 && !ev.glob:
		return usage.Errorf("%s: a user-space function joins a list in stack mode (-s) only; several events in one run are kernel functions' entries (kprobe:A,kprobe:B_*)", ev)
	}
	seen := map[string]bool{}
	for _, it := range ev.items {
		if o.Stack && it.glob {
			return usage.Errorf("-s: %s: a stack names its functions, one each, not a glob", it)
		}
		if o.Stack && seen[it.String()] {
			return usage.Errorf("-s: %s is named twice: a stack names each function once (its own recursion is counted)", it)
		}
		seen[it.String()] = true
	}
	keyStacks, _, err := stackColumns("--count-by", o.CountBy)
	if err != nil {
		return err
	}
	stackKey := len(keyStacks) > 0
	if o.Folded && !stackKey {
		return usage.Errorf("--folded writes stacks for a flame graph: add --count-by kstack or ustack")
	}
	if o.Folded && o.JSON {
		return usage.Errorf("--folded and --json: choose one output")
	}
	if stackKey && o.Serve != "" {
		return usage.Errorf("--serve and --count-by %s: a stack is no metric's label; count by other keys", o.CountBy)
	}
	user := slices.Contains(keyStacks, "ustack")
	if user {
		switch {
		case stat != "":
			return usage.Errorf("--%s with --count-by ustack: user stacks are counted (--count-by), not summed", stat)
		case o.MaxKeys != compile.CountsEntries:
			return usage.Errorf("--max-keys and --count-by ustack: user stacks are counted in profile's table of 4096 stacks")
		}
	}
	printed, _, _ := stackColumns("--fields", o.Fields)
	if (user || slices.Contains(printed, "ustack")) && (o.Stack || ev.glob || ev.tpGlob || len(ev.items) > 0) {
		return usage.Errorf("ustack is unwound at one event: not a glob, a list or a stack (-s)")
	}
	if o.Lead() == "usdt" && o.Pid == 0 {
		return usage.Errorf("--info usdt lists the probes of the files a process maps: it needs -p PID (or name a file: usdt:PATH)")
	}
	if o.Pid != 0 && o.Command != "" {
		return usage.Errorf("-p and -c: trace a running process or a command, not both")
	}
	if o.BufferPages != 0 {
		o.RingPages = o.BufferPages
	}
	if p := o.RingPages; p < 1 || p > 1<<16 || p&(p-1) != 0 {
		return usage.Errorf("--ring-pages %d: a power of two from 1 to 65536", p)
	}
	return nil
}

// stackColumns splits --count-by's keys or --fields' columns (text, of
// option) into the stacks (ustack, kstack, in their order) and the others. A user
// stack is unwound and counted or printed by profile's sampler, whose key
// is (process, kernel stack, user stack): as a key, kstack is the only
// other it takes (the report names each stack's comm and pid); printed,
// numbers and strings go beside it.
func stackColumns(option, text string) (stacks []string, rest []compile.Operand, err error) {
	if text == "" {
		return nil, nil, nil
	}
	cols, _ := compile.ParseOperands(text, 0)
	var others []string
	for _, c := range cols {
		bare := len(c.Steps) == 0 && c.Arith == nil && c.Cast == "" && !c.CharPtr && !c.Dump && !c.Ksym && !c.Usym && !c.IsConst()
		switch {
		case bare && (c.Base == "ustack" || c.Base == "kstack"):
			stacks = append(stacks, c.Base)
		default:
			others = append(others, c.Text)
			rest = append(rest, c)
		}
	}
	if slices.Contains(stacks, "ustack") && option == "--count-by" && len(others) > 0 {
		return nil, nil, usage.Errorf("--count-by %s: ustack keys by the process and its user stack, and takes kstack beside it, nothing else (the report names each stack's comm and pid): drop %s", text, strings.Join(others, ", "))
	}
	return stacks, rest, nil
}

// kernelBTF reads the kernel's BTF, which need names what it is for
// ("casts", "kprobe arguments") when the kernel has none.
func kernelBTF(need string) (*kbtf.Spec, error) {
	spec, err := kbtf.Kernel()
	if err != nil {
		return nil, fmt.Errorf("%s need the kernel's BTF: %w", need, err)
	}
	return spec, nil
}

// funcArgs returns a kernel function's BTF prototype.
func funcProto(spec *kbtf.Spec, symbol string) (*btf.Func, *btf.FuncProto, error) {
	name, off := tracefs.SplitSymbol(symbol)
	var fn *btf.Func
	if err := spec.TypeByName(name, &fn); err != nil {
		return nil, nil, fmt.Errorf("no function %s in the kernel's BTF: %w", name, err)
	}
	if off != 0 {
		return nil, nil, fmt.Errorf("%s: arguments are only known at the function's entry, not at +%d", symbol, off)
	}
	proto, ok := fn.Type.(*btf.FuncProto)
	if !ok {
		return nil, nil, fmt.Errorf("%s has no prototype in BTF", name)
	}
	return fn, proto, nil
}

// kprobeTarget builds the compile target and the probe's fetch arguments.
func kprobeTarget(ev event, proto *btf.FuncProto, regs *asm.Regs, slots bool) (compile.Target, []string, map[string]bool) {
	var args []compile.Arg
	var fetch []string
	pointers := map[string]bool{}
	if ev.kind == "kretprobe" {
		off := regs.Ret
		if slots {
			off = int16(8 * len(proto.Params)) // fexit: the return value follows the arguments
		}
		args = []compile.Arg{{Name: "ret", Type: proto.Return, RegOff: off}}
		if ft := tracefs.FetchType(proto.Return, regs.Width); ft != "" {
			fetch = append(fetch, "ret=$retval:"+ft)
			pointers["ret"] = ft[0] == 'x'
		}
		return argsTarget(args, slots, regs), fetch, pointers
	}
	for i, p := range proto.Params {
		if slots {
			args = append(args, compile.Arg{Name: p.Name, Type: p.Type, RegOff: int16(8 * i)})
			continue
		}
		if i >= len(regs.Args) {
			break // on the stack: not reachable from the registers
		}
		args = append(args, compile.Arg{Name: p.Name, Type: p.Type, RegOff: regs.Args[i]})
		if ft := tracefs.FetchType(p.Type, regs.Width); ft != "" && tracefs.ValidateName("argument", p.Name) == nil {
			fetch = append(fetch, fmt.Sprintf("%s=%%%s:%s", p.Name, regs.ArgNames[i], ft))
			pointers[p.Name] = ft[0] == 'x'
		}
	}
	return argsTarget(args, slots, regs), fetch, pointers
}

// argsTarget is a function's arguments as a trampoline's slots or a
// probe's registers.
func argsTarget(args []compile.Arg, slots bool, regs *asm.Regs) compile.Target {
	if slots {
		return compile.Target{Event: &compile.Slots{Args: args}}
	}
	return compile.Target{Event: &compile.Registers{Args: args, Width: regs.Width}}
}

func info(s *run.Session, ev event) error {
	if ev.tpGlob {
		// Each matched tracepoint's fields, one after the other.
		tps, err := tracefs.Tracepoints(ev.group, ev.name)
		if err != nil {
			return usage.Errorf("%v", err)
		}
		if len(tps) == 0 {
			return usage.Errorf("%s: no tracepoint matches", ev)
		}
		for _, tp := range tps {
			group, name, _ := strings.Cut(tp, ":")
			if err := info(s, event{kind: "tracepoint", group: group, name: name}); err != nil {
				return err
			}
		}
		return nil
	}
	if ev.kind == "tracepoint" {
		f, err := tracefs.ReadFormat(ev.group, ev.name)
		if err != nil {
			return eventErr(err)
		}
		fmt.Fprintf(s.Stdout, "%s\n", ev)
		for _, fl := range f.Fields {
			if fl.Common {
				continue
			}
			kind := "integer"
			switch {
			case fl.DataLoc && ev.group == "syscalls":
				kind = "the kernel's copy of user memory, in the stored record only: not an operand (read the argument)"
			case fl.DataLoc:
				kind = "string"
			case fl.ArrayLen > 0 && strings.HasPrefix(fl.Type, "char"):
				kind = "string"
			case ev.group == "syscalls" && strings.HasSuffix(strings.TrimSpace(strings.TrimPrefix(fl.Type, "const ")), "char *"):
				kind = "string, read from the process's memory"
			case strings.Contains(fl.Type, "*"):
				kind = "pointer: cast it to walk it"
			case len(f.Symbolic[fl.Name]) > 0:
				names := f.Symbolic[fl.Name]
				kind = fmt.Sprintf("integer, or one of %d names", len(names))
				for _, v := range []uint64{3, 2, 1} {
					if n, ok := names[v]; ok {
						kind += fmt.Sprintf(" (%d is %q)", v, n)
						break
					}
				}
			}
			fmt.Fprintf(s.Stdout, "    %-28s %-10s offset %3d, size %2d, %s\n", fl.Type, fl.Name, fl.Offset, fl.Size, kind)
		}
		return nil
	}
	spec, err := kbtf.Kernel()
	if err != nil {
		return fmt.Errorf("read the kernel's BTF: %w (needs CONFIG_DEBUG_INFO_BTF)", err)
	}
	if ev.glob {
		funcs, _, err := ev.functions(spec)
		if err != nil {
			return err
		}
		for _, name := range funcs {
			if fn, proto, err := funcProto(spec, name); err == nil {
				fmt.Fprintln(s.Stdout, kbtf.Signature(fn, proto))
			} else {
				fmt.Fprintf(s.Stdout, "%s(?); // no prototype in BTF: func and the builtins only\n", name)
			}
		}
		return nil
	}
	fn, proto, err := funcProto(spec, ev.symbol)
	if err != nil {
		return err
	}
	fmt.Fprintln(s.Stdout, kbtf.Signature(fn, proto))
	return nil
}

// mode is what a run does, decided from the options and the event.
type mode struct {
	act     compile.Action
	columns bool // Emit: the records are ours (compile.Program.Columns), not the kernel's
}

func trace(ctx context.Context, s *run.Session, o *options) error {
	ev, _ := parseEvent(o.Lead(), o.Info)
	if o.Info {
		if ev.user() {
			return userErr(userInfo(s, ev, int(o.Pid)))
		}
		return info(s, ev)
	}
	var root compile.Node
	if o.Where != "" {
		root, _ = compile.Parse(o.Where)
	}
	target := compile.Target{Read: kernel.Readers()}
	if !o.Self {
		target.SelfPid = uint32(os.Getpid())
	}
	target.Pid = uint32(o.Pid)
	target.CPid = uint32(s.CommandPid())
	// -c: the command's process tree, as the other tools follow it, for
	// every event (-a: everyone's while it runs).
	target.Tree = target.CPid != 0 && !o.All
	ns, err := kernel.PidNamespace()
	if err != nil && (o.Pid != 0 || o.Command != "") {
		return err
	}
	target.NS = ns
	act, err := action(o)
	if err != nil {
		return err
	}
	keyStacks, _, _ := stackColumns("--count-by", o.CountBy)
	fieldStacks, rest, _ := stackColumns("--fields", o.Fields)
	if why := kernel.TracepointStackLimit(); why != "" && ev.kind == "tracepoint" && slices.Contains(append(keyStacks, fieldStacks...), "kstack") {
		fmt.Fprintf(s.Stderr, "filter: kstack: %s\n", why)
	}
	if stacks := keyStacks; slices.Contains(stacks, "ustack") {
		return runUstack(ctx, s, o, ev, root, target, stackRun{stacks: stacks})
	}
	if stacks := fieldStacks; slices.Contains(stacks, "ustack") {
		return runUstack(ctx, s, o, ev, root, target, stackRun{stacks: stacks, emit: true, record: compile.Action{Kind: compile.Emit, Columns: rest, Option: "--fields", Source: o.Fields}})
	}
	if err := checkReturnOnly(ev, root, act); err != nil {
		return err
	}
	if compile.HasDump(act) && !kernel.HaveSnprintfBTF() {
		return fmt.Errorf("%s: printing a structure (*PATH) needs bpf_snprintf_btf, Linux 5.10 and later: this kernel has none", o.Fields)
	}
	var ch *chain
	if o.Stack {
		// The last function is the event; the others, its chain.
		last := len(ev.items) - 1
		if ch, err = newChain(o, ev.items[:last]); err != nil {
			return err
		}
		ev = ev.items[last]
		target.Inside = len(ch.items)
	}
	if ev.tpGlob {
		return runTracepoints(ctx, s, o, ev, root, act, target)
	}
	if ev.glob {
		return runGlob(ctx, s, o, ev, root, act, target)
	}
	if isCall(ev, root, act) {
		return runCall(ctx, s, o, ev, root, act, target, ch)
	}
	if ev.user() {
		return runUser(ctx, s, o, ev, root, act, target, ch)
	}
	var offers []hook.Offer
	var p plan // what the chosen offer built
	build := func(prepare func() (plan, error)) func() error {
		return func() error {
			next, err := prepare()
			if err != nil {
				return err
			}
			if err := next.compile(o.Where, root, act); err != nil {
				return usageOr(err)
			}
			p = next
			return nil
		}
	}
	if ev.kind == "tracepoint" {
		if offers, err = tracepointOffers(ev, target, root, act, build); err != nil {
			return err
		}
	} else if offers, err = kprobeOffers(ev, target, build); err != nil {
		return err
	}
	if _, err := hook.Choose(o.Attach, ev.String(), offers...); err != nil {
		return err
	}
	act, prog := p.act, p.prog
	spec := &ebpf.CollectionSpec{
		Maps: compile.Maps(act.Kind, prog),
		Programs: map[string]*ebpf.ProgramSpec{
			"filter": {Name: "filter", Type: p.progType, License: "GPL", Instructions: prog.Insns},
		},
	}
	if p.entry != "" {
		fp := spec.Programs["filter"]
		fp.AttachType, fp.AttachTo = p.attachType, p.entry
	}
	ch.add(spec)
	coll, err := loadFollowing(s, spec, target.Tree, target.NS, o.MaxTree)
	if err != nil {
		return err
	}
	if err := ch.attach(s, coll); err != nil {
		return err
	}
	if act.Kind != compile.Keep {
		// Our program makes what is reported: attach it once, as cheaply
		// as the event allows (a kprobe through the PMU where there is one).
		switch {
		case p.entry != "":
			err = s.AttachHook(coll.Programs["filter"], hook.Fentry, "", p.entry)
		case ev.kind == "tracepoint":
			err = s.AttachTracepoint(coll.Programs["filter"], ev.group, ev.name)
		default:
			err = s.AttachProbe(coll.Programs["filter"], ev.probe(), false)
		}
		if err != nil {
			return err
		}
	}
	if act.Kind == compile.Keep {
		return streamKept(ctx, s, ev, coll, p.format, p.fetch, p.pointers, o.RingPages)
	}
	return report(ctx, s, o, ev, coll, prog, act)
}

// report runs an action's loop: the maps read per interval, or the output
// rings printed.
func report(ctx context.Context, s *run.Session, o *options, ev event, coll *ebpf.Collection, prog *compile.Program, act compile.Action) error {
	// A run the kernel skipped is an event, passing --where or not, in
	// filter's own process or not: not a count, but said at the end.
	progs := make([]*ebpf.Program, 0, len(coll.Programs))
	for _, p := range coll.Programs {
		progs = append(progs, p)
	}
	s.ReportSkips("the events among them that would have passed are missing from the output", progs...)
	var table *keyTable
	if prog.Swap {
		top := 0
		if o.Serve != "" {
			top = o.ServeTop
		}
		var err error
		if table, err = newKeyTable(coll, prog, top, s.Opts.Cumulative); err != nil {
			return err
		}
		s.OnClose("", table.Close)
		s.Every("drain the counts", drainEvery, table.drain)
	}
	if o.Serve != "" {
		c := &collector{ev: ev.String(), coll: coll, prog: prog, act: act, table: table}
		if err := s.ServeMetrics(o.Serve, c.families); err != nil {
			return err
		}
	}
	switch act.Kind {
	case compile.Count:
		return count(ctx, s, ev, coll)
	case compile.CountBy:
		return countBy(ctx, s, ev, coll, prog, table, o.Folded)
	case compile.Hist:
		if act.Lhist != nil {
			return lhist(ctx, s, ev, coll, prog, act)
		}
		return hist(ctx, s, ev, coll, prog, act.Hist.Text)
	case compile.Stats:
		return stats(ctx, s, ev, coll, prog, act)
	}
	rings, err := s.OpenOutputRings(coll.Maps["events"], ev.String(), o.RingPages, perfevent.WakeBatch)
	if err != nil {
		return err
	}
	var funcs map[uint64]string
	if ev.glob || ev.tpGlob {
		for _, c := range prog.Columns {
			if c.Name == "func" || c.Name == "probe" {
				funcs = c.Symbols
			}
		}
	}
	return stream(ctx, s, ev, rings, recordFormat(ev, prog), nil, funcs)
}

// runUser runs a user-space probe: a program per argument layout (each
// USDT site has its own argument specs), sharing the maps, all attached or
// none.
func runUser(ctx context.Context, s *run.Session, o *options, ev event, root compile.Node, act compile.Action, base compile.Target, ch *chain) error {
	self, ns := base.SelfPid, base.NS
	if _, err := hook.Choose(o.Attach, ev.String(), hook.Offer{Hook: hook.Perf}); err != nil {
		return err // a uprobe is a perf event, and nothing else
	}
	regs, sites, err := userProbe(&ev, int(o.Pid))
	if err != nil {
		return err
	}
	if act.Kind == compile.Keep {
		// A uprobe's record in the kernel holds no arguments: always our own.
		act = compile.Action{Kind: compile.Emit, Columns: userTarget(ev, sites[0], regs).Event.Columns()}
	}
	spec := &ebpf.CollectionSpec{Programs: map[string]*ebpf.ProgramSpec{}}
	tree := base.Tree
	// Sites whose programs come out the same share one: one program per
	// argument layout, attached to all its sites as one link where the
	// kernel has uprobe_multi (see perfevent.UprobeMulti).
	multi := perfevent.UprobeMulti()
	attachType := ebpf.AttachNone
	if multi {
		attachType = ebpf.AttachTraceUprobeMulti
	}
	var prog *compile.Program
	var sets []run.ProbeSet
	progs := sharedPrograms{specs: spec.Programs, attachType: attachType}
	for _, st := range sites {
		t := userTarget(ev, st, regs)
		t.SelfPid, t.Pid, t.Tree, t.NS, t.Inside, t.CPid = self, uint32(o.Pid), tree, ns, base.Inside, base.CPid
		p, err := compile.Compile(o.Where, root, t, act)
		if err != nil {
			return usageOr(err)
		}
		if prog == nil {
			prog = p
		} else if p.Size != prog.Size {
			return fmt.Errorf("%s: sites lay out their columns differently", ev)
		}
		i := progs.add(p)
		if i == len(sets) {
			sets = append(sets, run.ProbeSet{})
		}
		sets[i].Probes = append(sets[i].Probes, st.probe)
	}
	spec.Maps = compile.Maps(act.Kind, prog)
	ch.add(spec)
	coll, err := loadFollowing(s, spec, tree, ns, o.MaxTree)
	if err != nil {
		return err
	}
	if err := ch.attach(s, coll); err != nil {
		return err
	}
	for i := range sets {
		sets[i].Prog = coll.Programs[progName(i)]
	}
	if err := s.AttachUprobes(sets, multi); err != nil {
		return fmt.Errorf("%s: %w", ev, err)
	}
	return report(ctx, s, o, ev, coll, prog, act)
}

// sharedPrograms are the kprobe programs of a run over several sites or
// functions, one per distinct instructions (insnsKey), named progName(i)
// in specs.
type sharedPrograms struct {
	specs      map[string]*ebpf.ProgramSpec
	attachType ebpf.AttachType
	progType   ebpf.ProgramType // ebpf.Kprobe when not set
	index      map[string]int
}

// add returns the index of p's program: a new one, len of those so far,
// when no other came out the same.
func (ps *sharedPrograms) add(p *compile.Program) int {
	if ps.index == nil {
		ps.index = map[string]int{}
	}
	key := insnsKey(p.Insns)
	i, ok := ps.index[key]
	if !ok {
		i = len(ps.index)
		ps.index[key] = i
		typ := ps.progType
		if typ == ebpf.UnspecifiedProgram {
			typ = ebpf.Kprobe
		}
		ps.specs[progName(i)] = &ebpf.ProgramSpec{Name: "filter", Type: typ, AttachType: ps.attachType, License: "GPL", Instructions: p.Insns}
	}
	return i
}

func progName(i int) string { return fmt.Sprintf("filter%d", i) }

// insnsKey is what makes two programs the same: their instructions, the
// maps and functions they name, not their comments.
func insnsKey(insns bpf.Instructions) string {
	var b strings.Builder
	for _, ins := range insns {
		fmt.Fprintf(&b, "%d %d %d %d %d %s %s\n", ins.OpCode, ins.Dst, ins.Src, ins.Offset, ins.Constant, ins.Reference(), ins.Symbol())
	}
	return b.String()
}

// usageOr turns an expression error into a usage error.
func usageOr(err error) error {
	var ee *compile.ExprError
	if errors.As(err, &ee) {
		opt := ee.Option
		if opt == "" {
			opt = "--where"
		}
		return usage.Errorf("%s: %v", opt, err)
	}
	return err
}

// maxLhistSlots bounds a linear histogram's slots between MIN and MAX, as
// bpftrace's 1000.
const maxLhistSlots = 1000

// parseLhist parses EXPR,MIN,MAX,STEP: the operand, then three integers.
// lhistSlots is how many slots of step span from MIN to MAX take,
// without overflow.
func lhistSlots(span, step uint64) uint64 {
	n := span / step
	if span%step != 0 {
		n++
	}
	return n
}

func parseLhist(text string) (compile.Operand, compile.Lhist, error) {
	parts := strings.Split(text, ",")
	if len(parts) < 4 {
		return compile.Operand{}, compile.Lhist{}, fmt.Errorf("%q: want EXPR,MIN,MAX,STEP (bpftrace's lhist(EXPR, MIN, MAX, STEP))", text)
	}
	n := len(parts)
	var b [3]int64
	for i, p := range parts[n-3:] {
		v, err := strconv.ParseInt(strings.TrimSpace(p), 0, 64)
		if err != nil {
			return compile.Operand{}, compile.Lhist{}, fmt.Errorf("%q: MIN, MAX and STEP are integers, not %q", text, p)
		}
		b[i] = v
	}
	l := compile.Lhist{Min: b[0], Max: b[1], Step: b[2]}
	switch {
	case l.Step <= 0 || l.Step > math.MaxInt32:
		return compile.Operand{}, l, fmt.Errorf("%q: STEP %d: want 1 to %d", text, l.Step, math.MaxInt32)
	case l.Max <= l.Min:
		return compile.Operand{}, l, fmt.Errorf("%q: MAX %d is not above MIN %d", text, l.Max, l.Min)
	// The span in unsigned arithmetic: MAX-MIN overflows int64 for bounds
	// far apart (issue 62: -2^63 to 2^63-1 passed as 0 slots, and every
	// event was dropped).
	case lhistSlots(uint64(l.Max)-uint64(l.Min), uint64(l.Step)) > maxLhistSlots:
		return compile.Operand{}, l, fmt.Errorf("%q: more than %d slots from MIN to MAX: raise STEP", text, maxLhistSlots)
	}
	expr := strings.Join(parts[:n-3], ",")
	ops, err := compile.ParseOperands(expr, 1)
	if err != nil {
		return compile.Operand{}, l, err
	}
	return ops[0], l, nil
}

// stat is the statistic asked for (sum, min, max, avg) and its EXPR, ""
// for none; several are a usage error (validate).
func (o *options) stat() (string, string) {
	for _, st := range []struct{ name, text string }{{"sum", o.Sum}, {"min", o.Min}, {"max", o.Max}, {"avg", o.Avg}} {
		if st.text != "" {
			return st.name, st.text
		}
	}
	return "", ""
}

func (o *options) statText() string {
	_, text := o.stat()
	return text
}

// action is what the options ask for; the event may still turn Keep into
// Emit.
func action(o *options) (compile.Action, error) {
	switch {
	case o.Count:
		return compile.Action{Kind: compile.Count}, nil
	case o.statText() != "":
		stat, text := o.stat()
		val, err := compile.ParseOperands(text, 1)
		if err != nil {
			return compile.Action{}, err
		}
		var cols []compile.Operand
		if o.CountBy != "" {
			if cols, err = compile.ParseOperands(o.CountBy, 0); err != nil {
				return compile.Action{}, err
			}
		}
		return compile.Action{Kind: compile.Stats, Columns: cols, Hist: val[0], Stat: stat, StatSource: text, Option: "--count-by", Source: o.CountBy, MaxKeys: o.MaxKeys}, nil
	case o.CountBy != "":
		cols, err := compile.ParseOperands(o.CountBy, 0)
		// Reports that clear, and scrapes, drain the kernel's counts: its
		// hash then holds an interval's keys, not the run's.
		swap := (o.Interval() > 0 && !o.Cumulative) || o.Serve != ""
		return compile.Action{Kind: compile.CountBy, Columns: cols, Option: "--count-by", Source: o.CountBy, MaxKeys: o.MaxKeys, Swap: swap}, err
	case o.Lhist != "":
		val, l, err := parseLhist(o.Lhist)
		if err != nil {
			return compile.Action{}, err
		}
		return compile.Action{Kind: compile.Hist, Hist: val, Lhist: &l, Option: "--lhist", Source: o.Lhist}, nil
	case o.Hist != "":
		cols, err := compile.ParseOperands(o.Hist, 1)
		if err != nil {
			return compile.Action{}, err
		}
		return compile.Action{Kind: compile.Hist, Hist: cols[0], Option: "--hist", Source: o.Hist}, nil
	case o.Fields != "":
		cols, err := compile.ParseOperands(o.Fields, 0)
		return compile.Action{Kind: compile.Emit, Columns: cols, Option: "--fields", Source: o.Fields}, err
	}
	return compile.Action{Kind: compile.Keep}, nil
}

// plan is how a run reaches its event by one hook: the program's context,
// its type and where it attaches, and what it was compiled to.
type plan struct {
	target     compile.Target
	format     *tracefs.Format // a tracepoint's record, which Keep streams
	fetch      []string        // a kprobe event's fetch arguments (perf)
	pointers   map[string]bool // which of them are addresses
	progType   ebpf.ProgramType
	attachType ebpf.AttachType
	entry      string // the function a trampoline (fentry, fexit) attaches to
	act        compile.Action
	prog       *compile.Program
}

// compile builds the plan's program for the expression and the action.
// A kept record that holds the address of a string rather than the
// string, or none at all (a trampoline builds no record), becomes records
// of our own, every field in them.
func (p *plan) compile(where string, root compile.Node, act compile.Action) error {
	if act.Kind == compile.Keep && (p.target.Event.HasStringPointer() || p.entry != "") {
		act = compile.Action{Kind: compile.Emit, Columns: p.target.Event.Columns()}
	}
	prog, err := compile.Compile(where, root, p.target, act)
	if err != nil {
		return err
	}
	p.act, p.prog = act, prog
	return nil
}

// tracepointOffers are the hooks a tracepoint is reached by: its record
// (perf), and for a syscalls:sys_enter_* event a BPF trampoline at the
// syscall's wrapper (fentry), first where it attaches: no record is
// built, and no other syscall runs the program (the same choice as
// writesize's, measured there). The record-less raw and BTF tracepoints
// cannot serve: filter names the record's fields.
func tracepointOffers(ev event, base compile.Target, root compile.Node, act compile.Action, build func(func() (plan, error)) func() error) ([]hook.Offer, error) {
	f, err := tracefs.ReadFormat(ev.group, ev.name)
	if err != nil {
		return nil, eventErr(err)
	}
	base.Event = &compile.Record{Format: f, UserSpace: ev.group == "syscalls"}
	if compile.NeedsBTF(root) || compile.ColumnsNeedBTF(act) {
		if base.BTF, err = kernelBTF("casts"); err != nil {
			return nil, err
		}
	}
	perf := hook.Offer{Hook: hook.Perf, Build: build(func() (plan, error) {
		return plan{target: base, format: f, progType: ebpf.TracePoint}, nil
	})}
	name, syscall := strings.CutPrefix(ev.name, "sys_enter_")
	if !syscall || ev.group != "syscalls" {
		return []hook.Offer{perf}, nil
	}
	fentry := hook.Offer{Hook: hook.Fentry, Have: hook.HasFentrySyscall(name), Build: build(func() (plan, error) {
		regs, err := asm.HostPtRegs()
		if err != nil {
			return plan{}, err
		}
		t := base
		t.Event = &compile.SyscallEntry{Format: f, Regs: regs}
		return plan{target: t, progType: ebpf.Tracing, attachType: ebpf.AttachTraceFEntry, entry: regs.SyscallPrefix + name}, nil
	})}
	if act.Kind == compile.Keep && !base.Event.HasStringPointer() && hasDataLoc(f) {
		// The stored record is printed as it is, 6.19+'s copies of user
		// memory (__value_val) among its fields: only perf stores one.
		return []hook.Offer{perf, fentry}, nil
	}
	return []hook.Offer{fentry, perf}, nil
}

// kprobeOffers are the hooks a kprobe or kretprobe event is reached by: a
// BPF trampoline at the function (fentry; fexit for a kretprobe), first
// where one attaches and the function's arguments fit its slots, and the
// kprobe (perf).
func kprobeOffers(ev event, common compile.Target, build func(func() (plan, error)) func() error) ([]hook.Offer, error) {
	regs, spec, proto, err := kernelFunc(ev)
	if err != nil {
		return nil, err
	}
	// what the event's kind does not change (readers, pids) comes from common
	at := func(slots bool) plan {
		t, f, ptrs := kprobeTarget(ev, proto, regs, slots)
		t.BTF, t.Read, t.SelfPid, t.Pid, t.NS, t.Inside, t.CPid = spec, common.Read, common.SelfPid, common.Pid, common.NS, common.Inside, common.CPid
		return plan{target: t, fetch: f, pointers: ptrs}
	}
	name, _ := tracefs.SplitSymbol(ev.symbol)
	fentry := hook.Offer{Hook: hook.Fentry,
		Have: func() error {
			if err := slotsFit(proto); err != nil {
				return fmt.Errorf("%s %v", name, err)
			}
			return hook.HasFentry(name)()
		},
		Build: build(func() (plan, error) {
			p := at(true)
			p.progType, p.attachType, p.entry = ebpf.Tracing, ebpf.AttachTraceFEntry, ev.symbol
			if ev.kind == "kretprobe" {
				p.attachType = ebpf.AttachTraceFExit
			}
			return p, nil
		}),
	}
	perf := hook.Offer{Hook: hook.Perf,
		Have: ev.haveKprobes,
		Build: build(func() (plan, error) {
			p := at(false)
			p.progType = ebpf.Kprobe
			return p, nil
		}),
	}
	return []hook.Offer{fentry, perf}, nil
}

// kernelFunc is what a kprobe event's program is compiled against: the
// registers' layout, the kernel's BTF, and the function's prototype.
func kernelFunc(ev event) (*asm.Regs, *kbtf.Spec, *btf.FuncProto, error) {
	regs, err := asm.HostPtRegs()
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", ev, err)
	}
	spec, err := kernelBTF("kprobe arguments")
	if err != nil {
		return nil, nil, nil, err
	}
	_, proto, err := funcProto(spec, ev.symbol)
	if err != nil {
		return nil, nil, nil, err
	}
	return regs, spec, proto, nil
}

// slotsFit reports why a function's arguments do not fit a BPF
// trampoline's context on every kernel that has trampolines: up to six,
// each a number or a pointer (structs by value came later, and only on
// some architectures), and no variadic tail.
func slotsFit(proto *btf.FuncProto) error {
	if len(proto.Params) > 6 {
		return fmt.Errorf("takes %d arguments, more than the 6 a trampoline passes on older kernels", len(proto.Params))
	}
	for _, p := range proto.Params {
		switch u := btf.UnderlyingType(p.Type).(type) {
		case *btf.Int, *btf.Enum, *btf.Pointer:
		case nil, *btf.Void:
			return errors.New("is variadic")
		default:
			return fmt.Errorf("passes %s (%s) by value", p.Name, kbtf.TypeName(u))
		}
	}
	switch u := btf.UnderlyingType(proto.Return).(type) {
	case nil, *btf.Void, *btf.Int, *btf.Enum, *btf.Pointer:
	default:
		return fmt.Errorf("returns %s by value", kbtf.TypeName(u))
	}
	return nil
}

func hasDataLoc(f *tracefs.Format) bool {
	for _, fl := range f.Fields {
		if fl.DataLoc {
			return true
		}
	}
	return false
}

// probe is the kprobe or kretprobe of ev.
func (e event) probe() tracefs.Probe {
	return tracefs.Probe{Type: tracefs.Kprobe, Symbol: e.symbol, Ret: e.kind == "kretprobe"}
}

// loadFollowing loads spec; with tree, its programs keep to the -c
// command's process tree (proctree), which is followed from then on.
func loadFollowing(s *run.Session, spec *ebpf.CollectionSpec, tree bool, ns *asm.PidNS, maxTree uint32) (*ebpf.Collection, error) {
	if tree {
		t, err := s.ProcessTree(ns, maxTree)
		if err != nil {
			return nil, err
		}
		if err := proctree.Add(spec, t); err != nil {
			return nil, err
		}
	}
	coll, err := s.Load(spec)
	if err != nil {
		return nil, err
	}
	if tree {
		if err := s.FollowProcessTree(coll); err != nil {
			return nil, err
		}
	}
	return coll, nil
}

// haveKprobes is a kprobe hook's Have: the kernel has kprobes.
func (e event) haveKprobes() error {
	if !perfevent.KprobesAvailable() {
		return fmt.Errorf("%s: %w; tracepoints (GROUP:NAME) work instead", e, perfevent.ErrNoKprobes)
	}
	return nil
}
