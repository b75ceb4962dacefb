module github.com/tracekit/tracekit

go 1.26.8

require (
	github.com/cilium/ebpf v0.22.0
	golang.org/x/sys v0.49.0
)

require github.com/jessevdk/go-flags v1.6.1
