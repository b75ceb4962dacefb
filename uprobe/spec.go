package uprobe

import (
	"debug/elf"
	"fmt"
	"strconv"
	"strings"
)

// ArgKind is where a USDT argument is at its call site.
type ArgKind int

const (
	ArgReg    ArgKind = iota // in a register: N@%reg
	ArgConst                 // a constant: N@$imm
	ArgMem                   // in memory at reg+off: N@off(%reg), N@(%reg)
	ArgIndex                 // at base+index*scale+off: N@off(%base,%index,scale)
	ArgGlobal                // a rip-relative global: N@sym+off(%rip)
)

// Arg is one USDT argument spec, as sys/sdt.h writes it for the assembler:
// a size (negative: signed) and an operand in AT&T syntax.
type Arg struct {
	Text   string
	Size   int  // 1, 2, 4 or 8 bytes
	Signed bool // sign-extend the Size bytes
	Kind   ArgKind
	Reg    string // the 64-bit register: "rax", "r13"; the base of ArgIndex ("" for none)
	Index  string // ArgIndex
	Scale  int    // ArgIndex: 1, 2, 4 or 8
	Off    int64  // ArgMem, ArgIndex, ArgGlobal: added to the address; ArgConst: the value
	// Sym is a symbol whose address is added: rip-relative for ArgGlobal
	// (where the file is loaded), absolute for ArgMem and ArgIndex (a
	// non-PIE's "tbl(,%rax,8)").
	Sym string
	// SymAddr is Sym's link-time address, filled in from the file.
	SymAddr uint64
	// Lo12: riscv64's "%lo(sym)(reg)", a non-PIE's global, whose register
	// would hold %hi(sym). gcc 12 writes it with a register it never set
	// (filter/testdata/usdt's tk:global: s10, untouched in main), so the
	// address is taken as sym+off itself (an ArgMem without Reg): a
	// non-PIE's link-time address is where it is.
	Lo12 bool
	// RegHi is 32-bit ARM's "-8@r9": an 8-byte ArgReg held in a pair of
	// registers, Reg its low half and RegHi (the next register) its high.
	RegHi string
}

// regs64 maps every x86-64 register name an operand may use to its 64-bit
// register (the pt_regs slot): rax, eax, ax, al; r8, r8d, r8w, r8b; ...
var regs64 = func() map[string]string {
	m := map[string]string{}
	for _, r := range []struct{ q, d, w, b string }{
		{"rax", "eax", "ax", "al"}, {"rbx", "ebx", "bx", "bl"}, {"rcx", "ecx", "cx", "cl"}, {"rdx", "edx", "dx", "dl"},
		{"rsi", "esi", "si", "sil"}, {"rdi", "edi", "di", "dil"}, {"rbp", "ebp", "bp", "bpl"}, {"rsp", "esp", "sp", "spl"},
	} {
		m[r.q], m[r.d], m[r.w], m[r.b] = r.q, r.q, r.q, r.q
	}
	for _, hi := range []string{"ah", "bh", "ch", "dh"} {
		m[hi] = "" // the second byte: no slot of its own, refused below
	}
	for i := 8; i <= 15; i++ {
		q := fmt.Sprintf("r%d", i)
		m[q], m[q+"d"], m[q+"w"], m[q+"b"] = q, q, q, q
	}
	m["rip"] = "rip"
	return m
}()

