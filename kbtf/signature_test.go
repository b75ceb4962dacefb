package kbtf

import (
	"testing"

	"github.com/cilium/ebpf/btf"
)

func TestSignature(t *testing.T) {
	char := &btf.Int{Name: "char", Size: 1, Encoding: btf.Signed}
	uint := &btf.Int{Name: "unsigned int", Size: 4}
	skb := &btf.Struct{Name: "sk_buff"}
	proto := &btf.FuncProto{Return: &btf.Int{Name: "long", Size: 8, Encoding: btf.Signed}, Params: []btf.FuncParam{
		{Name: "fd", Type: uint},
		{Name: "buf", Type: &btf.Pointer{Target: &btf.Const{Type: char}}},
		{Name: "skb", Type: &btf.Pointer{Target: skb}},
	}}
	got := Signature(&btf.Func{Name: "f", Type: proto}, proto)
	if want := "long f(unsigned int fd, const char *buf, struct sk_buff *skb);"; got != want {
		t.Errorf("Signature = %q, want %q", got, want)
	}
}
