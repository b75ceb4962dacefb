package compile

import (
	"fmt"
	"math/rand"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/internal/loadtest"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/kbtf"
	"github.com/tracekit/tracekit/proctree"
	"github.com/tracekit/tracekit/uprobe"
)

// A small BTF of our own: struct layouts fixed for the goldens, whatever
// kernel the tests run on.
func testBTF(t *testing.T) (*kbtf.Spec, *btf.Pointer) {
	t.Helper()
	u8 := &btf.Int{Name: "char", Size: 1, Encoding: btf.Signed}
	u16 := &btf.Int{Name: "unsigned short", Size: 2}
	u32 := &btf.Int{Name: "unsigned int", Size: 4}
	s32 := &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}
	dev := &btf.Struct{Name: "net_device", Size: 64, Members: []btf.Member{
		{Name: "name", Type: &btf.Array{Type: u8, Index: u32, Nelems: 16}, Offset: 0},
		{Name: "ifindex", Type: s32, Offset: 8 * 16},
	}}
	skb := &btf.Struct{Name: "sk_buff", Size: 256, Members: []btf.Member{
		{Name: "", Type: &btf.Union{Size: 8, Members: []btf.Member{{Name: "dev", Type: &btf.Pointer{Target: dev}}}}, Offset: 8 * 16},
		{Name: "len", Type: u32, Offset: 8 * 112},
		{Name: "protocol", Type: u16, Offset: 8 * 180},
	}}
	b, err := btf.NewBuilder([]btf.Type{skb, dev}, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := b.Marshal(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := kbtf.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return spec, &btf.Pointer{Target: skb}
}

func targets(t *testing.T) map[string]Target {
	spec, skbPtr := testBTF(t)
	s32 := &btf.Int{Name: "int", Size: 4, Encoding: btf.Signed}
	cstr := &btf.Pointer{Target: &btf.Const{Type: &btf.Int{Name: "char", Size: 1, Encoding: btf.Signed}}}
	openat := tooltest.Format(t, "sys_enter_openat.6.18.format")
	var specs []uprobe.Arg
	for _, a := range []string{"-4@%r13d", "1@%dl", "-4@$-9", "8@$0x1122334455", "-4@112(%rsp)", "-8@(%rax)", "-8@0(%rbp,%rdx,8)", "-8@tk_table(,%rax,8)", "-8@tk_global(%rip)", "8@%r15"} {
		arg, err := uprobe.ParseArg(a)
		if err != nil {
			t.Fatal(err)
		}
		arg.SymAddr = map[string]uint64{"tk_table": 0x404040, "tk_global": 0x4010}[arg.Sym]
		specs = append(specs, arg)
	}
	// riscv64's forms (its registers' offsets are inside x86-64's
	// pt_regs too, so every host's verifier loads them), a non-PIE's
	// %lo global read at its address.
	var rvSpecs []uprobe.Arg
	for _, a := range []string{"-4@a0", "-8@-20(s0)", "8@a5", "-8@%lo(tk_global)(s10)", "-4@-9"} {
		arg, err := uprobe.ParseArgRISCV64(a)
		if err != nil {
			t.Fatal(err)
		}
		arg.SymAddr = map[string]uint64{"tk_global": 0x12080}[arg.Sym]
		rvSpecs = append(rvSpecs, arg)
	}
	// 32-bit ARM's forms: 4-byte registers, a register pair, an index.
	var armSpecs []uprobe.Arg
	for _, a := range []string{"-4@r3", "-8@r9", "4@fp", "1@ip", "-4@[r7, #120]", "-4@[r4, r1, lsl #2]", "-4@#5"} {
		arg, err := uprobe.ParseArgARM(a)
		if err != nil {
			t.Fatal(err)
		}
		armSpecs = append(armSpecs, arg)
	}
	uprobeT := Target{Event: &Registers{Args: UprobeArgs(asm.AMD64), UserSpace: true}, Read: asm.NewReaders}
	uretT := uprobeT
	uretT.Event = &Registers{Args: UretprobeArgs(asm.AMD64), UserSpace: true}
	// 32-bit ARM's 4-byte registers (inside x86-64's pt_regs too: every
	// host's verifier loads them).
	uprobeARM := uprobeT
	uprobeARM.Event = &Registers{Args: UprobeArgs(asm.ARM), UserSpace: true, Width: asm.ARM.Width}
	return map[string]Target{
		"usdt":         {Event: &USDT{Args: specs, Site: 0x10ac, Regs: asm.AMD64}, Read: asm.NewReaders},
		"usdt_none":    {Event: &USDT{Args: []uprobe.Arg{}, Site: 0x1092, Regs: asm.AMD64}, Read: asm.OldReaders, SelfPid: 4242},
		"usdt_riscv64": {Event: &USDT{Args: rvSpecs, Site: 0x106e4, Regs: asm.RISCV64}, Read: asm.NewReaders},
		"usdt_arm":     {Event: &USDT{Args: armSpecs, Site: 0x5d8, Regs: asm.ARM}, Read: asm.NewReaders},
		"uprobe":       uprobeT,
		"uprobe_arm":   uprobeARM,
		"uprobe_tree": func() Target {
			t := uprobeT
			t.Tree, t.SelfPid = true, 4242
			return t
		}(),
		"uprobe_tree_ns": func() Target {
			t := uprobeT
			t.Tree, t.SelfPid, t.NS = true, 1, &asm.PidNS{Dev: 4, Ino: 4026532417}
			return t
		}(),
		"netif_ns":   {Event: &Record{Format: tooltest.Format(t, "netif_receive_skb.6.18.format")}, Read: asm.NewReaders, SelfPid: 1, Pid: 3, NS: &asm.PidNS{Dev: 4, Ino: 4026532417}},
		"usdt_pid":   {Event: &USDT{Args: specs[:2], Site: 0x10ac, Regs: asm.AMD64}, Read: asm.NewReaders, Pid: 1234},
		"uretprobe":  uretT,
		"netif":      {Event: &Record{Format: tooltest.Format(t, "netif_receive_skb.6.18.format")}, BTF: spec, Read: asm.NewReaders},
		"kfree":      {Event: &Record{Format: tooltest.Format(t, "kfree_skb.6.18.format")}, Read: asm.NewReaders},
		"sched":      {Event: &Record{Format: tooltest.Format(t, "sched_kthread_stop.2.6.format")}, Read: asm.OldReaders},
		"netif_self": {Event: &Record{Format: tooltest.Format(t, "netif_receive_skb.6.18.format")}, Read: asm.NewReaders, SelfPid: 4242},
		"switch":     {Event: &Record{Format: tooltest.Format(t, "sched_switch.6.18.format")}, Read: asm.NewReaders},
		"openat":     {Event: &Record{Format: openat, UserSpace: true}, Read: asm.NewReaders},
		"openat_old": {Event: &Record{Format: openat, UserSpace: true}, Read: asm.OldReaders},
		// At the syscall's wrapper (fentry): the same fields, from the
		// user's registers; 6.19+'s format adds __buf_val, a copy of the
		// buffer, which only the record has.
		"openat_entry":     {Event: &SyscallEntry{Format: openat, Regs: asm.AMD64}, Read: asm.NewReaders},
		"write_next":       {Event: &Record{Format: tooltest.Format(t, "sys_enter_write.6.18-next.format"), UserSpace: true}, Read: asm.NewReaders},
		"write_next_entry": {Event: &SyscallEntry{Format: tooltest.Format(t, "sys_enter_write.6.18-next.format"), Regs: asm.AMD64}, Read: asm.NewReaders, SelfPid: 4242},
		"kprobe":           {Event: &Registers{Args: []Arg{{Name: "net", Type: &btf.Pointer{}, RegOff: asm.AMD64.Args[0]}, {Name: "skb", Type: skbPtr, RegOff: asm.AMD64.Args[1]}}}, BTF: spec, Read: asm.NewReaders},
		// 32-bit ARM's kprobe with BTF: 4-byte registers and pointers (the
		// test BTF's offsets are x86-64's; the widths are what is pinned).
		"kprobe_arm": {Event: &Registers{Args: []Arg{{Name: "net", Type: &btf.Pointer{}, RegOff: asm.ARM.Args[0]}, {Name: "skb", Type: skbPtr, RegOff: asm.ARM.Args[1]}}, Width: 4}, BTF: spec, Read: asm.NewReaders},
		"kret":       {Event: &Registers{Args: []Arg{{Name: "ret", Type: &btf.Int{Name: "long", Size: 8, Encoding: btf.Signed}, RegOff: asm.AMD64.Ret}}}, Read: asm.NewReaders},
		"kopen":      {Event: &Registers{Args: []Arg{{Name: "dfd", Type: s32, RegOff: asm.AMD64.Args[0]}, {Name: "filename", Type: cstr, RegOff: asm.AMD64.Args[1]}}}, Read: asm.NewReaders},
		"kopen_old":  {Event: &Registers{Args: []Arg{{Name: "dfd", Type: s32, RegOff: asm.AMD64.Args[0]}, {Name: "filename", Type: cstr, RegOff: asm.AMD64.Args[1]}}}, Read: asm.OldReaders},
		// At a BPF trampoline (Slots): argument i in the context's slot i,
		// a return value after the arguments (ksys_write has three).
		"kprobe_slots": {Event: &Slots{Args: []Arg{{Name: "net", Type: &btf.Pointer{Target: &btf.Struct{Name: "net"}}, RegOff: 0}, {Name: "skb", Type: skbPtr, RegOff: 8}}}, BTF: spec, Read: asm.NewReaders},
		"kopen_slots":  {Event: &Slots{Args: []Arg{{Name: "dfd", Type: s32, RegOff: 0}, {Name: "filename", Type: cstr, RegOff: 8}, {Name: "argv", Type: &btf.Pointer{Target: cstr}, RegOff: 16}}}, Read: asm.NewReaders},
		"kret_slots":   {Event: &Slots{Args: []Arg{{Name: "ret", Type: &btf.Int{Name: "long", Size: 8, Encoding: btf.Signed}, RegOff: 24}}}, Read: asm.NewReaders, SelfPid: 4242},
		// Runs over several events: a kernel function glob's (func, the
		// kprobe_multi link's cookie) and a tracepoint glob's (probe, a
		// constant of the program).
		"kopen_glob": {Event: &Registers{Args: []Arg{{Name: "dfd", Type: s32, RegOff: asm.AMD64.Args[0]}, {Name: "filename", Type: cstr, RegOff: asm.AMD64.Args[1]}}}, Read: asm.NewReaders,
			Func: &Func{Index: 7, Cookie: true, Names: map[uint64]string{7: "do_sys_openat2"}}},
		"openat_glob": {Event: &Record{Format: openat, UserSpace: true}, Read: asm.NewReaders,
			Func: &Func{Index: 3, Names: map[uint64]string{3: "syscalls:sys_enter_openat"}}},
		"openat_cpid": {Event: &Record{Format: openat, UserSpace: true}, Read: asm.NewReaders, CPid: 4321},
		// Stack mode (-s): the last of three functions, inside the other two.
		"kopen_inside":  {Event: &Registers{Args: []Arg{{Name: "dfd", Type: s32, RegOff: asm.AMD64.Args[0]}, {Name: "filename", Type: cstr, RegOff: asm.AMD64.Args[1]}}}, Read: asm.NewReaders, SelfPid: 4242, Inside: 2},
		"uprobe_inside": func() Target { t := uprobeT; t.Inside = 2; return t }(),
	}
}

// compileCases are the expressions the goldens pin and the load test
// proves: one line per variant.
var compileCases = []struct {
	golden, target, expr string
	act                  string // "", "count", "count-by:KEYS", "hist:EXPR", "fields:LIST", "emit" (every field)
}{
	{"netif_name", "netif", `name == "lo"`, ""},
	{"netif_name_ne_len", "netif", `name != "lo" && len >= 1028`, ""},
	{"netif_cast_walk", "netif", `((struct sk_buff *)skbaddr)->dev->name == "lo"`, ""},
	{"kfree_reason_count", "kfree", `reason == "NO_SOCKET" && 0x800 == protocol`, "count"},
	{"sched_comm_pid", "sched", `comm == "kworker/0:1" && pid > -100 && 1000 >= pid`, ""},
	{"kprobe_skb_len", "kprobe", `skb->len > 100 && skb->protocol == 8`, ""},
	{"kprobe_skb_dev", "kprobe", `skb->dev->ifindex != 1`, "count"},
	{"kprobe_skb_dev_arm", "kprobe_arm", `skb->dev->ifindex != 1 && (char *)net == "x"`, "count"},
	{"kret_ret", "kret", `ret < 0`, ""},
	{"no_where", "netif", ``, ""},
	{"no_where_count", "netif", ``, "count"},
	{"sched_comm_ne_long", "sched", `comm != "abcdefghijklmnopqrstuvwxyz"`, ""},
	{"openat_filename", "openat", `filename == "/etc/passwd"`, ""},
	{"openat_prefix_or_not", "openat", `(filename ~ "/etc/*" || filename == "/tmp/x") && !(dfd == -100)`, "count"},
	{"openat_old_prefix", "openat_old", `str(args->filename) ~ "/usr/lib/*"`, ""},
	{"openat_address", "openat", `filename != 0 && flags >= 0x8000`, ""},
	{"builtins", "netif", `pid == 1 || tid != 2 && uid == 0 && gid >= 10 && cpu < 4 || comm == "filter"`, ""},
	{"builtins_count", "switch", `comm ~ "kworker/*" && !(cpu > 1)`, "count"},
	{"field_vs_field", "switch", `prev_pid == next_pid || prev_prio < next_prio && prev_state != 0`, ""},
	{"field_vs_field_count", "switch", `!(prev_pid <= next_pid) && prev_comm == "swapper/0"`, "count"},
	{"kprobe_str_arg", "kopen", `filename == "/etc/passwd" && dfd == -100`, ""},
	{"kprobe_str_arg_old", "kopen_old", `filename ~ "/proc/*" || filename == 0`, "count"},
	{"kprobe_cast_str", "kprobe", `(char *)net == "x" || !((const char *)skb->dev ~ "eth*")`, ""},
	{"kprobe_walk_str", "kprobe", `skb->dev->name ~ "lo*" && skb->dev->ifindex > skb->len`, ""},
	{"double_not", "netif", `!!(len > 3) && !(name == "lo" || name == "eth0")`, ""},
	{"self", "netif_self", `len > 100`, ""},
	{"ns_pid_builtins", "netif_ns", `pid == 3 && tid != 4`, "fields:pid,tid,len"},
	{"emit_openat", "openat", `dfd == -100`, "emit"},
	{"emit_kopen", "kopen", ``, "emit"},
	{"fields_mixed", "netif", `len > 0`, "fields:comm,pid,len,name,((struct sk_buff *)skbaddr)->dev->ifindex"},
	{"fields_sched_old", "sched", ``, "fields:comm,pid,tid,cpu,uid,gid"},
	{"fields_kprobe_walk", "kprobe", `skb->len > 0`, "fields:skb->len,skb->dev->name,cpu"},
	{"count_by_comm_filename", "openat", `filename ~ "/etc/*"`, "count-by:comm,filename"},
	{"count_by_switch", "switch", ``, "count-by:prev_comm,next_pid"},
	{"count_by_kopen", "kopen_old", `dfd == -100`, "count-by:filename,dfd,uid"},
	{"glob_kopen", "kopen_glob", `dfd == -100`, "count-by:func,filename"},
	// Statistics of a value per key (a signed one: min and max compare
	// so), and without a key.
	{"stats_dfd_comm", "openat", `flags == 0`, "stats-max:dfd:comm,filename"},
	{"stats_len", "netif", ``, "stats-sum:len:"},
	// A 16-byte key (comm): a direct-mapped slot before the hash.
	{"stats_sum_comm", "openat", ``, "stats-sum:flags:comm"},
	// Linear histograms: an unsigned value, and a signed one below zero.
	{"lhist_len", "netif", ``, "lhist:len:0:1500:100"},
	{"lhist_dfd", "openat", `flags == 0`, "lhist:dfd:-200:200:50"},
	// Counted by the kernel's stack: an id of the stacks map, and comm.
	{"count_by_kstack", "openat", `dfd == -100`, "count-by:kstack,comm"},
	// Printed with each event: its frames in the per-CPU buffer.
	{"fields_kstack", "openat", `dfd == -100`, "fields:filename,kstack,dfd"},
	{"fields_kstack_kprobe", "kprobe", `skb->len > 100`, "fields:kstack,*skb"},
	// The -c command's own process: cpid, a constant of the program.
	{"cpid_openat", "openat_cpid", `pid == cpid`, "count"},
	{"glob_openat", "openat_glob", `filename ~ "/etc/*"`, "fields:probe,filename"},
	// Stack mode: the chain checked after the pid filters, before --where.
	{"inside_kopen", "kopen_inside", `dfd == -100`, "count"},
	{"count_by_reason", "kfree", ``, "count-by:reason"},
	{"count_by_swapped", "openat", `dfd == -100`, "count-by-swapped:comm,flags"},
	{"hist_len", "netif", `name == "lo"`, "hist:len"},
	{"hist_signed", "openat", ``, "hist:dfd"},
	{"hist_walk", "kprobe", ``, "hist:skb->len"},
	{"usdt_forms", "usdt", ``, "fields:arg0,arg1,arg2,arg3,arg4,arg5,arg6,arg7,arg8"},
	{"usdt_riscv64_forms", "usdt_riscv64", ``, "fields:arg0,arg1,arg2,arg3,arg4"},
	{"usdt_arm_forms", "usdt_arm", ``, "fields:arg0,arg1,arg2,arg3,arg4,arg5,arg6"},
	{"usdt_where", "usdt", `arg0 < 0 && (char *)arg9 == "tk-string" || arg8 == -7`, "count"},
	{"usdt_hist", "usdt", `arg1 != 0`, "hist:arg4"},
	{"usdt_none_count", "usdt_none", ``, "count"},
	{"uprobe_args", "uprobe", `arg1 == 1000 && comm == "fx"`, "count-by:arg0"},
	{"uprobe_args_arm", "uprobe_arm", `arg1 == 1000 && (char *)arg2 == "x"`, "fields:arg0,arg3"},
	{"uretprobe_ret", "uretprobe", `ret == 1007`, "fields:ret,pid"},
	{"uprobe_tree", "uprobe_tree", `arg0 < 5`, "count"},
	{"uprobe_tree_ns", "uprobe_tree_ns", `arg0 < 5 && pid != 9`, "count"},
	{"common_pid_parens", "netif", `common_pid == 1 && ((len)) > 0 && (((struct sk_buff *)skbaddr)->len) > 0`, ""},
	{"usdt_pid", "usdt_pid", `arg0 == -1`, "count"},
	{"entry_openat_prefix_or_not", "openat_entry", `(filename ~ "/etc/*" || filename == "/tmp/x") && !(dfd == -100)`, "count"},
	{"entry_emit_openat", "openat_entry", `__syscall_nr == 257 && mode != 0`, "emit"},
	{"entry_count_by_flags", "openat_entry", `flags > 0`, "count-by:comm,flags,filename"},
	{"entry_hist_count", "write_next_entry", `fd == 1 && pid != 1`, "hist:count"},
	{"emit_write_next", "write_next", `count == 8`, "emit"},
	{"slots_skb_walk", "kprobe_slots", `skb->len > 100 && skb->dev->ifindex != 1`, "count"},
	{"slots_emit_skb", "kprobe_slots", `skb != 0 && net != skb`, "emit"},
	{"slots_str_arg", "kopen_slots", `filename == "/etc/passwd" && dfd == -100`, "count-by:comm,dfd"},
	{"slots_ret", "kret_slots", `ret == 4321`, "hist:ret"},
	// Structures printed whole (bpf_snprintf_btf), built in a per-CPU buffer.
	{"dump_kprobe", "kprobe", `skb->len > 100`, "fields:skb->len,*skb,comm,*skb->dev"},
	{"dump_cast", "netif", `len > 0`, "fields:*((struct sk_buff *)skbaddr),name"},
	{"dump_slots", "kprobe_slots", ``, "fields:*skb"},
	// Arithmetic: unsigned and signed (/ and % on the magnitudes), a
	// constant folded, a right side that waits on the stack (a walk, a
	// builtin), shifts, in each action.
	{"arith_where", "netif", `len - 28 > 100 && (len & 3) == 0 && len / 4 < len % 7 && len * (2 + 3) != 0x100000000`, ""},
	{"arith_signed", "openat", `dfd / flags < -2 && dfd % 3 != 0 && -dfd > mode >> 2`, "count"},
	{"arith_hist", "netif", ``, "hist:len - 28"},
	{"arith_count_by", "kprobe", ``, "count-by:skb->len / 100,pid * 2"},
	{"arith_fields", "openat", ``, "fields:flags << dfd,flags >> 3,dfd >> flags,mode * 0x100000000,dfd / 0,dfd % 0,dfd << 70,(dfd + uid) * tid"},
	{"arith_spill", "kprobe", `skb->len - skb->dev->ifindex > 0`, "fields:skb->len + (skb->len - skb->dev->ifindex),cpu - skb->len"},
	{"arith_stats", "netif", ``, "stats-sum:len * 2:"},
	{"arith_lhist", "openat", ``, "lhist:dfd * 2 - 1:-200:200:50"},
	// usym(): the address, then the process it is in (in a namespace, its pid there).
	{"usym_fields", "uprobe", `arg0 > 1`, "fields:arg0,usym(arg1)"},
	{"usym_key_ns", "uprobe_tree_ns", ``, "count-by:usym(arg0),comm"},
}

// compileCase compiles one case of compileCases.
func compileCase(t *testing.T, ts map[string]Target, i int) *Program {
	t.Helper()
	tc := compileCases[i]
	var root Node
	if tc.expr != "" {
		var err error
		if root, err = Parse(tc.expr); err != nil {
			t.Fatalf("%s: %v", tc.expr, err)
		}
	}
	prog, err := Compile(tc.expr, root, ts[tc.target], caseAction(t, ts[tc.target], tc.act))
	if err != nil {
		t.Fatalf("%s: %v", tc.expr, err)
	}
	return prog
}

// caseAction turns a case's act into an Action.
func caseAction(t *testing.T, target Target, act string) Action {
	if rest, ok := strings.CutPrefix(act, "lhist:"); ok {
		// lhist:EXPR:MIN:MAX:STEP
		f := strings.Split(rest, ":")
		val, err := ParseOperands(f[0], 1)
		if err != nil {
			t.Fatalf("%s: %v", act, err)
		}
		var b [3]int64
		for i := range b {
			if b[i], err = strconv.ParseInt(f[i+1], 10, 64); err != nil {
				t.Fatalf("%s: %v", act, err)
			}
		}
		return Action{Kind: Hist, Hist: val[0], Lhist: &Lhist{Min: b[0], Max: b[1], Step: b[2]}, Option: "--lhist", Source: f[0]}
	}
	if rest, ok := strings.CutPrefix(act, "stats-"); ok {
		// stats-STAT:EXPR:KEYS
		f := strings.SplitN(rest, ":", 3)
		val, err := ParseOperands(f[1], 1)
		if err != nil {
			t.Fatalf("%s: %v", act, err)
		}
		a := Action{Kind: Stats, Hist: val[0], Stat: f[0], StatSource: f[1], Option: "--count-by", Source: f[2]}
		if f[2] != "" {
			if a.Columns, err = ParseOperands(f[2], 0); err != nil {
				t.Fatalf("%s: %v", act, err)
			}
		}
		return a
	}
	kind, list, _ := strings.Cut(act, ":")
	k, ok := map[string]ActionKind{"": Keep, "count": Count, "count-by": CountBy, "count-by-swapped": CountBy, "hist": Hist, "fields": Emit, "emit": Emit}[kind]
	if !ok {
		t.Fatalf("unknown act %q", act)
	}
	a := Action{Kind: k, Option: "--" + kind, Source: list, Swap: kind == "count-by-swapped"}
	switch {
	case kind == "emit":
		a.Columns = target.Event.Columns()
	case list != "":
		ops, err := ParseOperands(list, 0)
		if err != nil {
			t.Fatalf("%s: %v", act, err)
		}
		a.Columns = ops
		if k == Hist {
			a.Columns, a.Hist = nil, ops[0]
		}
	}
	return a
}

// layout prints a program's columns, so the goldens pin what user space
// decodes too.
func layout(p *Program) string {
	var b strings.Builder
	for _, c := range p.Columns {
		kind := "u64"
		switch {
		case c.Frames:
			kind = fmt.Sprintf("kstack, u64[%d]", c.Size/8)
		case c.String:
			kind = fmt.Sprintf("char[%d]", c.Size)
		case c.Pointer:
			kind = "pointer"
		case c.Signed:
			kind = "s64"
		}
		fmt.Fprintf(&b, "column %s: %s at %d\n", c.Name, kind, c.Offset)
	}
	if p.Size > 0 {
		fmt.Fprintf(&b, "size %d\n", p.Size)
	}
	if p.Signed {
		b.WriteString("signed: below zero counted apart\n")
	}
	return b.String()
}

func TestCompileGoldens(t *testing.T) {
	ts := targets(t)
	for i, tc := range compileCases {
		p := compileCase(t, ts, i)
		act := ""
		if tc.act != "" {
			act = "--" + tc.act + "\n"
		}
		golden.Check(t, "compile_"+tc.golden, fmt.Sprintf("%s\n%s%s%v", tc.expr, act, layout(p), p.Insns))
	}
}

// slotFuncs are the kernel functions whose BTF the Slots targets mirror:
// the verifier checks the context's slots against the function's own
// types (ksys_write returns ssize_t after three arguments; do_sys_openat2
// has no argv, which the goldens only name in an error).
var slotFuncs = map[string]string{"kprobe_slots": "ip_send_skb", "kopen_slots": "do_sys_openat2", "kret_slots": "ksys_write"}

// TestCompiledLoad hands every compiled expression to the verifier, as a
// tracepoint or kprobe program as its target says.
func TestCompiledLoad(t *testing.T) {
	privtest.Require(t)
	ts := targets(t)
	for i, tc := range compileCases {
		typ := ebpf.TracePoint
		if _, ok := ts[tc.target].Event.(*Record); !ok && !isEntry(ts[tc.target]) {
			typ = ebpf.Kprobe
		}
		if !hostLoads(t, ts[tc.target]) {
			continue
		}
		p := compileCase(t, ts, i)
		kind := caseAction(t, ts[tc.target], tc.act).Kind
		m := Maps(kind, p)
		if ts[tc.target].Tree {
			m[proctree.PidsMap] = &ebpf.MapSpec{Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: 1}
		}
		if n := ts[tc.target].Inside; n > 0 {
			m[ChainMap] = ChainMapSpec(n)
		}
		if f := ts[tc.target].Func; f != nil && f.Cookie && !haveCookie() {
			t.Logf("%s: this kernel has no bpf_get_attach_cookie (5.15+), which only kprobe_multi runs (5.18+) use: the matrix kernels that have it load it", tc.golden)
			continue
		}
		prog := &ebpf.ProgramSpec{Name: "filter", Instructions: p.Insns}
		if fn, ok := slotFuncs[tc.target]; ok {
			if !hook.HaveFentry(fn) {
				t.Logf("%s: this kernel has no BPF trampoline at %s: the matrix kernels that have one load it", tc.golden, fn)
				continue
			}
			typ, prog.AttachType, prog.AttachTo = ebpf.Tracing, ebpf.AttachTraceFEntry, fn
			if tc.target == "kret_slots" {
				prog.AttachType = ebpf.AttachTraceFExit
			}
		} else if e, ok := ts[tc.target].Event.(*SyscallEntry); ok {
			format := e.Format
			// At the wrapper of this kernel's architecture: the x86-64
			// offsets the goldens pin are inside arm64's pt_regs too.
			name := strings.TrimPrefix(format.Name, "sys_enter_")
			if !hook.HaveFentrySyscall(name) {
				t.Logf("%s: this kernel has no fentry at %s's wrapper (BPF trampolines): the matrix kernels that have one load it", tc.golden, name)
				continue
			}
			regs, _ := asm.HostPtRegs()
			typ, prog.AttachType, prog.AttachTo = ebpf.Tracing, ebpf.AttachTraceFEntry, regs.SyscallPrefix+name
		}
		loadtest.Program(t, tc.golden, typ, prog, m)
	}
}

// At a trampoline a struct pointer is a pointer to the verifier: a
// histogram, which takes its bits, is refused at compile time (auto then
// takes the kprobe), where a kprobe's register holds a plain number.
func TestSlotsHistOfStructPointer(t *testing.T) {
	ts := targets(t)
	_, err := Compile("", nil, ts["kprobe_slots"], caseAction(t, ts["kprobe_slots"], "hist:skb"))
	want := "skb is a struct pointer, which the verifier types at a BPF trampoline: a histogram cannot take its bits; use --attach=perf (a kprobe)"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("--hist skb at a trampoline: %v, want %q", err, want)
	}
	if _, err := Compile("", nil, ts["kprobe"], caseAction(t, ts["kprobe"], "hist:skb")); err != nil {
		t.Errorf("--hist skb at a kprobe: %v", err)
	}
}