// ParseArgs parses a note's argument string, specs separated by spaces,
// in the syntax of the file's machine: AT&T on x86-64 ("-4@%r13d"), the
// arm64 assembler's on arm64 ("-4@[sp, 16]").
func ParseArgs(s string, machine elf.Machine) ([]Arg, error) {
	parse := ParseArg
	switch machine {
	case elf.EM_X86_64:
	case elf.EM_AARCH64:
		parse = ParseArgARM64
	case elf.EM_RISCV:
		parse = ParseArgRISCV64
	case elf.EM_ARM:
		parse = ParseArgARM
	default:
		return nil, fmt.Errorf("USDT arguments of %v files: this build reads x86-64's, arm64's, riscv64's and 32-bit ARM's", machine)
	}
	var args []Arg
	for _, f := range splitSpecs(s) {
		a, err := parse(f)
		if err != nil {
			return nil, err
		}
		args = append(args, a)
	}
	if len(args) > 12 {
		return nil, fmt.Errorf("%d arguments: sys/sdt.h writes at most 12", len(args))
	}
	return args, nil
}

// splitSpecs splits at spaces outside brackets: arm64's memory operands
// hold one ("8@[sp, 16]").
func splitSpecs(s string) []string {
	var specs []string
	depth, start := 0, -1
	for i := 0; i <= len(s); i++ {
		if i == len(s) || (depth == 0 && (s[i] == ' ' || s[i] == '\t')) {
			if start >= 0 {
				specs = append(specs, s[start:i])
				start = -1
			}
			continue
		}
		switch s[i] {
		case '[':
			depth++
		case ']':
			if depth > 0 {
				depth--
			}
		}
		if start < 0 {
			start = i
		}
	}
	return specs
}

// ParseArgARM64 parses one arm64 spec (the forms libbpf's usdt.c reads):
// a register "-4@x0" ("w0" is x0's low half, "sp" the stack pointer), a
// constant "-4@5", or memory at a register plus an offset: "8@[sp, 16]",
// "-4@[x1]".
func ParseArgARM64(s string) (Arg, error) {
	a, op, err := sizedSpec(s)
	if err != nil {
		return Arg{}, err
	}
	bad := func(why string) (Arg, error) { return Arg{}, fmt.Errorf("argument spec %q: %s", s, why) }
	if inner, mem, closed := bracketed(op); mem {
		if !closed {
			return bad("a memory operand without its ']'")
		}
		base, off, hasOff := strings.Cut(inner, ",")
		if a.Reg, err = regARM64(strings.TrimSpace(base)); err != nil {
			return bad("an unknown base register")
		}
		if hasOff {
			if a.Off, err = parseInt(strings.TrimPrefix(strings.TrimSpace(off), "#")); err != nil {
				return bad("an offset that is not a number (an index register is not supported)")
			}
		}
		a.Kind = ArgMem
		return a, nil
	}
	if v, err := parseInt(strings.TrimPrefix(op, "#")); err == nil {
		a.Kind, a.Off = ArgConst, v
		return a, nil
	}
	if a.Reg, err = regARM64(op); err != nil {
		return bad("not a register, a constant or a memory operand")
	}
	a.Kind = ArgReg
	return a, nil
}

// regARM64 is the pt_regs slot of an arm64 operand: x0-x30, their 32-bit
// halves w0-w30, and sp (wsp).
func regARM64(s string) (string, error) {
	switch s {
	case "sp", "wsp":
		return "sp", nil
	}
	if len(s) >= 2 && (s[0] == 'x' || s[0] == 'w') {
		n, err := strconv.Atoi(s[1:])
		if err == nil && n >= 0 && n <= 30 && strconv.Itoa(n) == s[1:] {
			return "x" + s[1:], nil
		}
	}
	return "", fmt.Errorf("unknown register %s", s)
}

