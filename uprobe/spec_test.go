package uprobe

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"strings"
	"testing"
)

func TestParseArg(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"-4@%r13d", "s32 reg r13"},
		{"1@%dl", "u8 reg rdx"},
		{"8@%rbx", "u64 reg rbx"},
		{"-1@%sil", "s8 reg rsi"},
		{"2@%r9w", "u16 reg r9"},
		{"-4@$42", "s32 const 42"},
		{"-4@$-9", "s32 const -9"},
		{"8@$0x10", "u64 const 16"},
		{"-4@112(%rsp)", "s32 mem rsp+112"},
		{"8@16(%rbp)", "u64 mem rbp+16"},
		{"-8@(%rax)", "s64 mem rax+0"},
		{"-4@-20(%rbp)", "s32 mem rbp-20"},
		{"-8@0(%rbp,%rdx,8)", "s64 index rbp+rdx*8+0"},
		{"4@(%rax,%rcx)", "u32 index rax+rcx*1+0"},
		{"-8@gcount(%rip)", "s64 global gcount+0"},
		{"4@tbl+8(%rip)", "u32 global tbl+8"},
		{"%rdi", "u64 reg rdi"},
		{"-8@tk_table(,%rax,8)", "s64 index tk_table+0+rax*8"},
		{"-8@(%r14,%rax,8)", "s64 index r14+rax*8+0"},
	} {
		a, err := ParseArg(tc.spec)
		if err != nil {
			t.Errorf("%s: %v", tc.spec, err)
			continue
		}
		if got := describe(a); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.spec, got, tc.want)
		}
	}
	for _, bad := range []string{"3@%rax", "x@%rax", "-4@%xyz", "4@%ah", "4@$abc", "4@12", "4@12(%rax", "4@1(%rax,%rbx,3)", "4@(%rip,%rax)", "4@8(%rip)", "8@%rip", "4@(%a,%b,1,2)", "4@(%rax,%rbx,1,2)", "4@()", "4@x+y(%rax)"} {
		if a, err := ParseArg(bad); err == nil {
			t.Errorf("%s: accepted as %s", bad, describe(a))
		}
	}
}

func TestParseArgARM64(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"-4@x0", "s32 reg x0"},
		{"8@x30", "u64 reg x30"},
		{"-4@w19", "s32 reg x19"},
		{"8@sp", "u64 reg sp"},
		{"-4@5", "s32 const 5"},
		{"-4@-9", "s32 const -9"},
		{"8@#16", "u64 const 16"},
		{"8@[sp, 16]", "u64 mem sp+16"},
		{"-4@[x29, -20]", "s32 mem x29-20"},
		{"-8@[x1]", "s64 mem x1+0"},
		{"4@[sp,8]", "u32 mem sp+8"},
	} {
		a, err := ParseArgARM64(tc.spec)
		if err != nil {
			t.Errorf("%s: %v", tc.spec, err)
			continue
		}
		if got := describe(a); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.spec, got, tc.want)
		}
	}
	for _, bad := range []string{"3@x0", "x0", "4@x31", "4@x01", "4@r0", "4@[x0", "4@[x0, x1]", "4@[]", "4@%rax", "4@[sp, 16", "4@$5"} {
		if a, err := ParseArgARM64(bad); err == nil {
			t.Errorf("%s: accepted as %s", bad, describe(a))
		}
	}
	// A note's string: memory operands hold a space.
	args, err := ParseArgs("-4@x0 8@[sp, 16]  -8@[x1]", elf.EM_AARCH64)
	if err != nil || len(args) != 3 || args[1].Text != "8@[sp, 16]" || args[2].Text != "-8@[x1]" {
		t.Errorf("%+v, %v", args, err)
	}
	if _, err := ParseArgs("8@%rax", elf.EM_PPC64); err == nil || !strings.Contains(err.Error(), "PPC64") {
		t.Errorf("ppc64: %v", err)
	}
}