func TestBadExpressions(t *testing.T) {
	ts := targets(t)
	for _, tc := range []struct {
		target, expr, want string
	}{
		{"netif", `nme == "lo"`, "event netif_receive_skb has no field \"nme\" (fields: skbaddr, len, name; builtins: pid, tid, comm, cpu, uid, gid, cpid, kstack, ustack)\n  nme == \"lo\"\n  ^"},
		{"netif", `len == "lo"`, "len is a number: compare it with a number\n  len == \"lo\"\n         ^"},
		{"netif", `name < "lo"`, "strings compare only with ==, != and ~ (prefix)\n  name < \"lo\"\n       ^"},
		{"netif", `name == 3`, "name is a string: compare it with a string literal\n  name == 3\n          ^"},
		{"netif", `len = 3`, "'=' is not an operator: use '==' to compare\n  len = 3\n      ^"},
		{"netif", `len == 3 &&`, "expected a field, a number or a string\n  len == 3 &&\n             ^"},
		{"netif", `len 3`, "expected a comparison (== != < <= > >= ~)\n  len 3\n      ^"},
		{"kopen_slots", `argv != 0`, "argument argv (const char * *) cannot be read at a BPF trampoline: use --attach=perf (a kprobe)\n  argv != 0\n  ^"},
		{"write_next_entry", `count > 0 && __buf_val == "x"`, "__buf_val is the kernel's copy of user memory in the stored record; a BPF program on a syscall event is handed only the syscall's number and arguments: compare the argument buf, whose string filter reads from user memory\n  count > 0 && __buf_val == \"x\"\n               ^"},
		{"write_next", `args->__buf_val ~ "x*"`, "__buf_val is the kernel's copy of user memory in the stored record; a BPF program on a syscall event is handed only the syscall's number and arguments: compare the argument buf, whose string filter reads from user memory\n  args->__buf_val ~ \"x*\"\n        ^"},
		{"netif", `skbaddr->len == 3`, "field skbaddr is not a struct pointer that can be walked: cast it, as in ((struct sk_buff *)skbaddr)->len\n  skbaddr->len == 3\n         ^"},
		{"netif", `((struct sk_buff *)len)->len == 3`, "field len (unsigned int) is not a pointer: it cannot be cast to struct sk_buff *\n  ((struct sk_buff *)len)->len == 3\n  ^"},
		{"netif", `((struct nosuch *)skbaddr)->len == 3`, "no struct nosuch in the kernel's BTF\n  ((struct nosuch *)skbaddr)->len == 3\n  ^"},
		{"netif", `((struct sk_buff *)skbaddr)->lenn == 3`, "((struct sk_buff *)skbaddr): struct sk_buff has no member \"lenn\" (members: len, protocol)\n  ((struct sk_buff *)skbaddr)->lenn == 3\n                               ^"},
		{"netif", `((struct sk_buff *)skbaddr)->len->x == 3`, "((struct sk_buff *)skbaddr)->len is unsigned int, not a pointer: use '.' instead of '->'\n  ((struct sk_buff *)skbaddr)->len->x == 3\n                                  ^"},
		{"netif", `len == -1`, "len is unsigned: it is never negative\n  len == -1\n         ^"},
		// Issue 62: silently always false before.
		{"netif", `len < 0`, "len is unsigned: len < 0 never holds\n  len < 0\n        ^"},
		{"netif", `!(len >= 0)`, "len is unsigned: len >= 0 always holds\n  !(len >= 0)\n           ^"},
		{"netif", `len == 0x100000000`, "4294967296 does not fit in len (4 bytes)\n  len == 0x100000000\n         ^"},
		{"netif", `1 == 1`, "compare a field with a constant or another field: both sides are constants\n  1 == 1\n  ^"},
		{"kprobe", `sk->len > 1`, "no argument or builtin \"sk\" (arguments: net, skb; builtins: pid, tid, comm, cpu, uid, gid, cpid, kstack, ustack)\n  sk->len > 1\n  ^"},
		{"kprobe", `skb.len > 1`, "skb is a pointer: use '->'\n  skb.len > 1\n     ^"},
		{"kfree", `reason == "NO_SUCH"`, "reason is a number: compare it with a number, or one of its names: ARP_PVLAN_DISABLE, BPF_CGROUP_EGRESS, BRIDGE_INGRESS_STP_STATE, CAKE_FLOOD, CANFD_RX_INVALID_FRAME, CANXL_RX_INVALID_FRAME, ...\n  reason == \"NO_SUCH\"\n            ^"},
		{"netif", `name == "unterminated`, "unterminated string\n  name == \"unterminated\n          ^"},
		{"netif", `len == 12abc`, "bad number \"12abc\"\n  len == 12abc\n         ^"},
		{"sched", `comm == "abcdefghijklmnopqrstuvwxyz"`, "\"abcdefghijklmnopqrstuvwxyz\" is longer than comm (16 bytes): it never matches\n  comm == \"abcdefghijklmnopqrstuvwxyz\"\n          ^"},
		{"openat", `filename ~ "/etc/*x"`, "~ takes a prefix ending in a single '*', as in \"/etc/*\" (use == for an exact match)\n  filename ~ \"/etc/*x\"\n             ^"},
		{"openat", `filename ~ "/etc/"`, "~ takes a prefix ending in a single '*', as in \"/etc/*\" (use == for an exact match)\n  filename ~ \"/etc/\"\n             ^"},
		{"openat", `filename < "a"`, "strings compare only with ==, != and ~ (prefix)\n  filename < \"a\"\n           ^"},
		{"openat", `"/etc/*" ~ filename`, "the pattern goes on the right: FIELD ~ \"PREFIX*\"\n  \"/etc/*\" ~ filename\n           ^"},
		{"openat", `dfd ~ "1*"`, "~ matches a string prefix: dfd is a number\n  dfd ~ \"1*\"\n      ^"},
		{"openat", `dfd == -2147483649`, "-2147483649 does not fit in dfd (4 bytes, signed)\n  dfd == -2147483649\n         ^"},
		{"openat", `filename == "` + strings.Repeat("x", 128) + `"`, "string literals are limited to 127 bytes\n  filename == \"" + strings.Repeat("x", 128) + "\"\n              ^"},
		{"openat", `!(filename ~ "*") && dfd == 1`, "the expression never holds: no event would pass\n  !(filename ~ \"*\") && dfd == 1\n  ^"},
		{"netif", `common_type > 0`, "common_type is in the record's first 8 bytes, which a BPF program may not read (common_pid reads as the tid builtin; pid is the process)\n  common_type > 0\n  ^"},
		{"netif", `(len == 3`, "expected ')'\n  (len == 3\n           ^"},
		{"netif", `!`, "expected a field, a number or a string\n  !\n   ^"},
		{"netif", `len & 3`, "expected a comparison (== != < <= > >= ~): (len & 3) != 0 tests the bits\n  len & 3\n         ^"},
		{"netif", `len & 3 == 1`, "put len & 3 in parentheses: C binds & looser than ==, and would read the comparison another way\n  len & 3 == 1\n      ^"},
		{"netif", `1 < len | 4`, "put len | 4 in parentheses: C binds | looser than <, and would read the comparison another way\n  1 < len | 4\n          ^"},
		{"netif", `len + "x" == 1`, "a string literal takes part in no arithmetic\n  len + \"x\" == 1\n        ^"},
		{"netif", `name + 1 == 1`, "name is a string: arithmetic takes numbers\n  name + 1 == 1\n  ^"},
		{"netif", `(len - ) == 1`, "expected a field, a number or a string\n  (len - ) == 1\n         ^"},
		{"kprobe", `net - 2 == -1`, "net - 2 is unsigned: it is never negative\n  net - 2 == -1\n             ^"},
		{"kprobe", `skb->len + (` + strings.Repeat(`skb->len - (`, 16) + `skb->len` + strings.Repeat(")", 17) + ` > 1`, "arithmetic nested too deeply: more than 16 left sides wait at once"},
		{"kprobe", `ksym(skb) + 1 > 1`, "ksym() names an address in the output (--fields, --count-by): compare the address itself\n  ksym(skb) + 1 > 1\n  ^"},
		{"netif", `len == 3 ||`, "expected a field, a number or a string\n  len == 3 ||\n             ^"},
		{"netif", `name == comm`, "name is a string: compare it with a string literal\n  name == comm\n          ^"},
		{"netif", `(char *)len == "x"`, "len is a 4-byte number: only an address (8 bytes here) can be read as a string\n  (char *)len == \"x\"\n  ^"},
		{"netif", `str(name) == "x"`, "name is a string: only an address (8 bytes here) can be read as a string\n  str(name) == \"x\"\n  ^"},
		{"netif", `comm->x == 1`, "comm is a builtin: it has no members\n  comm->x == 1\n  ^"},
		{"netif", `cpu == "x"`, "cpu is a number: compare it with a number\n  cpu == \"x\"\n         ^"},
		{"netif", `kstack == 1`, "kstack is counted by (--count-by kstack) or printed (--fields kstack): it is not a number\n  kstack == 1\n  ^"},
		{"netif", strings.Repeat("(", 65) + "len == 1" + strings.Repeat(")", 65), "expression nested deeper than 64 levels\n  " + strings.Repeat("(", 65) + "len == 1" + strings.Repeat(")", 65) + "\n  " + strings.Repeat(" ", 65) + "^"},
		{"netif", `name ~ ""`, "~ takes a prefix ending in a single '*', as in \"/etc/*\" (use == for an exact match)\n  name ~ \"\"\n         ^"},
		{"netif", strings.Repeat("!", 70) + `(len == 1)`, "expression nested deeper than 64 levels\n  " + strings.Repeat("!", 70) + "(len == 1)\n  " + strings.Repeat(" ", 65) + "^"},
		{"netif", strings.Repeat(`name == "abcdefghijklmnopqrstuvwxyz" || `, 300) + `len == 1`, "the expression compiles to 7506 instructions, more than the 4096 a program may have on kernels before 5.2: shorten it"},
	} {
		root, err := Parse(tc.expr)
		if err == nil {
			_, err = Compile(tc.expr, root, ts[tc.target], Action{})
		}
		if err == nil {
			t.Errorf("%s: accepted", tc.expr)
			continue
		}
		got := err.Error()
		if !strings.Contains(tc.want, "\n") {
			got, _, _ = strings.Cut(got, "\n") // the message alone: the expression is long
		}
		if got != tc.want {
			t.Errorf("%.200s:\ngot:\n%.2000s\nwant:\n%.2000s", tc.expr, got, tc.want)
		}
	}
}

