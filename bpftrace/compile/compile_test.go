package compile

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/cilium/ebpf/btf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/bpftrace/check"
	"github.com/tracekit/tracekit/bpftrace/parse"
	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/internal/loadtest"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/kbtf"
	"github.com/tracekit/tracekit/stacks"
	"github.com/tracekit/tracekit/stacks/prog"
	"github.com/tracekit/tracekit/tracefs"
	"github.com/tracekit/tracekit/uprobe"
)

// scripts are the programs whose bytecode the goldens pin and the
// kernel loads: each construct the compiler takes, in a few programs.
var scripts = map[string]string{
	"unsafe": `t:syscalls:sys_enter_kill /pid == cpid/ { signal("usr1"); system("echo %d %s", args->sig, comm); }
BEGIN { system("true"); }`,
	"mapops": `t:syscalls:sys_enter_write /pid == cpid/ { @i = @i + 1; @n = count(); @s[@i % 2] = sum(@i);
	if (@i == 2) { print(@n); zero(@s); } if (@i == 4) { clear(@n); print(@s, 1, $1); } }`,
	"count": `t:syscalls:sys_enter_write { @[comm] = count(); @n = count(); } t:syscalls:sys_enter_write /pid == cpid/ { @c = count(); }`,
	"latency": `t:syscalls:sys_enter_write { @start[tid] = nsecs; }
t:syscalls:sys_exit_write /@start[tid]/ { @ns[comm, pid] = hist(nsecs - @start[tid]); delete(@start[tid]); }`,
	"aggregations": `t:syscalls:sys_enter_write /args->count > 0 && pid != 1/ {
	@sum = sum(args->count); @min = min(args->count); @max = max(args->count);
	@avg[cpu] = avg(args->count); @stats = stats(args->count);
	@lhist = lhist(args->count, 0, 4096, 512); @bytes[args->fd] += args->count; @calls++;
}`,
	"printf": `t:syscalls:sys_enter_openat /comm == "cat" || uid == 0/ {
	printf("%-16s %6d %s\n", comm, pid, str(args->filename));
	@files[str(args->filename)] = count();
	if (args->flags & 64) { @creat = count(); } else { @plain = count(); }
	$n = args->dfd < 0 ? -args->dfd : args->dfd; @dfd = max($n);
	cat("/proc/%d/stat", pid);
	printf("%r %r %r %s\n", buf(args->filename, args->dfd & 7), buf(args->filename, 5), buf("a\tb", 3), strftime("%H:%M:%S.%f", nsecs));
}`,
	"strings": `t:sched:sched_switch { @next[args->next_comm] = count(); @last = args->prev_comm; }
t:sched:sched_process_exec { @exec[str(args->filename)] = count(); printf("%s %s\n", probe, args->filename); exit(); }`,
	"user": `BEGIN { @names[1] = "stdout"; @names[2] = "stderr"; printf("%s\n", $1); }
t:syscalls:sys_enter_write /@names[args->fd] == "stderr"/ { time("%H:%M:%S "); printf("%s\n", @names[args->fd]); @e = max(elapsed); }
interval:s:1 { time(); print(@e); clear(@e); }
END { zero(@e); }`,
	"kprobe": `kprobe:vfs_read,kprobe:vfs_write /arg2 > 100/ { @bytes[func] = sum(arg2); @start[tid] = nsecs; @path[tid] = str(arg1); }
kretprobe:vfs_read /@start[tid]/ { @lat[func, retval < 0] = hist(nsecs - @start[tid]); delete(@start[tid]); }`,
	"uprobe": `uprobe:/bin/bash:readline { @start[tid] = nsecs; }
uretprobe:/bin/bash:readline /@start[tid]/ { printf("%s %d %s\n", probe, pid, str(retval)); @lines[comm] = count(); delete(@start[tid]); }
uprobe:/bin/bash:readline { $f = usym(arg0); printf("%s %s\n", $f, usym(arg1)); @fn[usym(arg0), comm] = count(); }`,
	"walks": `kprobe:tcp_connect { $sk = (struct sock *)arg0; @fam[$sk->__sk_common.skc_family] = count(); @parent[curtask->real_parent->comm, (uint16)curtask->pid] = count(); }
t:syscalls:sys_enter_clock_nanosleep { @ns = hist(args->rqtp->tv_nsec); @s = sum((int8)args->rqtp->tv_sec); }
uprobe:/bin/bash:readline { $t = (struct __kernel_timespec *)arg0; @u = max($t->tv_nsec); }
kprobe:vfs_read { $t = (struct task_struct *)curtask; $p = ((struct task_struct *) $t->real_parent); @pp[$p->pid] = count();
	printf("%r %r\n", buf($t->comm), buf($t->real_parent, $p->pid & 15)); }`,
	"kstack":    `t:syscalls:sys_enter_getppid { @[kstack] = count(); @s[kstack(3), comm] = count(); @k[ksym(kaddr("vfs_read") + 16)] = count(); printf("%s\n", ksym(kaddr("vfs_read"))); }`,
	"ntop":      `kprobe:tcp_connect { $sk = (struct sock *)arg0; @[ntop($sk->__sk_common.skc_rcv_saddr), bswap((uint16)$sk->__sk_common.skc_family)] = count(); printf("%s %s\n", ntop(AF_INET6, $sk->__sk_common.skc_v6_daddr), ntop($sk->__sk_common.skc_v6_rcv_saddr)); }`,
	"join":      `t:syscalls:sys_enter_execve { join(args->argv); } t:sched:sched_process_exec { printf("%d\n", pid); }`,
	"profile":   `profile:hz:99 /pid != 0/ { @[comm, cpu] = count(); } software:page-faults:100 { @pf = count(); }`,
	"constants": `t:syscalls:sys_enter_openat /(args->flags & O_CREAT) && args->dfd != AF_INET6/ { @[TCP_SYN_SENT + TASK_RUNNING] = count(); }`,
	// comm is at offset 4 mod 8 (44 on 6.18): copied in 4-byte loads.
	"unaligned": `t:block:block_rq_issue { @[args->comm] = hist(args->bytes); }`,
	// Variables that hold a string or an address in a stack slot, set
	// in two branches to values of two sizes (tcpdrop.bt's $saddr).
	"vars": `kprobe:tcp_connect { $sk = (struct sock *)arg0; $c = comm;
	if ($sk->__sk_common.skc_family == AF_INET) { $a = ntop($sk->__sk_common.skc_rcv_saddr); $w = "v4"; }
	else { $a = ntop($sk->__sk_common.skc_v6_rcv_saddr); $w = "not v4"; }
	printf("%s %s %s\n", $c, $a, $w); @[$a, $w] = count(); }`,
	// An interval that keeps state and reads the kernel: a program on
	// one CPU's clock; *x reads 8 bytes at an integer's address.
	"interval": `interval:ms:100 /@i < 4/ { @i = @i + 1; $a = kaddr("vfs_read"); printf("%d %d\n", *$a, *($a + 8)); if (@i == 4) { exit(); } }
interval:s:1 { print(@i); }`,
	// The predicate's map reads reused by the body, where they ran
	// whenever it runs (not the right of ||, nor of && under ||); pid
	// and tid from one helper call.
	"reuse": `t:syscalls:sys_enter_read { @start[tid] = nsecs; @fd[tid] = args->fd; }
t:syscalls:sys_exit_read /@start[tid] && @fd[tid] > 2 || @start[pid]/ {
	@ns[@fd[tid]] = hist(nsecs - @start[tid]); @x = @start[pid];
	if (@fd[tid] == 3) { @fd[tid] = 4; } @y = @fd[tid]; delete(@start[tid]); @z = @start[tid]; }
t:syscalls:sys_exit_read /@start[tid] && @fd[tid] > 2/ { @w = @fd[tid] + @start[tid]; }`,
	// A usdt probe's arguments from its site's specs (usdtSpecs).
	"usdt": `usdt:/usr/bin/tk:tk:args /arg0 < 0/ { printf("%d %s %d\n", arg0, str(arg2), arg3); @[probe] = sum(arg1); @v = max(arg4); @t = min(arg5); }`,
	// ustack: the probe is the stack pipeline's gate; its last statement
	// leaves a record (the other keys, the value) for user space.
	"ustack":        `t:syscalls:sys_enter_write /pid != 1/ { @n = count(); $c = args->count; @u[ustack(5), comm, kstack, $c] = hist($c); }`,
	"ustack_printf": `uprobe:/bin/bash:readline { printf("%d %s %s\n", pid, ustack, comm); }`,
	"arith": `t:syscalls:sys_exit_write /args->ret >= 0/ {
	$x = args->ret; $y = ($x * 3 + 7) / 2 % 5 - ($x << 2) ^ ($x >> 1) | ~$x & 255;
	@v = sum(!$y + (-$x < 0)); unroll(3) { @u = count(); }
	if (gid > 0) { return; }
	@w = count();
}`,
}

