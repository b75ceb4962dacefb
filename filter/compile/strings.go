package compile

import (
	"fmt"
	"math"
	"sort"
	"strings"

	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
)

// fetchStr emits code that makes the first n bytes of a string readable,
// and returns where: the record (RegCtx) or the stack (RFP), at off.
func (c *compiler) fetchStr(v value, n int) (bpf.Register, int16, error) {
	switch {
	case v.ptr != nil:
		if err := c.fetchInt(*v.ptr, bpf.R1); err != nil {
			return 0, 0, err
		}
		c.readStr(v, strOff, n)
	case v.src == srcCtx:
		return asm.RegCtx, int16(v.ctxOff), nil
	case v.src == srcStash:
		return regStash, int16(v.ctxOff), nil
	case v.src == srcDataLoc:
		c.dataLocAddr(v)
		c.read(n, strOff)
	case v.src == srcWalk:
		c.read(n, strOff)
	case v.builtin == "comm":
		c.emit(
			bpf.Mov.Reg(bpf.R1, bpf.RFP).WithSource(bpf.Comment("comm = bpf_get_current_comm()")),
			bpf.Add.Imm(bpf.R1, strOff),
			bpf.Mov.Imm(bpf.R2, 16),
			bpf.FnGetCurrentComm.Call(),
		)
	default:
		return 0, 0, fmt.Errorf("%s is not a string", v.name)
	}
	return bpf.RFP, strOff, nil
}

// dataLocAddr puts the address of a __data_loc string in R1: the record
// holds a u32 whose low 16 bits are the string's offset in the record.
func (c *compiler) dataLocAddr(v value) {
	c.emit(
		bpf.LoadMem(bpf.R1, asm.RegCtx, int16(v.ctxOff), bpf.Word).WithSource(bpf.Comment(fmt.Sprintf("%s: __data_loc, offset in the low 16 bits", v.name))),
		bpf.And.Imm(bpf.R1, 0xffff),
		bpf.Add.Reg(bpf.R1, asm.RegCtx),
	)
}

// readStr reads at most n-1 bytes and a NUL of the string at the address in
// R1 to the stack at dst. The _str helpers, not a plain read of n bytes:
// strncpy_from_user copies a word at a time, and measured here (make bench,
// openat suite) a 25-byte filename took 111 ns of BPF time that way against
// 147 ns through copy_from_user_nofault. A string that cannot be read (a
// fault, a page not yet touched) reads as empty: the helpers clear the
// buffer.
func (c *compiler) readStr(v value, dst int16, n int) {
	kernel, user := c.t.Read.KernelStr, c.t.Read.UserStr
	helper := kernel
	if v.space != spaceKernel {
		helper = user
	}
	either := v.space == spaceEither && c.t.Read.Split()
	from := bpf.R1
	if either {
		from = bpf.R8 // kept for the second read
		c.emit(bpf.Mov.Reg(bpf.R8, bpf.R1))
	}
	call := func(h bpf.BuiltinFunc, note string) {
		c.emit(
			bpf.Mov.Reg(bpf.R3, from).WithSource(bpf.Comment(note)),
			bpf.Mov.Reg(bpf.R1, bpf.RFP),
			bpf.Add.Imm(bpf.R1, int32(dst)),
			bpf.Mov.Imm(bpf.R2, int32(n)),
			h.Call(),
		)
	}
	call(helper, fmt.Sprintf("read up to %d bytes of the string at %s with %v", n, v.name, helper))
	if either {
		done := c.label("read")
		c.emit(bpf.JSGE.Imm(bpf.R0, 0, done))
		call(kernel, "not a user address: a kernel one")
		c.mark(done)
	}
}

