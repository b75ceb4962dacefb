package uprobe

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestLocateLibrary: a library's short name ("libc", as bpftrace's
// uprobe:libc:getaddrinfo takes it) finds NAME.so.VERSION in the library
// directories, under a process's root too, but never another library
// whose name starts the same, nor a linker script.
func TestLocateLibrary(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "usr/lib")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for f, content := range map[string]string{
		"libtk.so":        "/* GNU ld script */", // as libc.so is
		"libtk.so.6":      "\x7fELF",
		"libtkextra.so.1": "\x7fELF",
	} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("libtk.so.6", filepath.Join(dir, "libtk-link.so.2")); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"libtk":      filepath.Join(dir, "libtk.so.6"),
		"libtkextra": filepath.Join(dir, "libtkextra.so.1"),
		"libtk-link": filepath.Join(dir, "libtk.so.6"),
	} {
		got, err := Locate(name, root)
		if err != nil || got != want {
			t.Errorf("Locate(%q) in the root: %q, %v; want %q", name, got, err, want)
		}
	}
	if got, err := Locate("libtkx", root); !Misnamed(err) {
		t.Errorf("Locate(libtkx): %q, %v; want a NoSuchError", got, err)
	}
	if got := library("libtk", "", []string{dir}); got != filepath.Join(dir, "libtk.so.6") {
		t.Errorf("library(libtk) on the host's paths: %q", got)
	}
}

// TestLocateMessage: a name found nowhere lists the directories looked
// in, this architecture's only (issue 62: a machine with cross compilers
// was told of aarch64's and riscv64's folders).
func TestLocateMessage(t *testing.T) {
	_, err := Locate("libtk-nowhere-at-all", "")
	if !Misnamed(err) {
		t.Fatalf("%v: want a NoSuchError", err)
	}
	for arch, dirs := range map[string][]string{"amd64": multiarch("amd64"), "arm64": multiarch("arm64"), "riscv64": multiarch("riscv64"), "arm": multiarch("arm")} {
		if arch == runtime.GOARCH {
			continue
		}
		if strings.Contains(err.Error(), dirs[0]+",") || strings.Contains(err.Error(), dirs[0]+")") {
			t.Errorf("%v: names %s's %s", err, arch, dirs[0])
		}
	}
}
