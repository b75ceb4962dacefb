package tooltest

import "testing"

// The end-of-run lines as run.Session writes them (ReportSkips,
// FollowProcessTree), read back per tool.
func TestToolCounts(t *testing.T) {
	stderr := "filter: the kernel skipped its programs 3152 times (preempted mid-run on a CPU that the next event then reached): the events among them that would have passed are missing from the output\n" +
		"writesize: the kernel skipped its programs 7 times (preempted mid-run on a CPU that the next event then reached): the traced writes among them are not counted\n" +
		"writesize: the kernel skipped following the command's processes 3 times (preempted mid-run on a CPU that the next event then reached): 2 forks or execs not seen, their processes' events are missing; 1 exits not seen\n"
	for _, c := range []struct {
		got, want uint64
	}{
		{SkippedRuns("filter", stderr), 3152},
		{SkippedRuns("writesize", stderr), 7},
		{SkippedRuns("iolat", stderr), 0},
		{ForksNotSeen("writesize", stderr), 2},
		{ForksNotSeen("filter", stderr), 0},
	} {
		if c.got != c.want {
			t.Errorf("got %d, want %d", c.got, c.want)
		}
	}
}
