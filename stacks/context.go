package stacks

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/tracekit/tracekit/stacks/prog"
)

// The context processes publish for profilers, read by default (not with
// --no-context): the OpenTelemetry thread context (OTEP 4947) and Polar
// Signals' custom labels. The program reads them at each sample into a
// contexts table (prog/context.go); here they are found in each process
// and decoded into labels.

// The symbols of the published context.
const (
	otelSymbol       = "otel_thread_ctx_v1"              // TLS: a pointer to the thread's record
	customVersionSym = "custom_labels_abi_version"       // u32: 0 or 1
	customV0Symbol   = "custom_labels_thread_local_data" // TLS: the label set, in place (ABI v0)
	customV1Symbol   = "custom_labels_current_set"       // TLS: a pointer to the label set (ABI v1)
)

// The process context (OTEP 4719): a mapping named OTEL_CTX starts with
// {char signature[8] "OTEL_CTX"; u32 version (2); u32 payload size; u64
// published at (ns, 0 while being updated); u64 payload's address}; the
// payload is a protobuf ProcessContext whose attribute
// threadlocal.attribute_key_map (an array of strings) names the records'
// key indexes.
const (
	otelCtxHeader  = 32
	otelCtxVersion = 2
	otelCtxMaxSize = 64 << 10 // the largest payload read
	otelKeyMap     = "threadlocal.attribute_key_map"
	otelSchema     = "threadlocal.schema_version"
)

// readOTelKeys reads the attribute key names a process publishes, or nil
// when it publishes none (yet).
func readOTelKeys(pid uint32) ([]string, error) {
	maps, err := readMaps(pid)
	if err != nil {
		return nil, err
	}
	mem := &procMem{pid: pid}
	defer mem.Close()
	for _, m := range maps {
		name := strings.TrimSuffix(m.Path, " (deleted)")
		if name != "[anon:OTEL_CTX]" && name != "/memfd:OTEL_CTX" {
			continue
		}
		var h [otelCtxHeader]byte
		if err := mem.read(m.Start, h[:]); err != nil {
			return nil, err
		}
		if string(h[:8]) != "OTEL_CTX" {
			continue
		}
		version, size := binary.LittleEndian.Uint32(h[8:]), binary.LittleEndian.Uint32(h[12:])
		published, at := binary.LittleEndian.Uint64(h[16:]), binary.LittleEndian.Uint64(h[24:])
		switch {
		case version != otelCtxVersion:
			return nil, fmt.Errorf("an OpenTelemetry process context of version %d (this reads %d)", version, otelCtxVersion)
		case published == 0:
			return nil, nil // being published: read at the next scan
		case size > otelCtxMaxSize:
			return nil, fmt.Errorf("an OpenTelemetry process context of %d bytes (at most %d read)", size, otelCtxMaxSize)
		}
		payload := make([]byte, size)
		if err := mem.read(at, payload); err != nil {
			return nil, err
		}
		return otelKeyNames(payload)
	}
	return nil, nil
}

// otelKeyNames finds the key names in a ProcessContext's wire bytes: the
// attribute threadlocal.attribute_key_map among its attributes (field 2)
// or its resource's (field 1, its field 1). A schema other than the
// thread-local one (tlsdesc_v1...) names records this does not read:
// nil.
func otelKeyNames(b []byte) ([]string, error) {
	var keys []string
	schemaOK := true
	found := false
	visit := func(kv []byte) error {
		var key string
		var value []byte
		err := pbFields(kv, func(field int, data []byte) error {
			switch field {
			case 1:
				key = string(data)
			case 2:
				value = data
			}
			return nil
		})
		if err != nil {
			return err
		}
		switch key {
		case otelSchema:
			s, _ := pbString(value)
			schemaOK = strings.HasPrefix(s, "tlsdesc_v1")
		case otelKeyMap:
			found = true
			return pbFields(value, func(field int, array []byte) error {
				if field != 5 { // AnyValue.array_value
					return nil
				}
				return pbFields(array, func(field int, v []byte) error {
					if field == 1 && len(keys) < 256 { // the key index is a byte
						s, _ := pbString(v)
						keys = append(keys, s)
					}
					return nil
				})
			})
		}
		return nil
	}
	err := pbFields(b, func(field int, data []byte) error {
		switch field {
		case 1: // the resource: its attributes
			return pbFields(data, func(field int, kv []byte) error {
				if field == 1 {
					return visit(kv)
				}
				return nil
			})
		case 2:
			return visit(data)
		}
		return nil
	})
	if err != nil || !found || !schemaOK {
		return nil, err
	}
	return keys, nil
}

