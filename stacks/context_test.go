package stacks

import (
	"encoding/binary"
	"reflect"
	"testing"

	"github.com/tracekit/tracekit/stacks/prog"
)

// pbBytes is a length-delimited protobuf field.
func pbBytes(field int, data []byte) []byte {
	b := binary.AppendUvarint(nil, uint64(field<<3|2))
	b = binary.AppendUvarint(b, uint64(len(data)))
	return append(b, data...)
}

func pbKV(key string, any []byte) []byte {
	return append(pbBytes(1, []byte(key)), pbBytes(2, any)...)
}

func pbArray(s ...string) []byte {
	var a []byte
	for _, v := range s {
		a = append(a, pbBytes(1, pbBytes(1, []byte(v)))...)
	}
	return pbBytes(5, a)
}

// The key names are found among the attributes or the resource's, other
// fields (varints, fixed) skipped; another schema's are not taken;
// malformed bytes are an error, never a panic.
func TestOTelKeyNames(t *testing.T) {
	schema := pbBytes(2, pbKV(otelSchema, pbBytes(1, []byte("tlsdesc_v1_dev"))))
	keys := pbKV(otelKeyMap, pbArray("http.method", "http.route"))
	varint := []byte{3 << 3, 0x96, 0x01}
	for _, c := range []struct {
		name string
		b    []byte
		want []string
		err  bool
	}{
		{"attributes", append(append(append([]byte{}, varint...), schema...), pbBytes(2, keys)...), []string{"http.method", "http.route"}, false},
		{"resource", pbBytes(1, pbBytes(1, keys)), []string{"http.method", "http.route"}, false},
		{"no schema", pbBytes(2, keys), []string{"http.method", "http.route"}, false},
		{"other schema", append(pbBytes(2, pbKV(otelSchema, pbBytes(1, []byte("nodejs_v1_dev")))), pbBytes(2, keys)...), nil, false},
		{"no key map", schema, nil, false},
		{"cut", pbBytes(2, keys)[:10], nil, true},
		{"huge length", []byte{2<<3 | 2, 0xff, 0xff, 0xff, 0xff, 0x0f}, nil, true},
	} {
		got, err := otelKeyNames(c.b)
		if !reflect.DeepEqual(got, c.want) || (err != nil) != c.err {
			t.Errorf("%s: %q, %v; want %q, error %v", c.name, got, err, c.want, c.err)
		}
	}
}

func FuzzOTelKeyNames(f *testing.F) {
	f.Add(pbBytes(2, pbKV(otelKeyMap, pbArray("a", "b"))))
	f.Add([]byte{0x0a, 0x80})
	f.Fuzz(func(t *testing.T, b []byte) {
		keys, _ := otelKeyNames(b)
		if len(keys) > 256 {
			t.Fatalf("%d key names: a key index is a byte", len(keys))
		}
	})
}

// A context decodes to the record's ids and attributes (an attribute cut
// at the bytes kept left out, an index no key names as attr.N), then the
// custom labels read, the first of a key.
func TestContextLabels(t *testing.T) {
	c := make([]byte, prog.ContextSize)
	c[0] = 3
	rec := c[prog.ContextOTel:]
	for i := range 16 {
		rec[i] = 0xab
	}
	attrs := []byte{0, 3, 'G', 'E', 'T', 9, 1, 'x', 1, 50}
	copy(rec[prog.OTelHeader:], attrs)
	binary.LittleEndian.PutUint16(rec[26:], uint16(len(attrs)))
	entry := func(e int, key, val string, read bool) {
		b := c[prog.ContextCustom+e*prog.CustomEntry:]
		binary.LittleEndian.PutUint16(b, uint16(len(key)))
		binary.LittleEndian.PutUint16(b[2:], uint16(len(val)))
		if read {
			b[4] = 1
		}
		copy(b[8:], key)
		copy(b[8+prog.CustomKeyLen:], val)
	}
	entry(0, "tenant", "acme", true)
	entry(1, "user", "u1", false)
	entry(2, "tenant", "dup", true)
	entry(3, "", "empty key", true)
	got := labelsName(contextLabels(c, []string{"http.method"}))
	want := `trace_id="abababababababababababababababab" http.method="GET" attr.9="x" tenant="acme" ="empty key" `
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if l := contextLabels(c[:10], nil); l != nil {
		t.Errorf("a short context: %v", l)
	}
}
