// Package ldso finds the files a dynamically linked program maps when it
// starts, before it runs: its interpreter (PT_INTERP) and the closure of
// its DT_NEEDED libraries, searched as glibc's and musl's loaders search
// them. profile reads their unwind tables before a -c command is
// released, so that its first samples find them loaded.
//
// The answer is the loader's for the common cases, not every case: the
// loader's cache (/etc/ld.so.cache) is replaced by the directories
// /etc/ld.so.conf names (the cache is built from them), and $LIB,
// $PLATFORM and hardware-capability subdirectories are not expanded. A
// file found wrongly costs a table read, nothing else.
package ldso

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/internal/regular"
)

// Limits on what one call reads: the files followed, the size of a
// file's dynamic section and of its string table, and /etc/ld.so.conf's
// includes (their depth and the directories they add).
const (
	MaxFiles        = 64
	maxDynamic      = 1 << 20
	maxConfDepth    = 4
	maxConfDirs     = 256
	maxConfFile     = 1 << 20
	maxConfIncludes = 64
)

// Options are what the search depends on besides the files: nil or
// zero fields mean this machine's.
type Options struct {
	// LibraryPath is LD_LIBRARY_PATH as the program will see it.
	LibraryPath string
	// ConfDirs are the directories the loader's cache holds; nil reads
	// /etc/ld.so.conf.
	ConfDirs []string
}

// Files is exe, its interpreter, and the libraries the loader maps for
// it, in the order the loader finds them (breadth first); at most
// MaxFiles. A library that cannot be found is left out; an exe that is
// not an ELF file is an error.
func Files(exe string, o *Options) ([]string, error) {
	if o == nil {
		o = &Options{LibraryPath: os.Getenv("LD_LIBRARY_PATH")}
	}
	main, err := open(exe)
	if err != nil {
		return nil, err
	}
	defer main.f.Close()
	s := &search{o: o, class: main.ef.Class, machine: main.ef.Machine, seen: map[fileID]bool{}}
	s.add(exe)
	if interp := interpreter(main.ef); interp != "" {
		s.interp = interp
		s.add(interp)
	}
	queue := []*object{main}
	for len(queue) > 0 && len(s.files) < MaxFiles {
		obj := queue[0]
		queue = queue[1:]
		for _, name := range obj.needed {
			if len(s.files) >= MaxFiles {
				break
			}
			path := s.find(name, obj)
			if path == "" || s.seen[idOf(path)] {
				continue
			}
			lib, err := open(path)
			if err != nil {
				continue
			}
			lib.f.Close()
			s.add(path)
			lib.parent = obj
			queue = append(queue, lib)
		}
	}
	return s.files, nil
}

// object is an ELF file opened for its dynamic section.
type object struct {
	path           string
	f              *os.File
	ef             *elf.File
	needed         []string
	runpath, rpath []string
	parent         *object // the object whose DT_NEEDED named it
}

func open(path string) (obj *object, err error) {
	f, err := regular.Open(path) // a FIFO named like a library never blocks the open
	if err != nil {
		return nil, err
	}
	defer func() {
		if p := recover(); p != nil { // debug/elf has panicked on malformed files
			f.Close()
			obj, err = nil, fmt.Errorf("%s: malformed ELF file (%v)", path, p)
		}
	}()
	ef, err := elf.NewFile(f)
	if err != nil {
		f.Close()
		return nil, err
	}
	obj = &object{path: path, f: f, ef: ef}
	dyn := ef.SectionByType(elf.SHT_DYNAMIC)
	if dyn == nil || dyn.Size > maxDynamic || int(dyn.Link) >= len(ef.Sections) || ef.Sections[dyn.Link].Size > maxDynamic {
		return obj, nil // static, or past the bounds: no libraries followed
	}
	obj.needed, _ = ef.DynString(elf.DT_NEEDED)
	obj.runpath = dynPaths(ef, elf.DT_RUNPATH, path)
	if len(obj.runpath) == 0 {
		obj.rpath = dynPaths(ef, elf.DT_RPATH, path)
	}
	return obj, nil
}

