package writesize

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/counts"
	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/internal/usage"
	"github.com/tracekit/tracekit/kernel"
	"github.com/tracekit/tracekit/loader"
	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/terminal"
	"github.com/tracekit/tracekit/tracefs"
	"github.com/tracekit/tracekit/writesize/prog"
)

func validate(o *options) error {
	if err := procfs.CheckPid(o.Pid); err != nil {
		return err
	}
	if err := o.CheckServe(); err != nil {
		return err
	}
	if err := o.CheckTree(); err != nil {
		return err
	}
	if err := hook.Validate(o.Attach); err != nil {
		return err
	}
	if o.Kprobe != "" && o.Attach != "" && o.Attach != "auto" {
		return usage.Errorf("--kprobe and --attach=%s contradict each other: a kprobe is its own hook", o.Attach)
	}
	if o.All && o.Command == "" {
		return usage.Errorf("--all goes with -c: without -c every process is traced already")
	}
	if o.All && o.Pid > 0 {
		return usage.Errorf("--all and -p contradict each other")
	}
	if o.Pid > 0 && o.Command != "" {
		return usage.Errorf("-p and -c: trace a running process or a command, not both")
	}
	if o.Kprobe != "" && o.Kprobe != "auto" {
		if err := tracefs.ValidateSymbol(o.Kprobe); err != nil {
			return usage.Errorf("--kprobe: %v", err)
		}
	}
	if o.MaxComms < 1 || o.MaxComms > prog.MaxCommsLimit {
		return usage.Errorf("--max-comms %d: from 1 to %d", o.MaxComms, prog.MaxCommsLimit)
	}
	if o.MaxKeys < 1 || o.MaxKeys > prog.MaxKeysLimit {
		return usage.Errorf("invalid --max-keys %d: want from 1 to %d", o.MaxKeys, prog.MaxKeysLimit)
	}
	if o.MaxKeys != prog.MaxKeys && !o.PerProcess {
		return usage.Errorf("--max-keys goes with -P: without it writesize keeps one histogram")
	}
	if o.Legacy && o.Kprobe == "" {
		return usage.Errorf("--legacy goes with --kprobe")
	}
	return nil
}

// writeOffers are the hooks writesize reaches write(2) by, cheapest
// first, each building its part of cfg. fentry where the kernel has BPF
// trampolines, else perf. A raw tracepoint on sys_enter makes each write
// cheaper to count, but it runs for every syscall of the machine (make
// bench shows both costs side by side); the perf tracepoint and fentry
// run only for writes, and fentry builds no record first: in a 6.12 guest
// (qemu TCG, five interleaved rounds) 100,000 writes cost 0.04 s more CPU
// under fentry, 0.28 s under perf and 0.27 s under raw.
func writeOffers(cfg *prog.Config) []hook.Offer {
	fentry := func() error {
		regs, err := asm.HostPtRegs()
		if err != nil {
			return err
		}
		cfg.Fentry = &prog.Fentry{Symbol: regs.SyscallPrefix + "write", Regs: regs}
		return nil
	}
	perf := func() error {
		format, err := tracefs.ReadFormat("syscalls", "sys_enter_write")
		if err != nil {
			if errors.Is(err, tracefs.ErrNoAccess) {
				return err
			}
			return fmt.Errorf("%w (writesize needs syscall tracepoints: CONFIG_FTRACE_SYSCALLS; or try --kprobe)", err)
		}
		cfg.Count, err = format.MustField("count")
		return err
	}
	raw := func() error {
		regs, err := asm.HostPtRegs()
		if err != nil {
			return err
		}
		nr, ok := prog.WriteNR[regs.Arch]
		if !ok {
			return fmt.Errorf("write's syscall number on %s is not known here", regs.Arch)
		}
		cfg.Raw = &prog.Raw{NR: nr, Regs: regs, ProbeRead: kernel.Readers().Kernel}
		return nil
	}
	return []hook.Offer{
		{Hook: hook.Fentry, Have: hook.HasFentrySyscall("write"), Build: fentry},
		{Hook: hook.Perf, Build: perf},
		{Hook: hook.Raw, Have: hook.HasRaw, Build: raw},
	}
}

// writeSymbols are the kernel's write syscall functions, newest first:
// the architecture's wrapper (__x64_sys_write, __arm64_sys_write; 32-bit
// ARM has none), then ksys_write and sys_write.
func writeSymbols(regs *asm.Regs) []string {
	syms := []string{"ksys_write", "sys_write"}
	if regs.SyscallPrefix != "" {
		syms = append([]string{regs.SyscallPrefix + "write"}, syms...)
	}
	return syms
}

// kprobeFor picks the function to probe and how to read the size there.
func kprobeFor(choice string) (*prog.Kprobe, error) {
	regs, err := asm.HostPtRegs()
	if err != nil {
		return nil, fmt.Errorf("--kprobe: %w; use the tracepoint mode (without --kprobe)", err)
	}
	if !perfevent.KprobesAvailable() {
		return nil, fmt.Errorf("--kprobe: %w; writesize without --kprobe uses the syscalls:sys_enter_write tracepoint instead", perfevent.ErrNoKprobes)
	}
	sym := choice
	if choice == "auto" {
		syms, err := procfs.LoadKallsyms()
		if err != nil {
			return nil, err
		}
		sym = ""
		for _, s := range writeSymbols(regs) {
			if syms.Has(s) {
				sym = s
				break
			}
		}
		if sym == "" {
			return nil, fmt.Errorf("--kprobe: none of %s is in /proc/kallsyms: name the function with --kprobe=SYMBOL", strings.Join(writeSymbols(regs), ", "))
		}
	}
	name, _ := tracefs.SplitSymbol(sym)
	return &prog.Kprobe{Symbol: sym, Wrapper: regs.SyscallPrefix != "" && strings.HasPrefix(name, regs.SyscallPrefix), ProbeRead: kernel.Readers().Kernel, Regs: regs}, nil
}

