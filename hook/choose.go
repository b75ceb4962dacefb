package hook

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/tracekit/tracekit/internal/usage"
)

// Env is --attach for every tool run without the flag.
const Env = "TRACEKIT_ATTACH"

// all are the hooks by name, for --attach.
var all = []Hook{Perf, Raw, BTF, Fentry}

// Offer is one way a tool can reach its event.
type Offer struct {
	Hook Hook
	// Have is nil when the kernel has this hook for the event, else
	// the fact that it lacks, as a phrase ("this kernel has no raw
	// tracepoints (4.17+)"). nil: always there.
	Have func() error
	// Build is nil when the tool can build its run on this hook (it may
	// keep what it built), else why not, in words of its own (a filter
	// expression a trampoline cannot serve). Called only when Have
	// passed. nil: nothing to build.
	Build func() error
}

// Validate checks an --attach value before anything runs: auto, "", or a
// hook's name. Whether the tool offers that hook for its event is
// Choose's to say.
func Validate(flag string) error {
	if flag == "" || flag == "auto" {
		return nil
	}
	for _, h := range all {
		if Hook(flag) == h {
			return nil
		}
	}
	return usage.Errorf("invalid --attach %q: want auto, perf, raw, btf or fentry", flag)
}

// Choose decides how a tool reaches event, one rule for every tool:
//   - the choice is the --attach flag, else the environment's
//     TRACEKIT_ATTACH, else auto;
//   - auto takes the first of offers (the tool lists them cheapest
//     first) that the kernel has and the tool can build on; when none
//     can serve, the error is the build error of the first the kernel
//     has, else the last offer's missing fact;
//   - a named hook is forced, from the flag and the environment alike:
//     one the tool does not offer for event is a usage error, one the
//     kernel lacks or the tool cannot build on is an error that says
//     why, named after the choice. It never falls back to another.
func Choose(flag, event string, offers ...Offer) (Hook, error) {
	choice, source := flag, "--attach"
	if choice == "" {
		choice, source = os.Getenv(Env), Env
	}
	if choice == "" || choice == "auto" {
		return auto(offers)
	}
	var names []string
	var forced *Offer
	for i, o := range offers {
		names = append(names, string(o.Hook))
		if string(o.Hook) == choice {
			forced = &offers[i]
		}
	}
	if forced == nil {
		if Validate(choice) != nil {
			return "", usage.Errorf("invalid %s %q: want %s", source, choice, orList(append([]string{"auto"}, names...)))
		}
		only := "by " + orList(names)
		if len(names) == 1 {
			only = "by " + names[0] + " only"
		}
		return "", usage.Errorf("%s=%s: %s is reached %s", source, choice, event, only)
	}
	if err := call(forced.Have); err != nil {
		var others []string
		for _, n := range names {
			if n != choice {
				others = append(others, n)
			}
		}
		if len(others) > 0 {
			return "", fmt.Errorf("%s=%s: %w; use %s=%s", source, choice, err, source, orList(others))
		}
		return "", fmt.Errorf("%s=%s: %w", source, choice, err)
	}
	if err := call(forced.Build); err != nil {
		return "", fmt.Errorf("%s=%s: %w", source, choice, err)
	}
	return forced.Hook, nil
}

func auto(offers []Offer) (Hook, error) {
	var buildErr, haveErr error
	for _, o := range offers {
		if err := call(o.Have); err != nil {
			haveErr = err
			continue
		}
		err := call(o.Build)
		if err == nil {
			return o.Hook, nil
		}
		if buildErr == nil {
			buildErr = err
		}
	}
	if buildErr != nil {
		return "", buildErr
	}
	if haveErr == nil {
		haveErr = errors.New("no hook offered")
	}
	return "", haveErr
}

func call(f func() error) error {
	if f == nil {
		return nil
	}
	return f()
}

// orList is "a", "a or b", "a, b or c".
func orList(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}
