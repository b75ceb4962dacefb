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
	return anyCmp(n, func(c *Cmp) bool { return c.Left.Cast != "" || c.Right.Cast != "" })
}