func trace(ctx context.Context, s *run.Session, o *options) error {
	cfg := prog.Config{Pid: uint32(o.Pid), PerProcess: o.PerProcess, Comms: o.MaxComms, MaxKeys: o.MaxKeys}
	if o.Kprobe != "" {
		k, err := kprobeFor(o.Kprobe)
		if err != nil {
			return err
		}
		cfg.Kprobe = k
	} else if _, err := hook.Choose(o.Attach, "syscalls:sys_enter_write", writeOffers(&cfg)...); err != nil {
		return err
	}
	// With -c, the command's process and its descendants: dash forks even a
	// single command, so the pid of "sh -c" alone would miss its writes.
	cmdPid := s.CommandPid()
	tree := cmdPid != 0 && o.Pid == 0 && !o.All
	if tree || cfg.Pid != 0 || cfg.PerProcess {
		ns, err := kernel.PidNamespace()
		if err != nil {
			return err
		}
		cfg.NS = ns
	}
	if tree {
		t, err := s.ProcessTree(cfg.NS, o.MaxTree)
		if err != nil {
			return err
		}
		cfg.Tree = t
	}
	spec, err := prog.Collection(cfg)
	if err != nil {
		return err
	}
	coll, err := s.Load(spec)
	if err != nil {
		return err
	}
	if cfg.Tree != nil {
		if err := s.FollowProcessTree(coll); err != nil {
			return err
		}
	}
	prog := coll.Programs["writesize"]
	switch {
	case cfg.Kprobe != nil:
		err = s.AttachProbe(prog, tracefs.Probe{Type: tracefs.Kprobe, Symbol: cfg.Kprobe.Symbol}, o.Legacy)
	case cfg.Fentry != nil:
		err = s.AttachHook(prog, hook.Fentry, "", cfg.Fentry.Symbol)
	case cfg.Raw != nil:
		err = s.AttachHook(prog, hook.Raw, "raw_syscalls", "sys_enter")
	default:
		err = s.AttachTracepoint(prog, "syscalls", "sys_enter_write")
	}
	if err != nil {
		return err
	}
	// The runs of the program the kernel skipped (loader.Misses) are lost
	// writes where each run is one: not on the raw hook (every system
	// call runs it) nor with -p or -c (every process's writes do); there
	// the end of the run says how many.
	counted := prog
	if cfg.Raw != nil || cfg.Pid != 0 || cfg.Tree != nil {
		counted = nil
		what := "the traced writes among them are not counted"
		if cfg.Pid == 0 && cfg.Tree == nil {
			what += " (--attach perf or fentry counts them as lost)"
		}
		s.ReportSkips(what, prog)
	}
	if o.PerProcess {
		return perProcess(ctx, s, o, coll, counted, cfg.NS != nil)
	}
	r := &reader{coll: coll, prog: counted, deltas: counts.Deltas{Cumulative: o.Cumulative}}
	if o.Serve != "" {
		c := &collector{r: &reader{coll: coll, prog: counted}}
		if err := s.ServeMetrics(o.Serve, c.families); err != nil {
			return err
		}
	}
	return s.Loop(ctx, "write(2) sizes", func(final bool) error {
		rep, err := r.report()
		if err != nil {
			return err
		}
		return s.WriteHist(rep, time.Now())
	})
}

// perProcess reports -P's histograms from the drained table.
func perProcess(ctx context.Context, s *run.Session, o *options, coll *ebpf.Collection, prog *ebpf.Program, inNS bool) error {
	table, err := newProcTable(coll, prog, int(o.MaxKeys), inNS, o.Cumulative, o.Serve != "")
	if err != nil {
		return err
	}
	s.OnClose("", table.Close)
	s.Every("drain the counts", time.Second, table.drain)
	if o.Serve != "" {
		if err := s.ServeMetrics(o.Serve, table.families); err != nil {
			return err
		}
	}
	return s.Loop(ctx, "write(2) sizes", func(final bool) error {
		rep, unnamed, err := table.take()
		if err != nil {
			return err
		}
		if err := s.WriteHist(rep, time.Now()); err != nil {
			return err
		}
		if final && unnamed > 0 {
			fmt.Fprintf(s.Stderr, "writesize: %d processes print as '?': their names did not fit in the name map (%d entries) and they exited before the report; --max-comms sets its size\n", unnamed, o.MaxComms)
		}
		return nil
	})
}

// reader turns the kernel's histogram into reports (without -P).
type reader struct {
	coll   *ebpf.Collection
	prog   *ebpf.Program // its skipped runs are lost writes (loader.Misses)
	deltas counts.Deltas
}

func (r *reader) report() (*run.HistReport, error) {
	h, err := counts.ReadLog2Array(r.coll.Maps["hist"])
	if err != nil {
		return nil, err
	}
	return &run.HistReport{Unit: "bytes", Hists: []*terminal.Log2Hist{r.deltas.Hist(0, &h)}, Lost: r.deltas.Counter(loader.Misses(r.prog)), LostWhy: run.SkippedWhy}, nil
}