// ParseArgARM parses one 32-bit ARM spec (gcc's operands, read from the
// fixtures' notes): a register "-4@r3" (or fp, ip, sp, lr, pc; "-8@r9" is
// a 64-bit value in the pair r9:r10), a constant "-4@#5", memory at a
// register plus an offset, "-4@[r7, #120]", "-4@[r3]", or at a base plus
// a shifted index, "-4@[r4, r1, lsl #2]".
func ParseArgARM(s string) (Arg, error) {
	a, op, err := sizedSpec(s)
	if err != nil {
		return Arg{}, err
	}
	bad := func(why string) (Arg, error) { return Arg{}, fmt.Errorf("argument spec %q: %s", s, why) }
	if inner, mem, closed := bracketed(op); mem {
		if !closed {
			return bad("a memory operand without its ']'")
		}
		parts := strings.Split(inner, ",")
		for i := range parts {
			parts[i] = strings.TrimSpace(parts[i])
		}
		if a.Reg, err = regARM(parts[0]); err != nil {
			return bad("an unknown base register")
		}
		a.Kind = ArgMem
		switch {
		case len(parts) == 1:
		case len(parts) == 2 && strings.HasPrefix(parts[1], "#"):
			if a.Off, err = parseInt(parts[1][1:]); err != nil {
				return bad("an offset that is not a number")
			}
		case len(parts) <= 3:
			if a.Index, err = regARM(parts[1]); err != nil {
				return bad("an offset that is neither #number nor an index register")
			}
			a.Kind, a.Scale = ArgIndex, 1
			if len(parts) == 3 {
				shift, ok := map[string]int{"lsl #0": 1, "lsl #1": 2, "lsl #2": 4, "lsl #3": 8}[parts[2]]
				if !ok {
					return bad("an index shifted other than by lsl #0-#3")
				}
				a.Scale = shift
			}
		default:
			return bad("a memory operand of more than base, index and shift")
		}
		return a, nil
	}
	if v, ok := strings.CutPrefix(op, "#"); ok {
		if a.Off, err = parseInt(v); err != nil {
			return bad("a constant that is not a number")
		}
		a.Kind = ArgConst
		return a, nil
	}
	if a.Reg, err = regARM(op); err != nil {
		return bad("not a register, a constant or a memory operand")
	}
	a.Kind = ArgReg
	if a.Size == 8 {
		n, _ := strconv.Atoi(a.Reg[1:])
		if n >= 14 {
			return bad("an 8-byte value in a pair of registers that ends past r15")
		}
		a.RegHi = "r" + strconv.Itoa(n+1)
	}
	return a, nil
}

// bracketed takes apart an ARM memory operand, "[sp, 16]": its inside, and
// whether op is one and has its ']'.
func bracketed(op string) (inner string, mem, closed bool) {
	inner, mem = strings.CutPrefix(op, "[")
	if !mem {
		return "", false, false
	}
	inner, closed = strings.CutSuffix(inner, "]")
	return inner, true, closed
}

// regARM is the pt_regs slot of a 32-bit ARM operand by its number:
// r0-r15, and fp, ip, sp, lr, pc (r11-r15) as gcc names them.
func regARM(s string) (string, error) {
	if n, ok := map[string]int{"fp": 11, "ip": 12, "sp": 13, "lr": 14, "pc": 15}[s]; ok {
		return "r" + strconv.Itoa(n), nil
	}
	if n, err := strconv.Atoi(strings.TrimPrefix(s, "r")); err == nil && n >= 0 && n <= 15 && "r"+strconv.Itoa(n) == s {
		return s, nil
	}
	return "", fmt.Errorf("unknown register %s", s)
}

