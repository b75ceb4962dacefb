package stacks

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/tracekit/tracekit/internal/regular"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/symbols"
)

// mapping is one line of /proc/PID/maps.
type mapping = procfs.Mapping

func readMaps(pid uint32) ([]mapping, error) { return procfs.ReadMaps(int(pid)) }

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
		ef, err := symbols.NewELF(bytes.NewReader(b))
		return ef, nil, err
	}
	denied := 0
	for _, p := range []string{
		fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.Start, m.End),
		fmt.Sprintf("/proc/%d/root%s", pid, strings.TrimSuffix(m.Path, " (deleted)")),
	} {
		osf, err := regular.Open(p) // a FIFO named like a deleted mapping: never opened
		if errors.Is(err, fs.ErrPermission) {
			denied++ // map_files: CAP_SYS_ADMIN; root: the ptrace check
		}
		if err != nil {
			continue
		}
		ef, err := symbols.NewELF(osf)
		if err != nil {
			osf.Close()
			return nil, nil, err
		}
		return ef, osf, nil
	}
	if denied == 2 {
		return nil, nil, procfs.Denied(int(pid), fs.ErrPermission)
	}
	return nil, nil, fmt.Errorf("open %s of pid %d: not reachable", m.Path, pid)
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
