package loader

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// cilium/ebpf's memlock hint is dropped from the text, and the error
// still unwraps to the errno.
func TestNoMemlockHint(t *testing.T) {
	err := fmt.Errorf("load BPF programs: %w%s", noMemlockHint{fmt.Errorf("map hist: map create: %w"+memlockHint, unix.EPERM)}, permissionHint)
	if got, want := err.Error(), "load BPF programs: map hist: map create: operation not permitted"+permissionHint; got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if !errors.Is(err, unix.EPERM) {
		t.Error("EPERM lost")
	}
}

// A program refused for want of the JIT, which is off, gets one line that
// says how to turn it on; with the JIT on (or another refusal) the log is
// shown as ever.
func TestJITOff(t *testing.T) {
	sysctl := filepath.Join(t.TempDir(), "bpf_jit_enable")
	defer func(p string) { JITEnable = p }(JITEnable)
	JITEnable = sysctl
	refused := []string{"load program: invalid argument:", "\tprogram requires BPF JIT compiler but it is not available", "\tprocessed 45 insns"}
	for _, tc := range []struct {
		value string
		log   []string
		hint  bool
	}{
		{"0\n", refused, true},
		{"1\n", refused, false},
		{"2\n", refused, false},
		{"0\n", []string{"R1 invalid mem access 'scalar'"}, false},
		{"", refused, false}, // no such file
	} {
		os.Remove(sysctl)
		if tc.value != "" {
			if err := os.WriteFile(sysctl, []byte(tc.value), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		err := jitOff(tc.log)
		if got := err != nil; got != tc.hint {
			t.Errorf("bpf_jit_enable %q, log %q: %v", tc.value, tc.log, err)
		}
		if err != nil && (!strings.Contains(err.Error(), "sysctl -w net.core.bpf_jit_enable=1") || strings.Contains(err.Error(), "\n")) {
			t.Errorf("not one line that says what to do: %v", err)
		}
	}
}

// ENOTSUPP with the JIT on (32-bit ARM's JIT refuses what its interpreter
// runs) gets one line that says to turn the JIT off; with the JIT off, or
// another error, nothing.
func TestJITRefuses(t *testing.T) {
	sysctl := filepath.Join(t.TempDir(), "bpf_jit_enable")
	defer func(p string) { JITEnable = p }(JITEnable)
	JITEnable = sysctl
	refused := fmt.Errorf("program dropmon: load program: %w", errNotSupp)
	for _, tc := range []struct {
		value string
		err   error
		hint  bool
	}{
		{"1\n", refused, true},
		{"0\n", refused, false},
		{"1\n", fmt.Errorf("load program: %w", unix.EINVAL), false},
	} {
		if err := os.WriteFile(sysctl, []byte(tc.value), 0o644); err != nil {
			t.Fatal(err)
		}
		err := jitRefuses(tc.err)
		if got := err != nil; got != tc.hint {
			t.Errorf("bpf_jit_enable %q, %v: %v", tc.value, tc.err, err)
		}
		if err != nil && (!strings.Contains(err.Error(), "sysctl -w net.core.bpf_jit_enable=0") || strings.Contains(err.Error(), "\n")) {
			t.Errorf("not one line that says what to do: %v", err)
		}
	}
}
