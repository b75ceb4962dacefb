package profile

import demangler "github.com/ianlancetaylor/demangle"

// demangle turns a C++ (Itanium ABI) or Rust symbol into its source name,
// without parameter lists, as BCC and perf print them; any other name is
// returned as it is.
func demangle(name string) string {
	return demangler.Filter(name, demangler.NoParams, demangler.NoTemplateParams)
}
