package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
)

// profileRun is one sampling run: the tracer's whole CPU time (its process
// and children, from start to exit, the report included), and its BPF
// programs' run time and runs.
type profileRun struct {
	cpu, bpf time.Duration
	runs     uint64
}

// profileSuite compares the sampling profilers on a busy no-frame-pointer
// fixture (the profile tests' chain-nopie, one per CPU, main -> a -> b ->
// c spinning) at 99 Hz, in interleaved rounds.
var profileSecs = flag.Int("profile-secs", 10, "seconds the profile suite's fixtures spin in each run")

func profileSuite() error {
	fx, _ := filepath.Abs(filepath.Join(*fxDir, "chain-nopie"))
	if _, err := os.Stat(fx); err != nil {
		fmt.Fprintf(os.Stderr, "bench: no profile fixture (%v): the profile suite is left out\n", err)
		return nil
	}
	secs := *profileSecs
	type sampler struct {
		name string
		cmd  []string
		post []string // run after the sampler ends (perf script)
	}
	var samplers []sampler
	if p, err := exec.LookPath("bpftrace"); err == nil {
		samplers = append(samplers, sampler{name: "bpftrace @[ustack, kstack] = count()", cmd: []string{p, "-e", "profile:hz:99 { @[ustack, kstack] = count(); }"}})
	}
	samplers = append(samplers,
		sampler{name: "profile --unwind=fp", cmd: []string{*bin + "/profile", "-F", "99", "--unwind=fp"}},
		sampler{name: "profile --unwind=eh", cmd: []string{*bin + "/profile", "-F", "99", "--unwind=eh"}},
	)
	// The fixture's thread-locals as labels: integers and char arrays in
	// turn (tk_bench_n0, tk_bench_s0, tk_bench_n1, ...).
	for _, n := range benchLabels {
		cmd := []string{*bin + "/profile", "-F", "99", "--unwind=eh"}
		for i := 0; i < n; i++ {
			if i%2 == 0 {
				cmd = append(cmd, "--label", fmt.Sprintf("n%d=tls:tk_bench_n%d:int", i/2, i/2))
			} else {
				cmd = append(cmd, "--label", fmt.Sprintf("s%d=tls:tk_bench_s%d:chars", i/2, i/2))
			}
		}
		samplers = append(samplers, sampler{name: fmt.Sprintf("profile --unwind=eh, %d --label", n), cmd: cmd})
	}
	data := filepath.Join(os.TempDir(), "bench-perf.data")
	defer os.Remove(data)
	if p, err := exec.LookPath("perf"); err == nil {
		samplers = append(samplers, sampler{name: "perf record --call-graph dwarf + perf script",
			cmd:  []string{p, "record", "-q", "-F", "99", "--call-graph", "dwarf", "-a", "-o", data},
			post: []string{p, "script", "-i", data}})
	} else {
		fmt.Fprintln(os.Stderr, "bench: perf (linux-perf) not found: its row is left out")
	}
	rounds := max(*rounds/3, 5)
	res := make([][]profileRun, len(samplers))
	for r := 0; r < rounds; r++ {
		for i := range samplers {
			k := (i + r) % len(samplers)
			s := samplers[k]
			run, err := sample(s.cmd, s.post, fx, secs)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			res[k] = append(res[k], run)
		}
	}
	fmt.Printf("\nSampling at 99 Hz while %s spins on every CPU for %d s (gcc -O2 -fomit-frame-pointer main -> a -> b -> c), %d interleaved rounds, medians\n\n", filepath.Base(fx), secs, rounds)
	fmt.Println("| sampler | BPF ns per sample | whole CPU ms per run | whole CPU vs perf |")
	fmt.Println("| --- | ---: | ---: | ---: |")
	perfCPU := 0.0
	if last := len(samplers) - 1; strings.HasPrefix(samplers[last].name, "perf") {
		perfCPU = medianOf(res[last], func(p profileRun) float64 { return float64(p.cpu+p.bpf) / 1e6 })
	}
	perSampleNs := map[string]float64{}
	for k, s := range samplers {
		perSample := medianOf(res[k], func(p profileRun) float64 {
			if p.runs == 0 {
				return 0
			}
			return float64(p.bpf) / float64(p.runs)
		})
		perSampleNs[s.name] = perSample
		whole := medianOf(res[k], func(p profileRun) float64 { return float64(p.cpu+p.bpf) / 1e6 })
		ratio := "-"
		if perfCPU > 0 {
			ratio = fmt.Sprintf("%.3fx", whole/perfCPU)
		}
		ns := "-"
		if perSample > 0 {
			ns = fmt.Sprintf("%.0f", perSample)
		}
		fmt.Printf("| %s | %s | %.1f | %s |\n", s.name, ns, whole, ratio)
	}
	labelCost(perSampleNs)
	return tablesCost()
}

// benchLabels are the label counts the profile suite samples with.
var benchLabels = []int{1, 4, 8}

