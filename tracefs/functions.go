package tracefs

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/tracekit/tracekit/internal/lazy"
)

// globPattern is a kernel function glob: a name's characters, '*' for
// any run of them and '?' for one.
var globPattern = lazy.Regexp(`^[A-Za-z0-9_.*?]+$`)

// IsGlob reports whether a kernel function name is a glob.
func IsGlob(s string) bool { return strings.ContainsAny(s, "*?") }

// ValidateGlob checks a kernel function glob.
func ValidateGlob(glob string) error {
	if len(glob) > 256 || !globPattern().MatchString(glob) {
		return fmt.Errorf("invalid function glob %q: want letters, digits, '_' and '.', with '*' for any run of them and '?' for one (e.g. tcp_*)", glob)
	}
	return nil
}

// MaxFunctions bounds a glob's matches: more than any kernel's tcp_* or
// vfs_*, fewer than a run should attach by accident.
const MaxFunctions = 20000

// Functions lists the traceable kernel functions any of the globs matches
// (available_filter_functions: the functions ftrace, and so a kprobe or
// fprobe, can reach), each name once, sorted; a module's functions too
// ("NAME [MODULE]" in the file). More than MaxFunctions is an error.
func Functions(globs ...string) ([]string, error) {
	for _, glob := range globs {
		if err := ValidateGlob(glob); err != nil {
			return nil, err
		}
	}
	root, err := Root()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(root, "available_filter_functions"))
	if err != nil {
		return nil, fmt.Errorf("list the kernel's traceable functions: %w (a glob needs the kernel's function tracer, CONFIG_DYNAMIC_FTRACE, with tracefs readable)", err)
	}
	defer f.Close()
	seen := map[string]bool{}
	var names []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 4096), 4096) // a name and its module: longer lines are not the kernel's
	for sc.Scan() {
		name, _, _ := strings.Cut(sc.Text(), " ")
		if seen[name] {
			continue
		}
		if !matchAny(globs, name) || ValidateSymbol(name) != nil {
			continue
		}
		seen[name] = true
		names = append(names, name)
		if len(names) > MaxFunctions {
			return nil, fmt.Errorf("%s matches more than %d kernel functions: narrow it", strings.Join(globs, ","), MaxFunctions)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read available_filter_functions: %w", err)
	}
	sort.Strings(names)
	return names, nil
}

func matchAny(globs []string, name string) bool {
	for _, glob := range globs {
		if ok, _ := filepath.Match(glob, name); ok {
			return true
		}
	}
	return false
}
