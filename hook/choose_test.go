package hook

import (
	"errors"
	"strings"
	"testing"

	"github.com/tracekit/tracekit/internal/usage"
)

func TestValidate(t *testing.T) {
	for _, ok := range []string{"", "auto", "perf", "raw", "btf", "fentry"} {
		if err := Validate(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"Raw", "perf ", "kprobe"} {
		var ue *usage.Error
		if err := Validate(bad); !errors.As(err, &ue) || !strings.Contains(err.Error(), "want auto, perf, raw, btf or fentry") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// The rule Choose writes once for every tool, run against offers whose
// kernel facts and builds are made up: no root needed.
func TestChoose(t *testing.T) {
	no := func(msg string) func() error { return func() error { return errors.New(msg) } }
	var built []Hook
	build := func(h Hook, err error) func() error {
		return func() error { built = append(built, h); return err }
	}
	type want struct {
		hook  Hook
		err   string // a substring; "" for none
		usage bool
		built []Hook // the builds Choose ran, in order
	}
	for _, tc := range []struct {
		name      string
		flag, env string
		offers    []Offer
		want      want
	}{
		{"auto: the first the kernel has", "", "", []Offer{
			{Hook: Fentry, Have: no("no trampolines")}, {Hook: Raw, Build: build(Raw, nil)}, {Hook: Perf, Build: build(Perf, nil)},
		}, want{hook: Raw, built: []Hook{Raw}}},
		{"auto: past a build that fails", "auto", "", []Offer{
			{Hook: Fentry, Build: build(Fentry, errors.New("struct pointer"))}, {Hook: Perf, Build: build(Perf, nil)},
		}, want{hook: Perf, built: []Hook{Fentry, Perf}}},
		{"auto: none builds, the first build error", "", "", []Offer{
			{Hook: Fentry, Build: build(Fentry, errors.New("first"))}, {Hook: Perf, Build: build(Perf, errors.New("second"))},
		}, want{err: "first", built: []Hook{Fentry, Perf}}},
		{"auto: a build error beats a missing hook", "", "", []Offer{
			{Hook: Fentry, Build: build(Fentry, errors.New("bad expression"))}, {Hook: Perf, Have: no("no kprobes")},
		}, want{err: "bad expression", built: []Hook{Fentry}}},
		{"auto: none there, the last fact", "", "", []Offer{
			{Hook: Fentry, Have: no("no trampolines")}, {Hook: Perf, Have: no("no kprobes")},
		}, want{err: "no kprobes"}},
		{"forced from the flag", "perf", "fentry", []Offer{
			{Hook: Fentry, Build: build(Fentry, nil)}, {Hook: Perf, Build: build(Perf, nil)},
		}, want{hook: Perf, built: []Hook{Perf}}},
		{"forced from the environment", "", "perf", []Offer{
			{Hook: Fentry, Build: build(Fentry, nil)}, {Hook: Perf, Build: build(Perf, nil)},
		}, want{hook: Perf, built: []Hook{Perf}}},
		{"the flag's auto beats the environment", "auto", "perf", []Offer{
			{Hook: Fentry, Build: build(Fentry, nil)}, {Hook: Perf},
		}, want{hook: Fentry, built: []Hook{Fentry}}},
		{"forced and missing: no fallback", "raw", "", []Offer{
			{Hook: Raw, Have: no("this kernel has no raw tracepoints (4.17+)")}, {Hook: Perf, Build: build(Perf, nil)},
		}, want{err: "--attach=raw: this kernel has no raw tracepoints (4.17+); use --attach=perf"}},
		{"forced by the environment and missing", "", "fentry", []Offer{
			{Hook: Fentry, Have: no("no trampolines")}, {Hook: Raw}, {Hook: Perf},
		}, want{err: "TRACEKIT_ATTACH=fentry: no trampolines; use TRACEKIT_ATTACH=raw or perf"}},
		{"forced and unbuildable: no fallback", "fentry", "", []Offer{
			{Hook: Fentry, Build: build(Fentry, errors.New("struct pointer"))}, {Hook: Perf, Build: build(Perf, nil)},
		}, want{err: "struct pointer", built: []Hook{Fentry}}},
		{"not offered: usage", "raw", "", []Offer{{Hook: Fentry}, {Hook: Perf}},
			want{err: "--attach=raw: ev is reached by fentry or perf", usage: true}},
		{"not offered from the environment: usage", "", "btf", []Offer{{Hook: Perf}},
			want{err: "TRACEKIT_ATTACH=btf: ev is reached by perf only", usage: true}},
		{"unknown from the environment: usage", "", "fast", []Offer{{Hook: Raw}, {Hook: Perf}},
			want{err: `invalid TRACEKIT_ATTACH "fast": want auto, raw or perf`, usage: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(Env, tc.env)
			built = nil
			h, err := Choose(tc.flag, "ev", tc.offers...)
			var ue *usage.Error
			switch {
			case tc.want.err == "" && (err != nil || h != tc.want.hook):
				t.Errorf("got %q, %v; want %q", h, err, tc.want.hook)
			case tc.want.err != "" && (err == nil || !strings.Contains(err.Error(), tc.want.err)):
				t.Errorf("got %q, %v; want the error %q", h, err, tc.want.err)
			case tc.want.err != "" && errors.As(err, &ue) != tc.want.usage:
				t.Errorf("%v: a usage error: %v, want %v", err, !tc.want.usage, tc.want.usage)
			}
			if strings.Join(hooks(built), ",") != strings.Join(hooks(tc.want.built), ",") {
				t.Errorf("built %v, want %v", built, tc.want.built)
			}
		})
	}
}

func hooks(hs []Hook) []string {
	var s []string
	for _, h := range hs {
		s = append(s, string(h))
	}
	return s
}