// labelCost prints what the labels add to a sample, from the suite's
// medians (ns: BPF ns per sample by sampler name): 0 labels is
// --unwind=eh alone.
func labelCost(ns map[string]float64) {
	none := ns["profile --unwind=eh"]
	if none == 0 {
		return
	}
	fmt.Println()
	fmt.Println("| labels (thread-locals, --unwind=eh) | BPF ns per sample | ns per label | vs none |")
	fmt.Println("| ---: | ---: | ---: | ---: |")
	fmt.Printf("| 0 | %.0f | - | 1.00x |\n", none)
	for _, n := range benchLabels {
		with := ns[fmt.Sprintf("profile --unwind=eh, %d --label", n)]
		if with == 0 {
			continue
		}
		fmt.Printf("| %d | %.0f | %.0f | %.2fx |\n", n, with, (with-none)/float64(n), with/none)
	}
}

func medianOf(runs []profileRun, f func(profileRun) float64) float64 {
	var xs []float64
	for _, r := range runs {
		xs = append(xs, f(r))
	}
	return median(xs)
}

// sample starts a sampler, waits until it samples, runs one fixture per
// CPU for secs, stops the sampler with SIGINT and waits for its report
// (and runs post, if any).
func sample(cmdline, post []string, fx string, secs int) (profileRun, error) {
	before := programIDs()
	cmd := exec.Command(cmdline[0], cmdline[1:]...)
	cmd.Stdout = io.Discard
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return profileRun{}, err
	}
	if strings.Contains(cmdline[0], "bpftrace") {
		// bpftrace says "Attaching" on stdout.
		cmd.Stdout = nil
		out, err := cmd.StdoutPipe()
		if err != nil {
			return profileRun{}, err
		}
		stderr = io.NopCloser(io.MultiReader(out, stderr))
	}
	if err := cmd.Start(); err != nil {
		return profileRun{}, err
	}
	ready := make(chan struct{}, 1)
	go func() {
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			if strings.HasPrefix(s.Text(), "Tracing") || strings.HasPrefix(s.Text(), "Attaching") {
				ready <- struct{}{}
			}
		}
	}()
	if strings.Contains(cmdline[0], "perf") {
		time.Sleep(time.Second) // perf record -q says nothing
	} else {
		select {
		case <-ready:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			cmd.Wait()
			return profileRun{}, fmt.Errorf("%s did not start", cmdline[0])
		}
		time.Sleep(time.Second)
	}
	var fixtures []*exec.Cmd
	for i := 0; i < 2; i++ {
		f := exec.Command(fx, fmt.Sprint(secs))
		if err := f.Start(); err != nil {
			return profileRun{}, err
		}
		fixtures = append(fixtures, f)
	}
	for _, f := range fixtures {
		f.Wait()
	}
	var run profileRun
	for id := range programIDs() {
		if before[id] {
			continue
		}
		if p, err := ebpf.NewProgramFromID(id); err == nil {
			if st, err := p.Stats(); err == nil {
				run.bpf += st.Runtime
				run.runs = max(run.runs, st.RunCount)
			}
			p.Close()
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	cmd.Wait()
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	run.cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if post != nil {
		p := exec.Command(post[0], post[1:]...)
		p.Stdout, p.Stderr = io.Discard, io.Discard
		if err := p.Run(); err != nil {
			return profileRun{}, fmt.Errorf("%s: %w", post[0], err)
		}
		ru := p.ProcessState.SysUsage().(*syscall.Rusage)
		run.cpu += time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	return run, nil
}

var tablesLine = regexp.MustCompile(`unwind tables: (\d+) files, (\d+) rows \(([\d.]+) of \d+ MiB\), read in (\d+) ms`)

// tablesCost reports the unwind tables of python3.11 (with libc and the
// loader) as profile loads them: rows, map memory, time to read.
func tablesCost() error {
	py := "/usr/bin/python3.11"
	if _, err := os.Stat(py); err != nil {
		return nil
	}
	var ms []float64
	var last []string
	for i := 0; i < 5; i++ {
		out, err := exec.Command(*bin+"/profile", "-c", py+" -c 'i = 0\nwhile i < 3000000: i += 1'").CombinedOutput()
		if err != nil {
			return fmt.Errorf("profile python3.11: %v\n%s", err, out)
		}
		m := tablesLine.FindStringSubmatch(string(out))
		if m == nil {
			return fmt.Errorf("profile python3.11: no tables line\n%s", out)
		}
		var t float64
		fmt.Sscan(m[4], &t)
		ms, last = append(ms, t), m
	}
	fmt.Printf("\nprofile's unwind tables for python3.11 (its files: the interpreter, libc, the loader, [vdso]): %s files, %s rows, %s MiB of map memory, read in %.0f ms (median of 5)\n", last[1], last[2], last[3], median(ms))
	return nil
}
