package tracefs

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tracekit/tracekit/internal/lazy"
)

// Field is one field of a trace event record, as its format file states it.
type Field struct {
	Name   string
	Type   string // C type without the name, e.g. "unsigned int", "char[16]"
	Offset int
	Size   int
	Signed bool
	// DataLoc marks a __data_loc field: the record holds a u32 whose low
	// 16 bits are the data's offset in the record and high 16 bits its length.
	DataLoc bool
	// ArrayLen is the element count of a fixed array ("char comm[16]"), 0 if
	// the field is not an array.
	ArrayLen int
	Common   bool // a common_* field shared by every event
}

// Format is a parsed tracefs event format file.
type Format struct {
	Name     string
	ID       uint64
	Fields   []Field
	PrintFmt string
	// Symbolic holds the value names of each __print_symbolic(REC->field, ...)
	// table of the print fmt, by field name.
	Symbolic map[string]map[uint64]string
}

// Field returns the named field.
func (f *Format) Field(name string) (Field, bool) {
	for _, fl := range f.Fields {
		if fl.Name == name {
			return fl, true
		}
	}
	return Field{}, false
}

// FieldNames lists the event's own (non-common) fields, for error messages.
func (f *Format) FieldNames() []string {
	var names []string
	for _, fl := range f.Fields {
		if !fl.Common {
			names = append(names, fl.Name)
		}
	}
	return names
}

// MustField returns the named field or an error listing the fields there are.
func (f *Format) MustField(name string) (Field, error) {
	if fl, ok := f.Field(name); ok {
		return fl, nil
	}
	return Field{}, fmt.Errorf("event %s has no field %q (fields: %s)", f.Name, name, strings.Join(f.FieldNames(), ", "))
}

var (
	fieldLine = lazy.Regexp(`^\s*field:(.+);\s*offset:(\d+);\s*size:(\d+);\s*signed:(\d+);`)
	arraySfx  = lazy.Regexp(`\[(\d*)\]$`)
)

// ParseFormat parses the text of a tracefs format file.
func ParseFormat(text string) (*Format, error) {
	f := &Format{Symbolic: map[string]map[uint64]string{}}
	common := true
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "name: "):
			f.Name = strings.TrimSpace(strings.TrimPrefix(line, "name: "))
		case strings.HasPrefix(line, "ID: "):
			id, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(line, "ID: ")), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("bad ID line %q: %w", line, err)
			}
			f.ID = id
		case strings.HasPrefix(line, "print fmt: "):
			f.PrintFmt = strings.TrimPrefix(line, "print fmt: ")
		case strings.TrimSpace(line) == "" && len(f.Fields) > 0:
			// A blank line separates the common fields from the event's own.
			common = false
		default:
			m := fieldLine().FindStringSubmatch(line)
			if m == nil {
				continue
			}
			fl, err := parseField(m)
			if err != nil {
				return nil, fmt.Errorf("field line %q: %w", strings.TrimSpace(line), err)
			}
			fl.Common = common && strings.HasPrefix(fl.Name, "common_")
			f.Fields = append(f.Fields, fl)
		}
	}
	if len(f.Fields) == 0 {
		return nil, fmt.Errorf("no fields found")
	}
	f.Symbolic = parseSymbolic(f.PrintFmt)
	return f, nil
}

func parseField(m []string) (Field, error) {
	decl := strings.TrimSpace(m[1])
	var fl Field
	fl.Offset, _ = strconv.Atoi(m[2])
	fl.Size, _ = strconv.Atoi(m[3])
	fl.Signed = m[4] == "1"
	if rest, ok := strings.CutPrefix(decl, "__data_loc "); ok {
		fl.DataLoc = true
		decl = rest
	}
	// The name is the last identifier; an array suffix may sit on either the
	// name ("char comm[16]") or the type ("__data_loc char[] name").
	i := strings.LastIndexAny(decl, " *")
	if i < 0 {
		return Field{}, fmt.Errorf("no type in %q", decl)
	}
	typ, name := strings.TrimSpace(decl[:i+1]), decl[i+1:]
	if a := arraySfx().FindStringSubmatch(name); a != nil {
		name = strings.TrimSuffix(name, a[0])
		typ += a[0]
		fl.ArrayLen, _ = strconv.Atoi(a[1])
	}
	if name == "" || !namePattern().MatchString(name) {
		return Field{}, fmt.Errorf("bad field name in %q", decl)
	}
	fl.Name, fl.Type = name, typ
	return fl, nil
}

