package filter

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/filter/compile"
	"github.com/tracekit/tracekit/internal/lazy"
	"github.com/tracekit/tracekit/internal/usage"
	"github.com/tracekit/tracekit/kernel"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/terminal"
	"github.com/tracekit/tracekit/tracefs"
	"github.com/tracekit/tracekit/uprobe"
)

var (
	// fileName is a bare file name looked up on $PATH and in the library
	// directories; a path must be absolute (tracefs.ValidatePath).
	fileName = lazy.Regexp(`^[A-Za-z0-9._+-]+$`)
	// userSymbol is a uprobe target: a function with an optional +offset,
	// or a virtual address.
	userSymbol = lazy.Regexp(`^([A-Za-z_][A-Za-z0-9_.$@]*(\+(0x[0-9a-fA-F]+|[0-9]+))?|0x[0-9a-fA-F]+)$`)
	usdtName   = lazy.Regexp(`^[A-Za-z0-9_]+$`)
)

// parseUserEvent parses uprobe:PATH:SYMBOL[+OFF], uprobe:PATH:0xADDR,
// uretprobe:PATH:SYMBOL and usdt:PATH:[PROVIDER:]NAME; with info, the
// target may be left out (usdt:PATH lists the probes, uprobe:PATH[:GLOB]
// the functions).
func parseUserEvent(kind, rest string, info bool) (event, error) {
	ev := event{kind: kind}
	path, target, _ := strings.Cut(rest, ":")
	if err := checkFileArg(path); err != nil {
		return ev, err
	}
	ev.path = path
	switch {
	case target == "" && info:
		return ev, nil
	case target == "":
		if kind == "usdt" {
			return ev, fmt.Errorf("invalid event %q: want usdt:PATH:[PROVIDER:]NAME", kind+":"+rest)
		}
		return ev, fmt.Errorf("invalid event %q: want %s:PATH:FUNCTION[+OFFSET] or %s:PATH:0xADDRESS", kind+":"+rest, kind, kind)
	case kind == "usdt":
		prov, name, ok := strings.Cut(target, ":")
		if !ok {
			prov, name = "", target
		}
		if (prov != "" && !usdtName().MatchString(prov)) || !usdtName().MatchString(name) {
			return ev, fmt.Errorf("invalid USDT probe %q: want [PROVIDER:]NAME, letters, digits and _", target)
		}
		ev.provider, ev.probeName = prov, name
	case info:
		ev.symbol = target // a glob
	default:
		if strings.ContainsAny(target, "*?[") {
			return ev, fmt.Errorf("%s:%s: a %s probes one function, not a glob: filter --info '%s:%s' lists the functions %q matches", kind, rest, kind, kind, rest, target)
		}
		if !userSymbol().MatchString(target) {
			return ev, fmt.Errorf("invalid function %q: want a symbol with an optional +offset, or a 0x address", target)
		}
		if kind == "uretprobe" && strings.Contains(target, "+") {
			return ev, fmt.Errorf("%s: a uretprobe goes on a function's entry, not at an offset", target)
		}
		ev.symbol = target
	}
	return ev, nil
}

func checkFileArg(path string) error {
	if strings.HasPrefix(path, "/") {
		return tracefs.ValidatePath(path)
	}
	if !fileName().MatchString(path) {
		return fmt.Errorf("invalid file %q: an absolute path, or a bare name to look up on $PATH and in the library directories", path)
	}
	return nil
}

// resolveFile finds the file a probe names, as the kernel will see it
// (uprobe.Locate), in pid's root when pid is not 0.
func resolveFile(name string, pid int) (string, error) {
	if pid == 0 {
		return uprobe.Locate(name, "")
	}
	root := fmt.Sprintf("/proc/%d/root", pid)
	if _, err := os.Stat(root + "/"); err != nil {
		return "", procfs.Denied(pid, err)
	}
	return uprobe.Locate(name, root)
}