// ParseArgRISCV64 parses one riscv64 spec (gcc's operands in the
// assembler's syntax): a register "-4@a0" (ABI names: a0-a7, s0-s11,
// t0-t6, ra, sp, gp, tp, fp; or x0-x31), a constant "-4@5", memory at a
// register plus an offset "-8@-40(s0)", "8@(a5)", and a non-PIE's global
// as gcc reaches it, "-8@%lo(sym)(s10)" (read at sym itself: see Lo12).
func ParseArgRISCV64(s string) (Arg, error) {
	a, op, err := sizedSpec(s)
	if err != nil {
		return Arg{}, err
	}
	bad := func(why string) (Arg, error) { return Arg{}, fmt.Errorf("argument spec %q: %s", s, why) }
	if v, err := parseInt(op); err == nil {
		a.Kind, a.Off = ArgConst, v
		return a, nil
	}
	if inner, ok := strings.CutPrefix(op, "%lo("); ok {
		sym, rest, ok := strings.Cut(inner, ")")
		if !ok || sym == "" || !strings.HasPrefix(rest, "(") {
			return bad("a %lo operand must be %lo(sym)(reg)")
		}
		if a.Sym, a.Off, err = symOff(sym); err != nil || a.Sym == "" {
			return bad("a %lo operand must name a symbol")
		}
		a.Lo12, op = true, rest
	}
	if open := strings.IndexByte(op, '('); open >= 0 {
		if !strings.HasSuffix(op, ")") {
			return bad("a memory operand without its ')'")
		}
		if disp := op[:open]; disp != "" {
			if a.Lo12 {
				return bad("a %lo operand with a second displacement")
			}
			if a.Off, err = parseInt(disp); err != nil {
				return bad("an offset that is not a number")
			}
		}
		if a.Reg, err = regRISCV64(op[open+1 : len(op)-1]); err != nil {
			return bad("an unknown base register")
		}
		if a.Lo12 {
			a.Reg = "" // see Lo12
		}
		a.Kind = ArgMem
		return a, nil
	}
	if a.Lo12 {
		return bad("a %lo operand without its register")
	}
	if a.Reg, err = regRISCV64(op); err != nil {
		return bad("not a register, a constant or a memory operand")
	}
	a.Kind = ArgReg
	return a, nil
}

// riscvABI are riscv's registers x1-x31 by their ABI names, in order.
var riscvABI = []string{"ra", "sp", "gp", "tp", "t0", "t1", "t2", "s0", "s1",
	"a0", "a1", "a2", "a3", "a4", "a5", "a6", "a7",
	"s2", "s3", "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "t3", "t4", "t5", "t6"}

// regRISCV64 is the pt_regs slot of a riscv64 operand, by its ABI name
// (fp is s0, x1-x31 their ABI names). zero (x0) has no slot.
func regRISCV64(s string) (string, error) {
	if s == "fp" {
		return "s0", nil
	}
	for _, r := range riscvABI {
		if s == r {
			return r, nil
		}
	}
	if n, err := strconv.Atoi(strings.TrimPrefix(s, "x")); err == nil && strings.HasPrefix(s, "x") && n >= 1 && n <= 31 && strconv.Itoa(n) == s[1:] {
		return riscvABI[n-1], nil
	}
	return "", fmt.Errorf("unknown register %s", s)
}

// sizedSpec splits an arm64 or riscv64 spec at its '@': the Arg with its
// size read, and the operand.
func sizedSpec(s string) (Arg, string, error) {
	a := Arg{Text: s}
	size, op, ok := strings.Cut(s, "@")
	if !ok {
		return Arg{}, "", fmt.Errorf("argument spec %q: no '@' between the size and the operand", s)
	}
	var err error
	if a.Size, a.Signed, err = parseSize(size); err != nil {
		return Arg{}, "", fmt.Errorf("argument spec %q: %v", s, err)
	}
	return a, op, nil
}

// parseSize reads a spec's size: 1, 2, 4 or 8 bytes, negative if signed.
func parseSize(s string) (size int, signed bool, err error) {
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, false, fmt.Errorf("the size is not a number")
	}
	if n < 0 {
		signed, n = true, -n
	}
	if n != 1 && n != 2 && n != 4 && n != 8 {
		return 0, false, fmt.Errorf("the size is not 1, 2, 4 or 8 bytes")
	}
	return n, signed, nil
}