// newReaders are the goldens' reading helpers: 5.5's and later.
func newReaders() asm.Readers { return asm.NewReaders }

// testTypes are a few kernel types of made-up layout, for the goldens:
// the running kernel's change from one build to the next.
type testTypes map[string]btf.Type

func (f testTypes) Named(name string) (btf.Type, error) {
	if t, ok := f[name]; ok {
		return t, nil
	}
	return nil, fmt.Errorf("no type %s", name)
}

func (f testTypes) Complete(t btf.Type) (btf.Type, error) { return t, nil }

func fakeTypes() testTypes {
	i32 := &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}
	u16 := &btf.Int{Name: "unsigned short", Size: 2}
	u32 := &btf.Int{Name: "unsigned int", Size: 4}
	i64 := &btf.Int{Name: "long long", Size: 8, Encoding: btf.Signed}
	char := &btf.Int{Name: "char", Size: 1, Encoding: btf.Signed}
	task := &btf.Struct{Name: "task_struct", Size: 64}
	task.Members = []btf.Member{
		{Name: "pid", Type: i32, Offset: 8 * 8},
		{Name: "real_parent", Type: &btf.Pointer{Target: task}, Offset: 16 * 8},
		{Name: "comm", Type: &btf.Array{Type: char, Nelems: 16}, Offset: 36 * 8}, // 4 mod 8
	}
	common := &btf.Struct{Name: "sock_common", Size: 40, Members: []btf.Member{
		{Name: "skc_family", Type: u16, Offset: 2 * 8},
		{Name: "skc_rcv_saddr", Type: u32, Offset: 4 * 8},
		{Name: "skc_v6_daddr", Type: &btf.Array{Type: &btf.Int{Name: "unsigned char", Size: 1}, Nelems: 16}, Offset: 8 * 8},
		{Name: "skc_v6_rcv_saddr", Type: &btf.Struct{Name: "in6_addr", Size: 16}, Offset: 24 * 8},
	}}
	sock := &btf.Struct{Name: "sock", Size: 32, Members: []btf.Member{{Name: "__sk_common", Type: common}, {Name: "sk_rcvbuf", Type: i32, Offset: 20 * 8}}}
	ts := &btf.Struct{Name: "__kernel_timespec", Size: 16, Members: []btf.Member{{Name: "tv_sec", Type: i64}, {Name: "tv_nsec", Type: i64, Offset: 8 * 8}}}
	return testTypes{"struct task_struct": task, "struct sock": sock, "struct __kernel_timespec": ts}
}

