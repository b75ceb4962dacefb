package filter

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf/btf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/kbtf"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/tracefs"
)

func TestMain(m *testing.M) { tooltest.Main(m) }

func filter(t *testing.T, args ...string) tooltest.Result {
	t.Helper()
	return tooltest.Run(t, tooltest.Tool(t, "filter"), args...)
}

// Our echo requests carry 1000 bytes: 1028 at netif_receive_skb, requests
// and replies alike; nothing else on the machine is likely to match.
const pingPayload = 1000

func lines(out string) []string {
	out = strings.TrimRight(out, "\n")
	if out == "" {
		return nil
	}
	return strings.Split(out, "\n")
}

// receiveLine matches a printed netif_receive_skb event of our pings: its
// fields in the order of the running kernel's format, skbaddr a pointer,
// len 1028, name lo, any other field (7.2's net_cookie) any value.
func receiveLine(t *testing.T) *regexp.Regexp {
	t.Helper()
	f, err := tracefs.ReadFormat("net", "netif_receive_skb")
	if err != nil {
		t.Fatal(err)
	}
	var fields []string
	for _, fl := range f.Fields {
		if strings.HasPrefix(fl.Name, "common_") {
			continue
		}
		v := `\S+`
		switch fl.Name {
		case "skbaddr":
			v = `0x[0-9a-f]+`
		case "len":
			v = `1028`
		case "name":
			v = `lo`
		}
		fields = append(fields, regexp.QuoteMeta(fl.Name)+"="+v)
	}
	return regexp.MustCompile(`^\s*\S+-\d+\s+\[\d{3}\] \d+\.\d{6}: netif_receive_skb: ` + strings.Join(fields, " ") + `$`)
}

