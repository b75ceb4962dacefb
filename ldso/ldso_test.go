package ldso

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tracekit/tracekit/procfs"
	"golang.org/x/sys/unix"
)

// TestFilesAsLoaded runs programs and compares Files with what the loader
// mapped: every file of an executable mapping, by device and inode as
// /proc/PID/maps names them (profile's key), is one Files found, and
// Files found no other. A system program (sleep), and, where gcc is,
// a program whose library is found through DT_RUNPATH's $ORIGIN and one
// through DT_RPATH (inherited by the library it needs), with glibc and
// with musl.
func TestFilesAsLoaded(t *testing.T) {
	var progs []prog
	if sleep, err := exec.LookPath("sleep"); err == nil {
		progs = append(progs, prog{"sleep", []string{sleep, "30"}, nil})
	}
	dir := t.TempDir()
	for _, cc := range []string{"gcc", "musl-gcc"} {
		if _, err := exec.LookPath(cc); err != nil {
			t.Logf("no %s: its programs not tried", cc)
			continue
		}
		progs = append(progs, buildFixtures(t, cc, filepath.Join(dir, cc))...)
	}
	if len(progs) == 0 {
		t.Skip("no sleep, no gcc: no program to run")
	}
	for _, p := range progs {
		t.Run(p.name, func(t *testing.T) {
			cmd := exec.Command(p.argv[0], p.argv[1:]...)
			cmd.Env = append(os.Environ(), p.env...)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { cmd.Process.Kill(); cmd.Wait() }()
			mapped := loaded(t, cmd.Process.Pid)
			o := &Options{}
			for _, e := range p.env {
				if v, ok := strings.CutPrefix(e, "LD_LIBRARY_PATH="); ok {
					o.LibraryPath = v
				}
			}
			files, err := Files(p.argv[0], o)
			if err != nil {
				t.Fatal(err)
			}
			found := map[string]string{}
			for _, f := range files {
				var st unix.Stat_t
				if err := unix.Stat(f, &st); err != nil {
					t.Fatalf("%s: %v", f, err)
				}
				found[procfs.MapsDev(st.Dev)+" "+strconv.FormatUint(st.Ino, 10)] = f
			}
			for key, path := range mapped {
				if _, ok := found[key]; !ok {
					t.Errorf("%s (%s) mapped, not found", path, key)
				}
			}
			for key, path := range found {
				if _, ok := mapped[key]; !ok {
					t.Errorf("%s (%s) found, not mapped", path, key)
				}
			}
			t.Logf("%d files: %v", len(files), files)
		})
	}
}

// prog is a program to run: its name, argv and environment (besides
// the test's).
type prog struct {
	name string
	argv []string
	env  []string
}

// loaded waits for pid to sleep (in main: its loader is done), and is
// the files of its executable mappings, by "DEV INODE".
func loaded(t *testing.T, pid int) map[string]string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, err := procfs.ReadStat(pid)
		if err != nil {
			t.Fatal(err)
		}
		if st.State == 'S' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d: not asleep after 10 s (state %c)", pid, st.State)
		}
		time.Sleep(5 * time.Millisecond)
	}
	maps, err := procfs.ReadMaps(pid)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, m := range maps {
		if m.Exec() && m.Inode != 0 {
			out[m.Dev+" "+strconv.FormatUint(m.Inode, 10)] = m.Path
		}
	}
	return out
}

