package bpftrace

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/bpftrace/check"
	"github.com/tracekit/tracekit/bpftrace/compile"
	"github.com/tracekit/tracekit/bpftrace/list"
	"github.com/tracekit/tracekit/bpftrace/output"
	"github.com/tracekit/tracekit/bpftrace/parse"
	"github.com/tracekit/tracekit/internal/usage"
	"github.com/tracekit/tracekit/kbtf"
	"github.com/tracekit/tracekit/kernel"
	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/stacks"
	"github.com/tracekit/tracekit/terminal"
)

func validate(o *options) error {
	if err := procfs.CheckPid(o.Pid); err != nil {
		return err
	}
	if o.Expr == "" && o.Lead() == "" && !o.List {
		return usage.Errorf("no program: give one with -e 'PROGRAM', or a script file")
	}
	if o.Expr != "" && o.List && o.Lead() != "" {
		return usage.Errorf("-l lists the probes of -e's program or of a search, not both")
	}
	if o.Pid > 0 && o.Command != "" {
		return usage.Errorf("-p and -c: trace a running process or a command, not both")
	}
	if o.List && o.Expr == "" {
		return nil // a search, taken by -l
	}
	// The program's faults are usage errors, said before anything runs.
	_, _, _, err := load(o)
	return err
}

// source is the program's text and the name messages give it.
func source(o *options) (file, src string, params []string, err error) {
	if o.Expr != "" {
		// Every positional argument is a parameter: $1 is the first.
		if o.Lead() == "" {
			return "stdin", o.Expr, nil, nil
		}
		return "stdin", o.Expr, append([]string{o.Lead()}, o.ScriptArgs()...), nil
	}
	f, err := os.Open(o.Lead())
	if err != nil {
		return "", "", nil, usage.Errorf("%v", err)
	}
	defer f.Close()
	// One byte past the bound, so that the parser says the script is too long.
	b, err := io.ReadAll(io.LimitReader(f, parse.MaxSource+1))
	if err != nil {
		return "", "", nil, fmt.Errorf("read %s: %w", o.Lead(), err)
	}
	return o.Lead(), string(b), o.ScriptArgs(), nil
}

// defined are the names #ifdef sees: BPFTRACE_HAVE_BTF where the kernel
// has BTF, as bpftrace defines it.
func defined() []string {
	if _, err := os.Stat(kbtf.KernelPath); err == nil {
		return []string{"BPFTRACE_HAVE_BTF"}
	}
	return nil
}

// load parses and checks the program; a fault in it is a usage error.
// The script is read, parsed and checked once: by the options' checks,
// whose result the run then takes (the check reads the kernel's BTF for
// its enumerators).
func load(o *options) (*parse.Program, []string, string, error) {
	if l := o.loaded; l != nil {
		return l.prog, l.params, l.file, nil
	}
	file, src, params, err := source(o)
	if err != nil {
		return nil, nil, "", err
	}
	prog, err := parse.Parse(file, src, defined())
	if err != nil {
		return nil, nil, "", usage.Errorf("%v", err)
	}
	isConst := func(name string) bool { _, ok := constant(name); return ok }
	if err := check.Check(file, prog, check.Options{Unsafe: o.Unsafe, Const: isConst}); err != nil {
		return nil, nil, "", usage.Errorf("%v", err)
	}
	o.loaded = &loaded{prog, params, file}
	return prog, params, file, nil
}

// loaded is a script read, parsed and checked.
type loaded struct {
	prog   *parse.Program
	params []string
	file   string
}

// types are the kernel's, or nil where it publishes no BTF (a cast is
// then refused, by name). They are read at the first cast or walk: a
// script without any (most one-liners) does not pay the parse of the
// kernel's BTF, a few milliseconds and megabytes.
func types() compile.Types {
	if _, err := os.Stat(kbtf.KernelPath); err != nil {
		return nil
	}
	return &lazyTypes{}
}

// lazyTypes reads the kernel's BTF when first asked.
type lazyTypes struct {
	once  sync.Once
	types compile.Types
	err   error
}

func (l *lazyTypes) get() (compile.Types, error) {
	l.once.Do(func() {
		spec, err := kbtf.Kernel()
		if err != nil {
			l.err = fmt.Errorf("the kernel's BTF: %w", err)
			return
		}
		l.types = compile.KernelTypes(spec)
	})
	return l.types, l.err
}

