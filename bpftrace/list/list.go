// Package list finds the probes an attach point names, as bpftrace -l
// lists them: "tracepoint:sched:sched_switch", "uprobe:/bin/bash:readline",
// "usdt:/usr/bin/python3.11:python:function__entry", sorted, each once;
// with -v a tracepoint's fields as its format file declares them.
package list

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tracekit/tracekit/bpftrace/parse"
	"github.com/tracekit/tracekit/tracefs"
	"github.com/tracekit/tracekit/uprobe"
)

// Probe is one probe found: its name as bpftrace writes it, and, for a
// tracepoint, its fields' declarations ("char comm[16]", "pid_t pid").
type Probe struct {
	Name   string
	Fields []string
}

// Match lists the probes ap names (its parts may hold globs: '*' and
// '?'). fields asks for a tracepoint's fields.
func Match(ap *parse.AttachPoint, fields bool) ([]Probe, error) {
	p := ap.Parts
	var names []string
	switch ap.Provider {
	case "tracepoint":
		if len(p) != 2 {
			return nil, fmt.Errorf("%s: tracepoints are listed as tracepoint:GROUP:EVENT (globs taken)", ap.Raw)
		}
		tps, err := availableEvents(p[0], p[1])
		if err != nil {
			return nil, err
		}
		for _, tp := range tps {
			names = append(names, "tracepoint:"+tp)
		}
	case "kprobe", "kretprobe":
		if len(p) != 1 {
			return nil, fmt.Errorf("%s: kernel functions are listed as %s:FUNCTION (globs taken)", ap.Raw, ap.Provider)
		}
		fns, err := tracefs.Functions(p[0])
		if err != nil {
			return nil, err
		}
		for _, fn := range fns {
			names = append(names, ap.Provider+":"+fn)
		}
	case "uprobe", "uretprobe":
		if len(p) != 2 {
			return nil, fmt.Errorf("%s: a file's functions are listed as %s:PATH:FUNCTION (globs taken)", ap.Raw, ap.Provider)
		}
		f, err := uprobe.Open(p[0])
		if err != nil {
			return nil, err
		}
		defer f.Close()
		syms, err := f.Glob(p[1])
		if err != nil {
			return nil, err
		}
		for _, s := range syms {
			names = append(names, ap.Provider+":"+p[0]+":"+s.Name)
		}
	case "usdt":
		if len(p) < 2 || len(p) > 3 {
			return nil, fmt.Errorf("%s: a file's USDT probes are listed as usdt:PATH:PROBE or usdt:PATH:PROVIDER:PROBE (globs taken)", ap.Raw)
		}
		provider, name := USDTGlobs(p)
		f, err := uprobe.Open(p[0])
		if err != nil {
			return nil, err
		}
		defer f.Close()
		probes, err := f.USDT()
		if err != nil {
			return nil, err
		}
		for _, u := range probes {
			if MatchUSDT(u, provider, name) {
				names = append(names, "usdt:"+p[0]+":"+u.Provider+":"+u.Name)
			}
		}
	default:
		return nil, fmt.Errorf("%s: %s probes are not listed (tracepoint, kprobe, uprobe and usdt are)", ap.Raw, ap.Provider)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	out := make([]Probe, len(names))
	for i, n := range names {
		out[i].Name = n
		if fields && ap.Provider == "tracepoint" {
			group, event, _ := strings.Cut(strings.TrimPrefix(n, "tracepoint:"), ":")
			fs, err := formatFields(group, event)
			if err != nil {
				return nil, err
			}
			out[i].Fields = fs
		}
	}
	return out, nil
}

// USDTGlobs are the provider's and the probe's globs of a usdt attach
// point's parts (PATH:PROBE takes any provider, PATH:PROVIDER:PROBE).
func USDTGlobs(parts []string) (provider, name string) {
	if len(parts) == 3 {
		return parts[1], parts[2]
	}
	return "*", parts[len(parts)-1]
}

// MatchUSDT says whether the globs name probe p (a bad glob names none).
func MatchUSDT(p uprobe.Probe, provider, name string) bool {
	okP, _ := filepath.Match(provider, p.Provider)
	okN, _ := filepath.Match(name, p.Name)
	return okP && okN
}

// maxEvents bounds the kernel's list of events read (7.2 has about 2,500).
const maxEvents = 100000

// availableEvents are the events of tracefs's available_events, the
// kernel's list of the tracepoints one can enable, whose group and name
// the globs match: as bpftrace lists them (ftrace's own events, which
// have format files but are no tracepoints, are not in it).
func availableEvents(groupGlob, nameGlob string) ([]string, error) {
	for _, g := range []string{groupGlob, nameGlob} {
		if err := tracefs.ValidateEventGlob(g); err != nil {
			return nil, err
		}
	}
	root, err := tracefs.Root()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(root, "available_events"))
	if err != nil {
		return nil, fmt.Errorf("list the kernel's tracepoints: %w", err)
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for n := 0; sc.Scan(); n++ {
		if n >= maxEvents {
			return nil, fmt.Errorf("list the kernel's tracepoints: more than %d events", maxEvents)
		}
		group, name, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		okG, _ := filepath.Match(groupGlob, group)
		okN, _ := filepath.Match(nameGlob, name)
		if okG && okN {
			out = append(out, group+":"+name)
		}
	}
	return out, sc.Err()
}

// formatFields are the declarations of an event's own fields (those after
// the common ones, which end at the format's first empty line), as its
// format file writes them.
func formatFields(group, event string) ([]string, error) {
	dir, err := tracefs.EventDir(group, event)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(dir, "format"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	var fields []string
	common := true
	for sc.Scan() {
		line := sc.Text()
		if common {
			common = line != ""
			continue
		}
		if decl, ok := strings.CutPrefix(line, "\tfield:"); ok {
			decl, _, _ = strings.Cut(decl, ";")
			fields = append(fields, decl)
		}
	}
	return fields, sc.Err()
}
