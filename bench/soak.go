package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
)

var soakSecs = flag.Int("soak-secs", 180, "seconds the soak suite samples the machine while processes come and go")

// soakMaps are the maps of profile's whose entries the soak suite counts.
var soakMaps = []string{"profile_short", "profile_short1", "profile_counts", "profile_counts1", "profile_seen", "profile_maps"}

// soakSuite runs profile system-wide at 499 Hz with a report every second
// for soakSecs, while two loops start short processes (deep 3 for 20 ms,
// each a new pid) and two chain-nopie spin: it prints, every tenth of
// the run, profile's resident memory and the entries of its counts, seen
// and mappings maps, which must level off however many processes came
// and went.
func soakSuite() error {
	deep, _ := filepath.Abs(filepath.Join(*fxDir, "deep"))
	chain, _ := filepath.Abs(filepath.Join(*fxDir, "chain-nopie"))
	if !fileExists(deep) || !fileExists(chain) {
		fmt.Fprintf(os.Stderr, "bench: no deep or chain-nopie fixture in %s: the soak suite is left out\n", *fxDir)
		return nil
	}
	secs := *soakSecs
	cmd, err := startTracing([]string{*bin + "/profile", "-F", "499", "1"})
	if err != nil {
		return err
	}
	defer func() {
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
	}()
	end := time.Now().Add(time.Duration(secs) * time.Second)
	var spawned atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 2; i++ {
		wg.Add(2)
		go func() {
			defer wg.Done()
			exec.Command(chain, fmt.Sprint(secs), "user", "now").Run()
		}()
		go func() {
			defer wg.Done()
			for time.Now().Before(end) {
				if exec.Command(deep, "3", "0.02").Run() == nil {
					spawned.Add(1)
				}
			}
		}()
	}
	fmt.Printf("\nprofile -F 499 1, system-wide for %d s, while processes of 20 ms come and go (two loops) and two spin\n\n", secs)
	fmt.Println("| s | processes started | profile RSS MiB | " + strings.Join(soakMaps, " | ") + " |")
	fmt.Println("| ---: | ---: | ---: |" + strings.Repeat(" ---: |", len(soakMaps)))
	step := time.Duration(secs) * time.Second / 10
	start := time.Now()
	for t := step; t <= time.Duration(secs)*time.Second; t += step {
		time.Sleep(time.Until(start.Add(t)))
		line := fmt.Sprintf("| %.0f | %d | %.1f |", t.Seconds(), spawned.Load(), float64(rssKiB(cmd.Process.Pid))/1024)
		counts := mapEntries()
		for _, m := range soakMaps {
			line += fmt.Sprintf(" %d |", counts[m])
		}
		fmt.Println(line)
	}
	wg.Wait()
	return nil
}

// rssKiB is a process's VmRSS.
func rssKiB(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var n int64
			fmt.Sscan(rest, &n)
			return n
		}
	}
	return 0
}

// mapEntries counts the entries of the maps named in soakMaps.
func mapEntries() map[string]int {
	out := map[string]int{}
	for id := ebpf.MapID(0); ; {
		next, err := ebpf.MapGetNextID(id)
		if err != nil {
			return out
		}
		id = next
		m, err := ebpf.NewMapFromID(id)
		if err != nil {
			continue
		}
		info, err := m.Info()
		if err == nil && slices.Contains(soakMaps, info.Name) {
			k := make([]byte, m.KeySize())
			n := 0
			for it := m.Iterate(); it.Next(&k, new([]byte)); {
				n++
			}
			out[info.Name] += n
		}
		m.Close()
	}
}
