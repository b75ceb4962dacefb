package stacks

import (
	"cmp"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tracekit/tracekit/internal/golden"
	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/stacktest"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/stacks/prog"
)

// A snapshot is one deferred sample of a real run, as the walk in user
// space met it: the registers where the kernel left the walk, the copy of
// the user stack, every answer the process's mappings and tables gave
// the walk, and the frames it found, each with the name the run gave it.
// Replayed, the walk must find the same frames from the same answers:
// the corpus pins walkCopy on real stacks, without a kernel or root.
type snapshot struct {
	Case       string        `json:"case"`
	Arch       string        `json:"arch"` // GOARCH of the run
	Mode       string        `json:"mode"`
	Regs       walkRegs      `json:"regs"`
	Stack      []byte        `json:"stack"`
	Base       uint64        `json:"base,omitempty"` // Stack's first address; none: Regs.SP (before arm64's copy started below it)
	Places     []PlaceAt     `json:"places"`
	Sigreturns []SigreturnAt `json:"sigreturns"`
	Start      []frame       `json:"start"` // the frames the kernel walked before it deferred
	Frames     []frame       `json:"frames"`
	Stop       int32         `json:"stop"`
	FP         bool          `json:"fp"`
}

type frame struct {
	PC   uint64 `json:"pc"`
	Name string `json:"name"`
}

// replayCases are the runs the corpus is taken from (and TestKernelWalk
// runs): a fixture, its arguments (a run that outlasts a slow load: it is
// killed once sampled), and the functions its snapshot's frames must hold
// in order (innermost first) for the walk to count as whole.
var replayCases = []struct {
	name, fixture string
	args          []string
	want          []string
	stop          int32 // how the walk ends where not prog.StopEnd
}{
	{"chain-nopie", "chain-nopie", []string{"60"}, []string{"c", "b", "a", "main"}, 0},
	{"chain-pie", "chain-pie", []string{"60"}, []string{"c", "b", "a", "main"}, 0},
	{"chain-lib", "chain-lib", []string{"60"}, []string{"c", "b", "a", "main"}, 0},
	{"signal-alrm", "signal", []string{"alrm", "60"}, []string{"hc", "hb", "on_signal", "__restore_rt", "a", "main"}, 0},
	{"signal-plt", "signal", []string{"plt", "60"}, []string{"hc", "hb", "on_signal", "__restore_rt", "getppid@plt", "b", "a", "main"}, 0},
	// musl's start code has no unwind row: the walk ends there.
	{"signal-musl", "musl/signal", []string{"alrm", "60"}, []string{"hc", "hb", "on_signal", "__restore_rt", "b", "a", "main"}, prog.StopNoRow},
	{"realign", "realign", []string{"60"}, []string{"c", "b", "a", "main"}, 0},
	{"overload", "overload", []string{"100", "1000"}, []string{"spin_cpu", "void tmpl<int>(int)", "main"}, 0},
	{"gospin", "gospin", []string{"60"}, []string{"main.c", "main.b", "main.a", "main.main"}, 0},
}

func replayDir() string { return filepath.Join("testdata", "replay", runtime.GOARCH) }

// TestReplay replays the committed corpus (testdata/replay/ARCH, every
// architecture's on any machine): each snapshot's walk, from its registers, stack and answers, finds the
// frames the run found, and those frames hold its case's functions. With
// -update (as root) it first takes this architecture's corpus again from
// real runs of the fixtures.
func TestReplay(t *testing.T) {
	if golden.Updating() {
		captureCorpus(t)
	}
	// Every architecture's snapshots, on any machine: the walk is pure.
	paths, _ := filepath.Glob(filepath.Join("testdata", "replay", "*", "*.json"))
	if !slices.Contains(paths, filepath.Join("testdata", "replay", "amd64", "chain-nopie.json")) {
		t.Fatalf("no x86-64 snapshots in testdata/replay/amd64 (go test -run TestReplay -update, as root on x86-64, takes them)")
	}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var snap snapshot
		if err := json.Unmarshal(b, &snap); err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		t.Run(snap.Arch+"/"+snap.Case, func(t *testing.T) { replay(t, snap) })
	}
}

func replay(t *testing.T, snap snapshot) {
	arch, ok := prog.ArchOf(snap.Arch)
	if !ok {
		t.Fatalf("snapshot of %s, which has no in-kernel unwinder", snap.Arch)
	}
	for _, c := range replayCases {
		if c.name == snap.Case && !holds(names(append(slices.Clone(snap.Start), snap.Frames...)), c.want) {
			t.Errorf("the snapshot's frames %q do not hold %q", names(snap.Frames), c.want)
		}
	}
	space := &replaySpace{t: t, snap: snap}
	room := prog.UserFrames - len(snap.Start)
	frames, stop, fp, wait := walkCopy(arch, snap.Mode, space, snap.Regs, stackReader(cmp.Or(snap.Base, snap.Regs.SP), snap.Stack), room)
	want := make([]uint64, len(snap.Frames))
	for i, f := range snap.Frames {
		want[i] = f.PC
	}
	if !slices.Equal(frames, want) || stop != snap.Stop || fp != snap.FP || wait != 0 {
		t.Errorf("replayed: frames %x, stop %d, fp %v, wait %v\nwant: frames %x (%q), stop %d, fp %v", frames, stop, fp, wait, want, names(snap.Frames), snap.Stop, snap.FP)
	}
}