// stringCmp compares a string with a literal: ==, != and the prefix match
// ~ "PREFIX*".
func (c *compiler) stringCmp(v value, lit Operand, op string, opPos int, target string, when bool) error {
	s := lit.Str
	prefix := false
	switch op {
	case "==", "!=":
	case "~":
		if s == "" || strings.IndexByte(s, '*') != len(s)-1 {
			return c.errAt(lit.Pos, "~ takes a prefix ending in a single '*', as in \"/etc/*\" (use == for an exact match)")
		}
		s, prefix = s[:len(s)-1], true
	default:
		return c.errAt(opPos, "strings compare only with ==, != and ~ (prefix)")
	}
	if len(s) > maxString {
		return c.errAt(lit.Pos, "string literals are limited to %d bytes", maxString)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return c.errAt(lit.Pos, "string literal contains a NUL byte")
	}
	n := len(s) + 1 // with the terminator
	if prefix {
		n = len(s)
	}
	if v.strLen > 0 && n > v.strLen {
		if len(s) > v.strLen {
			// Longer than the field: never equal.
			if op != "!=" {
				return c.errAt(lit.Pos, "%q is longer than %s (%d bytes): it never matches", s, v.name, v.strLen)
			}
			if when { // != always holds
				c.emit(bpf.Ja.Label(target))
			}
			return nil
		}
		n = v.strLen // exactly as long: no terminator to check
	}
	if n == 0 { // ~ "*": every string
		if when {
			c.emit(bpf.Ja.Label(target))
		}
		return nil
	}
	readLen := n
	if v.ptr != nil {
		// A string read ends in a NUL where it stops: one byte more, so
		// that a longer string shows its next character there, not a NUL
		// that would make "/etc/passwd" equal "/etc/pa".
		readLen = n + 1
	}
	base, off, err := c.fetchStr(v, readLen)
	if err != nil {
		return err
	}
	jumpIfEqual := (op == "!=") != when
	c.equalBranch(base, off, []byte(s), n, target, jumpIfEqual)
	return nil
}

// equalBranch compares n bytes at base+off with want (NUL-padded to n) in
// the widest aligned loads, and jumps to target when they are equal
// (ifEqual) or when they differ.
func (c *compiler) equalBranch(base bpf.Register, off int16, want []byte, n int, target string, ifEqual bool) {
	differ := target
	if ifEqual {
		differ = c.label("differ")
	}
	for i := 0; i < n; {
		size := 8
		for size > 1 && ((int(off)+i)%size != 0 || i+size > n) {
			size /= 2
		}
		var val uint64
		for k := size - 1; k >= 0; k-- { // little-endian
			val <<= 8
			if i+k < len(want) {
				val |= uint64(want[i+k])
			}
		}
		chunk := make([]byte, size)
		copy(chunk, want[min(i, len(want)):])
		c.emit(bpf.LoadMem(bpf.R1, base, off+int16(i), sizeOf(size)).WithSource(bpf.Comment(fmt.Sprintf("bytes %d..%d: %q?", i, i+size-1, chunk))))
		if val <= math.MaxInt32 {
			c.emit(bpf.JNE.Imm(bpf.R1, int32(val), differ))
		} else {
			c.emit(bpf.LoadImm(bpf.R2, int64(val), bpf.DWord), bpf.JNE.Reg(bpf.R1, bpf.R2, differ))
		}
		i += size
	}
	if ifEqual {
		c.emit(bpf.Ja.Label(target))
		c.mark(differ)
	}
}

// symbolic maps a name of a field's __print_symbolic table to its value,
// so that reason == "NO_SOCKET" works on every kernel.
func symbolic(v value, name string) (uint64, bool) {
	for val, n := range v.symbols {
		if n == name {
			return val, true
		}
	}
	return 0, false
}

func symbolicHint(v value) string {
	if len(v.symbols) == 0 {
		return ""
	}
	var names []string
	for _, n := range v.symbols {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) > 6 {
		names = append(names[:6], "...")
	}
	return fmt.Sprintf(", or one of its names: %s", strings.Join(names, ", "))
}
