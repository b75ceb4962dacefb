package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/privtest"
	"github.com/tracekit/tracekit/internal/tooltest"
)

// exactMark, on the line before a code block of the README or of
// docs/examples, says that its transcripts are exact on any kernel:
// TestTranscripts runs them again, so that they cannot rot.
const exactMark = "<!-- exact: TestTranscripts runs this again -->"

type transcript struct {
	file, command, output string
}

// transcripts are the marked blocks' commands ("# bin/TOOL ...") with
// what each printed on stdout.
func transcripts(t *testing.T) []transcript {
	files, _ := filepath.Glob("../../docs/examples/*.md")
	files = append(files, "../../README.md")
	var out []transcript
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(string(b), "\n")
		for i := 0; i+1 < len(lines); i++ {
			if lines[i] != exactMark {
				continue
			}
			if lines[i+1] != "```" {
				t.Fatalf("%s:%d: the mark is not followed by a code block", f, i+1)
			}
			var cur *transcript
			for j := i + 2; j < len(lines) && lines[j] != "```"; j++ {
				if cmd, ok := strings.CutPrefix(lines[j], "# "); ok {
					out = append(out, transcript{file: filepath.Base(f), command: cmd})
					cur = &out[len(out)-1]
					continue
				}
				if cur == nil {
					t.Fatalf("%s:%d: output before a command", f, j+1)
				}
				cur.output += lines[j] + "\n"
			}
		}
	}
	return out
}

// TestTranscripts runs the exact transcripts of the docs with the
// binary make build makes, in a directory whose bin/ holds it and its
// links, and compares what they print with what the docs say.
func TestTranscripts(t *testing.T) {
	ts := transcripts(t)
	if len(ts) < 3 {
		t.Fatalf("%d exact transcripts in the docs: the marks are gone", len(ts))
	}
	privtest.Require(t)
	var dir string
	for _, tool := range all {
		dir = filepath.Dir(tooltest.Tool(t, tool.name))
	}
	work := t.TempDir()
	if err := os.Symlink(dir, filepath.Join(work, "bin")); err != nil {
		t.Fatal(err)
	}
	for _, tr := range ts {
		cmd := exec.Command("bash", "-c", tr.command)
		cmd.Dir = work
		got, err := cmd.Output()
		want := strings.TrimRight(tr.output, "\n") + "\n"
		if err != nil || strings.TrimRight(string(got), "\n")+"\n" != want {
			t.Errorf("%s: %s: %v\n%s\nwant:\n%s", tr.file, tr.command, err, got, want)
		}
	}
}
