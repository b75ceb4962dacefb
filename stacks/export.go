package stacks

import (
	"bufio"
	"errors"
	"fmt"
	"html"
	"io"
	"io/fs"
	"os"
	"sort"
	"strings"

	"github.com/tracekit/tracekit/internal/usage"
)

// flameNode is a frame of the flame graph: its samples, its callees.
type flameNode struct {
	name     string
	count    uint64
	children map[string]*flameNode
}

func (n *flameNode) child(name string) *flameNode {
	c := n.children[name]
	if c == nil {
		c = &flameNode{name: name, children: map[string]*flameNode{}}
		n.children[name] = c
	}
	return c
}

// Flame graph geometry, in SVG user units.
const (
	flameWidth = 1200.0
	flameRow   = 16.0
	flameTop   = 30.0
)

// withLabels keeps the stacks that carry every one of want (name and
// value; a number by its decimal form).
func withLabels(stacks []stack, want []LabelValue) []stack {
	var out []stack
	for _, st := range stacks {
		if hasLabels(st.Labels, want) {
			out = append(out, st)
		}
	}
	return out
}

func hasLabels(have, want []LabelValue) bool {
	for _, w := range want {
		found := false
		for _, h := range have {
			if h.Name == w.Name && h.Value == w.Value {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// labelsTitle is "ep=/alpha req=101".
func labelsTitle(ls []LabelValue) string {
	var parts []string
	for _, l := range ls {
		parts = append(parts, l.Name+"="+l.Value)
	}
	return strings.Join(parts, " ")
}

// writeSVG writes a self-contained flame graph: the root at the bottom,
// each frame as wide as its share of the samples; hovering shows a frame's
// name and share, clicking zooms into it (its callers stay), clicking the
// root resets. Frames are ordered by name, as flamegraph.pl does. A
// stack's labels are frames between its process and its root, as in
// --folded: the graph splits each process by them.
func writeSVG(w io.Writer, stacks []stack, title, unit string) error {
	root := &flameNode{name: "all", children: map[string]*flameNode{}}
	for _, st := range stacks {
		root.count += st.Count
		n := root.child(st.Comm)
		n.count += st.Count
		var frames []string
		for _, l := range st.Labels {
			frames = append(frames, "["+l.Name+"="+l.Value+"]")
		}
		if st.End != "" {
			frames = append(frames, st.End)
		}
		for i := len(st.User) - 1; i >= 0; i-- {
			frames = append(frames, st.User[i])
		}
		for i := len(st.Kernel) - 1; i >= 0; i-- {
			frames = append(frames, st.Kernel[i]+" [k]")
		}
		for _, f := range frames {
			n = n.child(f)
			n.count += st.Count
		}
	}
	depth := 0
	var measure func(n *flameNode, d int)
	measure = func(n *flameNode, d int) {
		depth = max(depth, d)
		for _, c := range n.children {
			measure(c, d+1)
		}
	}
	measure(root, 1)
	height := flameTop + float64(depth)*flameRow + 10
	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" standalone="no"?>
<svg version="1.1" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" xmlns="http://www.w3.org/2000/svg" onload="init()">
<style>text{font-family:monospace;font-size:11px;fill:#000;pointer-events:none}rect{stroke:#fff;stroke-width:0.5;cursor:pointer}</style>
<text x="%.0f" y="18" text-anchor="middle" style="font-size:15px">%s</text>
<g id="frames">
`, flameWidth, height, flameWidth, height, flameWidth/2, html.EscapeString(title))
	var draw func(n *flameNode, x float64, d int, id string)
	draw = func(n *flameNode, x float64, d int, id string) {
		width := flameWidth * float64(n.count) / float64(max(root.count, 1))
		y := height - 10 - float64(d)*flameRow
		share := 100 * float64(n.count) / float64(max(root.count, 1))
		fmt.Fprintf(&b, `<g class="f" id="%s" data-x="%.3f" data-w="%.3f"><title>%s (%d %s, %.2f%%)</title><rect x="%.3f" y="%.1f" width="%.3f" height="%.1f" fill="%s" rx="2"/><text x="%.3f" y="%.1f">%s</text></g>
`, id, x, width, html.EscapeString(n.name), n.count, unit, share, x, y, width, flameRow-1, color(n.name), x+3, y+11, html.EscapeString(fitLabel(n.name, width)))
		names := make([]string, 0, len(n.children))
		for name := range n.children {
			names = append(names, name)
		}
		sort.Strings(names)
		cx := x
		for i, name := range names {
			c := n.children[name]
			draw(c, cx, d+1, fmt.Sprintf("%s.%d", id, i))
			cx += flameWidth * float64(c.count) / float64(max(root.count, 1))
		}
	}
	draw(root, 0, 1, "n")
	b.WriteString(`</g>
<script><![CDATA[
var W = ` + fmt.Sprintf("%.0f", flameWidth) + `;
function frames() { return document.querySelectorAll("g.f"); }
function label(g, x, w) {
  var t = g.querySelector("text"), name = g.querySelector("title").textContent.replace(/ \(\d+ \w+, [\d.]+%\)$/, "");
  var fit = Math.floor((w - 6) / 6.6);
  t.textContent = fit < 3 ? "" : (name.length <= fit ? name : name.substring(0, fit - 2) + "..");
  t.setAttribute("x", x + 3);
}
function show(g, x, w) {
  var r = g.querySelector("rect");
  r.setAttribute("x", x); r.setAttribute("width", Math.max(w, 0));
  g.style.display = w < 0.1 ? "none" : "";
  label(g, x, w);
}
function zoom(z) {
  var zx = +z.dataset.x, zw = +z.dataset.w, id = z.id;
  frames().forEach(function (g) {
    var x = +g.dataset.x, w = +g.dataset.w;
    if (g.id === id || id.indexOf(g.id + ".") === 0) { show(g, 0, W); return; }
    if (g.id.indexOf(id + ".") === 0) { show(g, (x - zx) * W / zw, w * W / zw); return; }
    show(g, 0, 0);
  });
}
function init() {
  frames().forEach(function (g) {
    show(g, +g.dataset.x, +g.dataset.w);
    g.addEventListener("click", function () { zoom(g); });
  });
}
]]></script>
</svg>
`)
	_, err := io.WriteString(w, b.String())
	return err
}

// fitLabel shortens a frame's name to the width of its box (about 6.6
// units a character at 11px monospace), as the script does when zooming.
func fitLabel(name string, width float64) string {
	fit := int((width - 6) / 6.6)
	switch {
	case fit < 3:
		return ""
	case len(name) <= fit:
		return name
	}
	return name[:fit-2] + ".."
}

// color gives each frame a warm colour from its name (the same name, the
// same colour); kernel frames are orange, markers grey.
func color(name string) string {
	var h uint32 = 2166136261
	for i := 0; i < len(name); i++ {
		h = (h ^ uint32(name[i])) * 16777619
	}
	switch {
	case strings.HasPrefix(name, "["):
		return "rgb(190,190,190)"
	case strings.HasSuffix(name, " [k]"):
		return fmt.Sprintf("rgb(%d,%d,40)", 220+h%35, 120+h%60)
	}
	return fmt.Sprintf("rgb(%d,%d,%d)", 205+h%50, 80+(h>>8)%130, 40+(h>>16)%50)
}

// outFile is a file the final report writes whole (--svg, --pprof). It is
// created at the start, so that a path that cannot be written fails before
// the run, and removed if the run ends without writing it (an error first,
// a full disk): no empty or cut file is left behind, unless it is no
// regular file (/dev/stdout).
type outFile struct {
	path    string
	f       *os.File
	written bool
}

func createOut(path string) (*outFile, error) {
	// A FIFO took the output silently (opened read-write, a small output
	// sat in the pipe for no one) or blocked the tool's end on a reader
	// that never came (issue 62): the file is written whole at the end of
	// the run, so it must be one that takes it then.
	if st, err := os.Stat(path); err == nil && st.Mode()&(os.ModeNamedPipe|os.ModeSocket) != 0 {
		return nil, usage.Errorf("%s is a FIFO or a socket: the file is written whole when the run ends; give a regular file", path)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
	if err != nil {
		return nil, err
	}
	return &outFile{path: path, f: f}, nil
}

// write writes the file through fn, once, and closes it; on an error it
// removes it and says which file and why, once ("write F: no space left
// on device").
func (o *outFile) write(fn func(io.Writer) error) error {
	if o.f == nil {
		return fmt.Errorf("write %s: already closed", o.path)
	}
	w := bufio.NewWriterSize(o.f, 64<<10)
	err := fn(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := o.f.Close(); err == nil {
		err = cerr
	}
	o.f = nil
	if err != nil {
		o.remove()
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is said once, here
		}
		return fmt.Errorf("write %s: %w", o.path, err)
	}
	o.written = true
	return nil
}

// close closes the file, and removes it if it was never written.
func (o *outFile) close() error {
	if o.f != nil {
		o.f.Close()
		o.f = nil
	}
	if !o.written {
		o.remove()
	}
	return nil
}

func (o *outFile) remove() {
	if st, err := os.Lstat(o.path); err == nil && st.Mode().IsRegular() {
		os.Remove(o.path)
	}
}
