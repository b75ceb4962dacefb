package main

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDist runs make dist and opens what it wrote: for each
// architecture an archive holding the binary for that machine, a link per
// tool, its man page and the README, all owned by root; SHA256SUMS
// matching them. It logs each archive's size.
func TestDist(t *testing.T) {
	out := t.TempDir()
	var names []string // every tool the binary has: the Makefile's TOOLS must name them all
	for _, tool := range all {
		names = append(names, tool.name)
	}
	cmd := exec.Command("make", "-C", "../..", "dist")
	cmd.Env = append(os.Environ(), "DIST="+out, "VERSION=9.9.9-test")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("make dist: %v\n%s", err, b)
	}
	sums, err := os.ReadFile(filepath.Join(out, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	machines := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64, "riscv64": elf.EM_RISCV, "armv7": elf.EM_ARM}
	if n := strings.Count(string(sums), "\n"); n != len(machines) {
		t.Errorf("SHA256SUMS has %d lines, want %d:\n%s", n, len(machines), sums)
	}
	for arch, machine := range machines {
		name := "tracekit-9.9.9-test-linux-" + arch
		data, err := os.ReadFile(filepath.Join(out, name+".tar.gz"))
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s.tar.gz: %d bytes", name, len(data))
		sum := sha256.Sum256(data)
		if line := hex.EncodeToString(sum[:]) + "  " + name + ".tar.gz\n"; !strings.Contains(string(sums), line) {
			t.Errorf("SHA256SUMS has no line %q:\n%s", line, sums)
		}
		zr, err := gzip.NewReader(strings.NewReader(string(data)))
		if err != nil {
			t.Fatal(err)
		}
		tr := tar.NewReader(zr)
		links := map[string]string{}
		var binary []byte
		var readme bool
		pages := map[string]bool{}
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			if h.Uid != 0 || h.Gid != 0 || !strings.HasPrefix(h.Name, name+"/") && h.Name != name+"/" {
				t.Errorf("%s: entry %s owned by %d:%d", arch, h.Name, h.Uid, h.Gid)
			}
			switch base := strings.TrimPrefix(h.Name, name+"/"); {
			case h.Typeflag == tar.TypeSymlink:
				links[base] = h.Linkname
			case base == "tracekit":
				if binary, err = io.ReadAll(tr); err != nil {
					t.Fatal(err)
				}
				if h.Mode&0o111 == 0 {
					t.Errorf("%s: tracekit is not executable: %o", arch, h.Mode)
				}
			case base == "README.md":
				readme = true
			case strings.HasPrefix(base, "man/man8/") && strings.HasSuffix(base, ".8"):
				pages[strings.TrimSuffix(strings.TrimPrefix(base, "man/man8/"), ".8")] = true
			}
		}
		f, err := elf.NewFile(strings.NewReader(string(binary)))
		if err != nil {
			t.Fatalf("%s: tracekit is no ELF file: %v", arch, err)
		}
		if f.Machine != machine || len(f.Progs) == 0 {
			t.Errorf("%s: tracekit is for %v", arch, f.Machine)
		}
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				t.Errorf("%s: tracekit is dynamically linked", arch)
			}
		}
		for _, tool := range names {
			if !pages[tool] {
				t.Errorf("%s: no man/man8/%s.8", arch, tool)
			}
			if links[tool] != "tracekit" {
				t.Errorf("%s: %s links to %q, want tracekit", arch, tool, links[tool])
			}
		}
		if !readme || len(links) != len(names) {
			t.Errorf("%s: README %v, %d links", arch, readme, len(links))
		}
	}
}
