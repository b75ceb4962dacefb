package proctree

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/counts"
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

// maxFollowed is the most processes (and threads) followed at once:
// exited ones leave the map. TRACEKIT_TREE_MAX lowers it (for tests).
var maxFollowed = func() uint32 {
	if n, err := strconv.ParseUint(os.Getenv("TRACEKIT_TREE_MAX"), 10, 32); err == nil && n > 0 && n < 8192 {
		return uint32(n)
	}
	return 8192
}()

// Add adds to spec what following the process root and its
// descendants takes: the hash PidsMap (kernel pid -> 1), which programs
// test with asm.PidInSet against bpf_get_current_pid_tgid, a
// sched:sched_process_fork program that adds children, and a
// sched:sched_process_exit program that removes the exited. Inside a pid
// namespace (ns not nil), root is that namespace's pid, and a
// sched:sched_process_exec program puts the kernel's pid in the map when
// root execs (see asm.SeedOnExec).
func Add(spec *ebpf.CollectionSpec, ns *asm.PidNS, root int) error {
	f, err := tracefs.ReadFormat("sched", "sched_process_fork")
	if err != nil {
		return fmt.Errorf("follow the command's processes: %w", err)
	}
	parent, err := f.MustField("parent_pid")
	if err != nil {
		return err
	}
	child, err := f.MustField("child_pid")
	if err != nil {
		return err
	}
	fork, err := asm.FollowForks(PidsMap, pidsLost, parent.Offset, child.Offset)
	if err != nil {
		return err
	}
	e, err := tracefs.ReadFormat("sched", "sched_process_exit")
	if err != nil {
		return fmt.Errorf("follow the command's processes: %w", err)
	}
	pid, err := e.MustField("pid")
	if err != nil {
		return err
	}
	exits, err := asm.ForgetExits(PidsMap, pid.Offset)
	if err != nil {
		return err
	}
	spec.Maps[PidsMap] = &ebpf.MapSpec{Name: "tk_pids", Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: maxFollowed}
	spec.Maps[pidsLost] = &ebpf.MapSpec{Name: "tk_pids_lost", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1}
	spec.Programs[followProg] = &ebpf.ProgramSpec{Name: followProg, Type: ebpf.TracePoint, License: "GPL", Instructions: fork}
	spec.Programs[forgetProg] = &ebpf.ProgramSpec{Name: forgetProg, Type: ebpf.TracePoint, License: "GPL", Instructions: exits}
	if ns != nil {
		spec.Programs[seedProg] = &ebpf.ProgramSpec{Name: seedProg, Type: ebpf.TracePoint, License: "GPL", Instructions: asm.SeedOnExec(PidsMap, *ns, uint32(root))}
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

// Unfollowed says how many of the processes the tree's programs saw were
// not followed for want of room in the map, and what that room is.
func Unfollowed(coll *ebpf.Collection) (n uint64, room uint32) {
	n, _ = counts.ReadPerCPUCounter(coll.Maps[pidsLost])
	return n, maxFollowed
}
