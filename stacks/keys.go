package stacks

import (
	"encoding/binary"

	"github.com/tracekit/tracekit/stacks/prog"
)

// stackKey is a counts map key as user space holds it (packKey): the
// kernel's keys have room for every frame the run keeps (64 kernel and 256
// user), most of it zeros.
type stackKey string

// packKey packs a raw key (its depths the run's, or a short key: a
// prefix with fewer user frames, prog.Config.ShortKeySize): the header,
// the numbers of kernel and user frames (u16 each), the labels, then the
// frames up to the first 0 of each stack. A walk writes no frame past a
// 0, and decoding stops at the first: two keys that differ only past it
// are one stack.
func packKey(b []byte, cfg prog.Config) stackKey {
	kernel, user := cfg.KernelOffset(), cfg.UserOffset()
	if len(b) < user {
		return stackKey(b)
	}
	nk, nu := depth(b[kernel:user]), depth(b[user:min(len(b), cfg.KeySize())])
	out := make([]byte, 0, 12+kernel-8+8*(nk+nu))
	out = append(out, b[:8]...)
	out = binary.LittleEndian.AppendUint16(out, uint16(nk))
	out = binary.LittleEndian.AppendUint16(out, uint16(nu))
	out = append(out, b[8:kernel]...)
	out = append(out, b[kernel:kernel+8*nk]...)
	out = append(out, b[user:user+8*nu]...)
	return stackKey(out)
}

// depth is the number of frames before the first 0 of a stack.
func depth(b []byte) int {
	n := 0
	for ; 8*n+8 <= len(b) && binary.LittleEndian.Uint64(b[8*n:]) != 0; n++ {
	}
	return n
}

// parts splits a packed key into its labels and its kernel and user
// frames (each stack's up to its first 0); ok is false for a key packKey
// did not make (too short to pack), which is the kernel's layout as it is.
func (k stackKey) parts(cfg prog.Config) (labels, kernel, user []byte, ok bool) {
	p := []byte(k)
	frames := 12 + cfg.KernelOffset() - 8
	if len(p) < frames {
		return nil, nil, nil, false
	}
	nk, nu := int(binary.LittleEndian.Uint16(p[8:])), int(binary.LittleEndian.Uint16(p[10:]))
	if nk > cfg.KernelDepth || nu > cfg.UserDepth || len(p) < frames+8*(nk+nu) {
		return nil, nil, nil, false
	}
	return p[12:frames], p[frames : frames+8*nk], p[frames+8*nk : frames+8*(nk+nu)], true
}

// raw unpacks k into the kernel's layout (a key of cfg.KeySize() bytes).
func (k stackKey) raw(cfg prog.Config) []byte {
	b := make([]byte, cfg.KeySize())
	labels, kernel, user, ok := k.parts(cfg)
	if !ok {
		copy(b, k)
		return b
	}
	copy(b, k[:8])
	copy(b[8:], labels)
	copy(b[cfg.KernelOffset():], kernel)
	copy(b[cfg.UserOffset():], user)
	return b
}

type decodedKey struct {
	Pid     uint32
	Stop    uint8
	KernErr uint8
	FP      bool     // a frame was stepped by its frame pointer (auto)
	Kernel  []uint64 // leaf first, up to the first 0
	User    []uint64
}

// decode decodes a packed key in place: a report decodes every key it
// holds, twice (its kernel frames named, then its stacks), and a key
// unpacked would be 2.6 KiB of garbage each time.
func (k stackKey) decode(cfg prog.Config) decodedKey {
	_, kernel, user, ok := k.parts(cfg)
	if !ok {
		return decodeKey(k.raw(cfg), cfg)
	}
	b := []byte(k)
	return decodedKey{Pid: binary.LittleEndian.Uint32(b), Stop: b[4], KernErr: b[5], FP: b[7] != 0, Kernel: pcs(kernel), User: pcs(user)}
}

// decodeKey decodes a raw key.
func decodeKey(b []byte, cfg prog.Config) decodedKey {
	kernel, user := cfg.KernelOffset(), cfg.UserOffset()
	return decodedKey{Pid: binary.LittleEndian.Uint32(b), Stop: b[4], KernErr: b[5], FP: b[7] != 0,
		Kernel: pcs(b[kernel : kernel+8*cfg.KernelDepth]),
		User:   pcs(b[user:min(len(b), user+8*cfg.UserDepth)])}
}

// pcs reads a stack's frames up to its first 0 (nil if none).
func pcs(b []byte) []uint64 {
	var out []uint64
	for i := range depth(b) {
		out = append(out, binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out
}