// functionTarget is a kprobe's or uprobe's target, as the tool resolves
// it, without looking: the goldens and the loads need no such function.
func functionTarget(ap *parse.AttachPoint) []Target {
	ret := strings.HasPrefix(ap.Provider, "kret") || strings.HasPrefix(ap.Provider, "uret")
	if strings.HasPrefix(ap.Provider, "u") {
		return []Target{{Provider: ap.Provider, Func: ap.Parts[1], Probe: tracefs.Probe{Type: tracefs.Uprobe, Path: ap.Parts[0], Ret: ret}}}
	}
	return []Target{{Provider: ap.Provider, Func: ap.Parts[0], Probe: tracefs.Probe{Type: tracefs.Kprobe, Symbol: ap.Parts[0], Ret: ret}}}
}

// usdtSpecs are a USDT site's arguments as each CPU's sys/sdt.h writes
// them: registers, constants, the stack, and on x86-64 a rip-relative
// global and an indexed table.
var usdtSpecs = map[string]struct {
	machine elf.Machine
	specs   string
}{
	"amd64":   {elf.EM_X86_64, "-4@%eax 8@%rdx 8@-32(%rbp) 1@$5 -2@tk_global(%rip) -8@tk_table(,%rax,8)"},
	"arm64":   {elf.EM_AARCH64, "-4@x0 8@x1 8@[sp, 16] 1@5 -2@x3 -8@[x2]"},
	"riscv64": {elf.EM_RISCV, "-4@a0 8@a1 8@16(sp) 1@5 -2@a3 -8@0(a5)"},
	"arm":     {elf.EM_ARM, "-4@r0 4@r1 4@[r7, #120] 1@#5 -2@r3 -8@r8"},
}