var (
	symbolicStart = lazy.Regexp(`__print_symbolic\(\s*REC->(\w+)\s*,`)
	symbolicEntry = lazy.Regexp(`\{\s*(-?(?:0x[0-9a-fA-F]+|\d+))\s*,\s*"([^"]*)"\s*\}`)
)

// parseSymbolic reads the {value, "name"} tables of __print_symbolic calls
// whose first argument is a plain field. Entries whose value is still an
// enum name (no TRACE_DEFINE_ENUM in that kernel) are skipped.
func parseSymbolic(printFmt string) map[string]map[uint64]string {
	out := map[string]map[uint64]string{}
	for _, loc := range symbolicStart().FindAllStringSubmatchIndex(printFmt, -1) {
		field := printFmt[loc[2]:loc[3]]
		body := printFmt[loc[1]:]
		// The table ends at the parenthesis that closes the call.
		depth := 1
		for i, c := range body {
			if c == '(' {
				depth++
			} else if c == ')' {
				depth--
				if depth == 0 {
					body = body[:i]
					break
				}
			}
		}
		table := map[uint64]string{}
		for _, e := range symbolicEntry().FindAllStringSubmatch(body, -1) {
			v, err := strconv.ParseInt(e[1], 0, 64)
			if err != nil {
				continue
			}
			table[uint64(v)] = e[2]
		}
		if len(table) > 0 {
			out[field] = table
		}
	}
	return out
}

// cTypes are the C integer types whose size and signedness a field's value
// follows, whatever its slot in the record (see Field.Value).
var cTypes = map[string]struct {
	size   int
	signed bool
}{
	"int": {4, true}, "signed int": {4, true}, "unsigned int": {4, false}, "unsigned": {4, false},
	"short": {2, true}, "unsigned short": {2, false}, "signed char": {1, true}, "unsigned char": {1, false},
	"long": {8, true}, "unsigned long": {8, false}, "long long": {8, true}, "unsigned long long": {8, false},
	"bool": {1, false}, "_Bool": {1, false},
	"s8": {1, true}, "u8": {1, false}, "s16": {2, true}, "u16": {2, false},
	"s32": {4, true}, "u32": {4, false}, "s64": {8, true}, "u64": {8, false},
	"__s8": {1, true}, "__u8": {1, false}, "__s16": {2, true}, "__u16": {2, false},
	"__s32": {4, true}, "__u32": {4, false}, "__s64": {8, true}, "__u64": {8, false},
	"pid_t": {4, true}, "uid_t": {4, false}, "gid_t": {4, false}, "umode_t": {2, false},
	"key_serial_t": {4, true}, "clockid_t": {4, true}, "qid_t": {4, false}, "rwf_t": {4, false},
	"size_t": {8, false}, "ssize_t": {8, true}, "loff_t": {8, true}, "off_t": {8, true},
	"aio_context_t": {8, false}, "key_t": {4, true}, "mqd_t": {4, true}, "timer_t": {4, true},
}

// Value is the size and signedness of an integer field's value as its C
// type declares them. A syscall tracepoint stores every argument in an
// 8-byte slot marked unsigned ("int dfd; size:8; signed:0"), yet an int
// argument is its low 4 bytes, signed, as the kernel itself reads it: dfd
// is -100 (AT_FDCWD), not 4294967196. Other fields keep the format's size
// and sign.
func (f Field) Value() (size int, signed bool) {
	if f.DataLoc || f.ArrayLen > 0 || f.IsPointer() {
		return f.Size, false
	}
	t, ok := cTypes[strings.TrimPrefix(f.Type, "const ")]
	if !ok || t.size > f.Size {
		return f.Size, f.Signed
	}
	return t.size, t.signed
}

// IsPointer reports whether the field's C type is a pointer.
func (f Field) IsPointer() bool { return strings.HasSuffix(f.Type, "*") }

// IsCharPointer reports whether the field is a char * (const or not): the
// address of a NUL-terminated string.
func (f Field) IsCharPointer() bool {
	t := strings.ReplaceAll(strings.TrimPrefix(f.Type, "const "), " ", "")
	return t == "char*" || t == "unsignedchar*"
}
