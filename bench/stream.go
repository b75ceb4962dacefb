package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// streamSuite prints events, not aggregates: this process reads one byte
// of /dev/zero at a paced rate for a second, every read an event a tracer
// prints, and each tracer's printed lines are counted as they arrive. It
// reports the events delivered, those lost, and how long each read took
// (wall time around the syscall: the wake-ups of the reader land there).
func streamSuite(bpftrace string) error {
	pid := os.Getpid()
	tracers := []struct {
		name string
		cmd  func() *exec.Cmd
	}{
		{"untraced", nil},
		{"filter", func() *exec.Cmd {
			return exec.Command(*bin+"/filter", "syscalls:sys_enter_read", "--where", fmt.Sprintf("pid == %d && count == 1", pid))
		}},
	}
	if bpftrace != "" {
		tracers = append(tracers, struct {
			name string
			cmd  func() *exec.Cmd
		}{"bpftrace printf()", func() *exec.Cmd {
			return exec.Command(bpftrace, "-e", fmt.Sprintf(`tracepoint:syscalls:sys_enter_read /pid == %d && args->count == 1/ { printf("%%d %%d\n", tid, args->count); }`, pid))
		}})
	}
	zero, err := os.Open("/dev/zero")
	if err != nil {
		return err
	}
	defer zero.Close()
	fmt.Printf("\nprinting every event: read(2) of 1 byte from /dev/zero, paced, for 1 s (median of 3)\n\n")
	fmt.Println("| rate /s | tracer | delivered /s | lost | read(2) ns |")
	fmt.Println("| ---: | --- | ---: | ---: | ---: |")
	for _, rate := range []int{100000, 500000} {
		for _, tr := range tracers {
			var delivered, lost, sysNs []float64
			for i := 0; i < 3; i++ {
				d, l, s, err := streamRun(tr.cmd, zero, rate)
				if err != nil {
					return fmt.Errorf("%s at %d/s: %w", tr.name, rate, err)
				}
				delivered, lost, sysNs = append(delivered, d), append(lost, l), append(sysNs, s)
				result(fmt.Sprintf("Stream%d", rate), tr.name, 1, metric{d, "delivered/s"}, metric{l, "lost/run"}, metric{s, "read-ns"})
			}
			if tr.cmd == nil {
				fmt.Printf("| %d | %s | | | %.0f |\n", rate, tr.name, median(sysNs))
				continue
			}
			fmt.Printf("| %d | %s | %.0f | %.0f | %.0f |\n", rate, tr.name, median(delivered), median(lost), median(sysNs))
		}
	}
	return nil
}

// lostLine is how filter ("N events lost", "at least N events lost" before
// 6.0) and bpftrace ("Lost N events") report losses.
var lostLine = regexp.MustCompile(`(\d+) events lost|Lost (\d+) events`)

// streamRun starts a tracer (none when start is nil), paces reads at rate
// for a second on this thread, stops the tracer and counts what it printed.
func streamRun(start func() *exec.Cmd, zero *os.File, rate int) (delivered, lost, sysNs float64, err error) {
	var cmd *exec.Cmd
	lines := make(chan int, 1)
	errDone := make(chan struct{})
	var stderr, outLost strings.Builder // written by one goroutine each, read after both are done
	if start != nil {
		cmd = start()
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return 0, 0, 0, err
		}
		errPipe, err := cmd.StderrPipe()
		if err != nil {
			return 0, 0, 0, err
		}
		if err := cmd.Start(); err != nil {
			return 0, 0, 0, err
		}
		ready := make(chan struct{}, 2)
		go func() {
			defer close(errDone)
			s := bufio.NewScanner(errPipe)
			for s.Scan() {
				stderr.WriteString(s.Text() + "\n")
				if strings.HasPrefix(s.Text(), "Tracing") {
					ready <- struct{}{}
				}
			}
		}()
		go func() {
			r := bufio.NewReaderSize(stdout, 1<<20)
			n := 0
			for {
				line, err := r.ReadSlice('\n')
				if len(line) > 0 && line[len(line)-1] == '\n' {
					if strings.HasPrefix(string(line), "Attaching") {
						ready <- struct{}{}
					} else if strings.HasPrefix(string(line), "Lost ") {
						outLost.Write(line) // bpftrace reports its losses on stdout
					} else {
						n++
					}
				}
				if err != nil && err != bufio.ErrBufferFull {
					break // EOF, or the pipe closed by Wait
				}
			}
			lines <- n
		}()
		select {
		case <-ready:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			cmd.Wait()
			return 0, 0, 0, fmt.Errorf("did not attach within 30 s")
		}
		time.Sleep(time.Second) // bpftrace says "Attaching" before it attaches
	}
	var b [1]byte
	total := rate
	var inRead time.Duration
	begin := time.Now()
	for n := 0; n < total; n++ {
		due := begin.Add(time.Duration(n) * time.Second / time.Duration(rate))
		t := time.Now()
		for t.Before(due) {
			t = time.Now()
		}
		unix.Read(int(zero.Fd()), b[:])
		inRead += time.Since(t)
	}
	took := time.Since(begin).Seconds()
	sysNs = float64(inRead.Nanoseconds()) / float64(total)
	if cmd == nil {
		return 0, 0, sysNs, nil
	}
	time.Sleep(500 * time.Millisecond) // the last batch
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	for done := false; !done; {
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
			done = true
		case <-time.After(2 * time.Second):
		}
	}
	n := <-lines
	<-errDone
	for _, m := range lostLine.FindAllStringSubmatch(stderr.String()+outLost.String(), -1) {
		l, _ := strconv.Atoi(m[1] + m[2])
		lost += float64(l)
	}
	return float64(n) / took, lost, sysNs, nil
}
