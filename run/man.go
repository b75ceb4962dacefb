package run

import (
	"bytes"
	"fmt"
	"io"
	"strings"
)

// ManPage writes the tool's manual in man(7) format, section 8, made of
// the texts --help prints: the options as go-flags writes them from the
// same parser, Details split at its "Examples:" paragraph into
// DESCRIPTION, EXAMPLES and NOTES, then OVERHEAD, and the run's common
// notes with their exit status. seeAlso names the related pages
// ("bpftrace(8)"). Nothing in it depends on the date or the build, so a
// checked-in page is current exactly when it equals a fresh one.
func ManPage(t Tool, seeAlso []string, w io.Writer) error {
	p, err := newParser(t)
	if err != nil {
		return err
	}
	var gf bytes.Buffer
	p.WriteManPage(&gf)
	_, options, ok := strings.Cut(gf.String(), ".SH OPTIONS\n")
	if !ok {
		return fmt.Errorf("go-flags' man page of %s has no OPTIONS section", t.Name)
	}

	var description, examples, notes []string
	seen := false
	for _, para := range paragraphs(t.Details) {
		switch rest, ok := strings.CutPrefix(para, "Examples:\n"); {
		case ok && !seen:
			examples, seen = append(examples, rest), true
		case seen:
			notes = append(notes, para)
		default:
			description = append(description, para)
		}
	}
	var status string
	for _, para := range paragraphs(exitHelp) {
		if s, ok := strings.CutPrefix(para, "Exit status: "); ok {
			status = s
		} else {
			notes = append(notes, para)
		}
	}

	var b strings.Builder
	name := roffEscape(t.Name)
	fmt.Fprintf(&b, ".TH %s 8 \"\" tracekit \"tracekit manual\"\n", strings.ToUpper(name))
	fmt.Fprintf(&b, ".SH NAME\n%s \\- %s\n", name, roffEscape(strings.TrimSuffix(t.Summary, ".")))
	synopsis := p.Usage
	for _, a := range p.Args() {
		synopsis += " [" + a.Name
	}
	synopsis += strings.Repeat("]", len(p.Args()))
	fmt.Fprintf(&b, ".SH SYNOPSIS\n.B %s\n%s\n", name, roffEscape(synopsis))
	section(&b, "DESCRIPTION", description)
	b.WriteString(".SH OPTIONS\n")
	b.WriteString(options)
	if len(p.Args()) > 0 {
		b.WriteString(".SH ARGUMENTS\n")
		for _, a := range p.Args() {
			fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", roffEscape(a.Name), roffEscape(a.Description))
		}
	}
	section(&b, "EXAMPLES", examples)
	section(&b, "NOTES", notes)
	if t.Overhead != "" {
		section(&b, "OVERHEAD", paragraphs(t.Overhead))
	}
	if status != "" {
		section(&b, "EXIT STATUS", []string{status})
	}
	if len(seeAlso) > 0 {
		var refs []string
		for _, r := range seeAlso {
			page, sec, _ := strings.Cut(strings.TrimSuffix(r, ")"), "(")
			refs = append(refs, fmt.Sprintf(".BR %s (%s)", roffEscape(page), sec))
		}
		b.WriteString(".SH SEE ALSO\n" + strings.Join(refs, " ,\n") + "\n")
	}
	_, err = io.WriteString(w, b.String())
	return err
}

// paragraphs splits text at its blank lines.
func paragraphs(text string) []string {
	var out []string
	for _, p := range strings.Split(strings.TrimSpace(text), "\n\n") {
		if p = strings.Trim(p, "\n"); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// section writes a section of paragraphs: unindented lines are filled as
// running text, indented ones (command lines, tables) kept as they are.
func section(b *strings.Builder, title string, paras []string) {
	if len(paras) == 0 {
		return
	}
	b.WriteString(".SH " + title + "\n")
	for i, para := range paras {
		if i > 0 {
			b.WriteString(".PP\n")
		}
		kept := false
		for _, line := range strings.Split(para, "\n") {
			indented := strings.HasPrefix(line, " ")
			if indented != kept {
				b.WriteString(map[bool]string{true: ".nf\n", false: ".fi\n"}[indented])
				kept = indented
			}
			b.WriteString(roffEscape(strings.TrimRight(line, " ")) + "\n")
		}
		if kept {
			b.WriteString(".fi\n")
		}
	}
}

// roffEscape makes a line of plain text safe as a line of roff: a
// backslash is printed as one, a hyphen stays the ASCII one that a
// command copied from the page needs, and a leading dot or quote is no
// request.
func roffEscape(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}