// riscv64's forms, as gcc 12 writes them (filter/testdata/usdt's
// fixtures built by riscv64-linux-gnu-gcc).
func TestParseArgRISCV64(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"-4@a0", "s32 reg a0"},
		{"8@s5", "u64 reg s5"},
		{"1@a3", "u8 reg a3"},
		{"-8@fp", "s64 reg s0"},
		{"4@x10", "u32 reg a0"},
		{"-4@5", "s32 const 5"},
		{"-4@-9", "s32 const -9"},
		{"-4@-20(s0)", "s32 mem s0-20"},
		{"-8@0(a5)", "s64 mem a5+0"},
		{"-8@32(s2)", "s64 mem s2+32"},
		{"8@(sp)", "u64 mem sp+0"},
		{"-8@%lo(tk_global)(s10)", "s64 mem +0 lo12(tk_global+0)"},
		{"-4@%lo(tbl+8)(a4)", "s32 mem +8 lo12(tbl+8)"},
	} {
		a, err := ParseArgRISCV64(tc.spec)
		if err != nil {
			t.Errorf("%s: %v", tc.spec, err)
			continue
		}
		got := describe(a)
		if a.Lo12 {
			got += fmt.Sprintf(" lo12(%s%+d)", a.Sym, a.Off)
		}
		if got != tc.want {
			t.Errorf("%s: %s, want %s", tc.spec, got, tc.want)
		}
	}
	for _, bad := range []string{"3@a0", "a0", "4@x0", "4@zero", "4@x32", "4@a8", "4@8(a0", "4@8(q1)", "4@%lo(x)", "4@%lo()(a0)", "4@%lo(x)8(a0)", "4@%rax", "4@[sp, 8]", "4@$5"} {
		if a, err := ParseArgRISCV64(bad); err == nil {
			t.Errorf("%s: accepted as %s", bad, describe(a))
		}
	}
	args, err := ParseArgs("-4@a5 -8@s1 8@s5 1@a4 -2@a3", elf.EM_RISCV)
	if err != nil || len(args) != 5 || args[4].Reg != "a3" || args[4].Size != 2 || !args[4].Signed {
		t.Errorf("%+v, %v", args, err)
	}
}

// 32-bit ARM's forms, as gcc 12 writes them (filter/testdata/usdt's
// fixtures built by arm-linux-gnueabihf-gcc).
func TestParseArgARM(t *testing.T) {
	for _, tc := range []struct{ spec, want string }{
		{"-4@r3", "s32 reg r3"},
		{"4@fp", "u32 reg r11"},
		{"1@ip", "u8 reg r12"},
		{"-2@lr", "s16 reg r14"},
		{"4@sp", "u32 reg r13"},
		{"-8@r9", "s64 reg r9:r10"},
		{"8@r0", "u64 reg r0:r1"},
		{"-4@#5", "s32 const 5"},
		{"-4@#-9", "s32 const -9"},
		{"-4@[r7, #120]", "s32 mem r7+120"},
		{"-8@[r7, #112]", "s64 mem r7+112"},
		{"1@[r7, #-3]", "u8 mem r7-3"},
		{"-4@[r3]", "s32 mem r3+0"},
		{"-4@[r4, r1, lsl #2]", "s32 index r4+r1*4+0"},
		{"-4@[r8, r3]", "s32 index r8+r3*1+0"},
	} {
		a, err := ParseArgARM(tc.spec)
		if err != nil {
			t.Errorf("%s: %v", tc.spec, err)
			continue
		}
		if got := describe(a); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.spec, got, tc.want)
		}
	}
	for _, bad := range []string{"3@r0", "r0", "4@r16", "4@r01", "4@x0", "4@a0", "4@5", "8@pc", "8@lr", "4@[r7, #8", "4@[q1]", "4@[r4, r1, lsl #5]", "4@[r4, r1, asr #2]", "4@[r4, r1, lsl #2, r2]", "4@[r4, 8]", "4@#x", "4@%r1"} {
		if a, err := ParseArgARM(bad); err == nil {
			t.Errorf("%s: accepted as %s", bad, describe(a))
		}
	}
	args, err := ParseArgs("-4@r1 -8@r9 4@r6 1@ip -2@lr", elf.EM_ARM)
	if err != nil || len(args) != 5 || args[1].RegHi != "r10" || args[4].Reg != "r14" || args[4].Size != 2 || !args[4].Signed {
		t.Errorf("%+v, %v", args, err)
	}
}

func describe(a Arg) string {
	switch a.Kind {
	case ArgReg:
		if a.RegHi != "" {
			return fmt.Sprintf("%s reg %s:%s", a.Type(), a.Reg, a.RegHi)
		}
		return fmt.Sprintf("%s reg %s", a.Type(), a.Reg)
	case ArgConst:
		return fmt.Sprintf("%s const %d", a.Type(), a.Off)
	case ArgMem:
		return fmt.Sprintf("%s mem %s%+d", a.Type(), a.Reg, a.Off)
	case ArgIndex:
		if a.Sym != "" {
			return fmt.Sprintf("%s index %s%+d+%s*%d", a.Type(), a.Sym, a.Off, a.Index, a.Scale)
		}
		return fmt.Sprintf("%s index %s+%s*%d%+d", a.Type(), a.Reg, a.Index, a.Scale, a.Off)
	}
	return fmt.Sprintf("%s global %s%+d", a.Type(), a.Sym, a.Off)
}

