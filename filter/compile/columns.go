package compile

// ColumnsNeedBTF reports whether an action's operands cast a field to a struct.
func ColumnsNeedBTF(act Action) bool {
	for _, o := range append(act.Columns, act.Hist) {
		if o.Cast != "" || o.Dump {
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
