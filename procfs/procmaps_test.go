package procfs

import (
	"bytes"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseMaps(t *testing.T) {
	in := `55d0c5a8c000-55d0c5a8e000 r--p 00000000 fd:01 1835234                    /usr/bin/cat
55d0c5a8e000-55d0c5a93000 r-xp 00002000 fd:01 1835234                    /usr/bin/cat
7f1c2a000000-7f1c2a021000 rw-p 00000000 00:00 0 
7f1c2a100000-7f1c2a128000 r-xp 00028000 fd:01 42                         /tmp/a dir/with spaces (deleted)
7ffd5e3f2000-7ffd5e3f4000 r-xp 00000000 00:00 0                          [vdso]
`
	maps, err := ParseMaps(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if len(maps) != 5 {
		t.Fatalf("%d mappings", len(maps))
	}
	m := maps[1]
	if m.Start != 0x55d0c5a8e000 || m.End != 0x55d0c5a93000 || m.Off != 0x2000 || !m.Exec() || m.Path != "/usr/bin/cat" || m.Inode != 1835234 {
		t.Errorf("mapping 1: %+v", m)
	}
	if maps[2].Path != "" || maps[2].Exec() {
		t.Errorf("anonymous mapping: %+v", maps[2])
	}
	if maps[3].Path != "/tmp/a dir/with spaces (deleted)" {
		t.Errorf("path with spaces: %q", maps[3].Path)
	}
	for _, bad := range []string{"zz-10 r-xp 0 0:0 0\n", "20-10 r-xp 0 0:0 0\n", "10-20 r-xp\n"} {
		if _, err := ParseMaps(strings.NewReader(bad)); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func FuzzParseMaps(f *testing.F) {
	f.Add("55d0c5a8e000-55d0c5a93000 r-xp 00002000 fd:01 1835234   /usr/bin/cat\n")
	f.Add("7ffd5e3f2000-7ffd5e3f4000 r-xp 00000000 00:00 0    [vdso]\n")
	f.Fuzz(func(t *testing.T, s string) {
		maps, err := ParseMaps(strings.NewReader(s))
		if err != nil {
			return
		}
		for _, m := range maps {
			if m.End <= m.Start {
				t.Fatalf("empty mapping %+v", m)
			}
		}
	})
}

// TestReadMapsLong: a maps file longer than ReadMaps' first buffer (here
// 600 mappings more, some 45 KiB) is read whole, as os.ReadFile reads it.
func TestReadMapsLong(t *testing.T) {
	var regions [][]byte
	defer func() {
		for _, r := range regions {
			unix.Munmap(r)
		}
	}()
	for i := 0; i < 600; i++ {
		prot := unix.PROT_READ
		if i%2 == 1 {
			prot |= unix.PROT_WRITE // unlike its neighbours: never merged with them
		}
		r, err := unix.Mmap(-1, 0, 4096, prot, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		regions = append(regions, r)
	}
	got, err := ReadMaps(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	want, err := ParseMaps(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 16<<10 || len(got) < 300 || len(got) < len(want)-20 || len(got) > len(want)+20 {
		t.Errorf("%d mappings read, %d in a %d-byte file read apart", len(got), len(want), len(b))
	}
}