// buildFixtures builds, with cc into dir: main, needing liba.so through
// DT_RUNPATH $ORIGIN/lib; rpath, needing liba.so through DT_RPATH, whose
// libb.so (not named by main) is found through main's DT_RPATH as the
// loader does; and env, found through LD_LIBRARY_PATH.
func buildFixtures(t *testing.T, cc, dir string) []prog {
	t.Helper()
	lib := filepath.Join(dir, "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", cc, args, err, out)
		}
	}
	b := write("b.c", "int b(int x) { return x + 1; }\n")
	a := write("a.c", "int b(int); int a(int x) { return b(x) * 2; }\n")
	m := write("main.c", "#include <unistd.h>\nint a(int);\nint main(void) { sleep(30); return a(1) == 4 ? 0 : 1; }\n")
	run("-shared", "-fPIC", "-o", filepath.Join(lib, "libb.so"), b)
	// liba.so names libb.so with no path of its own: found through the
	// executable's DT_RPATH (rpath), or LD_LIBRARY_PATH (env), or
	// liba.so's own DT_RUNPATH (runpath).
	run("-shared", "-fPIC", "-o", filepath.Join(lib, "liba.so"), a, "-L"+lib, "-lb", "-Wl,--enable-new-dtags,-rpath,$ORIGIN")
	run("-o", filepath.Join(dir, "runpath"), m, "-L"+lib, "-la", "-Wl,--enable-new-dtags,-rpath,$ORIGIN/lib")
	libOld := filepath.Join(dir, "libold")
	if err := os.MkdirAll(libOld, 0o755); err != nil {
		t.Fatal(err)
	}
	run("-shared", "-fPIC", "-o", filepath.Join(libOld, "libb.so"), b)
	run("-shared", "-fPIC", "-o", filepath.Join(libOld, "liba.so"), a, "-L"+libOld, "-lb")
	run("-o", filepath.Join(dir, "rpath"), m, "-L"+libOld, "-la", "-Wl,--disable-new-dtags,-rpath,"+libOld)
	run("-o", filepath.Join(dir, "env"), m, "-L"+libOld, "-la", "-Wl,-rpath-link,"+libOld)
	name := filepath.Base(dir)
	return []prog{
		{name + "/runpath", []string{filepath.Join(dir, "runpath")}, nil},
		{name + "/rpath", []string{filepath.Join(dir, "rpath")}, nil},
		{name + "/env", []string{filepath.Join(dir, "env")}, []string{"LD_LIBRARY_PATH=" + libOld}},
	}
}

// TestConfDirs: directories, comments, hwcap lines, and include globs
// relative to the file's directory.
func TestConfDirs(t *testing.T) {
	dir := t.TempDir()
	d := filepath.Join(dir, "ld.so.conf.d")
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"ld.so.conf":          "# comment\n/opt/a/lib\ninclude ld.so.conf.d/*.conf\nhwcap 0 nosegneg\n/opt/b/lib:/opt/c/lib # trailing\nrelative/dir\n",
		"ld.so.conf.d/1.conf": "/usr/local/lib/x86_64-linux-gnu\n",
		"ld.so.conf.d/2.conf": "include ../ld.so.conf.d/3.txt\n/opt/d=libc5\n",
		"ld.so.conf.d/3.txt":  "/opt/e\n",
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got := ConfDirs(filepath.Join(dir, "ld.so.conf"))
	want := []string{"/opt/a/lib", "/usr/local/lib/x86_64-linux-gnu", "/opt/e", "/opt/d", "/opt/b/lib", "/opt/c/lib"}
	if !slices.Equal(got, want) {
		t.Errorf("ConfDirs: %q, want %q", got, want)
	}
	// An include of itself ends at the depth bound.
	loop := filepath.Join(dir, "loop.conf")
	os.WriteFile(loop, []byte("/x\ninclude loop.conf\n"), 0o644)
	if got := ConfDirs(loop); len(got) != maxConfDepth+1 {
		t.Errorf("a file including itself: %d directories, want %d", len(got), maxConfDepth+1)
	}
}

// FuzzFiles: whatever the executable's bytes, Files ends, without a
// panic, with MaxFiles files at most.
func FuzzFiles(f *testing.F) {
	for _, p := range []string{"/bin/sh", "/bin/true"} {
		if b, err := os.ReadFile(p); err == nil && len(b) < 1<<20 {
			f.Add(b)
		}
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	path := filepath.Join(f.TempDir(), "exe")
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := os.WriteFile(path, data, 0o755); err != nil {
			t.Fatal(err)
		}
		files, err := Files(path, &Options{ConfDirs: []string{}})
		if err == nil && (len(files) == 0 || len(files) > MaxFiles || files[0] != path) {
			t.Errorf("%d files: %v", len(files), files)
		}
	})
}

// FuzzConfDirs: whatever an ld.so.conf holds, ConfDirs ends with
// absolute directories, maxConfDirs at most.
func FuzzConfDirs(f *testing.F) {
	f.Add("/lib\ninclude *.conf\n")
	f.Add("include /etc/ld.so.conf\n/a:/b,/c d=e\n")
	dir := f.TempDir()
	path := filepath.Join(dir, "a.conf")
	f.Fuzz(func(t *testing.T, text string) {
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		got := ConfDirs(path)
		if len(got) > maxConfDirs {
			t.Errorf("%d directories", len(got))
		}
		for _, d := range got {
			if !filepath.IsAbs(d) {
				t.Errorf("%q: not absolute", d)
			}
		}
	})
}
