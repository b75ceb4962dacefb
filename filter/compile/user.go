package compile

import (
	"fmt"

	"github.com/cilium/ebpf/btf"

	"github.com/tracekit/tracekit/asm"
)

// UprobeArgs are a uprobe's arguments, arg0 onwards, in the calling
// convention's registers: unsigned longs (a register's width), as no BTF
// describes user space.
func UprobeArgs(regs *asm.Regs) []Arg {
	var args []Arg
	for i, off := range regs.Args {
		args = append(args, Arg{Name: fmt.Sprintf("arg%d", i), Type: &btf.Int{Name: "unsigned long", Size: uint32(regs.Width)}, RegOff: off})
	}
	return args
}

// UretprobeArgs is a uretprobe's one operand, ret: the return value's
// register, a signed long.
func UretprobeArgs(regs *asm.Regs) []Arg {
	return []Arg{{Name: "ret", Type: &btf.Int{Name: "long", Size: uint32(regs.Width), Encoding: btf.Signed}, RegOff: regs.Ret}}
}
