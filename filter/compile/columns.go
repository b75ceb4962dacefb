package compile

import "fmt"

// DefaultColumns are every field (or argument) that has a value.
func DefaultColumns(t Target) []Operand {
	var cols []Operand
	if t.Format != nil {
		for _, f := range t.Format.Fields {
			if f.DataLoc && t.UserSpace {
				continue // a syscall's copy of user memory: not in a program's context (syscallCopyErr)
			}
			if _, err := fieldVal(f, t.Format, t.UserSpace); err == nil && !f.Common {
				cols = append(cols, Operand{Base: f.Name, Text: f.Name})
			}
		}
		return cols
	}
	for i := range t.USDT {
		name := fmt.Sprintf("arg%d", i)
		cols = append(cols, Operand{Base: name, Text: name})
	}
	for _, a := range t.Args {
		if _, err := scalar(value{name: a.Name, src: srcArg}, a.Type); err == nil && (!t.Slots || slotReadable(a) == nil) {
			cols = append(cols, Operand{Base: a.Name, Text: a.Name})
		}
	}
	return cols
}

// ColumnsNeedBTF reports whether an action's operands cast a field to a struct.
func ColumnsNeedBTF(act Action) bool {
	for _, o := range append(act.Columns, act.Hist) {
		if o.Cast != "" {
			return true
		}
	}
	return false
}

// NeedsBTF reports whether an expression casts a field to a struct.
func NeedsBTF(n Node) bool {
	switch n := n.(type) {
	case *Or:
		return NeedsBTF(n.L) || NeedsBTF(n.R)
	case *And:
		return NeedsBTF(n.L) || NeedsBTF(n.R)
	case *Not:
		return NeedsBTF(n.X)
	case *Cmp:
		return n.Left.Cast != "" || n.Right.Cast != ""
	}
	return false
}