// FuzzParse: the parser never panics, and an error always points inside
// the expression (or just past its end).
func FuzzParse(f *testing.F) {
	for _, s := range []string{`name == "lo"`, `((struct sk_buff *)skbaddr)->dev->name == "lo"`, `a->b.c >= -0x10 && d != "x\"y"`, `((`, `"`, `&&`, `a -> `,
		`!(a == 1 || (b ~ "x*")) && (char *)c == "d"`, `str(x) == "" || !!!y < 3`, `((a == 1)`, `(a == 1))`, `a == 1 || `, `!`, `name ~ ""`, `name ~ "*"`,
		`(len - 28) / 4 > len % 3`, `-len << 70 != (len & 3)`, `len-1 == - -2`, `((len) * (2 + 3)) > 0`, `len & 3 == 1`, `len +`, `(len - ) == 1`} {
		f.Add(s)
	}
	ts := targets(&testing.T{})
	f.Fuzz(func(t *testing.T, s string) {
		root, err := Parse(s)
		if err != nil {
			ee, ok := err.(*ExprError)
			if !ok || ee.Pos < 0 || ee.Pos > len(s) {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		if root == nil {
			t.Fatalf("%q: no expression and no error", s)
		}
		_, _ = Compile(s, root, ts["netif"], Action{})
	})
}

// operandsOf are the operands a generated expression draws from, per
// target: integers (with their signedness) and strings (with their room).
var operandsOf = map[string]struct {
	ints    map[string]bool // name: signed
	strs    map[string]int  // name: room (0: a pointer's string)
	actions []string
}{
	"switch": {
		ints:    map[string]bool{"prev_pid": true, "next_pid": true, "prev_prio": true, "prev_state": true, "pid": false, "tid": false, "cpu": false, "uid": false, "gid": false},
		strs:    map[string]int{"prev_comm": 16, "next_comm": 16, "comm": 16},
		actions: []string{"", "count", "count-by:prev_comm,next_pid,cpu", "hist:prev_state", "fields:prev_comm,next_comm,pid,comm"},
	},
	"openat": {
		ints:    map[string]bool{"dfd": true, "flags": true, "mode": false, "__syscall_nr": true, "uid": false},
		strs:    map[string]int{"filename": 0, "comm": 16, "str(args->filename)": 0},
		actions: []string{"", "count", "count-by:filename,comm", "hist:flags", "emit", "fields:filename,dfd"},
	},
	"usdt": {
		ints:    map[string]bool{"arg0": true, "arg2": true, "arg3": false, "arg4": true, "arg6": true, "arg7": true, "arg8": true, "arg9": false, "pid": false},
		strs:    map[string]int{"comm": 16, "str(arg9)": 0, "(char *)arg5": 0},
		actions: []string{"", "count", "count-by:arg0,comm", "hist:arg4", "fields:arg0,str(arg9),arg8"},
	},
	"uprobe": {
		ints:    map[string]bool{"arg0": false, "arg1": false, "arg5": false, "tid": false},
		strs:    map[string]int{"comm": 16, "str(arg0)": 0},
		actions: []string{"count", "count-by:arg0", "hist:arg1", "fields:arg0,arg1,str(arg2)"},
	},
	// Calls (CompileCall) of kopen's and uprobe's functions.
	"kopen_call": {
		ints:    map[string]bool{"dfd": true, "pid": false, "ret": true, "duration": false},
		strs:    map[string]int{"filename": 0, "comm": 16},
		actions: []string{"count", "count-by:filename,ret", "hist:duration", "emit", "fields:ret,comm,filename"},
	},
	"uprobe_call": {
		ints:    map[string]bool{"arg0": false, "ret": true, "duration": false, "tid": false},
		strs:    map[string]int{"str(arg0)": 0, "comm": 16},
		actions: []string{"count-by:str(arg1),ret", "hist:ret", "emit", "fields:duration,arg2"},
	},
	"kopen": {
		ints:    map[string]bool{"dfd": true, "pid": false, "gid": false},
		strs:    map[string]int{"filename": 0, "comm": 16},
		actions: []string{"", "count", "count-by:filename", "hist:dfd", "emit"},
	},
}

// genExpr writes a random valid expression over a target's operands.
func genExpr(r *rand.Rand, target string, depth int) string {
	ops := operandsOf[target]
	if depth > 0 {
		switch r.Intn(5) {
		case 0:
			return "!(" + genExpr(r, target, depth-1) + ")"
		case 1:
			return "(" + genExpr(r, target, depth-1) + " && " + genExpr(r, target, depth-1) + ")"
		case 2:
			return genExpr(r, target, depth-1) + " || " + genExpr(r, target, depth-1)
		}
	}
	pick := func(m map[string]bool) (string, bool) {
		names := make([]string, 0, len(m))
		for n := range m {
			names = append(names, n)
		}
		sort.Strings(names)
		n := names[r.Intn(len(names))]
		return n, m[n]
	}
	if r.Intn(2) == 0 {
		names := make([]string, 0, len(ops.strs))
		for n := range ops.strs {
			names = append(names, n)
		}
		sort.Strings(names)
		name := names[r.Intn(len(names))]
		limit := maxString
		if room := ops.strs[name]; room > 0 {
			limit = room - 1
		}
		lit := make([]byte, r.Intn(min(limit, 40)+1))
		for i := range lit {
			lit[i] = "abcdefghij/._-XYZ"[r.Intn(17)]
		}
		switch r.Intn(3) {
		case 0:
			return fmt.Sprintf(`%s == "%s"`, name, lit)
		case 1:
			return fmt.Sprintf(`%s != "%s"`, name, lit)
		}
		return fmt.Sprintf(`%s ~ "%s*"`, name, lit)
	}
	name, signed := pick(ops.ints)
	if r.Intn(3) == 0 {
		// Arithmetic (its sign unknown here: compared with >= 0 literals).
		name, signed = "("+genArith(r, ops.ints, 2)+")", false
	}
	op := []string{"==", "!=", "<", "<=", ">", ">="}[r.Intn(6)]
	if r.Intn(4) == 0 {
		other, _ := pick(ops.ints)
		return fmt.Sprintf("%s %s %s", name, op, other)
	}
	lit := strconv.Itoa(r.Intn(1 << 15))
	if signed && r.Intn(2) == 0 {
		lit = "-" + lit
	}
	if r.Intn(3) == 0 {
		return fmt.Sprintf("%s %s %s", lit, op, name)
	}
	return fmt.Sprintf("%s %s %s", name, op, lit)
}

// genArith writes arithmetic over integer operands and literals: zero
// divisors, shifts by 64 and more, and constants an immediate cannot hold
// among them.
func genArith(r *rand.Rand, ints map[string]bool, depth int) string {
	var names []string
	for n := range ints {
		names = append(names, n)
	}
	sort.Strings(names)
	side := func() string {
		switch {
		case depth > 0 && r.Intn(3) == 0:
			return "(" + genArith(r, ints, depth-1) + ")"
		case r.Intn(3) == 0:
			return []string{"0", "1", "3", "-5", "63", "64", "70", "4096", "0x100000000", "-0x80000001"}[r.Intn(10)]
		}
		return names[r.Intn(len(names))]
	}
	op := []string{"+", "-", "*", "/", "%", "&", "|", "^", "<<", ">>"}[r.Intn(10)]
	left := side() // not a literal: two would fold to a constant
	for left[0] == '-' || left[0] >= '0' && left[0] <= '9' {
		left = side()
	}
	expr := left + " " + op + " " + side()
	if r.Intn(6) == 0 {
		expr = "-" + names[r.Intn(len(names))] + " " + op + " " + side()
	}
	return expr
}

// haveCookie reports whether kprobe programs may call bpf_get_attach_cookie
// (5.15+): a glob's program reads func from it under kprobe_multi only.
func haveCookie() bool {
	return features.HaveProgramHelper(ebpf.Kprobe, bpf.FnGetAttachCookie) == nil
}

// maxChainTest is filter's bound on a stack's outer functions (maxChain - 1).
const maxChainTest = 8

// FuzzCompile generates valid expressions and actions from a seed: each
// must compile, and as root the kernel's verifier must take each program
// (go test runs the seeds below; go test -fuzz explores further).
func FuzzCompile(f *testing.F) {
	for seed := int64(0); seed < 24; seed++ {
		f.Add(seed)
	}
	ts := targets(&testing.T{})
	targetNames := []string{"kopen", "openat", "switch", "usdt", "uprobe", "kopen_call", "uprobe_call"}
	f.Fuzz(func(t *testing.T, seed int64) {
		r := rand.New(rand.NewSource(seed))
		target := targetNames[r.Intn(len(targetNames))]
		expr := genExpr(r, target, r.Intn(4))
		acts := operandsOf[target].actions
		actText := acts[r.Intn(len(acts))]
		if r.Intn(4) == 0 {
			// Statistics of one of the target's integers, keyed or not.
			var ints []string
			for name := range operandsOf[target].ints {
				ints = append(ints, name)
			}
			sort.Strings(ints)
			keys := ""
			if r.Intn(2) == 0 {
				keys = "comm"
			}
			value := ints[r.Intn(len(ints))]
			if r.Intn(2) == 0 {
				value = genArith(r, operandsOf[target].ints, 1)
			}
			actText = fmt.Sprintf("stats-%s:%s:%s", []string{"sum", "min", "max", "avg"}[r.Intn(4)], value, keys)
			if r.Intn(2) == 0 {
				// Or a linear histogram of it, its range anywhere.
				lo := int64(r.Intn(1<<20)) - 1<<19
				step := 1 + int64(r.Intn(1<<10))
				actText = fmt.Sprintf("lhist:%s:%d:%d:%d", value, lo, lo+step*int64(1+r.Intn(1000)), step)
			}
		}
		root, err := Parse(expr)
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		// A run over several events (func, a constant or the cookie), and
		// stack mode (the chain checked first), now and then.
		variant := func(tg Target) Target {
			if r.Intn(3) == 0 {
				// The cookie where the kernel has it, as filter (kprobe_multi) does.
				tg.Func = &Func{Index: uint64(r.Intn(50)), Cookie: r.Intn(2) == 0 && haveCookie(), Names: map[uint64]string{}}
			}
			if r.Intn(3) == 0 {
				tg.Inside = 1 + r.Intn(maxChainTest)
			}
			return tg
		}
		if base, ok := strings.CutSuffix(target, "_call"); ok {
			fuzzCall(t, seed, variant(ts[base]), base, expr, root, actText)
			return
		}
		tg := variant(ts[target])
		act := caseAction(t, tg, actText)
		prog, err := Compile(expr, root, tg, act)
		if err != nil && strings.Contains(err.Error(), "never holds") {
			return // !(x ~ "*"): refused, rightly
		}
		if err != nil {
			t.Fatalf("%s on %s (%s): %v", expr, target, actText, err)
		}
		if os.Geteuid() != 0 || !hostLoads(t, tg) {
			return
		}
		typ := ebpf.TracePoint
		if _, ok := ts[target].Event.(*Record); !ok && !isEntry(ts[target]) {
			typ = ebpf.Kprobe
		}
		m := Maps(act.Kind, prog)
		if tg.Inside > 0 {
			m[ChainMap] = ChainMapSpec(tg.Inside)
		}
		loadtest.Program(t, fmt.Sprintf("seed %d: %s on %s (%s, %d inside)", seed, expr, target, actText, tg.Inside), typ, &ebpf.ProgramSpec{Name: "filter", Instructions: prog.Insns}, m)
		if act.Kind != Emit || tg.Func != nil {
			return
		}
		// The same expression and columns as the gate of profile's
		// sampler (--fields with ustack): loaded with its exit.
		gate, _, _, err := GateRecord(expr, root, tg, act, "exit")
		if err != nil && strings.Contains(err.Error(), "the sampler's to read") || err != nil && strings.Contains(err.Error(), "structure is not printed") {
			return // a stack or a structure: not a gate's
		}
		if err != nil {
			t.Fatalf("gate: %s on %s (%s): %v", expr, target, actText, err)
		}
		delete(m, "events")
		loadtest.Program(t, fmt.Sprintf("seed %d: gate %s on %s (%s, %d inside)", seed, expr, target, actText, tg.Inside), typ, &ebpf.ProgramSpec{Name: "gate", Instructions: append(gate, asm.Return("exit", 0)...)}, m)
	})
}

// isEntry reports a target at a syscall's entry.
func isEntry(t Target) bool {
	_, ok := t.Event.(*SyscallEntry)
	return ok
}

// hostLoads reports whether this machine's verifier can judge a target's
// program. On 32-bit ARM a program that reads x86-64's pt_regs (168
// bytes) is refused by ARM's 72-byte struct for its offsets alone: there
// only the targets with 4-byte registers and tracepoint records load, and
// the 64-bit guests load the rest. A trampoline's or a syscall wrapper's
// program needs 64-bit BTF.
func hostLoads(t testing.TB, tg Target) bool {
	if strconv.IntSize == 64 {
		return true
	}
	e := tg.Event
	if r, ok := e.(*Return); ok {
		e = r.Entry
	}
	ok := false
	switch e := e.(type) {
	case *Record:
		ok = true
	case *Registers:
		ok = e.Width == 4
	case *USDT:
		ok = e.Regs.Width == 4
	}
	if !ok {
		t.Logf("a 64-bit CPU's program: not judged by a 32-bit kernel's verifier")
	}
	return ok
}
