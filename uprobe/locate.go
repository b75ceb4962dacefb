package uprobe

import (
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/tracekit/tracekit/internal/regular"
	"github.com/tracekit/tracekit/tracefs"
)

// libDirs are where a bare library name is looked for, after
// $LD_LIBRARY_PATH: the dynamic linker's defaults on Debian and others,
// for this machine's architecture only (a machine with cross compilers
// has other architectures' libraries too, which no process here maps).
var libDirs = append(multiarch(runtime.GOARCH), "/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib")

// multiarch are Debian's library directories of an architecture.
func multiarch(goarch string) []string {
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu", "riscv64": "riscv64-linux-gnu", "arm": "arm-linux-gnueabihf"}[goarch]
	if triplet == "" {
		return nil
	}
	return []string{"/lib/" + triplet, "/usr/lib/" + triplet}
}

// Locate finds the file a probe names, as the kernel will see it: an
// absolute path with its symbolic links resolved (a uprobe is on the
// inode). A bare name is looked up on $PATH, then in the library
// directories. With root (a process's /proc/PID/root), the file is found
// as that process sees it: an absolute path under root, or a bare name in
// the usual directories under root; the kernel follows root's magic link,
// and any symbolic link below it, when it places the probe. A name that
// is nowhere is a NoSuchError.
func Locate(name, root string) (string, error) {
	if root != "" {
		return locateIn(name, root)
	}
	path := name
	if !strings.HasPrefix(name, "/") {
		path = ""
		var dirs []string
		dirs = append(dirs, filepath.SplitList(os.Getenv("PATH"))...)
		dirs = append(dirs, filepath.SplitList(os.Getenv("LD_LIBRARY_PATH"))...)
		dirs = append(dirs, libDirs...)
		for _, d := range dirs {
			if d == "" || !filepath.IsAbs(d) {
				continue
			}
			if st, err := os.Stat(filepath.Join(d, name)); err == nil && st.Mode().IsRegular() {
				path = filepath.Join(d, name)
				break
			}
		}
		if path == "" {
			path = library(name, "", dirs)
		}
		if path == "" {
			return "", NoSuch("%s: not found on $PATH or in the library directories (%s)", name, strings.Join(existing(libDirs), ", "))
		}
	}
	if _, err := os.Stat(path); err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return "", fmt.Errorf("%s: %w", path, pe.Err)
		}
		return "", err
	}
	real, err := filepath.EvalSymlinks(path)
	if err != nil {
		return "", err
	}
	if err := tracefs.ValidatePath(real); err != nil {
		return "", err
	}
	return real, nil
}

func locateIn(name, root string) (string, error) {
	var candidates []string
	if strings.HasPrefix(name, "/") {
		candidates = []string{root + name}
	} else {
		for _, d := range append([]string{"/usr/local/bin", "/usr/bin", "/bin", "/usr/sbin", "/sbin"}, libDirs...) {
			candidates = append(candidates, root+d+"/"+name)
		}
	}
	for _, p := range candidates {
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
			if err := tracefs.ValidatePath(p); err != nil {
				return "", err
			}
			return p, nil
		}
	}
	if !strings.HasPrefix(name, "/") {
		if p := library(name, root, libDirs); p != "" {
			if err := tracefs.ValidatePath(p); err != nil {
				return "", err
			}
			return p, nil
		}
	}
	return "", NoSuch("%s: not found in the process's root (%s)", name, root)
}

// library finds a library by the short name bpftrace takes ("libc" for
// libc.so.6, "libpthread"): the first of NAME.so and NAME.so.VERSION in
// dirs under root that is an ELF file (libc.so is a linker script), its
// links resolved.
func library(name, root string, dirs []string) string {
	if strings.Contains(name, ".so") {
		return ""
	}
	for _, d := range dirs {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		matches, _ := filepath.Glob(filepath.Join(root+d, name+".so*"))
		for _, m := range matches {
			if rest := strings.TrimPrefix(filepath.Base(m), name+".so"); rest != "" && rest[0] != '.' {
				continue // libc.so-something: another library
			}
			real, err := filepath.EvalSymlinks(m)
			if err != nil {
				continue
			}
			if isELF(real) { // not libc.so, a linker script
				return real
			}
		}
	}
	return ""
}

// isELF says whether path is a regular file that starts as ELF files do.
func isELF(path string) bool {
	f, err := regular.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	_, err = io.ReadFull(f, magic[:])
	return err == nil && string(magic[:]) == elf.ELFMAG
}

// existing are the directories of dirs this machine has (a message lists
// those, not other architectures' folders).
func existing(dirs []string) []string {
	var out []string
	for _, d := range dirs {
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			out = append(out, d)
		}
	}
	return out
}
