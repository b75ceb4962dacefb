package tools

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/tracefs"
)

// Names of the process-tree map and program that AddProcessTree adds.
const (
	PidsMap     = "pids"
	followProg  = "follow_forks"
	maxFollowed = 8192
)

// AddProcessTree adds to spec what following a process and its descendants
// takes: the hash PidsMap (pid -> 1), which programs test with
// asm.PidInSet, and a sched:sched_process_fork program that adds children.
func AddProcessTree(spec *ebpf.CollectionSpec) error {
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
	insns, err := asm.FollowForks(PidsMap, parent.Offset, child.Offset)
	if err != nil {
		return err
	}
	spec.Maps[PidsMap] = &ebpf.MapSpec{Name: "tk_pids", Type: ebpf.Hash, KeySize: 4, ValueSize: 4, MaxEntries: maxFollowed}
	spec.Programs[followProg] = &ebpf.ProgramSpec{Name: followProg, Type: ebpf.TracePoint, License: "GPL", Instructions: insns}
	return nil
}

// FollowProcessTree seeds PidsMap with root and attaches the fork
// follower for the rest of the run.
func (s *Session) FollowProcessTree(coll *ebpf.Collection, root int) error {
	m, prog := coll.Maps[PidsMap], coll.Programs[followProg]
	if m == nil || prog == nil {
		return errors.New("follow the command's processes: AddProcessTree was not called")
	}
	if err := m.Put(uint32(root), uint32(1)); err != nil {
		return fmt.Errorf("follow pid %d: %w", root, err)
	}
	return s.AttachTracepoint(prog, "sched", "sched_process_fork")
}
