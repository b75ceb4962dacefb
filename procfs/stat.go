package procfs

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Stat is what /proc/PID/stat says of a process's place: its state
// ('R', 'S', 'Z', ...), parent and process group.
type Stat struct {
	State byte
	PPid  int
	PGrp  int
}

// Live reports whether the process runs or can run: not a zombie, not dead.
func (s Stat) Live() bool { return s.State != 'Z' && s.State != 'X' && s.State != 'x' }

// ReadStat reads /proc/PID/stat.
func ReadStat(pid int) (Stat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return Stat{}, err
	}
	return ParseStat(b)
}

// ParseStat parses "pid (comm) state ppid pgrp ...": comm may hold
// spaces and parentheses, so the fields start after the last ')'.
func ParseStat(b []byte) (Stat, error) {
	f := bytes.Fields(b[bytes.LastIndexByte(b, ')')+1:])
	if len(f) < 3 || len(f[0]) != 1 {
		return Stat{}, fmt.Errorf("parse /proc stat: %.40q", b)
	}
	ppid, err1 := strconv.Atoi(string(f[1]))
	pgrp, err2 := strconv.Atoi(string(f[2]))
	if err1 != nil || err2 != nil {
		return Stat{}, fmt.Errorf("parse /proc stat: %.40q", b)
	}
	return Stat{State: f[0][0], PPid: ppid, PGrp: pgrp}, nil
}

// Pids are the processes /proc lists now.
func Pids() []int {
	var pids []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		if pid, err := strconv.Atoi(d.Name()); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}
