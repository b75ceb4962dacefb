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
	"slices"
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

// baseline adds another build's profile to the fleet and depth suites, in the same
// interleaved rounds: a change's cost measured side by side, not against
// a table from another day.
var baseline = flag.String("baseline", "", "directory of another build's tools (e.g. a worktree's bin): the fleet and depth suites run its profile beside this one's")

// sampler is a sampling profiler's command line.
type sampler struct {
	name string
	cmd  []string
	post []string // run after the sampler ends (perf script)
}

func profileSuite() error {
	fx, _ := filepath.Abs(filepath.Join(*fxDir, "chain-nopie"))
	if _, err := os.Stat(fx); err != nil {
		fmt.Fprintf(os.Stderr, "bench: no profile fixture (%v): the profile suite is left out\n", err)
		return nil
	}
	secs := *profileSecs
	samplers := append(bpftraceSamplers(),
		sampler{name: "profile --unwind=fp", cmd: []string{*bin + "/profile", "-F", "99", "--unwind=fp"}},
		sampler{name: "profile --unwind=eh", cmd: []string{*bin + "/profile", "-F", "99", "--unwind=eh"}},
	)
	samplers = append(samplers, perfSampler()...)
	defer os.Remove(perfData)
	rounds := max(*rounds/3, 5)
	run := func(fixture []string) ([][]profileRun, error) { return interleave(samplers, rounds, fixture, 2) }
	res, err := run([]string{fx, fmt.Sprint(secs)})
	if err != nil {
		return err
	}
	fmt.Printf("\nSampling at 99 Hz while %s spins on every CPU for %d s (gcc -O2 -fomit-frame-pointer main -> a -> b -> c), %d interleaved rounds, medians\n\n", filepath.Base(fx), secs, rounds)
	perSampleNs := samplingTable("Sample", samplers, res)
	// Signal-heavy: the time in a SIGALRM handler, whose stacks run
	// through the kernel's signal frame (stacks/testdata/signal.c).
	if sig, _ := filepath.Abs(filepath.Join(*fxDir, "signal")); fileExists(sig) {
		res, err := run([]string{sig, "alrm", fmt.Sprint(secs)})
		if err != nil {
			return err
		}
		fmt.Printf("\nSampling at 99 Hz while signal alrm spins in a SIGALRM handler on every CPU for %d s (hc <- hb <- on_signal <- __restore_rt <- b <- a <- main, no frame pointers), %d interleaved rounds, medians\n\n", secs, rounds)
		samplingTable("SampleSignal", samplers, res)
	} else {
		fmt.Fprintf(os.Stderr, "bench: no signal fixture (%s): its rows are left out\n", sig)
	}
	if err := labelCost(fx, perSampleNs["profile --unwind=eh"]); err != nil {
		return err
	}
	return tablesSuite()
}

// bpftraceSamplers are bpftrace's user stacks at 99 Hz, alone (as
// profile's keys without a kernel stack would be) and with the kernel
// stack (as profile's keys are), when bpftrace is installed.
func bpftraceSamplers() []sampler {
	p, err := exec.LookPath("bpftrace")
	if err != nil {
		return nil
	}
	return []sampler{
		{name: "bpftrace @[ustack] = count()", cmd: []string{p, "-e", "profile:hz:99 { @[ustack] = count(); }"}},
		{name: "bpftrace @[ustack, kstack] = count()", cmd: []string{p, "-e", "profile:hz:99 { @[ustack, kstack] = count(); }"}},
	}
}

var perfData = filepath.Join(os.TempDir(), "bench-perf.data")

// perfSampler is perf's DWARF unwinding, system-wide, its report
// included (perf script), when perf is installed: the whole-CPU
// reference, last in a table.
func perfSampler() []sampler {
	p, err := exec.LookPath("perf")
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: perf (linux-perf) not found: its row is left out")
		return nil
	}
	return []sampler{{name: "perf record --call-graph dwarf + perf script",
		cmd:  []string{p, "record", "-q", "-F", "99", "--call-graph", "dwarf", "-a", "-o", perfData},
		post: []string{p, "script", "-i", perfData}}}
}