// The notes of Debian's python3.11 (3.11.2-6), copied with objcopy: eight
// probes, all guarded by semaphores.
func TestPythonNotes(t *testing.T) {
	data, err := os.ReadFile("testdata/python3.11.note.stapsdt")
	if err != nil {
		t.Fatal(err)
	}
	notes, err := parseNotes(data, binary.LittleEndian, 8)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range notes {
		got = append(got, fmt.Sprintf("%s:%s loc=0x%x sem=0x%x args=%q", n.provider, n.name, n.loc, n.sem, n.args))
	}
	want := []string{
		`python:audit loc=0x423ee0 sem=0xa7ed56 args="8@%rbx 8@%r15"`,
		`python:gc__start loc=0x426fc1 sem=0xa7ed4e args="-4@112(%rsp)"`,
	}
	all := strings.Join(got, "\n")
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("missing %s in:\n%s", w, all)
		}
	}
	if len(notes) != 8 {
		t.Errorf("%d notes, want 8:\n%s", len(notes), all)
	}
}

func FuzzParseArgs(f *testing.F) {
	for _, s := range []string{"-4@%r13d 8@$42", "-8@0(%rbp,%rdx,8)", "-8@gcount+4(%rip)", "4@(%", "@", "8@$-", "-4@112(%rsp)", "-4@x0 8@[sp, 16] -4@[x1]", "4@5 8@[x29, -8]", "8@[sp,", "4@[]", "-8@%lo(g)(s10) -4@-20(s0) 8@a5", "-4@[r4, r1, lsl #2] -8@r9 -4@#5 1@ip"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		x86, err := ParseArgs(s, elf.EM_X86_64)
		if err != nil {
			x86 = nil
		}
		arm, err := ParseArgs(s, elf.EM_AARCH64)
		if err != nil {
			arm = nil
		}
		rv, err := ParseArgs(s, elf.EM_RISCV)
		if err != nil {
			rv = nil
		}
		arm32, err := ParseArgs(s, elf.EM_ARM)
		if err != nil {
			arm32 = nil
		}
		for _, a := range append(append(append(x86, arm...), rv...), arm32...) {
			if a.Size != 1 && a.Size != 2 && a.Size != 4 && a.Size != 8 {
				t.Fatalf("%q: size %d", s, a.Size)
			}
			// An index operand may have no base: "0(,%rax)".
			if (a.Kind == ArgReg || a.Kind == ArgMem && a.Sym == "") && a.Reg == "" || a.Kind == ArgIndex && a.Index == "" {
				t.Fatalf("%q: no register", s)
			}
			if a.RegHi != "" && (a.Kind != ArgReg || a.Size != 8) {
				t.Fatalf("%q: a register pair for %s", s, describe(a))
			}
		}
	})
}

func FuzzParseNotes(f *testing.F) {
	for _, name := range []string{"python3.11", "fx-pie-O2"} {
		if data, err := os.ReadFile("testdata/" + name + ".note.stapsdt"); err == nil {
			f.Add(data)
			f.Add(data[:len(data)/2])
		}
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		notes, err := parseNotes(data, binary.LittleEndian, 8)
		if err == nil {
			for _, n := range notes {
				if n.provider == "" || n.name == "" {
					t.Fatalf("a note without a name: %+v", n)
				}
			}
		}
		parseNotes(data, binary.BigEndian, 4)
	})
}

// The notes of the test fixture built as a PIE at -O2 (gcc 12,
// filter/testdata/usdt), copied with objcopy: seven probes, one of them at
// ten call sites with a constant each, one behind a semaphore, and the
// memory forms gcc writes at -O2.
func TestFixtureNotes(t *testing.T) {
	data, err := os.ReadFile("testdata/fx-pie-O2.note.stapsdt")
	if err != nil {
		t.Fatal(err)
	}
	notes, err := parseNotes(data, binary.LittleEndian, 8)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	args := map[string]string{}
	var sems int
	for _, n := range notes {
		key := n.provider + ":" + n.name
		count[key]++
		args[key] = n.args
		if n.sem != 0 {
			sems++
		}
		if _, err := ParseArgs(n.args, elf.EM_X86_64); err != nil {
			t.Errorf("%s: %v", key, err)
		}
	}
	want := map[string]int{"tk:plain": 1, "tk:args": 1, "tk:constant": 1, "tk:global": 1, "tk:indexed": 1, "tk:guarded": 1, "tk:sites": 10}
	for k, n := range want {
		if count[k] != n {
			t.Errorf("%s: %d sites, want %d", k, count[k], n)
		}
	}
	if len(count) != len(want) || sems != 1 {
		t.Errorf("probes %v, %d with a semaphore", count, sems)
	}
	for k, a := range map[string]string{"tk:global": "-8@tk_global(%rip)", "tk:indexed": "-8@0(%r13,%rdx,8) -4@%r15d", "tk:constant": "-4@$42", "tk:plain": ""} {
		if args[k] != a {
			t.Errorf("%s: args %q, want %q", k, args[k], a)
		}
	}
}
