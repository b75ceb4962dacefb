package stacks

import (
	"bytes"
	"encoding/binary"
	"sort"

	"github.com/cilium/ebpf"
)

// memMap is a BPF map in memory, for tests of process tracking without
// root: keys and values stored as the kernel would hold them, little-
// endian bytes of fixed-size values.
type memMap struct{ m map[string][]byte }

func newMemMap() *memMap { return &memMap{m: map[string][]byte{}} }

func bytesOf(v any) []byte {
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, v); err != nil {
		panic(err)
	}
	return b.Bytes()
}

func (m *memMap) Put(key, value any) error {
	m.m[string(bytesOf(key))] = bytesOf(value)
	return nil
}

func (m *memMap) Delete(key any) error {
	k := string(bytesOf(key))
	if _, ok := m.m[k]; !ok {
		return ebpf.ErrKeyNotExist
	}
	delete(m.m, k)
	return nil
}

func (m *memMap) Lookup(key, out any) error {
	v, ok := m.m[string(bytesOf(key))]
	if !ok {
		return ebpf.ErrKeyNotExist
	}
	return binary.Read(bytes.NewReader(v), binary.LittleEndian, out)
}

// keys are its keys' bytes, sorted.
func (m *memMap) keys() []string {
	var ks []string
	for k := range m.m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
