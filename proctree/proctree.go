package proctree

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	ebpfasm "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/counts"
	"github.com/tracekit/tracekit/kbtf"
	"github.com/tracekit/tracekit/loader"
	"github.com/tracekit/tracekit/tracefs"
)

// Names of the process-tree map and programs that Add adds.
const (
	PidsMap    = "pids"
	pidsLost   = "pids_lost"
	followProg = "follow_forks"
	forgetProg = "forget_exits"
	execProg   = "tree_on_exec"
)

// MaxFollowed is the most processes (and threads) followed at once unless
// Tree.Max says otherwise: exited ones leave the map. MaxLimit bounds what
// a user may ask for (a preallocated hash, about 64 bytes an entry).
const (
	MaxFollowed = 8192
	MaxLimit    = 1 << 18
)

// Tree is what following a command's process tree takes: its root, and
// how this kernel gives the pids: from the raw tracepoints' arguments
// where it has them and its BTF places task_struct.pid (TaskPid), else
// where its sched_process_fork and sched_process_exit records keep them
// (from their format files, read by New).
//
// Raw tracepoints, because a perf tracepoint event's close waits out a
// grace period under the kernel's event_mutex (tracepoint_synchronize_
// unregister): 50 to 90 ms each on our 6.18 host, the three of them most
// of a short -c run; a raw tracepoint's link releases its probe without
// waiting.
type Tree struct {
	Root int // the command's pid: the namespace's, with NS
	// Shell: the root execs a shell that runs the command line, which
	// waits uncounted while the programs it starts are traced (see
	// asm.TreeOnExec and run.CommandArgv).
	Shell bool
	// NS: the tool runs in a pid namespace of its own (see Add).
	NS *asm.PidNS
	// Max is the most processes followed at once; 0 is MaxFollowed.
	Max                          uint32
	ParentPid, ChildPid, ExitPid int
	// TaskPid, when not 0, is task_struct.pid's offset: the programs are
	// raw tracepoints', which read the child's pid from its task, with
	// ReadKernel (the kernel's probe-read helper).
	TaskPid    int
	ReadKernel ebpfasm.BuiltinFunc
}

// New is the Tree of root on this kernel. readKernel is the kernel's
// probe-read helper where raw tracepoints load, else 0 (see
// run.Session.ProcessTree): with it and the kernel's BTF, the programs
// are raw tracepoints'.
func New(root int, shell bool, ns *asm.PidNS, max uint32, readKernel ebpfasm.BuiltinFunc) (*Tree, error) {
	t := &Tree{Root: root, Shell: shell, NS: ns, Max: max}
	if readKernel != 0 {
		if off, err := kbtf.MemberOffset("task_struct", "pid"); err == nil {
			t.TaskPid, t.ReadKernel = off, readKernel
			return t, nil
		}
	}
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
// -> traced or waiting), which programs test with asm.PidInSet against
// bpf_get_current_pid_tgid, a sched:sched_process_fork program that adds
// children, traced, a sched:sched_process_exit program that
// removes the exited, and a sched:sched_process_exec program that puts
// the root in the map at its exec, the gate's, and traces a waiting
// process that execs (asm.TreeOnExec). Inside a pid namespace (t.NS not
// nil), t.Root is that namespace's pid.
func Add(spec *ebpf.CollectionSpec, t *Tree) error {
	typ := ebpf.TracePoint
	var fork, exits ebpfasm.Instructions
	var err error
	if t.TaskPid != 0 {
		typ = ebpf.RawTracepoint
		fork, err = asm.FollowForksRaw(PidsMap, pidsLost, t.TaskPid, t.ReadKernel)
		exits = asm.ForgetExitsRaw(PidsMap)
	} else {
		if fork, err = asm.FollowForks(PidsMap, pidsLost, t.ParentPid, t.ChildPid); err == nil {
			exits, err = asm.ForgetExits(PidsMap, t.ExitPid)
		}
	}
	if err != nil {
		return err
	}
	max := t.Max
	if max == 0 {
		max = MaxFollowed
	}
	spec.Maps[PidsMap] = &ebpf.MapSpec{Name: "tk_pids", Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: max}
	spec.Maps[pidsLost] = &ebpf.MapSpec{Name: "tk_pids_lost", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1}
	spec.Programs[followProg] = &ebpf.ProgramSpec{Name: followProg, Type: typ, License: "GPL", Instructions: fork}
	spec.Programs[forgetProg] = &ebpf.ProgramSpec{Name: forgetProg, Type: typ, License: "GPL", Instructions: exits}
	rootValue := uint32(asm.TreeTraced)
	if t.Shell {
		rootValue = asm.TreeWaiting
	}
	spec.Programs[execProg] = &ebpf.ProgramSpec{Name: execProg, Type: typ, License: "GPL", Instructions: asm.TreeOnExec(PidsMap, t.NS, uint32(t.Root), rootValue)}
	return nil
}

// Follow attaches the exec program that puts the root in PidsMap when
// the gate execs it, the fork follower and the exit pruner through
// attach, which owns them from then on: a raw tracepoint's programs (see
// Tree) by the event's name, others through perf.
func Follow(coll *ebpf.Collection, attach func(prog *ebpf.Program, group, name string) error) error {
	exec, fork, exits := coll.Programs[execProg], coll.Programs[followProg], coll.Programs[forgetProg]
	if coll.Maps[PidsMap] == nil || exec == nil || fork == nil || exits == nil {
		return errors.New("follow the command's processes: Add was not called")
	}
	if err := attach(exec, "sched", "sched_process_exec"); err != nil {
		return err
	}
	if err := attach(fork, "sched", "sched_process_fork"); err != nil {
		return err
	}
	return attach(exits, "sched", "sched_process_exit")
}

// Skipped is how many runs of the tree's programs the kernel skipped
// (loader.Misses; on 7.x kernels a program preempted mid-run makes the
// next event on its CPU skip every program): forks and execs not seen,
// each a process (and its descendants) not followed or not traced, and
// exits not seen, each a pid left in the map until the run ends.
func Skipped(coll *ebpf.Collection) (forks, exits uint64) {
	return loader.Misses(coll.Programs[followProg]) + loader.Misses(coll.Programs[execProg]), loader.Misses(coll.Programs[forgetProg])
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