func TestLoopbackFilter(t *testing.T) {
	privtest.Require(t)
	const n = 6
	ping := tooltest.Ping(t, n, pingPayload)
	for _, where := range []string{
		`name == "lo" && len == 1028`,
		`((struct sk_buff *)skbaddr)->dev->name == "lo" && len == 1028`,
	} {
		if strings.Contains(where, "struct") && privtest.NoBTF(t) {
			continue // a cast's struct is BTF's
		}
		r := filter(t, "net:netif_receive_skb", "--where", where, "-a", "-c", ping)
		if r.Status != 0 {
			t.Fatalf("%s: exit %d: %s", where, r.Status, r.Stderr)
		}
		ls := lines(r.Stdout)
		if len(ls) != 2*n {
			t.Errorf("%s: %d events, want exactly %d:\n%s", where, len(ls), 2*n, r.Stdout)
		}
		line := receiveLine(t)
		for _, l := range ls {
			if !line.MatchString(l) {
				t.Errorf("%s: line %q", where, l)
			}
		}
	}
	// None of them with the opposite predicate.
	r := filter(t, "net:netif_receive_skb", "--where", `name != "lo" && len == 1028`, "-a", "-c", ping)
	if r.Status != 0 || len(lines(r.Stdout)) != 0 {
		t.Errorf("name != \"lo\": exit %d, events:\n%s", r.Status, r.Stdout)
	}
	// JSON: one object per event, fields decoded.
	r = filter(t, "--json", "net:netif_receive_skb", "--where", `name == "lo" && len == 1028`, "-a", "-c", ping)
	js := lines(r.Stdout)
	if len(js) != 2*n {
		t.Fatalf("json: %d lines", len(js))
	}
	for _, l := range js {
		var ev struct {
			Event  string         `json:"event"`
			Pid    uint32         `json:"pid"`
			Fields map[string]any `json:"fields"`
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil || ev.Event != "net:netif_receive_skb" || ev.Fields["name"] != "lo" || ev.Fields["len"] != float64(1028) {
			t.Errorf("json line %q: %v", l, err)
		}
	}
}

func TestCountUDP(t *testing.T) {
	privtest.Require(t)
	const n = 17
	// Datagrams of 300 bytes to a listening socket: 328 at netif_receive_skb.
	r := filter(t, "--count", "--json", "net:netif_receive_skb", "--where", `len == 328 && name == "lo"`, "-a", "-c", tooltest.UDPSizes(t, fmt.Sprintf("300x%d,20x5", n)))
	if r.Status != 0 {
		t.Fatalf("exit %d: %s", r.Status, r.Stderr)
	}
	var rep struct {
		Count uint64 `json:"count"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &rep); err != nil || rep.Count != n {
		t.Errorf("count %d (%v), want exactly %d: %q", rep.Count, err, n, r.Stdout)
	}
	// Drop reasons by name, as the running kernel's format names them; a
	// kernel without them (before 5.17) refuses the field.
	kfree, err := tracefs.ReadFormat("skb", "kfree_skb")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := kfree.Field("reason"); !ok {
		r = filter(t, "--count", "skb:kfree_skb", "--where", `reason == "NO_SOCKET"`)
		if r.Status != 2 || !strings.Contains(r.Stderr, `no field "reason"`) {
			t.Errorf("reason on a kernel without it: exit %d, %q", r.Status, r.Stderr)
		}
		return
	}
	r = filter(t, "--count", "skb:kfree_skb", "--where", `reason == "NO_SOCKET" && protocol == 0x0800`, "-a", "-c", tooltest.UDPDrops(t, n))
	m := regexp.MustCompile(`^(\d+) events of skb:kfree_skb passed$`).FindStringSubmatch(strings.TrimSpace(r.Stdout))
	if m == nil {
		t.Fatalf("count output %q (%s)", r.Stdout, r.Stderr)
	}
	if got, _ := strconv.Atoi(m[1]); got < n || got > n+2 {
		t.Errorf("%d NO_SOCKET drops, want %d (other drops on the machine are few)", got, n)
	}
	// Printed: the reason by name, the location by the kernel's symbol
	// (one this kernel's kallsyms has), as --count-by shows them.
	r = filter(t, "skb:kfree_skb", "--where", `reason == "NO_SOCKET" && protocol == 0x0800`, "-a", "-c", tooltest.UDPDrops(t, n))
	ls := lines(r.Stdout)
	loc := regexp.MustCompile(` location=([A-Za-z0-9_.]+)\+0x[0-9a-f]+ `)
	syms, err := procfs.LoadKallsyms()
	if err != nil {
		t.Fatal(err)
	}
	if len(ls) < n {
		t.Fatalf("printed %d drops, want %d: %s%s", len(ls), n, r.Stdout, r.Stderr)
	}
	for _, l := range ls[:n] {
		m := loc.FindStringSubmatch(l + " ")
		if !strings.Contains(l, " reason=NO_SOCKET") || m == nil || !syms.Has(m[1]) {
			t.Errorf("a drop's line without its reason's name or its location's symbol: %s", l)
			break
		}
	}
	// ksym() names any such address, in a key too.
	byLoc, r := countByJSON(t, "ksym(location)", "skb:kfree_skb", "--where", `reason == "NO_SOCKET" && protocol == 0x0800`, "-a", "-c", tooltest.UDPDrops(t, n))
	total := 0
	for _, c := range byLoc.Counts {
		name, _ := c.Key["ksym(location)"].(string)
		fn, _, _ := strings.Cut(name, "+0x")
		if !syms.Has(fn) {
			t.Errorf("ksym(location) %q: not a symbol of this kernel's", name)
		}
		total += int(c.Count)
	}
	if total < n {
		t.Errorf("--count-by ksym(location): %d drops, want %d: %s", total, n, r.Stderr)
	}
}

// cpid is the -c command's pid: its opens, and none of another process's.
func TestCpid(t *testing.T) {
	privtest.Require(t)
	a := t.TempDir() + "/a"
	openFiles(t, a)
	const n = 5
	opener := tooltest.Opens(t, "", tooltest.Open{Path: a, Times: n})
	// In the background: a child of the command's shell opens, not cpid.
	r := filter(t, "--count", "--json", "syscalls:sys_enter_openat", "--where", fmt.Sprintf(`pid == cpid && filename == "%s"`, a), "-c", opener+" & wait")
	if want := `"count":0`; r.Status != 0 || !strings.Contains(r.Stdout, want) {
		t.Errorf("pid == cpid, a child opening: exit %d, %s%s; want %s", r.Status, r.Stdout, r.Stderr, want)
	}
	r = filter(t, "--count", "--json", "syscalls:sys_enter_openat", "--where", fmt.Sprintf(`pid == cpid && filename == "%s"`, a), "-c", "exec "+opener)
	if want := fmt.Sprintf(`"count":%d`, n); r.Status != 0 || !strings.Contains(r.Stdout, want) {
		t.Errorf("pid == cpid: exit %d, %s%s; want %s", r.Status, r.Stdout, r.Stderr, want)
	}
	r = filter(t, "--count", "syscalls:sys_enter_openat", "--where", "pid == cpid")
	if r.Status != 2 || !strings.Contains(r.Stderr, "cpid is the pid of the command -c runs: add -c CMD") {
		t.Errorf("cpid without -c: exit %d, %s", r.Status, r.Stderr)
	}
}

// A command named by a bare word runs by its path: busybox's shell (the
// guests' /bin/sh) runs `exec dd` in itself, with no exec to start the
// tree at, and nothing of the command was counted.
func TestCommandByName(t *testing.T) {
	privtest.Require(t)
	r := filter(t, "--count", "--json", "syscalls:sys_enter_write", "--where", "count == 4321", "-c", "dd if=/dev/zero of=/dev/null bs=4321 count=3")
	if want := `"count":3`; r.Status != 0 || !strings.Contains(r.Stdout, want) {
		t.Errorf("-c 'dd ...': exit %d, %s%s; want %s", r.Status, r.Stdout, r.Stderr, want)
	}
}

func TestInfo(t *testing.T) {
	privtest.Require(t)
	r := filter(t, "--info", "net:netif_receive_skb")
	if r.Status != 0 || !strings.Contains(r.Stdout, "len") || !strings.Contains(r.Stdout, "name") {
		t.Errorf("info: %d %q %q", r.Status, r.Stdout, r.Stderr)
	}
	r = filter(t, "--info", "kprobe:ip_send_skb")
	if privtest.NoBTF(t) {
		// A function's signature is BTF's: refused in one line.
		if r.Status != 1 || !strings.Contains(r.Stderr, "this kernel has no BTF") || strings.Count(r.Stderr, "\n") != 1 {
			t.Errorf("info kprobe without BTF: %d %q %q", r.Status, r.Stdout, r.Stderr)
		}
		return
	}
	if want := btfSignature(t, "ip_send_skb"); r.Status != 0 || strings.TrimSpace(r.Stdout) != want {
		t.Errorf("info kprobe: %d %q %q; want %q", r.Status, r.Stdout, r.Stderr, want)
	}
}

// btfSignature is the C prototype of fn, from the running kernel's BTF,
// for a function whose return type is an integer and whose arguments are
// integers or pointers to structs (as ip_send_skb's are on every kernel
// so far; the test says so where that changes).
func btfSignature(t *testing.T, fn string) string {
	t.Helper()
	spec, err := kbtf.Kernel()
	if err != nil {
		t.Fatal(err)
	}
	var f *btf.Func
	if err := spec.TypeByName(fn, &f); err != nil {
		t.Fatal(err)
	}
	proto := f.Type.(*btf.FuncProto)
	ret, ok := btf.UnderlyingType(proto.Return).(*btf.Int)
	if !ok {
		t.Fatalf("%s returns %v: not an integer", fn, proto.Return)
	}
	var params []string
	for _, p := range proto.Params {
		switch u := btf.UnderlyingType(p.Type).(type) {
		case *btf.Int:
			params = append(params, u.Name+" "+p.Name)
		case *btf.Pointer:
			st, ok := u.Target.(*btf.Struct)
			if !ok {
				t.Fatalf("%s's %s is %v: not a pointer to a struct", fn, p.Name, u.Target)
			}
			params = append(params, "struct "+st.Name+" *"+p.Name)
		default:
			t.Fatalf("%s's %s is %v", fn, p.Name, u)
		}
	}
	return fmt.Sprintf("%s %s(%s);", ret.Name, fn, strings.Join(params, ", "))
}

func TestFilterUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{}, "missing EVENT"},
		{[]string{"netif_receive_skb"}, "invalid event"},
		{[]string{"kprobe:ksys_write x"}, "invalid kernel symbol"},
		{[]string{"kprobe:ksys_write,net:netif_receive_skb"}, "several events in one run are functions' entries"},
		{[]string{"kprobe:ksys_write,kretprobe:ksys_read"}, "several events in one run are functions' entries"},
		{[]string{"kprobe:ksys_write,kprobe:ksys_read+4"}, "kprobe:ksys_read+4: in a list, a function is traced at its entry, not at an offset in it"},
		{[]string{"kprobe:ksys_write,uprobe:/bin/sh:main"}, "a user-space function joins a list in stack mode (-s) only"},
		{[]string{"-s", "kprobe:ksys_write"}, "-s: name the functions in their calling order, outermost first"},
		{[]string{"-s", "kprobe:ksys_write,kprobe:vfs_*"}, "-s: kprobe:vfs_*: a stack names its functions, one each, not a glob"},
		{[]string{"-s", "kprobe:a,kprobe:b,kprobe:c,kprobe:d,kprobe:e,kprobe:f,kprobe:g,kprobe:h,kprobe:i,kprobe:j"}, "-s: 10 functions: at most 9 in a stack"},
		{[]string{"kprobe:ksys_write,kprobe:tcp_[*"}, "invalid function glob"},
		{[]string{"net:netif_receive_skb", "--where", "len = 3"}, "'=' is not an operator"},
		{[]string{"net:netif_receive_skb", "-1"}, "unknown flag"},
		{[]string{"--info", "--count", "net:netif_receive_skb"}, "--info"},
		{[]string{"--count", "--hist", "len", "net:netif_receive_skb"}, "--count and --hist: choose one of printing (--fields), --count, --count-by, --hist and --sum, --min, --max or --avg"},
		{[]string{"--fields", "len,,name", "net:netif_receive_skb"}, "--fields: expected a field, a number or a string\n  len,,name\n      ^"},
		{[]string{"--hist", "len,name", "net:netif_receive_skb"}, "--hist: expected one field or builtin\n  len,name\n     ^"},
		{[]string{"--count-by", `comm,"x"`, "net:netif_receive_skb"}, "--count-by: expected a field or a builtin, not a constant\n  comm,\"x\"\n       ^"},
		{[]string{"--ring-pages", "3", "net:netif_receive_skb"}, "--ring-pages 3: a power of two from 1 to 65536"},
		{[]string{"--attach=raw", "syscalls:sys_enter_write"}, "--attach=raw: syscalls:sys_enter_write is reached by fentry or perf"},
		{[]string{"--attach=fentry", "net:netif_receive_skb"}, "--attach=fentry: net:netif_receive_skb is reached by perf only"},
		{[]string{"--attach=fentry", "uprobe:/bin/sh:main"}, "--attach=fentry: uprobe:/bin/sh:main is reached by perf only"},
		{[]string{"--attach=fast", "syscalls:sys_enter_write"}, `invalid --attach "fast": want auto, perf, raw, btf or fentry`},
		{[]string{"--buffer-pages", "3", "net:netif_receive_skb"}, "--ring-pages 3: a power of two from 1 to 65536"}, // the old name
		{[]string{"--ring-pages", "131072", "net:netif_receive_skb"}, "--ring-pages 131072: a power of two from 1 to 65536"},
		{[]string{"-c", "", "net:netif_receive_skb"}, "--command is empty: give it a value, or leave it out"},
		{[]string{"--where", "", "net:netif_receive_skb"}, "--where is empty"},
		{[]string{"net:netif_receive_skb", "NaN"}, `invalid interval "NaN": want a number of seconds from 0.001 to 1000000`},
		{[]string{"net:netif_receive_skb", "1e-300"}, `invalid interval "1e-300"`},
		{[]string{"net:netif_receive_skb", "Inf"}, `invalid interval "Inf"`},
		{[]string{"-p", "4294967297", "net:netif_receive_skb"}, "invalid pid 4294967297: pids run from 1 to"},
		{[]string{"-T", "net:netif_receive_skb"}, "-T dates --count, --count-by and --hist reports"},
		{[]string{"--folded", "--count", "net:netif_receive_skb"}, "--folded writes stacks for a flame graph: add --count-by kstack"},
		{[]string{"--sum", "len", "--hist", "len", "net:netif_receive_skb"}, "--hist and --sum: choose one of printing (--fields), --count, --count-by, --hist and --sum, --min, --max or --avg"},
		{[]string{"--sum", "len", "--max", "len", "net:netif_receive_skb"}, "--max and --sum: choose one of"},
		{[]string{"--serve", ":0", "--avg", "len", "net:netif_receive_skb"}, "--serve and --avg: statistics are printed, not served yet"},
		{[]string{"--min", "len,name", "net:netif_receive_skb"}, "--min: expected one field or builtin"},
		{[]string{"--lhist", "len,0,100", "net:netif_receive_skb"}, `--lhist: "len,0,100": want EXPR,MIN,MAX,STEP`},
		{[]string{"--lhist", "len,10,5,1", "net:netif_receive_skb"}, `--lhist: "len,10,5,1": MAX 5 is not above MIN 10`},
		{[]string{"--lhist", "len,0,100000,1", "net:netif_receive_skb"}, `--lhist: "len,0,100000,1": more than 1000 slots from MIN to MAX: raise STEP`},
		// MAX-MIN overflows int64 (issue 62: taken as 0 slots, every event dropped).
		{[]string{"--lhist", "len,-9223372036854775808,9223372036854775807,1000", "net:netif_receive_skb"}, `--lhist: "len,-9223372036854775808,9223372036854775807,1000": more than 1000 slots from MIN to MAX: raise STEP`},
		{[]string{"--lhist", "len,0,100,x", "net:netif_receive_skb"}, `--lhist: "len,0,100,x": MIN, MAX and STEP are integers, not "x"`},
		{[]string{"--lhist", "len,0,100,10", "--hist", "len", "net:netif_receive_skb"}, "--hist and --lhist: choose one of"},
		{[]string{"--folded", "--json", "--count-by", "kstack", "net:netif_receive_skb"}, "--folded and --json: choose one output"},
		{[]string{"--serve", ":0", "--count-by", "kstack", "net:netif_receive_skb"}, "--serve and --count-by kstack: a stack is no metric's label"},
		{[]string{"-T", "--json", "--count", "net:netif_receive_skb"}, "-T and --json cannot be used together"},
	} {
		r := filter(t, tc.args...)
		if r.Status != 2 || !strings.Contains(r.Stderr, tc.want) || !strings.Contains(r.Stderr, "Try 'filter --help'") {
			t.Errorf("%v: exit %d, stderr %q", tc.args, r.Status, r.Stderr)
		}
	}
	privtest.Require(t)
	// Checked against the event's fields once it is known: still exit 2.
	r := filter(t, "net:netif_receive_skb", "--where", `nme == "lo"`)
	// The fields as this kernel's format names them (7.x adds net_cookie).
	f, err := tracefs.ReadFormat("net", "netif_receive_skb")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("has no field \"nme\" (fields: %s; builtins: pid, tid, comm, cpu, uid, gid, cpid, kstack, ustack)", strings.Join(f.FieldNames(), ", "))
	if r.Status != 2 || !strings.Contains(r.Stderr, want) || !strings.Contains(r.Stderr, "^") {
		t.Errorf("unknown field: exit %d, stderr %q", r.Status, r.Stderr)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--fields", "len,nosuch", "net:netif_receive_skb"}, "filter: --fields: event netif_receive_skb has no field \"nosuch\""},
		{[]string{"--hist", "name", "net:netif_receive_skb"}, "filter: --hist: name is a string: a histogram needs a number\n  name\n  ^"},
		{[]string{"--count-by", "skbaddr->len", "net:netif_receive_skb"}, "filter: --count-by: field skbaddr is not a struct pointer that can be walked"},
		{[]string{"--hist", "kstack", "net:netif_receive_skb"}, "filter: --hist: kstack is counted by (--count-by kstack) or printed (--fields kstack): it is not a number"},
		{[]string{"--count", "net:netif_receive_skb", "--where", "kstack == 0"}, "filter: --where: kstack is counted by (--count-by kstack)"},
		{[]string{"--count", "net:netif_receive_skb", "--where", "ksym(skbaddr) == 0"}, "filter: --where: ksym() names an address in the output (--fields, --count-by): compare the address itself"},
		{[]string{"--count-by", "ksym(name)", "net:netif_receive_skb"}, "filter: --count-by: name is a string: ksym() names a kernel address ("},
	} {
		r := filter(t, tc.args...)
		if r.Status != 2 || !strings.HasPrefix(r.Stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q", tc.args, r.Status, r.Stderr)
		}
	}
}

func TestKprobeFilters(t *testing.T) {
	privtest.RequireKprobes(t)
	privtest.NeedBTF(t) // the function's arguments
	tooltest.ForEachFunctionHook(t, func(t *testing.T) {
		const n, m = 9, 4
		r := filter(t, "--count", "--json", "kprobe:ip_send_skb", "--where", "skb->len > 100", "-c", tooltest.UDPSizes(t, fmt.Sprintf("200x%d,10x%d", n, m)))
		var rep struct {
			Count uint64 `json:"count"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &rep); err != nil || rep.Count != n {
			t.Errorf("kprobe count %d (%v), want exactly %d: %q %q", rep.Count, err, n, r.Stdout, r.Stderr)
		}
		// Printed: each event carries the arguments.
		r = filter(t, "kprobe:ip_send_skb", "--where", "skb->len > 100", "-c", tooltest.UDPSizes(t, fmt.Sprintf("200x%d,10x%d", n, m)))
		ls := lines(r.Stdout)
		if len(ls) != n || !strings.Contains(r.Stdout, ": ip_send_skb: net=0x") || !strings.Contains(r.Stdout, " skb=0x") {
			t.Errorf("kprobe print: %d lines, want %d:\n%s%s", len(ls), n, r.Stdout, r.Stderr)
		}
		// A user string argument (const char __user *filename) compared with
		// ==, and printed as text.
		a := t.TempDir() + "/a"
		openFiles(t, a)
		const opens = 11
		work := tooltest.Opens(t, "", tooltest.Open{Path: a, Times: opens})
		if got := countOf(t, "kprobe:do_sys_openat2", "--where", fmt.Sprintf(`filename == "%s"`, a), "-c", work); got != opens {
			t.Errorf("kprobe:do_sys_openat2 filename == %q: %d, want exactly %d", a, got, opens)
		}
		r = filter(t, "kprobe:do_sys_openat2", "--where", fmt.Sprintf(`filename ~ "%s*" && dfd == -100`, a), "-c", work)
		// Each argument as this kernel's BTF has it; dfd and filename at least.
		if ls := lines(r.Stdout); len(ls) != opens || !strings.Contains(ls[0], " dfd=-100 ") || !strings.Contains(ls[0], " filename="+a) {
			t.Errorf("kprobe:do_sys_openat2 print: %d lines, want %d:\n%s%s", len(ls), opens, r.Stdout, r.Stderr)
		}
		// kretprobe: the return value of ksys_write, our marker size.
		r = filter(t, "kretprobe:ksys_write", "--where", "ret == 4321", "-c", tooltest.Writes(t, 4321, n))
		ls = lines(r.Stdout)
		if len(ls) != n || !strings.Contains(r.Stdout, "ret=4321") {
			t.Errorf("kretprobe: %d lines, want %d:\n%s%s", len(ls), n, r.Stdout, r.Stderr)
		}
	}, "ip_send_skb", "do_sys_openat2", "ksys_write")
}

