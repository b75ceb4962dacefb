package tracefs

import (
	"testing"

	"github.com/cilium/ebpf/btf"
)

func TestFetchType(t *testing.T) {
	u32 := &btf.Int{Name: "unsigned int", Size: 4}
	for _, c := range []struct {
		t     btf.Type
		width int
		want  string
	}{
		{u32, 8, "u32"},
		{&btf.Int{Name: "long", Size: 8, Encoding: btf.Signed}, 8, "s64"},
		{&btf.Typedef{Name: "size_t", Type: &btf.Int{Name: "unsigned long", Size: 8}}, 8, "u64"},
		{&btf.Pointer{Target: u32}, 8, "x64"},
		{&btf.Pointer{Target: u32}, 4, "x32"},
		{&btf.Enum{Name: "e", Size: 4}, 8, "u32"},
		{&btf.Int{Name: "__int128", Size: 16}, 8, ""},
		{&btf.Struct{Name: "s", Size: 8}, 8, ""},
	} {
		if got := FetchType(c.t, c.width); got != c.want {
			t.Errorf("FetchType(%v, %d) = %q, want %q", c.t, c.width, got, c.want)
		}
	}
}
