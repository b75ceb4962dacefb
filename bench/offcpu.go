package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"

	"github.com/tracekit/tracekit/stacks/prog"
)

// offCPUSuite compares profile --off-cpu with libbpf-tools' offcputime, both
// system-wide, on the same context switches: testdata/offcpu.c's pingpong
// (no frame pointers), a parent and a child passing a byte back and forth
// through pipes. The figure is the BPF time per round trip: the kernel's
// run time of each tool's programs (the tail-called unwinder included: a
// tail call runs within its caller's accounting) over the trips, the same
// work under every tool. Over the runs of the sched_switch program
// instead, or over the fixture's waits (its voluntary context switches),
// the figure moved with the tool itself: a tracer slow at the switch-out
// lets the partner's byte arrive before the next read, and the fixture
// waits less (65,000 waits a run under profile, 98,000 under offcputime,
// for the same 50,000 trips); the runs mix a wait's switch-out (the stack
// walked) with the cheap switch-ins from the idle task, whose number
// depends on where the scheduler puts the two processes. (Those 65,000
// waits were profile's own deferral storm, fixed since: a Go binary's
// mappings never entered the trie. Now 91,000 to 95,000.) A floor row
// takes the kernel stack alone at each switch: what every row pays.
func offCPUSuite() error {
	fx, _ := filepath.Abs(filepath.Join(*fxDir, "offcpu"))
	if _, err := os.Stat(fx); err != nil {
		fmt.Fprintf(os.Stderr, "bench: no off-CPU fixture (%v): the off-CPU suite is left out\n", err)
		return nil
	}
	tracers := []tracer{
		{"profile --off-cpu", toolProcess(*bin+"/profile", []string{"--off-cpu"})},
		// The same without the unwinder: the kernel stack, the key, the maps.
		{"profile --off-cpu --unwind=fp", toolProcess(*bin+"/profile", []string{"--off-cpu", "--unwind=fp"})},
	}
	// The floor: a program that only takes the kernel stack at each
	// switch, as every row's does (prog.KernelFrames, profile's depth).
	tracers = append(tracers, tracer{"floor: the kernel stack alone", kernelStackFloor})
	// Other builds' profiles (links named profile, or scripts that exec
	// one), colon-separated, interleaved with this one's in the same run:
	// an A/B of a change.
	for _, alt := range filepath.SplitList(os.Getenv("BENCH_ALT_PROFILE")) {
		tracers = append(tracers, tracer{"profile --off-cpu (" + alt + ")", toolProcess(alt, []string{"--off-cpu"})})
	}
	if p, err := exec.LookPath("offcputime"); err == nil {
		tracers = append(tracers, tracer{"offcputime (libbpf-tools)", quietProcess(p, nil)})
	} else {
		fmt.Fprintln(os.Stderr, "bench: offcputime (libbpf-tools) not found: its row is left out")
	}
	const trips = 50000
	perTrip := make([][]float64, len(tracers))
	switches := make([][]float64, len(tracers))
	waits := make([][]float64, len(tracers))
	for r := 0; r < *rounds; r++ {
		for i := range tracers {
			k := (i + r) % len(tracers)
			before := programIDs()
			stop, err := tracers[k].start()
			if err != nil {
				return fmt.Errorf("%s: %w", tracers[k].name, err)
			}
			cmd := exec.Command(fx, "pingpong", strconv.Itoa(trips))
			if out, err := cmd.CombinedOutput(); err != nil {
				stop()
				return fmt.Errorf("%s pingpong: %v: %s", fx, err, out)
			}
			ns, runs := switchCost(before)
			stop()
			w := float64(cmd.ProcessState.SysUsage().(*syscall.Rusage).Nvcsw)
			if runs > 0 && w > 0 {
				perTrip[k] = append(perTrip[k], ns/trips)
				switches[k] = append(switches[k], float64(runs))
				waits[k] = append(waits[k], w)
				result("Switch", tracers[k].name, trips, metric{ns / trips, "bpf-ns/trip"}, metric{w, "waits/run"}, metric{float64(runs), "switches/run"})
			}
		}
	}
	fmt.Printf("\ncontext switches: %d round trips of a byte between two processes through pipes (stacks/testdata/offcpu.c pingpong, no frame pointers), system-wide\n\n", trips)
	fmt.Println("| tracer | BPF ns per round trip | BPF ns per wait | fixture's waits per run | sched_switch runs per run | vs offcputime |")
	fmt.Println("| --- | ---: | ---: | ---: | ---: | ---: |")
	last := len(tracers) - 1
	for k, t := range tracers {
		ratio := "-"
		if last > 0 && len(perTrip[last]) > 0 {
			ratio = fmt.Sprintf("%.2fx", median(perTrip[k])/median(perTrip[last]))
		}
		fmt.Printf("| %s | %.0f | %.0f | %.0f | %.0f | %s |\n", t.name, median(perTrip[k]), median(perTrip[k])*trips/median(waits[k]), median(waits[k]), median(switches[k]), ratio)
	}
	return nil
}

// switchCost is the run time of the programs loaded since before, and the
// runs of the most run one (the sched_switch program).
func switchCost(before map[ebpf.ProgramID]bool) (ns float64, runs uint64) {
	newPrograms(before, func(st *ebpf.ProgramStats) {
		ns += float64(st.Runtime.Nanoseconds())
		runs = max(runs, st.RunCount)
	})
	return ns, runs
}

// kernelStackFloor attaches, at sched:sched_switch, a program that takes
// the kernel stack (bpf_get_stack, profile's depth, into a per-CPU
// buffer) and nothing else: what any tool that keys waits by kernel stack
// pays at each switch, whatever else it does.
func kernelStackFloor() (func(), error) {
	const depth = prog.KernelFrames
	buf, err := ebpf.NewMap(&ebpf.MapSpec{Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8 * depth, MaxEntries: 1})
	if err != nil {
		return nil, err
	}
	sw, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.TracePoint, License: "GPL", Instructions: asm.Instructions{
		asm.Mov.Reg(asm.R6, asm.R1),
		asm.StoreImm(asm.RFP, -4, 0, asm.Word),
		asm.LoadMapPtr(asm.R1, buf.FD()),
		asm.Mov.Reg(asm.R2, asm.RFP),
		asm.Add.Imm(asm.R2, -4),
		asm.FnMapLookupElem.Call(),
		asm.JEq.Imm(asm.R0, 0, "exit"),
		asm.Mov.Reg(asm.R1, asm.R6),
		asm.Mov.Reg(asm.R2, asm.R0),
		asm.Mov.Imm(asm.R3, 8*depth),
		asm.Mov.Imm(asm.R4, 0),
		asm.FnGetStack.Call(),
		asm.Mov.Imm(asm.R0, 0).WithSymbol("exit"),
		asm.Return(),
	}})
	if err != nil {
		buf.Close()
		return nil, err
	}
	l, err := link.Tracepoint("sched", "sched_switch", sw, nil)
	if err != nil {
		sw.Close()
		buf.Close()
		return nil, err
	}
	return func() { l.Close(); sw.Close(); buf.Close() }, nil
}
