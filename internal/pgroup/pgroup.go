// Package pgroup tells tests which processes of a process group still run.
// A process whose parent died is reaped by init, which may take its time:
// kill(-pgid, 0) succeeds while zombies wait, so tests read /proc instead.
package pgroup

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Live are the processes of process group pgid that are not zombies.
func Live(pgid int) []int {
	var live []int
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces and parens.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 2 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			live = append(live, pid)
		}
	}
	return live
}