func (l *lazyTypes) Named(name string) (btf.Type, error) {
	t, err := l.get()
	if err != nil {
		return nil, err
	}
	return t.Named(name)
}

func (l *lazyTypes) Complete(typ btf.Type) (btf.Type, error) {
	t, err := l.get()
	if err != nil {
		return nil, err
	}
	return t.Complete(typ)
}

// kaddr is a kernel symbol's address, for kaddr("name").
func kaddr(name string) (uint64, bool) {
	addr, ok, err := procfs.KernelAddress(name)
	return addr, ok && err == nil
}

// enumerator is an enumerator of the kernel's BTF (none without BTF).
func enumerator(name string) (int64, bool) {
	spec, err := kbtf.Kernel()
	if err != nil {
		return 0, false
	}
	return spec.Enumerator(name)
}

// constant is a bare name's value as the compiler finds it: a header's
// macro, else the kernel's enumerator.
func constant(name string) (int64, bool) {
	if v, ok := compile.Macros[name]; ok {
		return v, true
	}
	return enumerator(name)
}

// listProbes is -l: the probes a search or the program's attach points
// name.
func listProbes(s *run.Session, o *options) error {
	var points []*parse.AttachPoint
	if o.Expr == "" {
		search := o.Lead()
		if search == "" {
			search = "*:*"
		}
		prog, err := parse.Parse("search", search+" {}", nil)
		if err != nil {
			return usage.Errorf("-l %q: %v", search, err)
		}
		points = prog.Probes[0].Points
	} else {
		prog, _, _, err := load(o)
		if err != nil {
			return err
		}
		for _, p := range prog.Probes {
			points = append(points, p.Points...)
		}
	}
	for _, ap := range points {
		probes, err := list.Match(ap, o.Listing)
		if err != nil {
			return err
		}
		for _, p := range probes {
			fmt.Fprintln(s.Stdout, p.Name)
			for _, f := range p.Fields {
				fmt.Fprintln(s.Stdout, "    "+f+";")
			}
		}
	}
	return nil
}

// printer writes the program's output, from the rings' reader and from
// the end, one at a time.
type printer struct {
	mu     sync.Mutex
	w      io.Writer
	stderr io.Writer
	boot   time.Time // the boot's wall-clock time (strftime)
	json   bool
	res    *compile.Result
	coll   *ebpf.Collection
	names  *kernelNames
	// ev: one record at a time, from the printf rings or the stack
	// pipeline; stack is the stacks of the pipeline's record being
	// handled; held the maps with ustack keys (see ustack.go).
	ev    sync.Mutex
	stack *stacks.Stack
	held  map[string]*heldMap
}

func (p *printer) printf(text string) { p.message("printf", text) }

// message writes text as it is, or in -f json as a message of kind
// ({"type": "printf", "data": ...}).
func (p *printer) message(kind, text string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.json {
		fmt.Fprintf(p.w, "{\"type\": \"%s\", \"data\": %s}\n", kind, jsonString(text))
		return
	}
	io.WriteString(p.w, text)
}

// join prints a join() record: its strings up to the first empty one,
// joined by delim, on a line of their own.
func (p *printer) join(raw []byte, delim string) {
	var args []string
	for i := 0; i < compile.JoinArgs && (i+1)*compile.JoinArgSize <= len(raw); i++ {
		arg := cString(raw[i*compile.JoinArgSize : (i+1)*compile.JoinArgSize])
		if arg == "" {
			break
		}
		args = append(args, arg)
	}
	line := strings.Join(args, delim)
	if !p.json {
		line += "\n" // bpftrace's json has none in it
	}
	p.message("join", line)
}

