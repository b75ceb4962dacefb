package tracefs

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// maxNear bounds the names a miss suggests.
const maxNear = 5

// nearEvents are the tracepoints under events/ (of root) whose names are
// near group:name, the nearest first: the group's events when the group
// exists, else the groups near it (as GROUP:*). Near is an edit distance
// of at most a sixth of the name, and at least 2, and at most one more
// than the nearest's; or one name holding the other.
func nearEvents(root, group, name string) []string {
	events := filepath.Join(root, "events")
	if entries, err := os.ReadDir(filepath.Join(events, group)); err == nil {
		var names []string
		for _, e := range entries {
			if e.IsDir() {
				names = append(names, e.Name())
			}
		}
		near := nearest(name, names)
		for i := range near {
			near[i] = group + ":" + near[i]
		}
		return near
	}
	entries, err := os.ReadDir(events)
	if err != nil {
		return nil
	}
	var groups []string
	for _, e := range entries {
		if e.IsDir() {
			groups = append(groups, e.Name())
		}
	}
	near := nearest(group, groups)
	for i := range near {
		near[i] += ":*"
	}
	return near
}

// NearFunctions are the traceable kernel functions (available_filter_
// functions) near name, the nearest first: what a kprobe's typo meant.
func NearFunctions(name string) []string {
	root, err := Root()
	if err != nil {
		return nil
	}
	f, err := os.Open(filepath.Join(root, "available_filter_functions"))
	if err != nil {
		return nil
	}
	defer f.Close()
	// Every name, past Functions' bound for a glob: a kernel lists some
	// 50,000 (bounded here at a million, the file being the kernel's).
	var names []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 4096), 4096)
	for sc.Scan() && len(names) < 1<<20 {
		fn, _, _ := strings.Cut(sc.Text(), " ")
		names = append(names, fn)
	}
	slices.Sort(names)
	return nearest(name, slices.Compact(names))
}

// nearest are the candidates near s, the nearest first (then by name).
func nearest(s string, candidates []string) []string {
	type scored struct {
		name string
		d    int
	}
	limit := max(2, len(s)/6)
	var near []scored
	for _, c := range candidates {
		d := editDistance(s, c, limit)
		if d > limit && len(s) >= 4 && (strings.Contains(c, s) || strings.Contains(s, c) && len(c) >= 4) {
			d = limit + 1 // near, after the close ones
		} else if d > limit {
			continue
		}
		near = append(near, scored{c, d})
	}
	slices.SortFunc(near, func(a, b scored) int {
		if a.d != b.d {
			return a.d - b.d
		}
		return strings.Compare(a.name, b.name)
	})
	var out []string
	for i := 0; i < len(near) && i < maxNear && near[i].d <= near[0].d+1; i++ {
		out = append(out, near[i].name)
	}
	return out
}

// editDistance is Levenshtein's distance between a and b, or limit+1 as
// soon as it is known to be more than limit.
func editDistance(a, b string, limit int) int {
	if d := len(a) - len(b); d > limit || -d > limit {
		return limit + 1
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		best := cur[0]
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			best = min(best, cur[j])
		}
		if best > limit {
			return limit + 1
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