// "filter ... | head -1": the stream ends soon after its reader goes
// away (at the next event's write), quietly, with status 0; and filter
// EVENT alone (no --where) loads and streams.
func TestStreamEndsWhenTheReaderGoes(t *testing.T) {
	privtest.Require(t)
	for _, args := range [][]string{
		{"sched:sched_switch", "--where", "prev_pid >= 0"},
		{"sched:sched_switch"},
		{"sched:sched_switch", "--where", `prev_comm != "abcdefghijklmnopqrstuvwxyz"`},
	} {
		cmd := exec.Command(tooltest.Tool(t, "filter"), args...)
		stdout, _ := cmd.StdoutPipe()
		var errb strings.Builder
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err != nil || !strings.Contains(line, "sched_switch:") || !strings.Contains(line, "prev_pid=") {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("%v: first line %q, %v; stderr %q", args, line, err, errb.String())
		}
		stdout.Close() // as head does after one line
		closed := time.Now()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			rest := strings.TrimPrefix(errb.String(), "Tracing events of sched:sched_switch... Hit Ctrl-C to end.\n")
			// 3 s: room for a guest of the kernel matrix (TCG, one CPU,
			// the host's CPUs shared with another guest) to detach and
			// exit; the log shows what it took.
			if took := time.Since(closed); err != nil || rest != "" || took > 3*time.Second {
				t.Errorf("%v: %v after %v, stderr %q", args, err, took, errb.String())
			} else {
				t.Logf("%v: ended %v after its reader", args, took.Round(time.Millisecond))
			}
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("%v: still streaming 5 s after its reader went away", args)
		}
	}
}