// jsonString quotes s as JSON.
func jsonString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			b.WriteString("\\" + string(r))
		case r == '\n':
			b.WriteString("\\n")
		case r == '\t':
			b.WriteString("\\t")
		case r < 0x20:
			fmt.Fprintf(&b, "\\u%04x", r)
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// record decodes one printf or exit record; exit says whether it was exit().
func (p *printer) record(raw []byte) (exit bool, err error) {
	if len(raw) < 8 {
		return false, fmt.Errorf("a record of %d bytes from the kernel: want 8 or more", len(raw))
	}
	id := binary.LittleEndian.Uint64(raw)
	if id >= uint64(len(p.res.Printfs)) {
		return false, fmt.Errorf("a record with id %d from the kernel: the programs have %d", id, len(p.res.Printfs))
	}
	pf := p.res.Printfs[id]
	switch {
	case pf.Exit:
		return true, nil
	case pf.Time:
		p.printf(strftime(pf.Format, time.Now()))
		return false, nil
	case pf.Join:
		p.join(raw[8:], pf.Format)
		return false, nil
	case pf.MapOp != "":
		return false, p.mapOp(pf.MapOp, pf.Map, pf.Top, pf.Div)
	}
	args := make([]output.Arg, 0, len(pf.Args))
	at := 8
	for _, a := range pf.Args {
		if at+a.Size > len(raw) {
			return false, fmt.Errorf("printf record %d is %d bytes: too short for its arguments", id, len(raw))
		}
		field := raw[at : at+a.Size]
		switch {
		case a.Strftime != "":
			args = append(args, output.Arg{Str: p.wallTime(a.Strftime, binary.LittleEndian.Uint64(field)), IsStr: true})
		case a.Buf:
			args = append(args, output.Arg{Str: bufText(field), IsStr: true})
		case a.Str:
			args = append(args, output.Arg{Str: cString(field), IsStr: true})
		case a.Inet:
			args = append(args, output.Arg{Str: inetText(field), IsStr: true})
		case a.Usym:
			args = append(args, output.Arg{Str: usymText(field), IsStr: true})
		case a.Ustack:
			args = append(args, output.Arg{Str: p.userStack(a, argIndent), IsStr: true})
		case a.Stack != "" && a.Size == 0: // the stack pipeline's, beside a ustack
			v, err := p.kernelStack(argIndent)
			if err != nil {
				return false, err
			}
			args = append(args, output.Arg{Str: v, IsStr: true})
		case a.Ksym, a.Stack != "":
			p.names.indent = argIndent
			v := p.names.keys(field, []compile.Key{a})
			p.names.indent = keyIndent
			if err := p.names.name(nil); err != nil {
				return false, err
			}
			args = append(args, output.Arg{Str: v[0].Str, IsStr: true})
		default:
			args = append(args, output.Arg{Int: binary.LittleEndian.Uint64(field)})
		}
		at += a.Size
	}
	if pf.Cat {
		p.cat(output.Printf(pf.Format, args))
		return false, nil
	}
	if pf.System {
		p.system(output.Printf(pf.Format, args))
		return false, nil
	}
	p.printf(output.Printf(pf.Format, args))
	return false, nil
}

// cat prints a cat() record: the file's first CatBytes bytes, as they
// are (no newline added, as bpftrace's); a file that cannot be read is
// said on stderr, prints nothing (-f json: an empty "cat", as bpftrace's),
// and the run goes on.
func (p *printer) cat(path string) {
	text, err := readHead(path, compile.CatBytes)
	if err != nil {
		fmt.Fprintf(p.stderr, "bpftrace: cat: %s\n", terminal.Printable(err.Error()))
	}
	p.message("cat", text)
}

// SystemBytes is the most of a system() command's output printed.
const SystemBytes = 1 << 20

// system runs a system() command by /bin/sh, as bpftrace runs it, and
// prints its output (-f json: a "syscall" message, as bpftrace's), at
// most SystemBytes of it; its errors go to stderr. Events wait for it,
// as under bpftrace.
func (p *printer) system(command string) {
	c := exec.Command("/bin/sh", "-c", command)
	c.Stderr = p.stderr
	out, err := c.StdoutPipe()
	if err == nil {
		err = c.Start()
	}
	if err != nil {
		fmt.Fprintf(p.stderr, "bpftrace: system: %s\n", terminal.Printable(err.Error()))
		return
	}
	text, _ := io.ReadAll(io.LimitReader(out, SystemBytes))
	io.Copy(io.Discard, out) // the rest, unprinted, so that the command ends
	c.Wait()                 // its status is its own, as under bpftrace
	p.message("syscall", string(text))
}

// readHead reads at most n bytes of path: a file of /proc or /sys, or a
// FIFO, whatever its size says.
func readHead(path string, n int) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, int64(n)))
	return string(b), err
}

