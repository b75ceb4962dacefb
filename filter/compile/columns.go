package compile

// ColumnsNeedBTF reports whether an action's operands cast a field to a struct.
func ColumnsNeedBTF(act Action) bool {
	for _, o := range append(act.Columns, act.Hist) {
		if o.anyLeaf(func(o Operand) bool { return o.Cast != "" || o.Dump }) {
			return true
		}
	}
	return false
}

// NeedsBTF reports whether an expression casts a field to a struct.
func NeedsBTF(n Node) bool {
	cast := func(o Operand) bool { return o.Cast != "" }
	return anyCmp(n, func(c *Cmp) bool { return c.Left.anyLeaf(cast) || c.Right.anyLeaf(cast) })
}
