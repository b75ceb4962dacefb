package loader

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/kbtf"
)

// progLoadAttr is union bpf_attr as BPF_PROG_LOAD reads it, up to
// attach_btf_id's neighbour (include/uapi/linux/bpf.h).
type progLoadAttr struct {
	progType           uint32
	insnCnt            uint32
	insns              uint64
	license            uint64
	logLevel           uint32
	logSize            uint32
	logBuf             uint64
	kernVersion        uint32
	progFlags          uint32
	progName           [16]byte
	progIfindex        uint32
	expectedAttachType uint32
	progBTFFd          uint32
	funcInfoRecSize    uint32
	funcInfo           uint64
	funcInfoCnt        uint32
	lineInfoRecSize    uint32
	lineInfo           uint64
	lineInfoCnt        uint32
	attachBTFID        uint32
	attachProgFd       uint32
	_                  uint32
}

// tracingTarget is the kernel BTF id a tracing program attaches to: a BTF
// tracepoint's btf_trace_ typedef, or fentry's and fexit's function.
func tracingTarget(p *ebpf.ProgramSpec) (btf.TypeID, error) {
	spec, err := kbtf.Kernel()
	if err != nil {
		return 0, err
	}
	switch p.AttachType {
	case ebpf.AttachTraceRawTp:
		return spec.ID("btf_trace_"+p.AttachTo, kbtf.KindTypedef)
	case ebpf.AttachTraceFEntry, ebpf.AttachTraceFExit:
		return spec.ID(p.AttachTo, kbtf.KindFunc)
	}
	return 0, fmt.Errorf("attach type %s: not a tracing program this loader knows", p.AttachType)
}

// Tracing loads a tracing program (BTF tracepoint, fentry, fexit)
// itself, its target's id found by kbtf: cilium/ebpf would parse all of
// the kernel's BTF to find it, 30 ms of every start. maps are the
// collection's, for the program's map references.
func Tracing(p *ebpf.ProgramSpec, maps map[string]*ebpf.Map, verbose bool) (*ebpf.Program, error) {
	id, err := tracingTarget(p)
	if err != nil {
		return nil, fmt.Errorf("program %s: %s %s: %w", p.Name, p.AttachType, p.AttachTo, err)
	}
	insns := p.Copy().Instructions
	for i := range insns {
		ins := &insns[i]
		if !ins.IsLoadFromMap() || ins.Reference() == "" {
			continue
		}
		m, ok := maps[ins.Reference()]
		if !ok {
			return nil, fmt.Errorf("program %s: no map %s", p.Name, ins.Reference())
		}
		if err := ins.AssociateMap(m); err != nil {
			return nil, fmt.Errorf("program %s: %w", p.Name, err)
		}
	}
	var code bytes.Buffer
	if err := insns.Marshal(&code, hostOrder()); err != nil {
		return nil, fmt.Errorf("program %s: %w", p.Name, err)
	}
	license := []byte(p.License + "\x00")
	attr := progLoadAttr{
		progType:           uint32(ebpf.Tracing),
		insnCnt:            uint32(code.Len() / 8),
		insns:              uint64(uintptr(unsafe.Pointer(&code.Bytes()[0]))),
		license:            uint64(uintptr(unsafe.Pointer(&license[0]))),
		expectedAttachType: uint32(p.AttachType),
		attachBTFID:        uint32(id),
	}
	copy(attr.progName[:15], strings.Map(func(r rune) rune {
		if r == '_' || r == '.' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, p.Name))
	fd, err := progLoad(&attr)
	if err == nil {
		runtime.KeepAlive(code.Bytes())
		runtime.KeepAlive(license)
		return ebpf.NewProgramFromFD(fd)
	}
	if errors.Is(err, unix.EPERM) {
		if unix.Geteuid() == 0 {
			// Kernels without BPF trampolines refuse fentry so, even to root.
			return nil, fmt.Errorf("load BPF program %s (%s %s): %w, even to root: this kernel does not allow it", p.Name, p.AttachType, p.AttachTo, err)
		}
		return nil, fmt.Errorf("load BPF program %s: %w%s", p.Name, noMemlockHint{err}, permissionHint)
	}
	if fe := fdError(err); fe != nil {
		return nil, fe
	}
	// Again with the verifier's log, which says why.
	log := make([]byte, 1<<20)
	for {
		attr.logLevel, attr.logSize, attr.logBuf = 1, uint32(len(log)), uint64(uintptr(unsafe.Pointer(&log[0])))
		_, err2 := progLoad(&attr)
		if !errors.Is(err2, unix.ENOSPC) || len(log) >= 64<<20 {
			break
		}
		log = make([]byte, 4*len(log))
	}
	runtime.KeepAlive(code.Bytes())
	runtime.KeepAlive(license)
	text := strings.TrimRight(string(log[:max(0, bytes.IndexByte(log, 0))]), "\n")
	if text == "" {
		return nil, fmt.Errorf("load BPF program %s: %w", p.Name, err)
	}
	lines := strings.Split(text, "\n")
	const head = "load BPF programs: the kernel's verifier rejected them: program %s: %w\n%s"
	if !verbose {
		if len(lines) > shortLog {
			lines = lines[len(lines)-shortLog:]
		}
		return nil, fmt.Errorf(head, p.Name, err, "the verifier log's last lines (--verbose prints all of it and the programs):\n"+strings.Join(lines, "\n"))
	}
	return nil, fmt.Errorf(head, p.Name, err, "verifier log:\n"+text+fmt.Sprintf("\nprogram %s:\n%v", p.Name, p.Instructions))
}

// hostOrder is the byte order of the machine: cilium/ebpf's Marshal takes
// binary.LittleEndian or BigEndian, not binary.NativeEndian.
func hostOrder() binary.ByteOrder {
	var b [2]byte
	binary.NativeEndian.PutUint16(b[:], 1)
	if b[0] == 1 {
		return binary.LittleEndian
	}
	return binary.BigEndian
}

func progLoad(attr *progLoadAttr) (int, error) {
	for try := 0; ; try++ {
		fd, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_LOAD, uintptr(unsafe.Pointer(attr)), unsafe.Sizeof(*attr))
		runtime.KeepAlive(attr)
		switch errno {
		case 0:
			return int(fd), nil
		case unix.EAGAIN, unix.EINTR:
			if try < 5 {
				continue // the verifier was interrupted; cilium/ebpf retries too
			}
		}
		return -1, errno
	}
}