// dynPaths is a DT_RUNPATH or DT_RPATH's directories, $ORIGIN (the
// directory of the file that names them) expanded; directories with
// other tokens are left out.
func dynPaths(ef *elf.File, tag elf.DynTag, path string) []string {
	vals, _ := ef.DynString(tag)
	origin := filepath.Dir(path)
	var dirs []string
	for _, v := range vals {
		for _, d := range strings.Split(v, ":") {
			d = strings.ReplaceAll(strings.ReplaceAll(d, "${ORIGIN}", origin), "$ORIGIN", origin)
			if d != "" && !strings.Contains(d, "$") {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

func interpreter(ef *elf.File) string {
	for _, p := range ef.Progs {
		if p.Type != elf.PT_INTERP || p.Filesz > 4096 {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			return ""
		}
		return string(bytes.TrimRight(b, "\x00"))
	}
	return ""
}

type search struct {
	o        *Options
	class    elf.Class
	machine  elf.Machine
	interp   string
	files    []string
	seen     map[fileID]bool // a file by two names (/lib64/ld-linux-x86-64.so.2, and libc's DT_NEEDED of it) once
	conf     []string        // the cache's directories, read once
	confRead bool
}

func (s *search) add(path string) {
	s.seen[idOf(path)] = true
	s.files = append(s.files, path)
}

type fileID struct{ dev, ino uint64 }

// idOf is the file path names, through symbolic links.
func idOf(path string) fileID {
	var st unix.Stat_t
	if unix.Stat(path, &st) != nil {
		return fileID{}
	}
	return fileID{st.Dev, st.Ino}
}

// find is where the loader finds the library name that obj needs, "" if
// nowhere. glibc's order: the DT_RPATHs of obj and the objects that led
// to it (when obj has no DT_RUNPATH), LD_LIBRARY_PATH, obj's DT_RUNPATH,
// the cache, the default directories. musl's libc.so is its loader.
func (s *search) find(name string, obj *object) string {
	if strings.Contains(name, "/") {
		return name
	}
	if strings.HasPrefix(filepath.Base(s.interp), "ld-musl-") && strings.HasPrefix(name, "libc.") {
		return s.interp
	}
	var dirs []string
	if len(obj.runpath) == 0 {
		for o := obj; o != nil; o = o.parent {
			dirs = append(dirs, o.rpath...)
		}
	}
	dirs = append(dirs, filepath.SplitList(s.o.LibraryPath)...)
	dirs = append(dirs, obj.runpath...)
	dirs = append(dirs, s.cacheDirs()...)
	dirs = append(dirs, defaultDirs(s.machine)...)
	for _, d := range dirs {
		if d == "" {
			continue
		}
		p := filepath.Join(d, name)
		if s.fits(p) {
			return p
		}
	}
	return ""
}

// fits reports whether path is an ELF file of the program's class and
// machine: the loader passes over the others (a 32-bit library first in
// a directory list).
func (s *search) fits(path string) bool {
	f, err := regular.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var ident [20]byte
	if _, err := f.ReadAt(ident[:], 0); err != nil || string(ident[:4]) != elf.ELFMAG {
		return false
	}
	if elf.Class(ident[elf.EI_CLASS]) != s.class {
		return false
	}
	var m uint16
	switch elf.Data(ident[elf.EI_DATA]) {
	case elf.ELFDATA2LSB:
		m = uint16(ident[18]) | uint16(ident[19])<<8
	case elf.ELFDATA2MSB:
		m = uint16(ident[18])<<8 | uint16(ident[19])
	}
	return elf.Machine(m) == s.machine
}

func (s *search) cacheDirs() []string {
	if !s.confRead {
		s.confRead = true
		if s.o.ConfDirs != nil {
			s.conf = s.o.ConfDirs
		} else {
			s.conf = ConfDirs("/etc/ld.so.conf")
		}
	}
	return s.conf
}

// defaultDirs are the directories every loader searches last.
func defaultDirs(m elf.Machine) []string {
	var dirs []string
	switch m {
	case elf.EM_X86_64:
		dirs = []string{"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"}
	case elf.EM_AARCH64:
		dirs = []string{"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/lib64", "/usr/lib64"}
	case elf.EM_RISCV:
		// lp64d: glibc's riscv64 loader also searches the ABI's own.
		dirs = []string{"/lib/riscv64-linux-gnu", "/usr/lib/riscv64-linux-gnu", "/lib64/lp64d", "/usr/lib64/lp64d", "/lib64", "/usr/lib64"}
	case elf.EM_ARM:
		// Debian's armhf (hard float); armel's are soft float.
		dirs = []string{"/lib/arm-linux-gnueabihf", "/usr/lib/arm-linux-gnueabihf", "/lib/arm-linux-gnueabi", "/usr/lib/arm-linux-gnueabi"}
	}
	return append(dirs, "/lib", "/usr/local/lib", "/usr/lib")
}

// ConfDirs reads an ld.so.conf: its directories, and those of the files
// its include lines name (globs, relative to its directory), within the
// package's bounds.
func ConfDirs(path string) []string {
	var dirs []string
	includes := 0
	var read func(path string, depth int)
	read = func(path string, depth int) {
		f, err := regular.Open(path)
		if err != nil {
			return
		}
		defer f.Close()
		if st, err := f.Stat(); err != nil || st.Size() > maxConfFile {
			return
		}
		b, err := io.ReadAll(io.LimitReader(f, maxConfFile))
		if err != nil {
			return
		}
		for _, line := range strings.Split(string(b), "\n") {
			line, _, _ = strings.Cut(line, "#")
			line = strings.TrimSpace(line)
			if rest, ok := strings.CutPrefix(line, "include"); ok && rest != "" && (rest[0] == ' ' || rest[0] == '\t') {
				pattern := strings.TrimSpace(rest)
				if !filepath.IsAbs(pattern) {
					pattern = filepath.Join(filepath.Dir(path), pattern)
				}
				matches, _ := filepath.Glob(pattern)
				for _, m := range matches {
					if depth >= maxConfDepth || includes >= maxConfIncludes {
						return
					}
					includes++
					read(m, depth+1)
				}
				continue
			}
			// "hwcap" lines and the old "dir=type" form's type are not dirs.
			if line == "" || strings.HasPrefix(line, "hwcap") {
				continue
			}
			line, _, _ = strings.Cut(line, "=")
			for _, d := range strings.FieldsFunc(line, func(r rune) bool { return r == ':' || r == ',' || r == ' ' || r == '\t' }) {
				if len(dirs) < maxConfDirs && filepath.IsAbs(d) {
					dirs = append(dirs, d)
				}
			}
		}
	}
	read(path, 0)
	return dirs
}
