// Package pgroup tells tests which of their processes still run. A
// process whose parent died is reaped by init, which may take its time:
// kill(-pgid, 0) succeeds while zombies wait, so tests read /proc instead.
package pgroup

import (
	"bytes"
	"os"
	"strconv"

	"github.com/tracekit/tracekit/procfs"
)

// Live are the processes of process group pgid that are not zombies.
func Live(pgid int) []int {
	var live []int
	for _, pid := range procfs.Pids() {
		if st, err := procfs.ReadStat(pid); err == nil && st.Live() && st.PGrp == pgid {
			live = append(live, pid)
		}
	}
	return live
}

// WithArg are the live processes one of whose arguments is arg: a test
// gives the processes it starts an argument no other has ("sleep 987.25")
// and finds them wherever they went (another session, another parent).
func WithArg(arg string) []int {
	var live []int
	for _, pid := range procfs.Pids() {
		cmdline, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if err != nil || !bytes.Contains(append([]byte{0}, cmdline...), []byte("\x00"+arg+"\x00")) {
			continue
		}
		if st, err := procfs.ReadStat(pid); err == nil && st.Live() {
			live = append(live, pid)
		}
	}
	return live
}