// wallTime is strftime(format, ns)'s text: ns nanoseconds after the
// boot, by the wall clock (the boot's wall-clock time read once, as
// bpftrace reads it), formatted as strftime(3) does, %f the microseconds.
func (p *printer) wallTime(format string, ns uint64) string {
	if p.boot.IsZero() {
		var real, boot unix.Timespec
		if unix.ClockGettime(unix.CLOCK_REALTIME, &real) != nil || unix.ClockGettime(unix.CLOCK_BOOTTIME, &boot) != nil {
			return "(?)"
		}
		p.boot = time.Unix(0, real.Nano()-boot.Nano())
	}
	t := p.boot.Add(time.Duration(min(ns, math.MaxInt64)))
	return strftime(strings.ReplaceAll(format, "%f", fmt.Sprintf("%06d", t.Nanosecond()/1000)), t)
}

// bufText is a buf() as bpftrace prints it: its bytes (as many as its
// length byte says, at most the room after it), printable ASCII as it
// is, every other byte as \xNN.
func bufText(b []byte) string {
	if len(b) < compile.BufData {
		return ""
	}
	n := min(int(b[0]), len(b)-compile.BufData)
	var out strings.Builder
	for _, c := range b[compile.BufData : compile.BufData+n] {
		if c >= 32 && c <= 126 {
			out.WriteByte(c)
		} else {
			fmt.Fprintf(&out, "\\x%02x", c)
		}
	}
	return out.String()
}