// usdtTarget is a usdt probe's one site, with the arguments of arch's
// specs, where the file would have them.
func usdtTarget(ap *parse.AttachPoint, arch string) []Target {
	spec := usdtSpecs[arch]
	args, err := uprobe.ParseArgs(spec.specs, spec.machine)
	if err != nil {
		panic(err) // the table's own
	}
	for i := range args {
		if args[i].Sym != "" {
			args[i].SymAddr = 0x4010
		}
	}
	return []Target{{Provider: "usdt", Func: "tk:args", Probe: tracefs.Probe{Type: tracefs.Uprobe, Path: ap.Parts[0], Offset: 0x1130}, USDT: &USDTSite{Addr: 0x1130, Args: args}}}
}

// testdataTargets resolves attach points from testdata's formats.
func testdataTargets(ap *parse.AttachPoint) ([]Target, error) {
	if ap.Provider == "usdt" {
		return usdtTarget(ap, "amd64"), nil
	}
	return targets(ap, func(group, name string) (*tracefs.Format, error) {
		b, err := os.ReadFile(filepath.Join("testdata", name+".6.18.format"))
		if err != nil {
			return nil, err
		}
		return tracefs.ParseFormat(string(b))
	})
}

// kernelTargets resolves them from the running kernel's formats.
func kernelTargets(ap *parse.AttachPoint) ([]Target, error) {
	if ap.Provider == "usdt" {
		return usdtTarget(ap, runtime.GOARCH), nil
	}
	return targets(ap, tracefs.ReadFormat)
}

// targets resolves an attach point as the tool would, a tracepoint's
// format from format.
func targets(ap *parse.AttachPoint, format func(group, name string) (*tracefs.Format, error)) ([]Target, error) {
	switch ap.Provider {
	case "profile", "software", "hardware":
		return []Target{{Provider: ap.Provider, Raw: ap.Raw}}, nil
	case "tracepoint":
	default:
		return functionTarget(ap), nil
	}
	f, err := format(ap.Parts[0], ap.Parts[1])
	if err != nil {
		return nil, err
	}
	return []Target{{Provider: "tracepoint", Group: ap.Parts[0], Name: ap.Parts[1], Format: f}}, nil
}

