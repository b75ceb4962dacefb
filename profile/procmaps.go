package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// mapping is one line of /proc/PID/maps.
type mapping struct {
	Start, End, Off uint64
	Perms           string
	Dev             string
	Inode           uint64
	Path            string
}

// Exec reports whether the mapping holds code.
func (m mapping) Exec() bool { return strings.Contains(m.Perms, "x") }

// parseMaps reads /proc/PID/maps lines ("start-end perms offset dev inode
// path"); malformed lines are an error.
func parseMaps(r io.Reader) ([]mapping, error) {
	var out []mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) < 5 {
			return nil, fmt.Errorf("maps line %q", line)
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		off, err3 := strconv.ParseUint(f[2], 16, 64)
		inode, err4 := strconv.ParseUint(f[4], 10, 64)
		if !ok || errors.Join(err1, err2, err3, err4) != nil || end <= start {
			return nil, fmt.Errorf("maps line %q", line)
		}
		m := mapping{Start: start, End: end, Off: off, Perms: f[1], Dev: f[3], Inode: inode}
		if len(f) > 5 {
			// The path is the rest of the line after the fifth field (it may hold spaces).
			rest := line
			for i := 0; i < 5; i++ {
				rest = strings.TrimLeft(rest, " ")
				rest = rest[strings.IndexByte(rest, ' ')+1:]
			}
			m.Path = strings.TrimLeft(rest, " ")
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// readMaps reads a process's mappings.
func readMaps(pid uint32) ([]mapping, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, err
	}
	return parseMaps(bytes.NewReader(b))
}

// fileKey names a mapped file: its device and inode (or, for [vdso], the
// name, whose bytes are the same in every process of a boot).
type fileKey struct {
	Dev   string
	Inode uint64
	Name  string
}

func keyOf(m mapping) fileKey {
	if m.Inode == 0 {
		return fileKey{Name: m.Path}
	}
	return fileKey{Dev: m.Dev, Inode: m.Inode}
}

// openMapped opens the ELF file behind a mapping as the process sees it:
// through /proc/PID/map_files (which works after the file is deleted or
// replaced, and across mount namespaces), else /proc/PID/root/PATH; [vdso]
// is read from the process's memory. The file stays open (read lazily).
func openMapped(pid uint32, m mapping) (*elf.File, *os.File, error) {
	if m.Path == "[vdso]" {
		mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
		if err != nil {
			return nil, nil, err
		}
		defer mem.Close()
		b := make([]byte, m.End-m.Start)
		if _, err := mem.ReadAt(b, int64(m.Start)); err != nil {
			return nil, nil, fmt.Errorf("read [vdso]: %w", err)
		}
		ef, err := newELF(bytes.NewReader(b))
		return ef, nil, err
	}
	for _, p := range []string{
		fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.Start, m.End),
		fmt.Sprintf("/proc/%d/root%s", pid, strings.TrimSuffix(m.Path, " (deleted)")),
	} {
		osf, err := os.Open(p)
		if err != nil {
			continue
		}
		ef, err := newELF(osf)
		if err != nil {
			osf.Close()
			return nil, nil, err
		}
		return ef, osf, nil
	}
	return nil, nil, fmt.Errorf("open %s of pid %d: not reachable", m.Path, pid)
}

// newELF is elf.NewFile with a panic (debug/elf has had them on malformed
// input) turned into an error.
func newELF(r io.ReaderAt) (f *elf.File, err error) {
	defer func() {
		if p := recover(); p != nil {
			f, err = nil, fmt.Errorf("malformed ELF file (%v)", p)
		}
	}()
	return elf.NewFile(r)
}

// biasOf is what to subtract from an address in the mapping to get the
// file's virtual address: through the PT_LOAD segment that holds the
// mapping's file offset (mapping start minus offset is wrong for non-PIE
// executables and for segments whose offset and address differ).
func biasOf(f *elf.File, m mapping) (uint64, bool) {
	if m.Path == "[vdso]" {
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD {
				return m.Start - p.Vaddr + p.Off, true
			}
		}
		return 0, false
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && m.Off >= p.Off && m.Off < p.Off+p.Filesz {
			return m.Start - m.Off + p.Off - p.Vaddr, true
		}
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && m.Off >= p.Off && m.Off < p.Off+max(p.Filesz, 1) {
			return m.Start - m.Off + p.Off - p.Vaddr, true
		}
	}
	return 0, false
}