// interleave runs each sampler once a round over n copies of fixture,
// the order rotating each round, and returns each one's runs.
func interleave(samplers []sampler, rounds int, fixture []string, n int) ([][]profileRun, error) {
	res := make([][]profileRun, len(samplers))
	for r := 0; r < rounds; r++ {
		for i := range samplers {
			k := (i + r) % len(samplers)
			s := samplers[k]
			run, err := sample(s.cmd, s.post, [][]string{fixture}, n)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", s.name, err)
			}
			res[k] = append(res[k], run)
		}
	}
	return res, nil
}

// benchDepths are the recursion depths of the depth suite.
var benchDepths = []int{5, 20, 60, 120}

// depthSuite measures the samplers' BPF time per sample as the stack
// deepens: stacks/testdata/deep at each of benchDepths (DEPTH + 5 user
// frames, with frame pointers, so that bpftrace's ustack and profile's fp
// walk reach main as the tables do), one per CPU, at 99 Hz; and the cost
// of a frame, the slope between the shallowest and the deepest.
func depthSuite() error {
	fx, _ := filepath.Abs(filepath.Join(*fxDir, "deep"))
	if !fileExists(fx) {
		fmt.Fprintf(os.Stderr, "bench: no deep fixture (%s): the depth suite is left out\n", fx)
		return nil
	}
	samplers := append(bpftraceSamplers(),
		sampler{name: "profile --unwind=eh", cmd: []string{*bin + "/profile", "-F", "99", "--unwind=eh"}},
		sampler{name: "profile --unwind=fp", cmd: []string{*bin + "/profile", "-F", "99", "--unwind=fp"}},
	)
	eh := len(samplers) - 2 // the columns before it are the peers eh is compared with
	if *baseline != "" {
		samplers = append(samplers, sampler{name: "profile --unwind=eh, " + *baseline, cmd: []string{*baseline + "/profile", "-F", "99", "--unwind=eh"}})
	}
	rounds, secs := max(*rounds/5, 3), max(*profileSecs/2, 3)
	perSample := make([][]float64, len(samplers)) // by sampler, by depth
	for _, depth := range benchDepths {
		res, err := interleave(samplers, rounds, []string{fx, fmt.Sprint(depth), fmt.Sprint(secs)}, 2)
		if err != nil {
			return err
		}
		for k := range samplers {
			perSample[k] = append(perSample[k], medianOf(res[k], func(p profileRun) float64 {
				if p.runs == 0 {
					return 0
				}
				return float64(p.bpf) / float64(p.runs)
			}))
		}
	}
	fmt.Printf("\nBPF ns per sample at 99 Hz while deep spins DEPTH calls down on every CPU for %d s (DEPTH + 5 user frames, frame pointers kept), %d interleaved rounds, medians\n\n", secs, rounds)
	head, rule := "| user frames |", "| ---: |"
	for _, s := range samplers {
		head, rule = head+" "+s.name+" |", rule+" ---: |"
	}
	for k := 0; k < eh; k++ {
		head, rule = head+" eh vs "+strings.TrimSuffix(strings.TrimPrefix(samplers[k].name, "bpftrace "), " = count()")+" |", rule+" ---: |"
	}
	fmt.Println(head)
	fmt.Println(rule)
	row := func(label string, f func(k int) float64, ratio func(k int) string) {
		line := "| " + label + " |"
		for k := range samplers {
			line += fmt.Sprintf(" %.0f |", f(k))
		}
		for k := 0; k < eh; k++ {
			line += " " + ratio(k) + " |"
		}
		fmt.Println(line)
	}
	for i, depth := range benchDepths {
		row(fmt.Sprint(depth+5), func(k int) float64 { return perSample[k][i] }, func(k int) string {
			return fmt.Sprintf("%.2fx", perSample[eh][i]/perSample[k][i])
		})
	}
	last, span := len(benchDepths)-1, float64(benchDepths[len(benchDepths)-1]-benchDepths[0])
	slope := func(k int) float64 { return (perSample[k][last] - perSample[k][0]) / span }
	row("ns a frame", slope, func(k int) string { return fmt.Sprintf("%.2fx", slope(eh)/slope(k)) })
	return nil
}

// fleetProcs is how many processes the fleet suite spins.
const fleetProcs = 50