func names(fs []frame) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Name)
	}
	return out
}

// holds says whether got has want's names in order (others between).
func holds(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// replaySpace answers as the run did; a question the run was not asked
// means the walk took another way.
type replaySpace struct {
	t    *testing.T
	snap snapshot
}

func (r *replaySpace) At(lookup uint64) Place {
	for _, p := range r.snap.Places {
		if p.Lookup == lookup {
			return p.Place
		}
	}
	r.t.Errorf("the walk asked what is at %#x, which the run did not", lookup)
	return Place{}
}

func (r *replaySpace) SigreturnIn(lookup, pc uint64) bool {
	return r.sigreturn(true, lookup, pc)
}

func (r *replaySpace) Sigreturn(pc uint64) bool { return r.sigreturn(false, 0, pc) }

func (r *replaySpace) sigreturn(in bool, lookup, pc uint64) bool {
	for _, s := range r.snap.Sigreturns {
		if s.In == in && s.Lookup == lookup && s.PC == pc {
			return s.Is
		}
	}
	r.t.Errorf("the walk asked whether %#x (in the file of %#x: %v) is the signal trampoline, which the run did not", pc, lookup, in)
	return false
}

// captureCorpus profiles each case's fixture (-p, every sample deferred
// to user space) and writes the first walk that holds the case's
// functions and ends where the stack does.
func captureCorpus(t *testing.T) {
	privtest.Require(t)
	if _, ok := prog.ArchOf(runtime.GOARCH); !ok {
		t.Skipf("%s has no in-kernel unwinder to defer from", runtime.GOARCH)
	}
	fx := stacktest.Fixtures(t)
	if err := os.MkdirAll(replayDir(), 0o755); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var taken []snapshot
	recordWalk = func(ps *processes, s *deferredSample, user int, frames []uint64, stop int32, fp bool) {
		snap := snapshot{Arch: runtime.GOARCH, Mode: ps.mode, Regs: walkRegs{PC: s.pc, SP: s.sp, BP: s.bp, LR: s.lr, Lookup: s.lookup},
			Stack: s.stack, Base: s.sp - ps.arch.CopyBelow(), Places: s.rec.places, Sigreturns: s.rec.sigreturns, Stop: stop, FP: fp}
		// Named as the reports name them: a return address by its call,
		// the frame a signal interrupted by its own address.
		prev := ""
		name := func(i int, pc uint64) frame {
			f := frame{pc, ps.symbolize(s.pid, pc, i > 0 && !IsSigreturn(prev))}
			prev = f.Name
			return f
		}
		for i := 0; i < s.n; i++ {
			snap.Start = append(snap.Start, name(i, binary.LittleEndian.Uint64(s.key[user+8*i:])))
		}
		for i, pc := range frames {
			snap.Frames = append(snap.Frames, name(s.n+i, pc))
		}
		mu.Lock()
		taken = append(taken, snap)
		mu.Unlock()
	}
	deferAll = true
	defer func() { recordWalk, deferAll = nil, false }()
	for _, c := range replayCases {
		path := filepath.Join(fx, c.fixture)
		if _, err := os.Stat(path); err != nil {
			t.Logf("%s: no fixture %s here", c.name, path)
			continue
		}
		if why := noGoWalk(c.fixture); why != "" {
			t.Logf("%s: %s", c.name, why)
			continue
		}
		mu.Lock()
		taken = nil
		mu.Unlock()
		cmd := exec.Command(path, c.args...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		// Sampled for 2.5 s from the moment it is traced (a TCG guest's
		// load takes seconds).
		o := &Options{Pid: int64(cmd.Process.Pid), Frequency: 199, Unwind: prog.UnwindAuto, Budget: DefaultBudget, NoContext: true}
		s := run.NewSession("profile", &o.Common)
		ctx, cancel := context.WithCancel(context.Background())
		s.Stdout, s.Stderr = io.Discard, &onLine{prefix: "Tracing ", fn: func() { time.AfterFunc(2500*time.Millisecond, cancel) }}
		err := Run(ctx, s, o)
		cancel()
		s.Close()
		cmd.Process.Kill()
		cmd.Wait()
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		mu.Lock()
		var best *snapshot
		for i := range taken {
			sn := &taken[i]
			if (sn.Stop == prog.StopEnd || c.stop != 0 && sn.Stop == c.stop) && holds(names(append(slices.Clone(sn.Start), sn.Frames...)), c.want) {
				best = sn
				break
			}
		}
		mu.Unlock()
		if best == nil {
			seen := map[string]int{}
			for _, sn := range taken {
				seen[fmt.Sprintf("%d %q", sn.Stop, names(append(slices.Clone(sn.Start), sn.Frames...)))]++
			}
			t.Errorf("%s: none of %d deferred walks holds %q and ends whole; they were (stop, frames): %v", c.name, len(taken), c.want, seen)
			continue
		}
		best.Case = c.name
		b, err := json.MarshalIndent(best, "", " ")
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(replayDir(), c.name+".json")
		if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %d walks, wrote %s: %s", c.name, len(taken), out, strings.Join(names(best.Frames), " < "))
	}
}

// TestKernelWalk profiles each replay case's fixture as profile does,
// the in-kernel walker doing the work (nothing deferred on purpose), and
// finds the case's functions, in order, in a fifth or more of the
// samples that reach its outermost one (overload's three functions take
// turns, a third each; the others' spin is all there): the expectations the replayed
// walk in user space meets, met by the kernel's.
func TestKernelWalk(t *testing.T) {
	privtest.Require(t)
	stacktest.RequireUnwinder(t)
	fx := stacktest.Fixtures(t)
	for _, c := range replayCases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(fx, c.fixture)
			stacktest.HaveFixture(t, path)
			if why := noGoWalk(c.fixture); why != "" {
				t.Skip(why)
			}
			cmd := exec.Command(path, c.args...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer cmd.Wait()
			defer cmd.Process.Kill()
			// Sampled for 1.5 s from the moment it is traced: the load
			// takes seconds in the matrix's TCG guests.
			var out strings.Builder
			o := &Options{Pid: int64(cmd.Process.Pid), Frequency: 199, Unwind: prog.UnwindAuto, Budget: DefaultBudget, NoContext: true, Folded: true}
			s := run.NewSession("profile", &o.Common)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s.Stdout, s.Stderr = &out, &onLine{prefix: "Tracing ", fn: func() { time.AfterFunc(1500*time.Millisecond, cancel) }}
			err := Run(ctx, s, o)
			s.Close()
			if err != nil {
				t.Fatal(err)
			}
			// Of the samples whose stacks reach main (riscv64's vDSO
			// clock_gettime, where overload spends much of its time under
			// TCG, has no unwind row), a fifth or more hold the case's
			// functions: overload's three take turns, a third each, and
			// its tmpl had 32 of 141 (23%) in riscv64's guest beside two
			// others, the sampling's spread at that count.
			held, reached := 0, 0
			for _, line := range strings.Split(out.String(), "\n") {
				if line == "" {
					continue
				}
				i := strings.LastIndexByte(line, ' ')
				n, err := strconv.Atoi(line[i+1:])
				if i < 0 || err != nil {
					t.Fatalf("not a folded line: %q", line)
				}
				frames := strings.Split(line[:i], ";")
				slices.Reverse(frames) // innermost first, as the cases name them
				if slices.Contains(frames, foldName(c.want[len(c.want)-1])) {
					reached += n
				}
				if holds(frames, foldNames(c.want)) {
					held += n
				}
			}
			if held == 0 || 5*held < reached {
				t.Errorf("%d of the %d samples that reach %s hold %q (want a fifth or more):\n%s", held, reached, c.want[len(c.want)-1], c.want, out.String())
			}
		})
	}
}

// foldNames are names as folded output writes them.
func foldNames(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = foldName(n)
	}
	return out
}

// onLine calls fn once, at the first line written to it that starts with
// prefix (a session's stderr: "Tracing ..." once everything is attached).
type onLine struct {
	prefix string
	fn     func()
	once   sync.Once
	buf    []byte
}

func (w *onLine) Write(b []byte) (int, error) {
	w.buf = append(w.buf, b...)
	for _, l := range strings.Split(string(w.buf), "\n") {
		if strings.HasPrefix(l, w.prefix) {
			w.once.Do(w.fn)
		}
	}
	if i := strings.LastIndexByte(string(w.buf), '\n'); i >= 0 {
		w.buf = w.buf[i+1:]
	}
	return len(b), nil
}

// noGoWalk says why the Go fixture's stacks are not whole here ("" where
// they are): on riscv64 Go keeps no frame pointers and a stripped Go
// program has no .debug_frame, nothing to step by.
func noGoWalk(fixture string) string {
	if fixture == "gospin" && runtime.GOARCH == "riscv64" {
		return "riscv64: Go keeps no frame pointers here, and -ldflags=-w leaves no .debug_frame"
	}
	return ""
}
