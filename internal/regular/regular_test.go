package regular

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(file, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{file, link} {
		f, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 5)
		if n, err := f.ReadAt(b, 0); n != 5 || string(b) != "hello" {
			t.Errorf("%s: read %q, %v", p, b[:n], err)
		}
		f.Close()
	}
	// A FIFO with no writer: an open for reading would wait for one.
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, dir, "/dev/null"} {
		start := time.Now()
		f, err := Open(p)
		if err == nil {
			f.Close()
			t.Errorf("%s: opened", p)
		} else if !strings.Contains(err.Error(), "is not a regular file") || time.Since(start) > time.Second {
			t.Errorf("%s: %v after %v", p, err, time.Since(start))
		}
	}
	if _, err := Open(filepath.Join(dir, "none")); !os.IsNotExist(err) {
		t.Errorf("a missing file: %v", err)
	}
}
