package dropmon

import (
	"testing"

	"github.com/tracekit/tracekit/run"
)

func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		o     options
		proto int
		ok    bool
	}{
		{options{Protocol: "ip"}, 0x0800, true},
		{options{Protocol: "IPv6"}, 0x86dd, true},
		{options{Protocol: "0x0806"}, 0x0806, true},
		{options{Protocol: "2048"}, 0x0800, true},
		{options{Protocol: "ipx"}, 0, false},
		{options{Protocol: "0x10000"}, 0, false},
		{options{Top: "0"}, -1, false},
		{options{Top: "-3"}, -1, false},
		{options{Top: "5"}, -1, true},
		{options{ServeTop: -1}, -1, false},
		{options{ServeOption: run.ServeOption{Serve: "localhost"}}, -1, false},
		{options{ServeOption: run.ServeOption{Serve: "localhost:9435"}}, -1, true},
	} {
		o := tc.o
		if o.ServeTop == 0 {
			o.ServeTop = 100 // the flag's default
		}
		err := validate(&o)
		if (err == nil) != tc.ok {
			t.Errorf("%+v: err %v", tc.o, err)
		}
		if tc.ok && tc.o.Protocol != "" && o.proto != tc.proto {
			t.Errorf("%+v: proto %#x, want %#x", tc.o, o.proto, tc.proto)
		}
	}
}
