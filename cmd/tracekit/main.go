// Command tracekit is every tool of the toolkit in one static binary, so a
// host without a toolchain needs one file. It runs the tool its name says
// when started through a link named after it (writesize -> tracekit), or
// the tool named by its first argument (tracekit writesize 1 5).
package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/tracekit/tracekit/bpftrace"
	"github.com/tracekit/tracekit/dropmon"
	"github.com/tracekit/tracekit/filter"
	"github.com/tracekit/tracekit/iolat"
	"github.com/tracekit/tracekit/profile"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/writesize"
)

type tool struct {
	name string
	tool func() run.Tool
}

var all = []tool{
	{"writesize", writesize.Tool},
	{"dropmon", dropmon.Tool},
	{"iolat", iolat.Tool},
	{"filter", filter.Tool},
	{"profile", profile.Tool},
	{"bpftrace", bpftrace.Tool},
}

func find(name string) *tool {
	for i := range all {
		if all[i].name == name {
			return &all[i]
		}
	}
	return nil
}

func main() {
	run.Guard() // a -c command's guard is this binary, started again
	os.Exit(dispatch(os.Args, os.Stdout, os.Stderr))
}

func dispatch(argv []string, stdout, stderr io.Writer) int {
	if len(argv) > 0 {
		if t := find(filepath.Base(argv[0])); t != nil {
			return run.Main(t.tool(), argv[1:])
		}
	}
	if len(argv) < 2 {
		usage(stderr)
		return 2
	}
	switch arg := argv[1]; arg {
	case "-h", "--help", "help":
		usage(stdout)
		return 0
	case "--version", "version":
		fmt.Fprintln(stdout, run.VersionLine("tracekit"))
		return 0
	default:
		if t := find(arg); t != nil {
			return run.Main(t.tool(), argv[2:])
		}
		fmt.Fprintf(stderr, "tracekit: no tool named %q\nTry 'tracekit --help' for the list.\n", arg)
		return 2
	}
}

func usage(w io.Writer) {
	var b strings.Builder
	b.WriteString(`Usage: tracekit TOOL [OPTIONS] [ARGS]
       TOOL [OPTIONS] [ARGS]      (through a link named after the tool)

Every tool of the toolkit in one static binary: copy this one file to a
host and run 'tracekit TOOL --help' for a tool's options.

Tools:
`)
	var names []string
	for _, t := range all {
		fmt.Fprintf(&b, "  %-10s %s\n", t.name, t.tool().Summary)
		names = append(names, t.name)
	}
	fmt.Fprintf(&b, `
Links named after the tools run them without the TOOL argument:
  for t in %s; do ln -s tracekit $t; done

  tracekit --version    the toolkit's version, commit and Go version
`, strings.Join(names, " "))
	fmt.Fprint(w, b.String())
}
