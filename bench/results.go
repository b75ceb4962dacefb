package main

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

var resultsPath = flag.String("results", "", "write every measurement, one line each, in Go's benchmark format to this file too (benchstat reads it: benchstat FILE, or benchstat OLD NEW)")

// metric is one value of a measurement, in its unit ("cpu-ns/write").
type metric struct {
	v    float64
	unit string
}

// results are the measurements so far, in Go's benchmark format.
var results []string

// result records one measurement of a suite's config (one run of one
// round: benchstat takes the rounds as its samples) over n operations.
func result(suite, config string, n int, ms ...metric) {
	var b strings.Builder
	fmt.Fprintf(&b, "Benchmark%s/%s %d", benchName(suite), benchName(config), max(n, 1))
	for _, m := range ms {
		fmt.Fprintf(&b, " %.6g %s", m.v, m.unit)
	}
	results = append(results, b.String())
}

// benchName makes s one field of a benchmark line: no white space, and no
// slash, which would start a sub-benchmark's name.
func benchName(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r == '/':
			return '|'
		case r == ' ' || r == '\t':
			return '_'
		}
		return r
	}, s)
}

// writeResults writes the measurements to -results, after the lines that
// say where they were taken (benchstat's configuration keys).
func writeResults() error {
	if *resultsPath == "" {
		return nil
	}
	f, err := os.Create(*resultsPath)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	var u unix.Utsname
	unix.Uname(&u)
	fmt.Fprintf(w, "goos: %s\ngoarch: %s\n", runtime.GOOS, runtime.GOARCH)
	if cpu := cpuModel(); cpu != "" {
		fmt.Fprintf(w, "cpu: %s\n", cpu)
	}
	fmt.Fprintf(w, "kernel: %s\ncpus: %d\nrounds: %d\ndate: %s\n", unix.ByteSliceToString(u.Release[:]), runtime.NumCPU(), *rounds, time.Now().UTC().Format(time.DateOnly))
	for _, l := range results {
		fmt.Fprintln(w, l)
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// cpuModel is /proc/cpuinfo's first "model name" ("" where it has none).
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
