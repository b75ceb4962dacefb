// Package parse reads bpftrace's language (one-liners and .bt scripts)
// into a syntax tree: the probes with their attach points, predicates and
// actions, every statement and expression with its position in the
// source. It knows the grammar, not the meaning: whether a builtin, a
// function or a probe type is taken, and what it compiles to, is the
// compiler's word, which refuses with the position kept here.
//
// A script is first preprocessed as bpftrace's clang would for the
// scripts users write: #include lines are recorded (the types come from
// the kernel's BTF), #ifdef/#ifndef/#else/#endif choose lines by the
// names defined (BPFTRACE_HAVE_BTF where the kernel has BTF), and
// object-like #define macros are replaced in the code.
package parse

import "fmt"

// Pos is a place in the source: a byte offset and the line and column
// (both from 1, the column in bytes) it is at.
type Pos struct{ Offset, Line, Col int }

func (p Pos) String() string { return fmt.Sprintf("%d:%d", p.Line, p.Col) }

// Program is a whole script.
type Program struct {
	Includes []string // #include lines' headers, as written: <linux/sched.h>
	Probes   []*Probe
}

// Probe is one or more attach points sharing a predicate and an action.
type Probe struct {
	Pos    Pos
	Points []*AttachPoint
	Pred   Expr // nil: none
	Body   []Stmt
}

// AttachPoint is one probe's point: "tracepoint:syscalls:sys_enter_read".
// Provider is the probe type with bpftrace's aliases resolved (t is
// tracepoint, k kprobe, U usdt, ...); Parts are the fields after it, as
// written (wildcards kept, quotes removed).
type AttachPoint struct {
	Pos      Pos
	Raw      string
	Provider string
	Parts    []string
	// Listed: one of several attach points of its probe, which bpftrace
	// skips, with a warning, where it names nothing the system has.
	Listed bool
}

// Stmt is a statement of an action.
type Stmt interface{ StmtPos() Pos }

// ExprStmt is an expression run for its effect: a call, an increment.
type ExprStmt struct{ X Expr }

// Assign stores to a map element or a variable: Op is "=" or a compound
// operator ("+=", "<<=", ...).
type Assign struct {
	Pos    Pos
	Target Expr // *Map or *Var
	Op     string
	Value  Expr
}

// If is if (Cond) { Then } else { Else }; an else-if is an If alone in Else.
type If struct {
	Pos  Pos
	Cond Expr
	Then []Stmt
	Else []Stmt
}

// Unroll repeats Body N times: unroll(N) { ... }.
type Unroll struct {
	Pos  Pos
	N    Expr
	Body []Stmt
}

// While is while (Cond) { Body } (bpftrace 0.17 has it for 5.3+ kernels).
type While struct {
	Pos  Pos
	Cond Expr
	Body []Stmt
}

// Jump is return, break or continue.
type Jump struct {
	Pos  Pos
	Kind string
}

func (s *ExprStmt) StmtPos() Pos { return s.X.ExprPos() }
func (s *Assign) StmtPos() Pos   { return s.Pos }
func (s *If) StmtPos() Pos       { return s.Pos }
func (s *Unroll) StmtPos() Pos   { return s.Pos }
func (s *While) StmtPos() Pos    { return s.Pos }
func (s *Jump) StmtPos() Pos     { return s.Pos }

// Expr is an expression.
type Expr interface{ ExprPos() Pos }

// Int is an integer literal, Text as written.
type Int struct {
	Pos   Pos
	Value uint64
	Text  string
}

// Str is a string literal, escapes resolved.
type Str struct {
	Pos   Pos
	Value string
}

// Ident is a name that is neither a variable nor a map: a builtin (pid,
// comm, args, arg0), an enum constant, a probe's type name in a call.
type Ident struct {
	Pos  Pos
	Name string
}

// Var is a scratch variable, $name.
type Var struct {
	Pos  Pos
	Name string
}

// Param is a positional parameter: $1, $2, or $# (N is 0).
type Param struct {
	Pos Pos
	N   int
}

// Map is a map or one of its elements: @name, @name[k1, k2], @ (Name "").
type Map struct {
	Pos  Pos
	Name string
	Keys []Expr // nil: the map's one value
}

// Call is a function call: printf("%d\n", pid), count(), kstack(perf, 5).
type Call struct {
	Pos  Pos
	Name string
	Args []Expr
}