// site is one place a user-space probe goes, and what the program there
// compiles against.
type site struct {
	probe tracefs.Probe
	usdt  []uprobe.Arg // nil for a uprobe
	addr  uint64
}

// userSites opens the event's file and finds its sites.
func userSites(ev *event, pid int) ([]site, error) {
	path, err := resolveFile(ev.path, pid)
	if err != nil {
		return nil, err
	}
	ev.path = path
	f, err := uprobe.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if ev.kind == "usdt" {
		p, err := f.FindUSDT(ev.provider, ev.probeName)
		if err != nil {
			return nil, err
		}
		ev.provider = p.Provider
		var sites []site
		for _, s := range p.Sites {
			if err := f.Probeable(s.Addr); err != nil { // USDT listed its offset
				return nil, fmt.Errorf("%s:%s: %w", p.Provider, p.Name, err)
			}
			sites = append(sites, site{
				probe: tracefs.Probe{Type: tracefs.Uprobe, Path: path, Offset: s.Offset, RefCtrOffset: p.Semaphore},
				usdt:  append([]uprobe.Arg{}, s.Args...), addr: s.Addr,
			})
		}
		return sites, nil
	}
	var addr uint64
	if strings.HasPrefix(ev.symbol, "0x") {
		if addr, err = strconv.ParseUint(ev.symbol[2:], 16, 64); err != nil {
			return nil, fmt.Errorf("bad address %s", ev.symbol)
		}
	} else {
		name, off := tracefs.SplitSymbol(ev.symbol)
		sym, err := f.Function(name)
		if err != nil {
			return nil, err
		}
		if off != 0 && sym.Size != 0 && off >= sym.Size {
			return nil, fmt.Errorf("%s: offset %d is past the function's %d bytes", ev.symbol, off, sym.Size)
		}
		addr = sym.Value + off
	}
	off, err := f.CodeOffset(addr)
	if err != nil {
		return nil, err
	}
	return []site{{probe: tracefs.Probe{Type: tracefs.Uprobe, Path: path, Offset: off, Ret: ev.kind == "uretprobe"}, addr: addr}}, nil
}

// userProbe is what a user-space probe needs before its programs are
// compiled: the kernel's uprobes, the registers' layout, and the sites
// (ev's path resolved, in pid's root when not 0).
func userProbe(ev *event, pid int) (*asm.Regs, []site, error) {
	if !tracefs.Uprobe.Available() {
		return nil, nil, fmt.Errorf("%s: %w", ev, tracefs.ErrNoUprobes)
	}
	regs, err := asm.HostPtRegs()
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", ev, err)
	}
	sites, err := userSites(ev, pid)
	if err != nil {
		return nil, nil, userErr(err)
	}
	return regs, sites, nil
}

// userErr is how a failure to find a uprobe's or USDT probe's sites ends
// the run, in a trace as in --info: a name that matches nothing (no such
// file, function or probe) is the command line's mistake (exit 2), as an
// unknown tracepoint is; a file that cannot be read, or is no valid ELF
// file, is the file's (exit 1).
func userErr(err error) error {
	if uprobe.Misnamed(err) {
		return usage.Errorf("%v", err)
	}
	return err
}

// userTarget is what a site's program compiles against: USDT arguments
// from their specs, a uprobe's from the calling convention's registers
// (arg0..arg5, unsigned 64-bit: no BTF describes user space), a
// uretprobe's ret (signed 64-bit).
func userTarget(ev event, s site, regs *asm.Regs) compile.Target {
	t := compile.Target{Read: kernel.Readers()}
	switch {
	case ev.kind == "usdt":
		args := s.usdt
		if args == nil {
			args = []uprobe.Arg{} // no arguments, still a USDT probe
		}
		t.Event = &compile.USDT{Args: args, Site: s.addr, Regs: regs}
	case ev.kind == "uretprobe":
		t.Event = &compile.Registers{Args: compile.UretprobeArgs(regs), UserSpace: true, Width: regs.Width}
	default:
		t.Event = &compile.Registers{Args: compile.UprobeArgs(regs), UserSpace: true, Width: regs.Width}
	}
	return t
}