// countOf runs filter --count --json and returns the count.
func countOf(t *testing.T, args ...string) int {
	t.Helper()
	r := filter(t, append([]string{"--count", "--json"}, args...)...)
	var rep struct {
		Count *int `json:"count"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &rep); err != nil || r.Status != 0 || rep.Count == nil {
		t.Fatalf("filter %q: exit %d, %v: %q %q", args, r.Status, err, r.Stdout, r.Stderr)
	}
	return *rep.Count
}

// bpftraceCount runs a bpftrace one-liner that counts into @ and returns
// the count (an empty map prints nothing: 0).
func bpftraceCount(t *testing.T, bt, script, command string) int {
	t.Helper()
	out, err := exec.Command(bt, "-e", script, "-c", command).CombinedOutput()
	if err != nil {
		t.Fatalf("bpftrace -e %q: %v\n%s", script, err, out)
	}
	m := regexp.MustCompile(`(?m)^@: (\d+)$`).FindStringSubmatch(string(out))
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// User strings (a syscall's const char *filename), the prefix match, ||, !
// and comm, each counted exactly, side by side with bpftrace's count of the
// same predicate over the same workload.
func TestUserStringsSideBySide(t *testing.T) {
	privtest.Require(t)
	tooltest.ForEachSyscallHook(t, "openat", func(t *testing.T) {
		dir := t.TempDir()
		// ax: a string that a starts, which == a must not count.
		a, b, ax, other := dir+"/a", dir+"/b", dir+"/ax", dir+"-other"
		openFiles(t, a, b, ax, other)
		const na, nb, nx, no = 7, 5, 2, 3
		work := tooltest.Opens(t, "tk-opens", tooltest.Open{Path: a, Times: na}, tooltest.Open{Path: b, Times: nb}, tooltest.Open{Path: ax, Times: nx}, tooltest.Open{Path: other, Times: no})
		bt := tooltest.Peer(t, "bpftrace", "bpftrace")
		fn := `str(args->filename)`
		prefix := fmt.Sprintf(`strncmp(%s, "%s/", %d) == 0`, fn, dir, len(dir)+1)
		for _, tc := range []struct {
			where, bpftrace string
			want            int
		}{
			{fmt.Sprintf(`filename == "%s"`, a), fmt.Sprintf(`%s == "%s"`, fn, a), na},
			{fmt.Sprintf(`filename ~ "%s/*"`, dir), prefix, na + nb + nx},
			{fmt.Sprintf(`filename == "%s" || filename == "%s"`, a, b), fmt.Sprintf(`%s == "%s" || %s == "%s"`, fn, a, fn, b), na + nb},
			{fmt.Sprintf(`filename ~ "%s/*" && !(filename == "%s")`, dir, a), fmt.Sprintf(`%s && !(%s == "%s")`, prefix, fn, a), nb + nx},
			{fmt.Sprintf(`comm == "tk-opens" && filename ~ "%s*" && dfd == -100`, dir), fmt.Sprintf(`comm == "tk-opens" && strncmp(%s, "%s", %d) == 0 && args->dfd == -100`, fn, dir, len(dir)), na + nb + nx + no},
		} {
			got := countOf(t, "syscalls:sys_enter_openat", "--where", tc.where, "-c", work)
			if got != tc.want {
				t.Errorf("--where '%s': %d events, want exactly %d", tc.where, got, tc.want)
			}
			if bt == "" {
				t.Logf("--where '%s': %d; bpftrace is compared on the host, not in the matrix's guests", tc.where, got)
				continue
			}
			peer := bpftraceCount(t, bt, fmt.Sprintf("tracepoint:syscalls:sys_enter_openat /%s/ { @ = count(); }", tc.bpftrace), work)
			if peer != got {
				t.Errorf("--where '%s': filter counted %d, bpftrace %d", tc.where, got, peer)
			}
		}
	})
}

// -c and --where reach /bin/sh and the parser verbatim: go-flags would
// otherwise unquote a value that starts with a quote.
func TestQuotedValuesVerbatim(t *testing.T) {
	privtest.Require(t)
	r := filter(t, "--count", "net:netif_receive_skb", "--where", `"nosuchdev" == name`, "-c", `"/bin/echo" hi`)
	if r.Status != 0 || r.Stdout != "hi\n0 events of net:netif_receive_skb passed\n" {
		t.Errorf(`-c '"/bin/echo" hi': exit %d, %q %q`, r.Status, r.Stdout, r.Stderr)
	}
	r = filter(t, "--count", "net:netif_receive_skb", "-c", `"echo hi"`)
	if r.Status != 127 || !strings.Contains(r.Stderr, "echo hi: not found") {
		t.Errorf(`-c '"echo hi"' runs a command named "echo hi", as sh does: exit %d, %q`, r.Status, r.Stderr)
	}
}

// openFiles makes empty files for an opens workload.
func openFiles(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(p) })
	}
}

// countByReport is a --count-by --json report.
type countByReport struct {
	Keys   []string `json:"keys"`
	Counts []struct {
		Key   map[string]any `json:"key"`
		Count int            `json:"count"`
	} `json:"counts"`
	Total int `json:"total"`
	Lost  int `json:"lost"`
}

// phasedFiles makes phases*per empty files in dir, f0 onwards, and the
// workload's list that opens each twice, phase by phase, pausing pauseMs
// after each phase.
func phasedFiles(t *testing.T, dir string, phases, per, pauseMs int) []tooltest.Open {
	t.Helper()
	var files []tooltest.Open
	for p := 0; p < phases; p++ {
		for i := 0; i < per; i++ {
			path := fmt.Sprintf("%s/f%d", dir, p*per+i)
			openFiles(t, path)
			files = append(files, tooltest.Open{Path: path, Times: 2})
		}
		files = append(files, tooltest.Open{Times: pauseMs})
	}
	return files
}

// --count-by comm and a user string key, in the kernel; bpftrace's
// @[comm] = count() over the same workload agrees.
func TestCountBy(t *testing.T) {
	privtest.Require(t)
	tooltest.ForEachSyscallHook(t, "openat", func(t *testing.T) {
		dir := t.TempDir()
		a, b := dir+"/a", dir+"/b"
		openFiles(t, a, b)
		const na, nb = 9, 4
		work := tooltest.Opens(t, "tk-countby", tooltest.Open{Path: a, Times: na}, tooltest.Open{Path: b, Times: nb})
		where := fmt.Sprintf(`filename ~ "%s/*"`, dir)
		r := filter(t, "--count-by", "comm", "syscalls:sys_enter_openat", "--where", where, "-c", work)
		want := "comm        count\ntk-countby     13\n"
		if r.Status != 0 || r.Stdout != want {
			t.Errorf("--count-by comm: exit %d, got:\n%swant:\n%s%s", r.Status, r.Stdout, want, r.Stderr)
		}
		r = filter(t, "--json", "--count-by", "filename,comm", "syscalls:sys_enter_openat", "--where", where, "-c", work)
		var rep countByReport
		if err := json.Unmarshal([]byte(r.Stdout), &rep); err != nil || r.Status != 0 {
			t.Fatalf("--json --count-by: exit %d, %v: %q %q", r.Status, err, r.Stdout, r.Stderr)
		}
		if len(rep.Counts) != 2 || rep.Total != na+nb || rep.Lost != 0 || strings.Join(rep.Keys, ",") != "filename,comm" ||
			rep.Counts[0].Key["filename"] != a || rep.Counts[0].Count != na || rep.Counts[0].Key["comm"] != "tk-countby" ||
			rep.Counts[1].Key["filename"] != b || rep.Counts[1].Count != nb {
			t.Errorf("--json --count-by filename,comm: %s", r.Stdout)
		}
		t.Run("bpftrace", func(t *testing.T) {
			bt := tooltest.Peer(t, "bpftrace", "bpftrace")
			if bt == "" {
				t.Skip("bpftrace is compared on the host, not in the matrix's guests")
			}
			out, err := exec.Command(bt, "-e", fmt.Sprintf(`tracepoint:syscalls:sys_enter_openat /strncmp(str(args->filename), "%s/", %d) == 0/ { @[comm] = count(); }`, dir, len(dir)+1), "-c", work).CombinedOutput()
			if err != nil || !strings.Contains(string(out), "@[tk-countby]: 13\n") {
				t.Errorf("bpftrace @[comm] = count(): %v\n%s", err, out)
			}
		})
	})
}

// --hist len over loopback datagrams of known sizes, bucket by bucket, and
// bpftrace's hist() over the same workload.
func TestHistLen(t *testing.T) {
	privtest.Require(t)
	// Payloads of 20, 300, 1000 and 5000 bytes: 48, 328, 1028 and 5028 at
	// netif_receive_skb (IP and UDP headers).
	work := tooltest.UDPSizes(t, "20x5,300x17,1000x3,5000x2")
	where := `name == "lo" && (len == 48 || len == 328 || len == 1028 || len == 5028)`
	r := filter(t, "--hist", "len", "net:netif_receive_skb", "--where", where, "-a", "-c", work)
	want := "     len                 : count     distribution\n" +
		"         0 -> 1          : 0        |                                        |\n" +
		"         2 -> 3          : 0        |                                        |\n" +
		"         4 -> 7          : 0        |                                        |\n" +
		"         8 -> 15         : 0        |                                        |\n" +
		"        16 -> 31         : 0        |                                        |\n" +
		"        32 -> 63         : 5        |***********                             |\n" +
		"        64 -> 127        : 0        |                                        |\n" +
		"       128 -> 255        : 0        |                                        |\n" +
		"       256 -> 511        : 17       |****************************************|\n" +
		"       512 -> 1023       : 0        |                                        |\n" +
		"      1024 -> 2047       : 3        |*******                                 |\n" +
		"      2048 -> 4095       : 0        |                                        |\n" +
		"      4096 -> 8191       : 2        |****                                    |\n"
	if r.Status != 0 || r.Stdout != want {
		t.Errorf("--hist len: exit %d, got:\n%swant:\n%s%s", r.Status, r.Stdout, want, r.Stderr)
	}
	t.Run("bpftrace", func(t *testing.T) {
		bt := tooltest.Peer(t, "bpftrace", "bpftrace")
		if bt == "" {
			t.Skip("bpftrace is compared on the host, not in the matrix's guests")
		}
		pred := `str(args->name) == "lo" && (args->len == 48 || args->len == 328 || args->len == 1028 || args->len == 5028)`
		env, err := exec.LookPath("env")
		if err != nil {
			t.Fatal(err)
		}
		// bpftrace's -c runs a program, not a shell line: env sets the variable.
		out, err := exec.Command(bt, "-e", fmt.Sprintf(`tracepoint:net:netif_receive_skb /%s/ { @ = hist(args->len); }`, pred), "-c", env+" "+work).CombinedOutput()
		if err != nil {
			t.Fatalf("bpftrace: %v\n%s", err, out)
		}
		// bpftrace: "[32, 64)   5 |@@@...|"; ours: "32 -> 63 : 5".
		peer := map[string]string{}
		for _, m := range regexp.MustCompile(`(?m)^\[(\d+)K?, (\d+)K?\)\s+(\d+) \|`).FindAllStringSubmatch(string(out), -1) {
			peer[m[1]] = m[3]
		}
		for _, m := range regexp.MustCompile(`(?m)^\s+(\d+) -> \d+\s+: (\d+)`).FindAllStringSubmatch(r.Stdout, -1) {
			lo, _ := strconv.Atoi(m[1])
			key := m[1]
			if lo >= 1024 {
				key = strconv.Itoa(lo / 1024) // bpftrace writes 1K, 4K
			}
			if m[2] != "0" && peer[key] != m[2] {
				t.Errorf("bucket from %s: filter %s, bpftrace %q\n%s", m[1], m[2], peer[key], out)
			}
		}
	})
}

// A ring too small for a burst: what is printed plus what is reported lost
// is exactly what passed. The tool is stopped (SIGSTOP) for the burst, so
// its reader cannot drain the ring whatever the machine's speed: in the
// arm64 guest, where an open takes a millisecond, a running reader kept up
// with 20,000 of them. Ten execs after the burst write their names to
// rings of their own: the old binary, with names in the event's rings,
// counted those that met the full ring as lost events too.
func TestRingOverflowIsCounted(t *testing.T) {
	privtest.Require(t)
	a := t.TempDir() + "/a"
	openFiles(t, a)
	const burst = 2000
	cmd := exec.Command(tooltest.Tool(t, "filter"), "--ring-pages", "1", "syscalls:sys_enter_openat", "--where", fmt.Sprintf(`filename == "%s"`, a))
	var stdout strings.Builder
	cmd.Stdout = &stdout
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	errs := bufio.NewReader(stderr)
	if _, err := errs.ReadString('\n'); err != nil { // "Tracing ...": attached
		t.Fatal(err)
	}
	opens := func(n int) {
		t.Helper()
		if out, err := exec.Command("/bin/sh", "-c", tooltest.Opens(t, "", tooltest.Open{Path: a, Times: n})).CombinedOutput(); err != nil {
			t.Fatalf("opens: %v %s", err, out)
		}
	}
	cmd.Process.Signal(syscall.SIGSTOP)
	opens(burst)
	// Ten execs meet the full rings: their names must not count as events.
	for range 10 {
		if err := exec.Command("/bin/true").Run(); err != nil {
			t.Fatal(err)
		}
	}
	cmd.Process.Signal(syscall.SIGCONT)
	opens(1) // the kernel reports a loss with the next record that fits
	// No wait for the reader: the final report reads what the rings hold.
	cmd.Process.Signal(syscall.SIGINT)
	rest, _ := io.ReadAll(errs)
	err := cmd.Wait()
	r := tooltest.Result{Stdout: stdout.String(), Stderr: string(rest)}
	if err != nil {
		r.Status = 1
	}
	printed := len(lines(r.Stdout))
	m := regexp.MustCompile(`filter: (?:at least )?(\d+) events lost: a ring buffer was full`).FindStringSubmatch(r.Stderr)
	lost := 0
	if m != nil {
		lost, _ = strconv.Atoi(m[1])
	}
	if r.Status != 0 || printed+lost != burst+1 {
		t.Errorf("%v: %d printed + %d lost, want exactly %d: %s", err, printed, lost, burst+1, r.Stderr)
	}
	if lost == 0 {
		t.Errorf("a 1-page ring kept up with %d events while its reader was stopped: %s", burst, r.Stderr)
	}
	t.Logf("%d printed, %d lost", printed, lost)
	if !strings.Contains(r.Stdout, "filename="+a+" ") {
		t.Errorf("the filename prints as text: %.300s", r.Stdout)
	}
}

// filter leaves its own events out unless --self: its threads make
// syscalls all along (polls, reads of the maps). Its pid is its command's
// grandparent's, the command's parent being its guard (other processes may
// be named filter: the tests of other packages run at the same time).
func TestSelf(t *testing.T) {
	privtest.Require(t)
	for _, self := range []bool{false, true} {
		args := []string{"--json", "--count-by", "pid", "raw_syscalls:sys_enter", "-a", "-c", "echo filter=$(cut -d' ' -f4 /proc/$PPID/stat) >&2; sleep 0.5"}
		if self {
			args = append(args, "--self")
		}
		r := filter(t, args...)
		m := regexp.MustCompile(`filter=(\d+)`).FindStringSubmatch(r.Stderr)
		if r.Status != 0 || m == nil {
			t.Fatalf("exit %d: %s", r.Status, r.Stderr)
		}
		if got := strings.Contains(r.Stdout, `{"pid":`+m[1]+`}`); got != self {
			t.Errorf("--self=%v: a row for filter itself (pid %s): %v\n%s", self, m[1], got, r.Stdout)
		}
	}
}

// A process name with an escape sequence and a newline cannot forge a line
// or drive the terminal: text output escapes it; JSON carries it as is.
func TestHostileCommEscaped(t *testing.T) {
	privtest.Require(t)
	a := t.TempDir() + "/a"
	openFiles(t, a)
	const comm = "x\x1b[31mY\nFAKE"
	work := tooltest.Opens(t, comm, tooltest.Open{Path: a, Times: 2})
	where := fmt.Sprintf(`filename == "%s"`, a)
	r := filter(t, "syscalls:sys_enter_openat", "--where", where, "-c", work)
	ls := lines(r.Stdout)
	if len(ls) != 2 || strings.ContainsAny(r.Stdout, "\x1b") || !strings.Contains(ls[0], `x\x1b[31mY\x0aFAKE-`) {
		t.Errorf("stream: %q", r.Stdout)
	}
	r = filter(t, "--count-by", "comm", "syscalls:sys_enter_openat", "--where", where, "-c", work)
	if strings.ContainsAny(r.Stdout, "\x1b") || !strings.Contains(r.Stdout, `x\x1b[31mY\x0aFAKE  `) || len(lines(r.Stdout)) != 2 {
		t.Errorf("--count-by comm: %q", r.Stdout)
	}
	r = filter(t, "--json", "--count-by", "comm", "syscalls:sys_enter_openat", "--where", where, "-c", work)
	if !strings.Contains(r.Stdout, `"comm":"x\u001b[31mY\nFAKE"`) {
		t.Errorf("--json keeps the name: %q", r.Stdout)
	}
}

// The rings wake the reader a quarter full, not per record: a single
// record must still print while the run goes on, within the reader's
// poll timeout (100 ms), not at the end.
// The record filter prints at a syscall's entry is the tracepoint's: the
// same fields, the same values, the syscall's number among them.
func TestSyscallRecordOnEachHook(t *testing.T) {
	privtest.Require(t)
	regs, err := asm.HostPtRegs()
	if err != nil {
		t.Fatal(err)
	}
	nr := map[string]float64{"amd64": 1, "arm64": 64, "riscv64": 64, "arm": 4}[regs.Arch]
	const size, n = 4321, 3
	var first, printed string
	tooltest.ForEachSyscallHook(t, "write", func(t *testing.T) {
		r := filter(t, "--json", "--fields", "__syscall_nr,fd,count", "syscalls:sys_enter_write", "--where", fmt.Sprintf("count == %d", size), "-c", tooltest.Writes(t, size, n))
		var got []string
		for _, l := range lines(r.Stdout) {
			var ev struct {
				Fields map[string]float64 `json:"fields"`
			}
			if err := json.Unmarshal([]byte(l), &ev); err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			if ev.Fields["__syscall_nr"] != nr || ev.Fields["count"] != size || ev.Fields["fd"] < 1 {
				t.Errorf("%s: want __syscall_nr %v, count %d, a descriptor", l, nr, size)
			}
			got = append(got, fmt.Sprint(ev.Fields))
		}
		if r.Status != 0 || len(got) != n {
			t.Fatalf("exit %d, %d events, want %d: %s%s", r.Status, len(got), n, r.Stdout, r.Stderr)
		}
		if first == "" {
			first = strings.Join(got, "\n")
		} else if s := strings.Join(got, "\n"); s != first {
			t.Errorf("fields %s, on perf %s", s, first)
		}
		// Every field, as printed by default: the same text on each hook
		// (6.19+'s __buf_val, a copy only the stored record has, is not a
		// field a program can read, on either).
		r = filter(t, "syscalls:sys_enter_write", "--where", fmt.Sprintf("count == %d", size), "-c", tooltest.Writes(t, size, n))
		ls := lines(r.Stdout)
		if r.Status != 0 || len(ls) != n {
			t.Fatalf("default print: exit %d, %d lines, want %d: %s%s", r.Status, len(ls), n, r.Stdout, r.Stderr)
		}
		for _, l := range ls {
			_, fields, _ := strings.Cut(l, ": sys_enter_write: ")
			if !strings.HasPrefix(fields, fmt.Sprintf("__syscall_nr=%d fd=", int(nr))) || !strings.HasSuffix(fields, fmt.Sprintf(" count=%d", size)) {
				t.Errorf("default print %q", l)
			}
			if printed == "" {
				printed = fields
			} else if fields != printed {
				t.Errorf("default print %q, on perf %q", fields, printed)
			}
		}
	})
}

func TestOneEventPrintsAtOnce(t *testing.T) {
	privtest.Require(t)
	const size = 12345
	cmd := exec.Command(tooltest.Tool(t, "filter"), "syscalls:sys_enter_write", "--where", fmt.Sprintf("count == %d", size))
	stdout, _ := cmd.StdoutPipe()
	stderr, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if _, err := bufio.NewReader(stderr).ReadString('\n'); err != nil { // "Tracing ...": attached
		t.Fatal(err)
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	wrote := time.Now()
	null.Write(make([]byte, size))
	got := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		got <- line
	}()
	select {
	case line := <-got:
		if !strings.Contains(line, fmt.Sprintf("count=%d", size)) {
			t.Errorf("line %q", line)
		}
		t.Logf("printed %v after the write", time.Since(wrote).Round(time.Millisecond))
	case <-time.After(5 * time.Second):
		// Without the poll timeout it would print only at the end, and
		// the run has no end: 5 s leaves room for a slow guest.
		t.Fatal("the event did not print within 5 s of the write")
	}
}

// A thread's last switch away comes after the kernel released it: the
// sample's thread id is -1, and the line shows the record's common_pid,
// as trace_pipe does (here, the switch's prev_pid), never 4294967295.
func TestReleasedThreadShowsCommonPid(t *testing.T) {
	privtest.Require(t)
	const n = 5
	r := filter(t, "--json", "sched:sched_switch", "--where", `prev_comm == "tkthread"`, "-c", tooltest.Threads(t, n))
	js := lines(r.Stdout)
	if r.Status != 0 || len(js) < n {
		t.Fatalf("exit %d, %d lines, want at least %d (one last switch per thread): %s", r.Status, len(js), n, r.Stderr)
	}
	pids := map[any]bool{}
	for _, l := range js {
		var ev struct {
			Pid    any            `json:"pid"`
			Tid    uint32         `json:"tid"`
			Fields map[string]any `json:"fields"`
		}
		if err := json.Unmarshal([]byte(l), &ev); err != nil || float64(ev.Tid) != ev.Fields["prev_pid"] {
			t.Errorf("json line %q: tid is not the switch's prev_pid (%v)", l, err)
		}
		pids[ev.Pid] = true
	}
	// The process outlives its threads: it is known, and one.
	if len(pids) != 1 || pids[nil] || pids[float64(gone)] {
		t.Errorf("pids %v, want the workload's alone", pids)
	}
	r = filter(t, "sched:sched_switch", "--where", `prev_comm == "tkthread"`, "-c", tooltest.Threads(t, n))
	for _, l := range lines(r.Stdout) {
		if strings.Contains(l, "-4294967295 ") || !regexp.MustCompile(`-(\d+) +\[\d+\] .* prev_pid=(\d+) `).MatchString(l) {
			t.Errorf("text line %q", l)
		} else if m := regexp.MustCompile(`-(\d+) +\[\d+\] .* prev_pid=(\d+) `).FindStringSubmatch(l); m[1] != m[2] {
			t.Errorf("text line %q: the thread shown is not prev_pid", l)
		}
	}
}

// --max-keys bounds the distinct keys an interval holds, not a run: 300
// files opened twice each, in six phases of 50 distinct files half a second
// apart, under --max-keys 100 and reports every 0.2 s, are all counted
// exactly, none lost: the kernel's counts are drained at each report (two
// hashes, one counting while the other is read and emptied). One report
// at the end holds the run's keys: the first 100 files are counted, and
// the 200 others' 400 opens are lost, exactly. The old binary kept every
// key of the run in the kernel, intervals or not (it had no --max-keys).
func TestMaxKeysPerInterval(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	files := phasedFiles(t, dir, 6, 50, 500)
	work := tooltest.Opens(t, "", files...)
	where := fmt.Sprintf(`filename ~ "%s/*"`, dir)
	reports := func(args ...string) []countByReport {
		t.Helper()
		r := filter(t, append([]string{"--json", "--count-by", "filename", "--max-keys", "100", "syscalls:sys_enter_openat", "--where", where, "-c", work}, args...)...)
		if r.Status != 0 {
			t.Fatalf("%q: exit %d: %s", args, r.Status, r.Stderr)
		}
		var reps []countByReport
		for _, l := range lines(r.Stdout) {
			var rep countByReport
			if err := json.Unmarshal([]byte(l), &rep); err != nil {
				t.Fatalf("%q: %v: %q", args, err, l)
			}
			reps = append(reps, rep)
		}
		return reps
	}
	perFile := map[string]int{}
	total, lost := 0, 0
	reps := reports("0.2")
	for _, rep := range reps {
		for _, c := range rep.Counts {
			perFile[fmt.Sprint(c.Key["filename"])] += c.Count
		}
		total, lost = total+rep.Total, lost+rep.Lost
	}
	wrong := 0
	for _, f := range files {
		if f.Path != "" && perFile[f.Path] != 2 {
			wrong++
		}
	}
	if total != 600 || lost != 0 || len(perFile) != 300 || wrong != 0 {
		t.Errorf("every 0.2 s: %d events over %d reports, %d lost, %d files (%d not counted twice); want 600, 0 lost, 300 files", total, len(reps), lost, len(perFile), wrong)
	}
	reps = reports()
	if len(reps) != 1 || len(reps[0].Counts) != 100 || reps[0].Total != 200 || reps[0].Lost != 400 {
		t.Errorf("one report: %d reports; want one of 100 keys, 200 events, 400 lost: %+v", len(reps), reps)
	}
}

// TestSkippedRunsAccounted runs writers side by side: where the kernel
// skips the program (a 7.x kernel preempts it mid-run, and the next write
// on that CPU finds it busy), the writes it missed must be said, never
// silently absent from the count.
func TestSkippedRunsAccounted(t *testing.T) {
	privtest.Require(t)
	const size, n, writers = 4322, 3000, 8
	cmd := strings.Repeat(tooltest.Writes(t, size, n)+" & ", writers) + "wait"
	tooltest.ForEachSyscallHook(t, "write", func(t *testing.T) {
		r := filter(t, "--count", "--json", "syscalls:sys_enter_write", "--where", fmt.Sprintf("count == %d", size), "-c", cmd)
		var rep struct {
			Count uint64 `json:"count"`
		}
		if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &rep); r.Status != 0 || err != nil {
			t.Fatalf("exit %d (%v): %s%s", r.Status, err, r.Stdout, r.Stderr)
		}
		skipped := tooltest.SkippedRuns("filter", r.Stderr)
		// A writer whose fork the kernel skipped following is said
		// too: its n writes are missing, as the end of the run says.
		unseen := tooltest.ForksNotSeen("filter", r.Stderr)
		const want = n * writers
		if rep.Count > want || rep.Count+skipped+unseen*n < want {
			t.Errorf("%d writes counted, %d runs said skipped, %d forks not followed; want %d counted, or the missing ones among those: %s", rep.Count, skipped, unseen, want, r.Stderr)
		}
		t.Logf("%d counted, %d skipped, %d forks not followed", rep.Count, skipped, unseen)
	})
}

// TestUprobeLeastPrivilege: CAP_BPF and CAP_PERFMON attach a uprobe to a
// library anyone may read. What they do not give is another process's
// files (its /proc/PID/root): the ptrace check. The error says so, and
// names CAP_SYS_PTRACE, which makes it run; it never advises the two
// capabilities the tool already has. The binary before said "libc.so.6:
// not found in the process's root".
func TestUprobeLeastPrivilege(t *testing.T) {
	privtest.Require(t)
	target := exec.Command("sleep", "60")
	if err := target.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { target.Process.Kill(); target.Wait() }()
	bin := tooltest.Tool(t, "filter")
	least := []uintptr{tooltest.CapBPF, tooltest.CapPerfmon}
	paranoid, _ := os.ReadFile("/proc/sys/kernel/perf_event_paranoid")
	level, _ := strconv.Atoi(strings.TrimSpace(string(paranoid)))
	ran := func(what string, r tooltest.Result) {
		t.Helper()
		if r.Status == 0 && strings.Contains(r.Stdout, "events of uprobe:") {
			return
		}
		// Debian's level 3 keeps perf events for root on 5.10 and 6.1
		// (6.12 and 7.2 let CAP_PERFMON through): then the level is named.
		if level <= 2 || r.Status != 1 || !strings.Contains(r.Stderr, fmt.Sprintf("kernel.perf_event_paranoid is %d", level)) {
			t.Errorf("%s (perf_event_paranoid %d): exit %d, %q %q; want a run, or 1 and the level named above 2", what, level, r.Status, r.Stdout, r.Stderr)
		}
	}
	// A library anyone may read: libc's malloc, or on 32-bit ARM, whose
	// libc is Thumb code that uprobes cannot probe, the fixtures' libtk.so.
	probe := "uprobe:libc.so.6:malloc"
	if runtime.GOARCH == "arm" {
		probe = "uprobe:" + filepath.Join(fixtures(t), "libtk.so") + ":tk_lib_twice"
	}
	ran("system-wide", tooltest.RunAs(t, least, bin, "--count", probe, "0.01", "1"))

	pid := strconv.Itoa(target.Process.Pid)
	r := tooltest.RunAs(t, least, bin, "--count", probe, "-p", pid, "0.01", "1")
	if r.Status != 1 || strings.Count(r.Stderr, "\n") != 1 || !strings.Contains(r.Stderr, "cannot read process "+pid+"'s memory maps and files: permission denied") || !strings.Contains(r.Stderr, "needs CAP_SYS_PTRACE") {
		t.Errorf("-p of root's process: exit %d, %q; want 1 and one line naming CAP_SYS_PTRACE", r.Status, r.Stderr)
	}
	r = tooltest.RunAs(t, least, bin, "--info", "usdt", "-p", pid)
	if r.Status != 1 || !strings.Contains(r.Stderr, "needs CAP_SYS_PTRACE") {
		t.Errorf("--info usdt -p of root's process: exit %d, %q; want 1 and CAP_SYS_PTRACE named", r.Status, r.Stderr)
	}
	ran("-p with CAP_SYS_PTRACE", tooltest.RunAs(t, append(least, tooltest.CapSysPtrace), bin, "--count", probe, "-p", pid, "0.01", "1"))
}

// -c keeps the events of the command's tree from its exec on: the
// command line's shell (its printf, a builtin, writes 5 bytes once) and a
// process outside the tree (this test, 4 writes while the command runs)
// are not counted, the 3 writes of the program the shell runs are; -a
// keeps all 8.
func TestCommandScope(t *testing.T) {
	privtest.Require(t)
	dir := t.TempDir()
	self := selfComm()
	where := fmt.Sprintf(`count == 5 && (comm == "sh" || comm == "%s")`, self)
	for _, all := range []bool{false, true} {
		goFile, done := filepath.Join(dir, fmt.Sprint("go", all)), filepath.Join(dir, fmt.Sprint("done", all))
		go func() {
			for i := 0; i < 3000; i++ {
				if _, err := os.Stat(goFile); err == nil {
					null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
					if err == nil {
						for range 4 {
							null.Write([]byte("12345"))
						}
						null.Close()
					}
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			os.WriteFile(done, nil, 0o644)
		}()
		line := fmt.Sprintf("printf abcde > /dev/null; %s; touch %s; while [ ! -e %s ]; do sleep 0.02; done", tooltest.Writes(t, 5, 3), goFile, done)
		args := []string{"--count", "--json", "syscalls:sys_enter_write", "--where", where, "-c", line}
		want := `"count":3`
		if all {
			args, want = append(args, "-a"), `"count":8`
		}
		if r := filter(t, args...); r.Status != 0 || !strings.Contains(r.Stdout, want) {
			t.Errorf("-a=%v: exit %d, %s%s; want %s", all, r.Status, r.Stdout, r.Stderr, want)
		}
	}
}
