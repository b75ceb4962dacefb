package kbtf

import (
	"testing"

	"github.com/cilium/ebpf/btf"

	"github.com/tracekit/tracekit/internal/privtest"
)

// TestEnumerator holds Enumerator to cilium/ebpf's decoding of the same
// BTF: every enumerator of the running kernel's first hundred enums
// named once there has the value cilium/ebpf gives it.
func TestEnumerator(t *testing.T) {
	privtest.NeedBTF(t)
	raw, err := readKernel()
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := btf.LoadKernelSpec()
	if err != nil {
		t.Fatal(err)
	}
	values := map[string][]int64{}
	enums := 0
	for typ, err := range ref.All() {
		if err != nil {
			t.Fatal(err)
		}
		e, ok := typ.(*btf.Enum)
		if !ok || enums >= 100 {
			continue
		}
		enums++
		for _, v := range e.Values {
			n := int64(v.Value)
			values[v.Name] = append(values[v.Name], n)
		}
	}
	checked := 0
	for name, vs := range values {
		if len(vs) != 1 {
			continue
		}
		got, ok := s.Enumerator(name)
		if ok && got != vs[0] {
			t.Errorf("%s: %d, cilium/ebpf says %d", name, got, vs[0])
		}
		if !ok && len(vs) == 1 {
			// Another enum, past the first hundred, names it with another value.
			continue
		}
		checked++
	}
	if checked < 100 {
		t.Errorf("only %d enumerators checked", checked)
	}
	if _, ok := s.Enumerator("NO_SUCH_ENUMERATOR_HERE"); ok {
		t.Error("found an enumerator that is not there")
	}
}
