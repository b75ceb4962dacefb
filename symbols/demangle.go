package symbols

import demangler "github.com/ianlancetaylor/demangle"

// Demangle turns a C++ (Itanium ABI) or Rust symbol into its source name,
// as perf prints it: with its parameters and template arguments, so that
// overloads (f(int), f(double)) and instantiations stay apart; short, as
// BCC prints it, without them (f, std::vector::push_back). Any other name
// is returned as it is.
func Demangle(name string, short bool) string {
	if short {
		return demangler.Filter(name, demangler.NoParams, demangler.NoTemplateParams)
	}
	return demangler.Filter(name)
}
