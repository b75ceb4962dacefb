package tracefs

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
)

// MaxTracepoints bounds a tracepoint glob's matches: more than every
// syscall's entry and exit together, fewer than a run should attach by
// accident.
const MaxTracepoints = 5000

// ValidateEventGlob checks a tracepoint glob's group or name.
func ValidateEventGlob(glob string) error {
	if len(glob) > 256 || !globPattern().MatchString(glob) {
		return fmt.Errorf("invalid tracepoint glob %q: want letters, digits, '_' and '.', with '*' for any run of them and '?' for one (e.g. syscalls:sys_enter_*)", glob)
	}
	return nil
}

// Tracepoints lists the tracepoints whose group and name the globs match,
// "GROUP:NAME" sorted: the directories of tracefs's events/ that hold a
// format file. More than MaxTracepoints is an error.
func Tracepoints(groupGlob, nameGlob string) ([]string, error) {
	for _, g := range []string{groupGlob, nameGlob} {
		if err := ValidateEventGlob(g); err != nil {
			return nil, err
		}
	}
	root, err := Root()
	if err != nil {
		return nil, err
	}
	groups, err := os.ReadDir(filepath.Join(root, "events"))
	if err != nil {
		return nil, fmt.Errorf("list the kernel's tracepoints: %w", err)
	}
	var names []string
	for _, g := range groups {
		if ok, _ := filepath.Match(groupGlob, g.Name()); !ok || !g.IsDir() || ValidateName("event group", g.Name()) != nil {
			continue
		}
		events, err := os.ReadDir(filepath.Join(root, "events", g.Name()))
		if err != nil {
			continue
		}
		for _, e := range events {
			if ok, _ := filepath.Match(nameGlob, e.Name()); !ok || !e.IsDir() || ValidateName("event", e.Name()) != nil {
				continue
			}
			if _, err := os.Stat(filepath.Join(root, "events", g.Name(), e.Name(), "format")); err != nil {
				continue
			}
			names = append(names, g.Name()+":"+e.Name())
			if len(names) > MaxTracepoints {
				return nil, fmt.Errorf("%s:%s matches more than %d tracepoints: narrow it", groupGlob, nameGlob, MaxTracepoints)
			}
		}
	}
	sort.Strings(names)
	return names, nil
}