// userInfo lists a file's USDT probes, or its functions.
func userInfo(s *run.Session, ev event, pid int) error {
	if ev.path == "" {
		return mappedInfo(s, pid)
	}
	path, err := resolveFile(ev.path, pid)
	if err != nil {
		return err
	}
	f, err := uprobe.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if ev.kind != "usdt" {
		syms, err := f.Glob(ev.symbol)
		if err != nil {
			return err
		}
		if len(syms) == 0 {
			return fmt.Errorf("%s: no function matches %q", path, ev.symbol)
		}
		for _, sym := range syms {
			fmt.Fprintf(s.Stdout, "%s:%s\n", terminal.Printable(path), terminal.Printable(sym.Name))
		}
		return nil
	}
	probes, err := f.USDT()
	if err != nil {
		return err
	}
	if len(probes) == 0 {
		return errors.New(path + " has no USDT probes (no .note.stapsdt section)")
	}
	for _, p := range probes {
		if ev.probeName != "" && (p.Name != ev.probeName || ev.provider != "" && p.Provider != ev.provider) {
			continue
		}
		sem := "none"
		if p.Semaphore != 0 {
			sem = fmt.Sprintf("0x%x", p.Semaphore)
		}
		plural := "s"
		if len(p.Sites) == 1 {
			plural = ""
		}
		fmt.Fprintf(s.Stdout, "usdt:%s:%s  %d site%s, semaphore %s\n", terminal.Printable(path), terminal.Printable(p.String()), len(p.Sites), plural, sem)
		for _, st := range p.Sites {
			var args []string
			for i, a := range st.Args {
				args = append(args, fmt.Sprintf("arg%d %s (%s)", i, a.Type(), terminal.Printable(a.Text)))
			}
			if len(args) == 0 {
				args = []string{"no arguments"}
			}
			fmt.Fprintf(s.Stdout, "    0x%x: %s\n", st.Offset, strings.Join(args, ", "))
		}
	}
	return nil
}

// mappedInfo lists the USDT probes of every file process pid maps, as
// /proc/PID/maps names them, read through the process's root.
func mappedInfo(s *run.Session, pid int) error {
	maps, err := procfs.ReadMaps(pid)
	var denied *procfs.DeniedError
	if errors.As(err, &denied) {
		return err
	} else if err != nil {
		return fmt.Errorf("read the mappings of pid %d: %w", pid, err)
	}
	seen := map[string]bool{}
	found := 0
	for _, m := range maps {
		if !strings.HasPrefix(m.Path, "/") || seen[m.Path] {
			continue
		}
		seen[m.Path] = true
		path := fmt.Sprintf("/proc/%d/root%s", pid, m.Path)
		f, err := uprobe.Open(path)
		if errors.Is(err, fs.ErrPermission) {
			return procfs.Denied(pid, err) // its root: the ptrace check
		}
		if err != nil {
			continue // deleted, not ELF, gone: nothing to list
		}
		probes, err := f.USDT()
		f.Close()
		if err != nil || len(probes) == 0 {
			continue
		}
		found += len(probes)
		for _, p := range probes {
			fmt.Fprintf(s.Stdout, "usdt:%s:%s  %d site(s), semaphore %s\n", terminal.Printable(m.Path), terminal.Printable(p.String()), len(p.Sites), semName(p.Semaphore))
		}
	}
	if found == 0 {
		return fmt.Errorf("pid %d maps no file with USDT probes", pid)
	}
	return nil
}

func semName(off uint64) string {
	if off == 0 {
		return "none"
	}
	return fmt.Sprintf("0x%x", off)
}