// cString is b up to its first NUL.
func cString(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

func trace(ctx context.Context, s *run.Session, o *options) error {
	s.Quiet = true // bpftrace prints "Attaching N probes..." instead
	out := s.Stdout
	if o.Output != "" {
		f, err := os.Create(o.Output)
		if err != nil {
			return err
		}
		s.OnClose("close "+o.Output, f.Close)
		out = f
	}
	if o.List {
		return listProbes(s, o)
	}
	prog, params, file, err := load(o)
	if err != nil {
		return err
	}
	var now unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &now); err != nil {
		return fmt.Errorf("the monotonic clock: %w", err)
	}
	regs, _ := asm.HostPtRegs() // nil: the compiler refuses arg0 and retval
	var skipped []*missingFunc
	resolve := func(ap *parse.AttachPoint) ([]compile.Target, error) {
		tps, err := targets(ap, o.Pid)
		if m := (*missingFunc)(nil); errors.As(err, &m) {
			skipped = append(skipped, m)
			return nil, nil
		}
		return tps, err
	}
	res, err := compile.Compile(prog, compile.Options{File: file, Resolve: resolve, Readers: kernel.Readers, Regs: regs, Pid: uint32(o.Pid), CPid: uint32(s.CommandPid()), Params: params, Start: uint64(now.Nano()), Const: enumerator, Types: types(), Kaddr: kaddr})
	if err != nil {
		var pe *parse.Error
		if errors.As(err, &pe) {
			return usage.Errorf("%v", err)
		}
		return err
	}
	if len(skipped) > 0 && len(res.Attach) == 0 {
		return usage.Errorf("%v", skipped[0].err) // nothing left to trace
	}
	// One line a file: a tool may probe a dozen functions a library's
	// other versions have.
	var files []string
	missing := map[string][]string{}
	for _, m := range skipped {
		if missing[m.path] == nil {
			files = append(files, m.path)
		}
		if !slices.Contains(missing[m.path], m.name) {
			missing[m.path] = append(missing[m.path], m.name)
		}
	}
	for _, f := range files {
		fmt.Fprintf(s.Stderr, "bpftrace: %s has no %s: their probes skipped, as bpftrace skips them\n", f, strings.Join(missing[f], ", "))
	}
	if o.Listing {
		for _, name := range sortedPrograms(res) {
			fmt.Fprintf(s.Stderr, "%s:\n%v\n", name, res.Spec.Programs[name].Instructions)
		}
	}
	coll, err := s.Load(res.Spec)
	if err != nil {
		return err
	}
	p := &printer{w: out, stderr: s.Stderr, json: o.Format == "json", res: res, coll: coll, names: &kernelNames{coll: coll, indent: keyIndent}}
	s.OnClose("", p.names.close)
	rings, err := s.OpenOutputRings(coll.Maps[compile.EventsMap], "printf", perfevent.DefaultRingPages, perfevent.WakeBatch)
	if err != nil {
		return err
	}
	exited := false
	read := func() error {
		var ferr error
		rings.ReadInOrder(func(smp perfevent.Sample) {
			if ferr != nil || exited {
				return
			}
			p.ev.Lock()
			exit, err := p.record(smp.Raw)
			p.ev.Unlock()
			if err != nil {
				ferr = err
			}
			if exit {
				exited = true
				s.Stop(nil)
			}
		})
		return ferr
	}
	stop, err := rings.Drain(100*time.Millisecond, read, s.Stop)
	if err != nil {
		return err
	}
	// BEGIN runs before the probes attach: its constants are in their
	// maps before the first event reads them, and its own system calls
	// (a map update each) are no events of the probes (capable.bt's
	// cap_capable counted the 41 updates of its BEGIN as the tool's).
	// What it prints follows the "Attaching" line, as under bpftrace.
	var begun bytes.Buffer
	p.w = &begun
	u := &user{p: p, params: params}
	exit := false
	for _, body := range res.Begin {
		exit = u.run(body) || exit
	}
	p.w = out
	if u.err != nil {
		stop()
		return u.err
	}
	if err := attach(s, coll, res); err != nil {
		stop()
		return err
	}
	var hosted *stacks.Hosted
	n := len(res.Attach) + len(res.Begin) + len(res.End) + len(res.Intervals)
	if res.Ustack != nil {
		if hosted, err = startUstack(ctx, s, o, coll, p); err != nil {
			stop()
			return err
		}
		n += len(res.Ustack.Targets)
	}
	if !o.Quiet {
		if p.json {
			fmt.Fprintf(out, "{\"type\": \"attached_probes\", \"data\": {\"probes\": %d}}\n", n)
		} else {
			fmt.Fprintf(out, "Attaching %d probe%s...\n", n, map[bool]string{true: "", false: "s"}[n == 1])
		}
	}
	out.Write(begun.Bytes())
	if exit {
		s.Stop(nil)
	}
	for _, iv := range res.Intervals {
		s.Every("an interval probe", iv.Every, func() error {
			if u.run(iv.Body) {
				s.Stop(nil)
			}
			return u.err
		})
	}
	what := fmt.Sprintf("%d probes", len(res.Attach))
	return s.Loop(ctx, what, func(final bool) error {
		if !final {
			return nil
		}
		stop()
		if err := read(); err != nil { // what came before the detach
			return err
		}
		if hosted != nil {
			if err := hosted.Flush(); err != nil {
				return err
			}
		}
		if lost, _ := rings.LostEvents(); lost > 0 {
			fmt.Fprintf(s.Stderr, "Lost %d events\n", lost)
		}
		for _, body := range res.End {
			u.run(body)
		}
		if err := u.err; err != nil {
			return err
		}
		if n := lostUpdates(coll); n > 0 {
			fmt.Fprintf(s.Stderr, "bpftrace: %d map updates lost: a map was full (%d elements; a histogram's buckets %d)\n", n, compile.MapEntries, compile.HistEntries)
		}
		return p.maps()
	})
}

func sortedPrograms(res *compile.Result) []string {
	var names []string
	for _, a := range res.Attach {
		names = append(names, a.Program)
	}
	return names
}

// maps prints every map, as bpftrace does at its end: an empty one as an
// empty line (text) or not at all (json).
func (p *printer) maps() error {
	var maps []*output.Map
	for _, m := range p.res.Maps {
		om, err := p.readMap(m)
		if err != nil {
			return err
		}
		maps = append(maps, om)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	// Two empty lines before the maps, in either format, as bpftrace.
	if _, err := io.WriteString(p.w, "\n\n"); err != nil {
		return err
	}
	if p.json {
		return output.WriteMapsJSON(p.w, maps)
	}
	return output.WriteMaps(p.w, maps)
}

// lostUpdates sums the lost map's slot over the CPUs.
func lostUpdates(coll *ebpf.Collection) uint64 {
	var per []uint64
	if err := coll.Maps[compile.LostMap].Lookup(uint32(0), &per); err != nil {
		return 0
	}
	var n uint64
	for _, v := range per {
		n += v
	}
	return n
}