func compileScript(t *testing.T, src string, tps func(*parse.AttachPoint) ([]Target, error), regs ...*asm.Regs) (*Result, error) {
	t.Helper()
	prog, err := parse.Parse("test.bt", src, nil)
	if err != nil {
		t.Fatal(err)
	}
	isConst := func(name string) bool { _, ok := Macros[name]; return ok || name == "TCP_SYN_SENT" }
	if err := check.Check("test.bt", prog, check.Options{Const: isConst, Unsafe: true}); err != nil {
		return nil, err
	}
	r, err := asm.PtRegs("amd64")
	if err != nil {
		t.Fatal(err)
	}
	if len(regs) > 0 {
		r = regs[0]
	}
	// The kernel's enumerators, as its BTF would give them.
	enums := func(name string) (int64, bool) { v, ok := map[string]int64{"TCP_SYN_SENT": 2}[name]; return v, ok }
	types := Types(fakeTypes())
	if len(regs) > 0 { // the running kernel's, where it has BTF
		types = nil
		if spec, err := kbtf.Kernel(); err == nil {
			types = KernelTypes(spec)
		}
	}
	kaddr := func(name string) (uint64, bool) { return 0xffffffff81234560, name == "vfs_read" }
	return Compile(prog, Options{File: "test.bt", Resolve: tps, Readers: newReaders, Regs: r, CPid: 4242, Start: 1e9, Const: enums, Types: types, Kaddr: kaddr})
}

// TestUSDTArches: the usdt script compiles for each CPU's specs and
// registers (the load test takes the host's; the guests load theirs).
func TestUSDTArches(t *testing.T) {
	for arch := range usdtSpecs {
		regs, err := asm.PtRegs(arch)
		if err != nil {
			t.Fatal(err)
		}
		tps := func(ap *parse.AttachPoint) ([]Target, error) { return usdtTarget(ap, arch), nil }
		if _, err := compileScript(t, scripts["usdt"], tps, regs); err != nil {
			t.Errorf("%s: %v", arch, err)
		}
	}
}

// goldenText is what a golden pins of a compiled script: its maps, its
// printfs, each program and the stack pipeline's gate.
func goldenText(res *Result) string {
	var b strings.Builder
	for _, m := range res.Maps {
		fmt.Fprintf(&b, "# %s: %s %v kind %d key %d bytes value %d bytes per-CPU %v\n", m.BPFName, m.Name, m.Keys, m.Kind, m.KeySize(), m.ValueSize(), m.PerCPU)
	}
	for i, p := range res.Printfs {
		if p.MapOp != "" {
			fmt.Fprintf(&b, "# printf %d: %s(%s) top %d div %d\n", i, p.MapOp, p.Map, p.Top, p.Div)
			continue
		}
		fmt.Fprintf(&b, "# printf %d: %q %v exit %v\n", i, p.Format, p.Args, p.Exit)
	}
	for _, a := range res.Attach {
		fmt.Fprintf(&b, "\n%s on %s\n", a.Program, a.Target.ProbeName())
		b.WriteString(golden.Program(res.Spec.Programs[a.Program].Instructions))
	}
	if u := res.Ustack; u != nil {
		fmt.Fprintf(&b, "\nthe stack pipeline's gate on %s: record %d bytes at fp%d %v value %v kernel %v map %v %s printf %d\n",
			u.Targets[0].ProbeName(), u.Record, u.RecordAt, u.Layout, u.Value, u.Kernel, u.Map != nil, u.Call, u.Printf)
		b.WriteString(golden.Program(u.Gate))
	}
	return b.String()
}

// TestGolden pins each script's programs and maps.
func TestGolden(t *testing.T) {
	for name, src := range scripts {
		t.Run(name, func(t *testing.T) {
			res, err := compileScript(t, src, testdataTargets)
			if err != nil {
				t.Fatal(err)
			}
			golden.Check(t, name, goldenText(res))
		})
	}
}