// ParseArg parses one x86-64 spec: "-4@%r13d", "8@$42", "-8@16(%rbp)",
// "-8@0(%rbp,%rdx,8)", "-4@gcount(%rip)".
func ParseArg(s string) (Arg, error) {
	a := Arg{Text: s}
	bad := func(why string) (Arg, error) { return Arg{}, fmt.Errorf("argument spec %q: %s", s, why) }
	size, op, ok := strings.Cut(s, "@")
	if !ok {
		// sys/sdt.h before 2010 wrote the operand alone: 8 bytes, unsigned.
		size, op = "8", s
	}
	var err error
	if a.Size, a.Signed, err = parseSize(size); err != nil {
		return bad(err.Error())
	}
	switch {
	case strings.HasPrefix(op, "$"):
		v, err := parseInt(op[1:])
		if err != nil {
			return bad("a constant that is not a number")
		}
		a.Kind, a.Off = ArgConst, v
		return a, nil
	case strings.HasPrefix(op, "%"):
		r, err := reg(op)
		if err != nil || r == "rip" {
			return bad("an unknown register")
		}
		a.Kind, a.Reg = ArgReg, r
		return a, nil
	}
	open := strings.IndexByte(op, '(')
	if open < 0 || !strings.HasSuffix(op, ")") {
		return bad("not a register, a constant or a memory operand")
	}
	disp, inner := op[:open], op[open+1:len(op)-1]
	parts := strings.Split(inner, ",")
	if len(parts) > 3 {
		return bad("a memory operand of more than three parts")
	}
	if disp != "" {
		if a.Off, err = parseInt(disp); err != nil {
			// A symbol: "gcount(%rip)", or an absolute "tbl(,%rax,8)".
			if a.Sym, a.Off, err = symOff(disp); err != nil || a.Sym == "" {
				return bad("a displacement that is neither a number nor a symbol")
			}
		}
	}
	if parts[0] != "" {
		if a.Reg, err = reg(parts[0]); err != nil {
			return bad("an unknown base register")
		}
	}
	if a.Reg == "rip" {
		if len(parts) != 1 || a.Sym == "" {
			return bad("a rip-relative operand must be sym(%rip)")
		}
		a.Kind, a.Reg = ArgGlobal, ""
		return a, nil
	}
	if len(parts) == 1 {
		if a.Reg == "" {
			return bad("a memory operand without a register")
		}
		a.Kind = ArgMem
		return a, nil
	}
	if a.Index, err = reg(parts[1]); err != nil || a.Index == "rip" {
		return bad("an unknown index register")
	}
	a.Kind, a.Scale = ArgIndex, 1
	if len(parts) == 3 {
		if a.Scale, err = strconv.Atoi(parts[2]); err != nil || (a.Scale != 1 && a.Scale != 2 && a.Scale != 4 && a.Scale != 8) {
			return bad("a scale that is not 1, 2, 4 or 8")
		}
	}
	return a, nil
}

// reg is the 64-bit register of an operand "%eax".
func reg(s string) (string, error) {
	name, ok := strings.CutPrefix(s, "%")
	if !ok {
		return "", fmt.Errorf("not a register")
	}
	r, ok := regs64[name]
	if !ok || r == "" {
		return "", fmt.Errorf("unknown register %s", s)
	}
	return r, nil
}

// symOff splits "gcount", "gcount+8", "tbl-4" (or a bare number).
func symOff(s string) (string, int64, error) {
	i := strings.IndexAny(s, "+-")
	if i <= 0 {
		if _, err := parseInt(s); err == nil {
			return "", 0, nil
		}
		return s, 0, nil
	}
	off, err := parseInt(s[i:])
	return s[:i], off, err
}

func parseInt(s string) (int64, error) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(strings.TrimPrefix(s, "-"), "+")
	u, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		return 0, err
	}
	if neg {
		return -int64(u), nil
	}
	return int64(u), nil
}

// Type is the argument's C-like type as --info prints it: s32, u64, ...
func (a Arg) Type() string {
	if a.Signed {
		return fmt.Sprintf("s%d", a.Size*8)
	}
	return fmt.Sprintf("u%d", a.Size*8)
}
