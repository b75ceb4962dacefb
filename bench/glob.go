package main

import (
	"fmt"
	"os/exec"
	"regexp"
	"sort"
	"time"
)

// globSuite times a glob of hundreds of kernel functions, kprobe:*sys_*:
// how long filter takes to attach them (its own figure), and its whole run
// around a command that does nothing (load, attach, detach, exit).
func globSuite() error {
	const glob = "kprobe:*sys_*"
	re := regexp.MustCompile(`(\d+) functions attached in (\S+) \((.*)\)`)
	var attach, whole []time.Duration
	var funcs, how string
	for r := 0; r < min(*rounds, 5); r++ {
		start := time.Now()
		out, err := exec.Command(*bin+"/filter", "--count", glob, "-c", "true").CombinedOutput()
		total := time.Since(start)
		m := re.FindStringSubmatch(string(out))
		if err != nil || m == nil {
			return fmt.Errorf("filter --count %s: %v: %s", glob, err, out)
		}
		d, err := time.ParseDuration(m[2])
		if err != nil {
			return fmt.Errorf("filter's attach time %q: %v", m[2], err)
		}
		attach, whole, funcs, how = append(attach, d), append(whole, total), m[1], m[3]
	}
	mid := func(ds []time.Duration) time.Duration {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		return ds[len(ds)/2]
	}
	fmt.Printf("\n%s: %s functions, %s, medians of %d runs\n\n", glob, funcs, how, len(attach))
	fmt.Println("| attached in | the whole run (load, attach, detach, exit) |")
	fmt.Println("| ---: | ---: |")
	fmt.Printf("| %v | %v |\n", mid(attach).Round(time.Millisecond), mid(whole).Round(time.Millisecond))
	return nil
}
