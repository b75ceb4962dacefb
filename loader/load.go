package loader

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"
)

// shortLog is how many lines of a verifier log a rejection shows without
// --verbose: the end, where the verifier says why.
const shortLog = 20

// Load creates the maps and programs of spec. Maps are bound to the
// programs' map references by name. On a verifier rejection the error
// carries the verifier's log: with verbose all of it and the annotated
// disassembly of the programs, else the log's last lines (a complex
// program's log runs to tens of thousands of lines).
func Load(spec *ebpf.CollectionSpec, verbose bool) (*ebpf.Collection, error) {
	// Kernels before 5.11 charge BPF memory to RLIMIT_MEMLOCK; the limit
	// is raised only where that accounting is still in force.
	if err := RemoveMemlock(); err != nil {
		return nil, err
	}
	for _, p := range spec.Programs {
		firstLineInfo(p.Instructions)
	}
	// Marshalling mutates instructions: keep a copy to show on failure.
	shown := spec.Copy()
	// Tracing programs (BTF tracepoints, fentry) are loaded after the
	// rest, by Tracing: cilium/ebpf would parse all of the kernel's
	// BTF to find their targets.
	rest := *spec
	rest.Programs = map[string]*ebpf.ProgramSpec{}
	tracing := map[string]*ebpf.ProgramSpec{}
	for name, p := range spec.Programs {
		if p.Type == ebpf.Tracing {
			tracing[name] = p
		} else {
			rest.Programs[name] = p
		}
	}
	coll, err := ebpf.NewCollection(&rest)
	if err == nil {
		for name, p := range tracing {
			prog, err := Tracing(p, coll.Maps, verbose)
			if err != nil {
				coll.Close()
				return nil, err
			}
			coll.Programs[name] = prog
		}
		return coll, nil
	}
	if fe := fdError(err); fe != nil {
		return nil, fe // the programs passed: no verifier log to show
	}
	var ve *ebpf.VerifierError
	if errors.As(err, &ve) {
		if e := jitOff(ve.Log); e != nil {
			return nil, e
		}
		if e := jitRefuses(err); e != nil {
			return nil, e
		}
		if !verbose {
			return nil, fmt.Errorf("load BPF programs: the kernel's verifier rejected them: %w\nthe verifier log's last lines (--verbose prints all of it and the programs):\n%-*v", err, shortLog, ve)
		}
		var progs string
		for name, p := range shown.Programs {
			progs += fmt.Sprintf("program %s:\n%v", name, p.Instructions)
		}
		return nil, fmt.Errorf("load BPF programs: the kernel's verifier rejected them: %w\nverifier log:\n%+v\n%s", err, ve, progs)
	}
	if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
		return nil, fmt.Errorf("load BPF programs: %w%s", noMemlockHint{err}, permissionHint)
	}
	return nil, fmt.Errorf("load BPF programs: %w", err)
}

// JITEnable is the sysctl that turns the kernel's BPF JIT on (a file).
var JITEnable = "/proc/sys/net/core/bpf_jit_enable"

// jitOff is the one line to print when a program was refused for want of
// the JIT, which is off: the interpreter runs no program that calls
// another (or reads kernel memory through BTF pointers on newer
// kernels), and riscv64's and 32-bit ARM's kernels leave the JIT off
// unless told (no ARCH_WANT_DEFAULT_BPF_JIT). nil otherwise.
func jitOff(log []string) error {
	if !slices.ContainsFunc(log, func(l string) bool { return strings.Contains(l, "requires BPF JIT") }) {
		return nil
	}
	if jitSetting() != "0" {
		return nil
	}
	return errors.New("load BPF programs: the kernel's BPF JIT is off, and these programs need it: turn it on with 'sysctl -w net.core.bpf_jit_enable=1 net.core.bpf_jit_kallsyms=1' (the second names the programs in kernel stacks, so that they are left out)")
}

// jitSetting is net.core.bpf_jit_enable's value ("0" off, "1" on, "2"
// on with a debug dump), "" when it cannot be read.
func jitSetting() string {
	b, err := os.ReadFile(JITEnable)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// errNotSupp is the kernel's ENOTSUPP (524), which the kernel returns
// from bpf(2) though it is no user-space errno (x/sys/unix has no name).
const errNotSupp = unix.Errno(524)

// jitRefuses is the one line to print when the kernel refused a program
// with ENOTSUPP while its JIT is on: 32-bit ARM's JIT (6.1) refuses
// programs its interpreter runs (dropmon's, iolat's, a 64-bit compare and
// exchange: each loads and runs there with the JIT off). nil otherwise.
func jitRefuses(err error) error {
	if !errors.Is(err, errNotSupp) {
		return nil
	}
	if jitSetting() != "1" {
		return nil
	}
	return errors.New("load BPF programs: the kernel's BPF JIT cannot compile them (operation not supported; 32-bit ARM's lacks instructions they use), and its interpreter can: turn the JIT off with 'sysctl -w net.core.bpf_jit_enable=0'")
}

// permissionHint follows a refusal to load.
const permissionHint = " (needs root, or CAP_BPF and CAP_PERFMON; with them, kernel lockdown, a security module or a seccomp filter can still forbid BPF)"

// memlockHint is what cilium/ebpf adds to every EPERM from creating a map
// or loading a program. RemoveMemlock has raised the limit wherever the
// kernel charges it (before 5.11); elsewhere the hint is false.
const memlockHint = " (MEMLOCK may be too low, consider rlimit.RemoveMemlock)"

// noMemlockHint is an error without memlockHint in its text.
type noMemlockHint struct{ err error }

func (e noMemlockHint) Error() string { return strings.ReplaceAll(e.err.Error(), memlockHint, "") }
func (e noMemlockHint) Unwrap() error { return e.err }

// firstLineInfo gives the first instruction a comment when any other has
// one: comments become BTF line info, and the kernel rejects line info that
// does not start at instruction 0 ("missing bpf_line_info for func#0").
func firstLineInfo(insns asm.Instructions) {
	if len(insns) == 0 || insns[0].Source() != nil {
		return
	}
	for _, ins := range insns[1:] {
		if ins.Source() != nil {
			insns[0] = insns[0].WithSource(asm.Comment("program start"))
			return
		}
	}
}

// lowFiles is an open-files limit low enough to explain a failed feature
// probe (a few maps and programs, per-CPU perf events on a large machine).
const lowFiles = 256

// fdError is the one line for a load that ran out of file descriptors (a
// map's or a program's): EMFILE is no verifier rejection, though the
// verifier's log of a program that passed comes with it. nil for any other
// error.
func fdError(err error) error {
	var lim unix.Rlimit
	_ = unix.Getrlimit(unix.RLIMIT_NOFILE, &lim)
	switch {
	case errors.Is(err, unix.EMFILE):
		return fmt.Errorf("load BPF programs: too many open files: the limit is %d (ulimit -n); each map and program takes one, raise it", lim.Cur)
	case errors.Is(err, ebpf.ErrNotSupported) && lim.Cur < lowFiles:
		// cilium/ebpf's feature probes take a descriptor too: out of them,
		// they conclude the kernel lacks a feature every kernel we run on
		// has.
		return fmt.Errorf("load BPF programs: %w: with %d open files allowed (ulimit -n), most likely out of them: raise the limit", err, lim.Cur)
	case errors.Is(err, unix.ENFILE):
		return errors.New("load BPF programs: the system's open files are at their limit (fs.file-max)")
	}
	return nil
}
