// Package stacktest holds what the stack pipeline's tests share, in
// stacks and in the tools that run it (profile, filter): its C fixtures
// and the skips of the architectures without its in-kernel unwinder.
package stacktest

import (
	"bytes"
	"encoding/xml"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/tooltest"
	"github.com/tracekit/tracekit/stacks/prog"
)

// Fixtures is the directory of the pipeline's fixtures
// (stacks/testdata/build.sh): prebuilt in stacks/testdata/build (the
// kernel matrix ships them), else built here once with gcc. The paths
// are from a package directory beside stacks (or stacks itself).
func Fixtures(t testing.TB) string {
	t.Helper()
	return tooltest.Fixtures(t, "../stacks/testdata/build", "../stacks/testdata/build.sh", "gcc musl-tools", func() bool {
		_, err := exec.LookPath("gcc")
		_, errMusl := exec.LookPath("musl-gcc")
		return err == nil && errMusl == nil
	})
}

// HaveFixture fails when a fixture that must be there is not, and skips
// where the architecture has none (the musl fixtures).
func HaveFixture(t *testing.T, path string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		if !strings.Contains(path, "/musl/") || runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64" && os.Getenv("TRACEKIT_BIN") != "" {
			t.Fatalf("fixture %s: %v", path, err)
		}
		// riscv64 has none: bookworm's riscv64 ld dies linking against
		// sid's musl (see vmtest/run.sh).
		t.Skipf("no %s: the musl fixtures are built for x86-64, and for arm64 by vmtest (a cross build over Debian's arm64 musl)", path)
	}
}

// RequireUnwinder skips where there is no in-kernel unwinder: on 32-bit
// ARM profile walks frame pointers only, by the kernel's own walker.
// docs/design/kernel-matrix.md names these skips.
func RequireUnwinder(t *testing.T) {
	t.Helper()
	if _, ok := prog.ArchOf(runtime.GOARCH); !ok {
		t.Skipf("%s: profile walks frame pointers only here; the in-kernel unwinder reads x86-64, arm64 and riscv64", runtime.GOARCH)
	}
}

// RequireThreadPointer skips where --label's thread-locals and the
// process context are not read: the sampled thread's thread pointer is in
// task_struct on x86-64 and arm64 only (riscv64 keeps it in the task's
// pt_regs, tp). docs/design/kernel-matrix.md names these skips.
func RequireThreadPointer(t *testing.T) {
	t.Helper()
	RequireUnwinder(t)
	if prog.ThreadPointerMember[runtime.GOARCH] == "" {
		t.Skipf("%s: --label and the context read the thread pointer in task_struct, on x86-64 and arm64", runtime.GOARCH)
	}
}

// SVGTitles are the <title> texts of an SVG flame graph: the frames it
// names, each with its share.
func SVGTitles(t *testing.T, svg []byte) map[string]bool {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	titles := map[string]bool{}
	in := false
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() == "EOF" {
				return titles
			}
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		switch x := tok.(type) {
		case xml.StartElement:
			in = x.Name.Local == "title"
		case xml.CharData:
			if in {
				titles[string(x)] = true
			}
		case xml.EndElement:
			in = false
		}
	}
}