// TestLoad hands each script, compiled against the running kernel's
// formats, to its verifier.
func TestLoad(t *testing.T) {
	privtest.Require(t)
	names := make([]string, 0, len(scripts))
	for name := range scripts {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if (name == "walks" || name == "ntop" || name == "vars") && privtest.NoBTF(t) {
			continue // casts need the kernel's BTF
		}
		regs, err := asm.HostPtRegs()
		if err != nil {
			t.Fatal(err)
		}
		res, err := compileScript(t, scripts[name], kernelTargets, regs)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		loadtest.Spec(t, name, res.Spec)
		if u := res.Ustack; u != nil {
			// The gate in the stack pipeline's sampler, as StartEvent
			// loads it, beside the script's maps.
			spec, err := stacks.EventSpec(stacks.StackEvent{Event: prog.Event{Type: u.Type, Regs: u.Regs, Gate: u.Gate, Record: u.Record, RecordAt: u.RecordAt}, Kernel: u.Kernel})
			if err != nil {
				t.Errorf("%s: %v", name, err)
				continue
			}
			for n, m := range res.Spec.Maps {
				spec.Maps[GateMap(n)] = m.Copy()
			}
			loadtest.Spec(t, name+"'s gate", spec)
		}
	}
}

// TestRefused: what the compiler does not take is refused with its place.
func TestRefused(t *testing.T) {
	for _, c := range []struct{ src, want string }{
		{`watchpoint:0x1000:8:w { @ = count(); }`, "watchpoint"},
		{`t:syscalls:sys_enter_write { @ = NO_SUCH_CONSTANT; }`, `test.bt:1:34: unknown name "NO_SUCH_CONSTANT"`},
		{`t:syscalls:sys_enter_write { @ = arg0; }`, "test.bt:1:34: arg0 is not in tracepoint probes"},
		{`kprobe:vfs_read { @ = args->count; }`, "test.bt:1:23: args is not in kprobe probes"},
		{`kprobe:vfs_read { @ = arg7; }`, "arg7: the arguments in registers are arg0 to arg5"},
		{`t:syscalls:sys_enter_write { @x[ustack] = count(); @y = 1; }`, "test.bt:1:33: ustack is taken in one statement of a probe, its last"},
		{`t:syscalls:sys_enter_write { printf("%d\n", ustack + 1); }`, "test.bt:1:45: '+' takes integers, not a stack"},
		{`t:syscalls:sys_enter_write /ustack/ { @ = count(); }`, "test.bt:1:29: ustack in a predicate"},
		{`t:syscalls:sys_enter_write { @x[ustack] = 1; }`, "test.bt:1:30: ustack is a key of a map an aggregation is assigned"},
		{`t:syscalls:sys_enter_write { @x[ustack] = count(); }
t:syscalls:sys_exit_write { @y[ustack] = count(); }`, "test.bt:2:1: ustack is taken in one probe of a program here"},
		{`t:syscalls:sys_enter_write { @x[ustack(200)] = count(); }`, "ustack's frames: 1 to 127"},
		{`t:syscalls:sys_enter_write { @x[ustack(perf, 3)] = count(); }`, "ustack(perf): bpftrace's format and a number of frames are taken"},
		{`t:syscalls:sys_enter_write { @[kstack(200)] = count(); }`, "kstack's frames: 1 to 127"},
		{`t:syscalls:sys_enter_write { @ = kaddr("no_such_symbol"); }`, `kaddr("no_such_symbol"): no such symbol`},
		{`t:syscalls:sys_enter_write { @ = args->nosuch; }`, `test.bt:1:34: tracepoint:syscalls:sys_enter_write has no field "nosuch" (fields: __syscall_nr, fd, buf, count)`},
		{`t:syscalls:sys_enter_write { while (1) { @ = 1; } }`, "while is not taken"},
		{`kprobe:f { @ = ((struct sock *)arg0)->nosuch; }`, "test.bt:1:37: struct sock has no member nosuch (it has __sk_common, sk_rcvbuf...)"},
		{`kprobe:f { @ = ((struct sock *)arg0).sk_rcvbuf; }`, ".sk_rcvbuf of a pointer: use ->sk_rcvbuf"},
		{`kprobe:f { @ = ((struct sock *)arg0)->__sk_common->skc_family; }`, "->skc_family of a struct, not of a pointer: use .skc_family"},
		{`kprobe:f { @ = (struct nosuch *)arg0; }`, "struct nosuch: not a type of the kernel's BTF"},
		{`kprobe:f { @ = arg0->x; }`, "-> of an integer: cast it to the struct it points at first, (struct NAME *)"},
		{`kprobe:f { @ = (struct sock)arg0; }`, "(struct sock) casts to an integer type or to a pointer here"},
		{`BEGIN { @x = pid; }`, "test.bt:1:9: BEGIN assigns constants to maps' elements here, nothing else yet"},
		{`END { @x = 1; }`, "BEGIN and END take printf, cat, system, print, clear, zero, time and exit here"},
		{`interval:us:10 { exit(); }`, "interval probes run every 1 ms or more here"},
		{`t:syscalls:sys_enter_write { $s = comm; $s = 1; }`, "test.bt:1:41: $s holds a string, and is assigned an integer here"},
		{`t:syscalls:sys_enter_write { @ = lhist(pid, 10, 0, 1); }`, "lhist(value, min, max, step) wants min < max"},
	} {
		_, err := compileScript(t, c.src, testdataTargets)
		var pe *parse.Error
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want a refusal with %q", c.src, err, c.want)
		}
	}
}