// Unary is -x, !x, ~x, *x (a dereference) or &x.
type Unary struct {
	Pos Pos
	Op  string
	X   Expr
}

// Binary is L Op R with C's operators.
type Binary struct {
	Pos  Pos
	Op   string
	L, R Expr
}

// Ternary is Cond ? Then : Else.
type Ternary struct {
	Pos              Pos
	Cond, Then, Else Expr
}

// IncDec is x++, x--, ++x or --x.
type IncDec struct {
	Pos  Pos
	Op   string // "++" or "--"
	Post bool
	X    Expr
}

// Cast is (Type)X.
type Cast struct {
	Pos  Pos
	Type Type
	X    Expr
}

// Field is X.Name or X->Name (Arrow); NamePos is where the . or -> is.
type Field struct {
	Pos     Pos
	X       Expr
	Name    string
	NamePos Pos
	Arrow   bool
}

// Index is X[I] on something that is not a map.
type Index struct {
	Pos  Pos
	X, I Expr
}

// Tuple is (a, b, ...), two elements or more.
type Tuple struct {
	Pos   Pos
	Elems []Expr
}

// Sizeof is sizeof(Type) or sizeof(X): one of the two is set.
type Sizeof struct {
	Pos  Pos
	Type *Type
	X    Expr
}

// Type is a type as a cast or sizeof names it: "struct sock", "uint32",
// "char", with Ptr levels of pointer.
type Type struct {
	Name string
	Ptr  int
}

func (t Type) String() string {
	s := t.Name
	if t.Ptr > 0 {
		s += " "
		for range t.Ptr {
			s += "*"
		}
	}
	return s
}

func (e *Int) ExprPos() Pos     { return e.Pos }
func (e *Str) ExprPos() Pos     { return e.Pos }
func (e *Ident) ExprPos() Pos   { return e.Pos }
func (e *Var) ExprPos() Pos     { return e.Pos }
func (e *Param) ExprPos() Pos   { return e.Pos }
func (e *Map) ExprPos() Pos     { return e.Pos }
func (e *Call) ExprPos() Pos    { return e.Pos }
func (e *Unary) ExprPos() Pos   { return e.Pos }
func (e *Binary) ExprPos() Pos  { return e.Pos }
func (e *Ternary) ExprPos() Pos { return e.Pos }
func (e *IncDec) ExprPos() Pos  { return e.Pos }
func (e *Cast) ExprPos() Pos    { return e.Pos }
func (e *Field) ExprPos() Pos   { return e.Pos }
func (e *Index) ExprPos() Pos   { return e.Pos }
func (e *Tuple) ExprPos() Pos   { return e.Pos }
func (e *Sizeof) ExprPos() Pos  { return e.Pos }

// Inspect calls f for n and, while f returns true, for each statement
// and expression under it, in source order. n is a Stmt, an Expr or a
// []Stmt.
func Inspect(n any, f func(any) bool) {
	switch n := n.(type) {
	case nil:
		return
	case []Stmt:
		for _, s := range n {
			Inspect(s, f)
		}
		return
	case []Expr:
		for _, e := range n {
			Inspect(e, f)
		}
		return
	}
	if !f(n) {
		return
	}
	switch n := n.(type) {
	case *ExprStmt:
		Inspect(n.X, f)
	case *Assign:
		Inspect(n.Target, f)
		Inspect(n.Value, f)
	case *If:
		Inspect(n.Cond, f)
		Inspect(n.Then, f)
		Inspect(n.Else, f)
	case *Unroll:
		Inspect(n.N, f)
		Inspect(n.Body, f)
	case *While:
		Inspect(n.Cond, f)
		Inspect(n.Body, f)
	case *Map:
		Inspect(n.Keys, f)
	case *Call:
		Inspect(n.Args, f)
	case *Unary:
		Inspect(n.X, f)
	case *Binary:
		Inspect(n.L, f)
		Inspect(n.R, f)
	case *Ternary:
		Inspect(n.Cond, f)
		Inspect(n.Then, f)
		Inspect(n.Else, f)
	case *IncDec:
		Inspect(n.X, f)
	case *Cast:
		Inspect(n.X, f)
	case *Field:
		Inspect(n.X, f)
	case *Index:
		Inspect(n.X, f)
		Inspect(n.I, f)
	case *Tuple:
		Inspect(n.Elems, f)
	case *Sizeof:
		if n.X != nil {
			Inspect(n.X, f)
		}
	}
}
