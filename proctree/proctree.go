package proctree

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/counts"
	"github.com/tracekit/tracekit/loader"
	"github.com/tracekit/tracekit/tracefs"
)

// Names of the process-tree map and programs that Add adds.
const (
	PidsMap    = "pids"
	pidsLost   = "pids_lost"
	followProg = "follow_forks"
	forgetProg = "forget_exits"
	seedProg   = "seed_on_exec"
)

// MaxFollowed is the most processes (and threads) followed at once unless
// Tree.Max says otherwise: exited ones leave the map. MaxLimit bounds what
// a user may ask for (a preallocated hash, about 64 bytes an entry).
const (
	MaxFollowed = 8192
	MaxLimit    = 1 << 18
)

// Tree is what following a command's process tree takes: its root, and
// where this kernel's sched_process_fork and sched_process_exit records
// keep the pids (from their format files, read by New).
type Tree struct {
	Root int // the command's pid: the namespace's, with NS
	// NS: the tool runs in a pid namespace of its own (see Add).
	NS *asm.PidNS
	// Max is the most processes followed at once; 0 is MaxFollowed.
	Max                          uint32
	ParentPid, ChildPid, ExitPid int
}

// New is the Tree of root on this kernel.
func New(root int, ns *asm.PidNS, max uint32) (*Tree, error) {
	t := &Tree{Root: root, NS: ns, Max: max}
	f, err := tracefs.ReadFormat("sched", "sched_process_fork")
	if err != nil {
		return nil, fmt.Errorf("follow the command's processes: %w", err)
	}
	e, err := tracefs.ReadFormat("sched", "sched_process_exit")
	if err != nil {
		return nil, fmt.Errorf("follow the command's processes: %w", err)
	}
	return t, t.Read(f, e)
}

// Read takes the pids' offsets from the fork and exit events' formats.
func (t *Tree) Read(fork, exit *tracefs.Format) error {
	for _, f := range []struct {
		format *tracefs.Format
		name   string
		off    *int
	}{{fork, "parent_pid", &t.ParentPid}, {fork, "child_pid", &t.ChildPid}, {exit, "pid", &t.ExitPid}} {
		field, err := f.format.MustField(f.name)
		if err != nil {
			return err
		}
		*f.off = field.Offset
	}
	return nil
}

// Add adds to spec what following t takes: the hash PidsMap (kernel pid
// -> 1), which programs test with asm.PidInSet against
// bpf_get_current_pid_tgid, a sched:sched_process_fork program that adds
// children, and a sched:sched_process_exit program that removes the
// exited. Inside a pid namespace (t.NS not nil), t.Root is that
// namespace's pid, and a sched:sched_process_exec program puts the
// kernel's pid in the map when the root execs (see asm.SeedOnExec).
func Add(spec *ebpf.CollectionSpec, t *Tree) error {
	fork, err := asm.FollowForks(PidsMap, pidsLost, t.ParentPid, t.ChildPid)
	if err != nil {
		return err
	}
	exits, err := asm.ForgetExits(PidsMap, t.ExitPid)
	if err != nil {
		return err
	}
	max := t.Max
	if max == 0 {
		max = MaxFollowed
	}
	spec.Maps[PidsMap] = &ebpf.MapSpec{Name: "tk_pids", Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: max}
	spec.Maps[pidsLost] = &ebpf.MapSpec{Name: "tk_pids_lost", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1}
	spec.Programs[followProg] = &ebpf.ProgramSpec{Name: followProg, Type: ebpf.TracePoint, License: "GPL", Instructions: fork}
	spec.Programs[forgetProg] = &ebpf.ProgramSpec{Name: forgetProg, Type: ebpf.TracePoint, License: "GPL", Instructions: exits}
	if t.NS != nil {
		spec.Programs[seedProg] = &ebpf.ProgramSpec{Name: seedProg, Type: ebpf.TracePoint, License: "GPL", Instructions: asm.SeedOnExec(PidsMap, *t.NS, uint32(t.Root))}
	}
	return nil
}

// Follow seeds PidsMap with root (or, in a pid namespace, attaches the
// program that does at root's exec) and attaches the fork follower and
// the exit pruner through attach, which owns them from then on.
func Follow(coll *ebpf.Collection, root int, attach func(prog *ebpf.Program, group, name string) error) error {
	m, fork, exits := coll.Maps[PidsMap], coll.Programs[followProg], coll.Programs[forgetProg]
	if m == nil || fork == nil || exits == nil {
		return errors.New("follow the command's processes: Add was not called")
	}
	if seed := coll.Programs[seedProg]; seed != nil {
		if err := attach(seed, "sched", "sched_process_exec"); err != nil {
			return err
		}
	} else if err := m.Put(uint32(root), uint32(1)); err != nil {
		return fmt.Errorf("follow pid %d: %w", root, err)
	}
	if err := attach(fork, "sched", "sched_process_fork"); err != nil {
		return err
	}
	return attach(exits, "sched", "sched_process_exit")
}

// Skipped is how many runs of the tree's programs the kernel skipped
// (loader.Misses; on 7.x kernels a program preempted mid-run makes the
// next event on its CPU skip every program): forks not seen, each a
// process (and its descendants) not followed, and exits not seen, each a
// pid left in the map until the run ends.
func Skipped(coll *ebpf.Collection) (forks, exits uint64) {
	return loader.Misses(coll.Programs[followProg]), loader.Misses(coll.Programs[forgetProg])
}

// Unfollowed says how many of the processes the tree's programs saw were
// not followed for want of room in the map, and what that room is.
func Unfollowed(coll *ebpf.Collection) (n uint64, room uint32) {
	n, _ = counts.ReadPerCPUCounter(coll.Maps[pidsLost])
	if m := coll.Maps[PidsMap]; m != nil {
		room = m.MaxEntries()
	}
	return n, room
}