// fleetSuite samples the whole machine while fleetProcs processes of the
// profile fixtures (chain-nopie, chain-pie, chain-lib, overload, deep 20,
// in turn: several files, none with frame pointers but deep) spin, at 99
// Hz: profile's whole CPU (its default mode, and eh) against perf's
// DWARF unwinding.
func fleetSuite() error {
	var fixtures [][]string
	secs := *profileSecs
	for _, name := range []string{"chain-nopie", "chain-pie", "chain-lib", "overload", "deep"} {
		fx, _ := filepath.Abs(filepath.Join(*fxDir, name))
		if !fileExists(fx) {
			fmt.Fprintf(os.Stderr, "bench: no %s fixture (%s): the fleet suite is left out\n", name, fx)
			return nil
		}
		if name == "deep" {
			fixtures = append(fixtures, []string{fx, "20", fmt.Sprint(secs)})
		} else {
			fixtures = append(fixtures, []string{fx, fmt.Sprint(secs)})
		}
	}
	samplers := []sampler{
		{name: "profile (auto)", cmd: []string{*bin + "/profile", "-F", "99"}},
		{name: "profile --unwind=eh", cmd: []string{*bin + "/profile", "-F", "99", "--unwind=eh"}},
	}
	if *baseline != "" {
		samplers = append(samplers, sampler{name: "profile (auto), " + *baseline, cmd: []string{*baseline + "/profile", "-F", "99"}})
	}
	samplers = append(samplers, perfSampler()...)
	defer os.Remove(perfData)
	rounds := max(*rounds/5, 3)
	res := make([][]profileRun, len(samplers))
	for r := 0; r < rounds; r++ {
		for i := range samplers {
			k := (i + r) % len(samplers)
			run, err := sample(samplers[k].cmd, samplers[k].post, fixtures, fleetProcs)
			if err != nil {
				return fmt.Errorf("%s: %w", samplers[k].name, err)
			}
			res[k] = append(res[k], run)
		}
	}
	fmt.Printf("\nSampling the whole machine at 99 Hz while %d processes (chain-nopie, chain-pie, chain-lib, overload, deep 20 in turn) spin for %d s, %d interleaved rounds, medians\n\n", fleetProcs, secs, rounds)
	samplingTable("Fleet", samplers, res)
	return nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// samplingTable prints the samplers' runs (perf's last, the whole CPU's
// reference) and returns each one's BPF ns per sample.
func samplingTable(suite string, samplers []sampler, res [][]profileRun) map[string]float64 {
	fmt.Println("| sampler | BPF ns per sample | whole CPU ms per run | whole CPU vs perf |")
	fmt.Println("| --- | ---: | ---: | ---: |")
	perfCPU := 0.0
	if last := len(samplers) - 1; strings.HasPrefix(samplers[last].name, "perf") {
		perfCPU = medianOf(res[last], func(p profileRun) float64 { return float64(p.cpu+p.bpf) / 1e6 })
	}
	perSampleNs := map[string]float64{}
	for k, s := range samplers {
		for _, p := range res[k] {
			ms := []metric{{float64(p.cpu+p.bpf) / 1e6, "cpu-ms/run"}}
			if p.runs > 0 {
				ms = append(ms, metric{float64(p.bpf) / float64(p.runs), "bpf-ns/sample"})
			}
			result(suite, s.name, 1, ms...)
		}
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
	return perSampleNs
}

// benchLabels are the label counts the label suite samples with.
var benchLabels = []int{0, 1, 4, 8}

// labelArgs are n --label's of the fixture's thread-locals: integers and
// char arrays in turn (tk_bench_n0, tk_bench_s0, tk_bench_n1, ...).
func labelArgs(n int) []string {
	var args []string
	for i := 0; i < n; i++ {
		if i%2 == 0 {
			args = append(args, "--label", fmt.Sprintf("n%d=tls:tk_bench_n%d:int", i/2, i/2))
		} else {
			args = append(args, "--label", fmt.Sprintf("s%d=tls:tk_bench_s%d:chars", i/2, i/2))
		}
	}
	return args
}

// labelCost measures what labels add to a sample. A label costs about a
// probe-read, tens of ns, where the same sampler's ns per sample moves by
// hundreds from one run to the next on a VM (and by as much between two
// identical samplers started one after the other in one run): measured
// apart, the labels' cost is lost in that noise. So the samplers with 0,
// 1, 4 and 8 labels run at once, on the same fixtures in the same seconds,
// at 999 Hz (ten times the samples of the suite above); their order of
// start rotates each round, so that each holds each place as often; the
// medians of the rounds are compared. eh99 is the suite's 99 Hz figure,
// for scale.
func labelCost(fx string, eh99 float64) error {
	rounds := max(*rounds/5, 2) * len(benchLabels)
	secs := max(*profileSecs/2, 3)
	ns := make([][]float64, len(benchLabels))
	for r := 0; r < rounds; r++ {
		cmds := make([][]string, len(benchLabels))
		at := make([]int, len(benchLabels)) // cmds[i] is benchLabels[at[i]]
		for i := range benchLabels {
			k := (i + r) % len(benchLabels)
			cmds[i] = append([]string{*bin + "/profile", "-F", "999", "--unwind=eh"}, labelArgs(benchLabels[k])...)
			at[i] = k
		}
		runs, err := sampleTogether(cmds, fx, secs)
		if err != nil {
			return fmt.Errorf("profile --label: %w", err)
		}
		for i, run := range runs {
			if run.runs > 0 {
				ns[at[i]] = append(ns[at[i]], float64(run.bpf)/float64(run.runs))
			}
		}
	}
	fmt.Printf("\nprofile --label: the samplers with 0, 1, 4 and 8 labels (thread-locals of %s, integers and char[16] in turn) at once, 999 Hz, %d s, %d rounds in rotated order, medians", filepath.Base(fx), secs, rounds)
	if eh99 > 0 {
		fmt.Printf(" (at 99 Hz, alone, --unwind=eh takes %.0f ns: a colder cache)", eh99)
	}
	fmt.Print("\n\n")
	fmt.Println("| labels | BPF ns per sample | ns per label | vs none |")
	fmt.Println("| ---: | ---: | ---: | ---: |")
	none := median(ns[0])
	for k, n := range benchLabels {
		with := median(ns[k])
		if n == 0 {
			fmt.Printf("| 0 | %.0f | - | 1.00x |\n", with)
			continue
		}
		fmt.Printf("| %d | %.0f | %.0f | %.2fx |\n", n, with, (with-none)/float64(n), with/none)
	}
	return nil
}

func medianOf(runs []profileRun, f func(profileRun) float64) float64 {
	var xs []float64
	for _, r := range runs {
		xs = append(xs, f(r))
	}
	return median(xs)
}

// sample starts a sampler, waits until it samples, runs n fixtures (the
// command lines of fixtures in turn: one per CPU, or a fleet) and waits
// for them, stops the sampler with SIGINT and waits for its report (and
// runs post, if any).
func sample(cmdline, post []string, fixtures [][]string, n int) (profileRun, error) {
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
	var running []*exec.Cmd
	for i := 0; i < n; i++ {
		fx := fixtures[i%len(fixtures)]
		f := exec.Command(fx[0], fx[1:]...)
		if err := f.Start(); err != nil {
			return profileRun{}, err
		}
		running = append(running, f)
	}
	for _, f := range running {
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

// startTracing starts one of our tools (its output discarded) and returns
// once it says "Tracing": its programs are attached. One that does not
// within 30 s is killed.
func startTracing(cmdline []string) (*exec.Cmd, error) {
	cmd := exec.Command(cmdline[0], cmdline[1:]...)
	cmd.Stdout = io.Discard
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	ready := make(chan struct{}, 1)
	go func() {
		s := bufio.NewScanner(stderr)
		for s.Scan() {
			if strings.HasPrefix(s.Text(), "Tracing") {
				ready <- struct{}{}
			}
		}
	}()
	select {
	case <-ready:
		return cmd, nil
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		cmd.Wait()
		return nil, fmt.Errorf("%s did not start", cmdline[0])
	}
}

// sampleTogether starts the samplers one after the other (each ready
// before the next starts, so that each one's programs are known), runs
// one fixture per CPU for secs, reads each one's programs' run time and
// runs, and stops them.
func sampleTogether(cmds [][]string, fx string, secs int) ([]profileRun, error) {
	var started []*exec.Cmd
	stop := func() {
		for _, c := range started {
			c.Process.Signal(syscall.SIGINT)
			c.Wait()
		}
	}
	defer stop()
	progs := make([][]ebpf.ProgramID, len(cmds))
	for i, cmdline := range cmds {
		before := programIDs()
		cmd, err := startTracing(cmdline)
		if err != nil {
			return nil, err
		}
		started = append(started, cmd)
		for id := range programIDs() {
			if !before[id] {
				progs[i] = append(progs[i], id)
			}
		}
	}
	time.Sleep(time.Second)
	var fixtures []*exec.Cmd
	for i := 0; i < 2; i++ {
		f := exec.Command(fx, fmt.Sprint(secs))
		if err := f.Start(); err != nil {
			return nil, err
		}
		fixtures = append(fixtures, f)
	}
	for _, f := range fixtures {
		f.Wait()
	}
	runs := make([]profileRun, len(cmds))
	for i, ids := range progs {
		for _, id := range ids {
			if p, err := ebpf.NewProgramFromID(id); err == nil {
				if st, err := p.Stats(); err == nil {
					runs[i].bpf += st.Runtime
					runs[i].runs = max(runs[i].runs, st.RunCount)
				}
				p.Close()
			}
		}
	}
	return runs, nil
}

var tablesLine = regexp.MustCompile(`unwind tables: (\d+) files, (\d+) rows \(([\d.]+) of \d+ MiB\), read in (\d+) ms`)

// tablesSuite is -only tables: python3.11's and a libLLVM process's.
func tablesSuite() error {
	if err := tablesCost(); err != nil {
		return err
	}
	return bigLibraryCost()
}

// tablesOf runs profile (tool) on what, and returns its summary's tables
// line and the milliseconds the tables took to read.
func tablesOf(what string, tool *exec.Cmd) (line []string, ms float64, err error) {
	out, err := tool.CombinedOutput()
	if err != nil {
		return nil, 0, fmt.Errorf("profile %s: %v\n%s", what, err, out)
	}
	if line = tablesLine.FindStringSubmatch(string(out)); line == nil {
		return nil, 0, fmt.Errorf("profile %s: no tables line\n%s", what, out)
	}
	fmt.Sscan(line[4], &ms)
	return line, ms, nil
}

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
		m, t, err := tablesOf("python3.11", exec.Command(*bin+"/profile", "-c", py+" -c 'i = 0\nwhile i < 3000000: i += 1'"))
		if err != nil {
			return err
		}
		ms, last = append(ms, t), m
	}
	fmt.Printf("\nprofile's unwind tables for python3.11 (its files: the interpreter, libc, the loader, [vdso]): %s files, %s rows, %s MiB of map memory, read in %.0f ms (median of 5)\n", last[1], last[2], last[3], median(ms))
	return nil
}

// bigLibraryCost reports the tables of a process linking Debian's
// libLLVM-14 (stacks/testdata/llvm.c, built here with gcc when the
// library is installed), read by profile -p at the default settings: the
// time to read them, and profile's own peak RSS (wait4's maxrss, which
// would count a child's: -p, so that profile has none).
func bigLibraryCost() error {
	const lib = "/usr/lib/x86_64-linux-gnu/libLLVM-14.so.1"
	if _, err := os.Stat(lib); err != nil {
		fmt.Fprintf(os.Stderr, "bench: no %s: the libLLVM row is left out\n", lib)
		return nil
	}
	fx := filepath.Join(*fxDir, "llvm")
	if out, err := exec.Command("gcc", "-O2", "-o", fx, "stacks/testdata/llvm.c", "-l:libLLVM-14.so.1").CombinedOutput(); err != nil {
		return fmt.Errorf("build the llvm fixture: %v\n%s", err, out)
	}
	var ms, mib []float64
	var last []string
	for i := 0; i < 5; i++ {
		spin := exec.Command(fx, "3")
		if err := spin.Start(); err != nil {
			return err
		}
		time.Sleep(200 * time.Millisecond) // its libraries mapped
		tool := exec.Command(*bin+"/profile", "-F", "99", "-p", fmt.Sprint(spin.Process.Pid), "1.5", "1")
		m, t, err := tablesOf("the llvm fixture", tool)
		spin.Process.Kill()
		spin.Wait()
		if err != nil {
			return err
		}
		ms, last = append(ms, t), m
		mib = append(mib, float64(tool.ProcessState.SysUsage().(*syscall.Rusage).Maxrss)/1024)
	}
	fmt.Printf("profile's unwind tables for a process linking libLLVM-14 (stacks/testdata/llvm.c: libLLVM, libz3, libstdc++, libc, ...): %s files, %s rows, %s MiB of map memory, read in %.0f ms (median of 5; goal 200), profile's peak RSS %.1f MiB (median; most %.1f; goal 32)\n", last[1], last[2], last[3], median(ms), median(mib), slices.Max(mib))
	return nil
}