// FuzzCompile: any program the checker takes compiles or is refused in
// one line with its place; nothing panics, and no program is longer than
// the 4096 instructions old kernels take.
func FuzzCompile(f *testing.F) {
	for _, src := range scripts {
		f.Add(src)
	}
	f.Add(`t:syscalls:sys_enter_write { $x = (struct sock *)arg0; @[$x->__sk_common.skc_family, ntop($x->__sk_common.skc_v6_daddr)] = lhist(args->count, -5, 5, 1); }`)
	f.Fuzz(func(t *testing.T, src string) {
		prog, err := parse.Parse("fuzz.bt", src, nil)
		if err != nil {
			return
		}
		isConst := func(name string) bool { _, ok := Macros[name]; return ok }
		if check.Check("fuzz.bt", prog, check.Options{Const: isConst}) != nil {
			return
		}
		r, err := asm.PtRegs("amd64")
		if err != nil {
			t.Fatal(err)
		}
		resolve := func(ap *parse.AttachPoint) ([]Target, error) {
			if ap.Provider == "tracepoint" && (len(ap.Parts) != 2 || strings.ContainsAny(ap.Raw, "*?/")) {
				return nil, fmt.Errorf("%s: no such tracepoint here", ap.Raw)
			}
			if ap.Provider == "tracepoint" {
				if _, err := os.Stat(filepath.Join("testdata", ap.Parts[1]+".6.18.format")); err != nil {
					return nil, err
				}
			}
			if (ap.Provider == "uprobe" || ap.Provider == "uretprobe") && len(ap.Parts) != 2 {
				return nil, fmt.Errorf("%s: a uprobe is written PATH:FUNCTION", ap.Raw)
			}
			return testdataTargets(ap)
		}
		res, err := Compile(prog, Options{File: "fuzz.bt", Resolve: resolve, Readers: newReaders, Regs: r, Types: fakeTypes()})
		if err != nil {
			if strings.Count(err.Error(), "\n") > 0 {
				t.Errorf("a refusal of more than one line: %q", err)
			}
			return
		}
		for name, p := range res.Spec.Programs {
			if len(p.Instructions) > 4096 {
				t.Errorf("%s: %d instructions", name, len(p.Instructions))
			}
		}
	})
}