// pbString is an AnyValue's string (field 1).
func pbString(any []byte) (s string, ok bool) {
	pbFields(any, func(field int, data []byte) error {
		if field == 1 {
			s, ok = string(data), true
		}
		return nil
	})
	return s, ok
}

// pbFields calls f with each length-delimited field of protobuf wire
// bytes (others are skipped), stopping at the first error.
func pbFields(b []byte, f func(field int, data []byte) error) error {
	for len(b) > 0 {
		tag, n := binary.Uvarint(b)
		if n <= 0 {
			return fmt.Errorf("malformed process context")
		}
		b = b[n:]
		field := int(tag >> 3)
		switch tag & 7 {
		case 0: // varint
			_, n := binary.Uvarint(b)
			if n <= 0 {
				return fmt.Errorf("malformed process context")
			}
			b = b[n:]
		case 1: // 64-bit
			if len(b) < 8 {
				return fmt.Errorf("malformed process context")
			}
			b = b[8:]
		case 5: // 32-bit
			if len(b) < 4 {
				return fmt.Errorf("malformed process context")
			}
			b = b[4:]
		case 2:
			size, n := binary.Uvarint(b)
			if n <= 0 || size > uint64(len(b)-n) {
				return fmt.Errorf("malformed process context")
			}
			if err := f(field, b[n:n+int(size)]); err != nil {
				return err
			}
			b = b[n+int(size):]
		default:
			return fmt.Errorf("malformed process context")
		}
	}
	return nil
}

// contextLabels are the labels of a context as the program read it:
// trace_id and span_id (in hex, when not all zero) and the attributes of
// the OpenTelemetry record, under their key names (keys; attr.N for an
// index it does not name); then the custom labels, the first of each key.
func contextLabels(c []byte, keys []string) []LabelValue {
	if len(c) < prog.ContextSize {
		return nil
	}
	var out []LabelValue
	if c[0]&1 != 0 {
		rec := c[prog.ContextOTel:prog.ContextCustom]
		if id := rec[:16]; !allZero(id) {
			out = append(out, LabelValue{Name: "trace_id", Value: hex.EncodeToString(id)})
		}
		if id := rec[16:24]; !allZero(id) {
			out = append(out, LabelValue{Name: "span_id", Value: hex.EncodeToString(id)})
		}
		attrs := rec[prog.OTelHeader:]
		attrs = attrs[:min(len(attrs), int(binary.LittleEndian.Uint16(rec[26:])))]
		for len(attrs) >= 2 && int(attrs[1])+2 <= len(attrs) { // a cut attribute is left out
			name := "attr." + strconv.Itoa(int(attrs[0]))
			if int(attrs[0]) < len(keys) && keys[attrs[0]] != "" {
				name = keys[attrs[0]]
			}
			out = append(out, LabelValue{Name: name, Value: string(attrs[2 : 2+attrs[1]])})
			attrs = attrs[2+attrs[1]:]
		}
	}
	if c[0]&2 != 0 {
		seen := map[string]bool{}
		for e := 0; e < prog.CustomEntries; e++ {
			b := c[prog.ContextCustom+e*prog.CustomEntry:][:prog.CustomEntry]
			if b[4] == 0 {
				continue // no key, or unreadable
			}
			klen, vlen := int(binary.LittleEndian.Uint16(b)), int(binary.LittleEndian.Uint16(b[2:]))
			key := string(b[8 : 8+min(klen, prog.CustomKeyLen)])
			if seen[key] {
				continue
			}
			seen[key] = true
			out = append(out, LabelValue{Name: key, Value: string(b[8+prog.CustomKeyLen : 8+prog.CustomKeyLen+min(vlen, prog.CustomValLen)])})
		}
	}
	return out
}

func allZero(b []byte) bool { return len(bytes.Trim(b, "\x00")) == 0 }

// otelKeyNames is the key names process pid publishes: read when its
// record was found, and again while it has published none and lives.
func (ps *processes) otelKeyNames(pid uint32) []string {
	p := ps.procs[pid]
	if p == nil {
		return nil
	}
	if p.otelKeys == nil && !p.gone && time.Since(p.otelKeysTried) > time.Second {
		p.otelKeysTried = time.Now()
		p.otelKeys, _ = readOTelKeys(pid)
	}
	return p.otelKeys
}
