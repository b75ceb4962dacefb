# tracekit: hand-assembled BPF tracing tools. `make help` lists the targets.
GO      ?= go
TOOLS   := writesize dropmon iolat filter profile
BIN     := bin
# The metrics server speaks HTTP/1.1 (Prometheus scrapes over it, and h2
# needs TLS, which --serve does not do): net/http's bundled HTTP/2 would be
# 0.35 MB of code nobody calls.
TAGS    := nethttpomithttp2
# The BPF program builders (*/prog, filter's compiler, asm, and
# cilium/ebpf's asm whose constructors they call) and tracefs (probe
# events, format files) run once, at a tool's start or end: compiled
# without inlining, each of the builders' thousands of instructions is a
# call to a constructor, not its body copied (93 KB less binary). The
# demangler runs once per symbol named in a report: without inlining it
# is 160 KB smaller and as fast (7.5 us a symbol of libstdc++ either way).
# The same holds for what runs at a tool's start or per report, never per
# event: the rest of cilium/ebpf (loading, BTF, links, map reads per
# interval), our BTF and ELF readers (kbtf, uprobe), flag parsing, and the
# metrics server's client_golang and protobuf (per scrape): 266 KB less
# (12.66 MB to 12.39 MB, measured when calls, structures and globs in
# filter had taken the binary past its 12 MiB budget). The tools' shared
# setup and teardown (run) and the /proc and kallsyms readers (procfs, at
# start and per report) gave 16 KB more when arithmetic in filter left
# 12 KB of the budget. filter's --count-by ustack (profile's unwinder at an
# event) took 20 KB past it: the setup-only readers and helpers (kernel,
# hook, ldso, proctree, the metrics collectors per scrape, and internal's
# error and file helpers, usage.Errorf inlined at hundreds of call sites)
# gave 24 KB. --fields ustack took 8 KB more: the loader (at a tool's
# start), counts (per report) and terminal (whose per-event Printable is
# a loop of no calls; the heatmap's cells per frame) gave them back, and
# usym() 4 KB more: tcell (the heatmap's screen, redrawn a few times a
# second) gave them; the tools' own packages (writesize, dropmon, iolat:
# their options, setup and reports) 4 KB more. riscv64 (its pt_regs and
# USDT operands) took 8 KB past it: filter's own package (its options,
# setup, reports, and the printing of events, where a call more per
# column sits beside fmt's formatting of it) gave 24 KB. 32-bit ARM (its
# pt_regs, USDT operands, Thumb check) took 4 KB past it: golang.org/x/sys
# (syscall wrappers, whose call is nothing beside the syscall) gave 8 KB.
# riscv64's in-kernel unwinder (its registers, steps and signal frame in
# the builder, its rules in the deferred unwinder) and the process trees'
# raw tracepoints took 4 KB past it: profile's own package (its options,
# setup, table loading by file, reports, and the deferred unwinder, which
# runs per sample a new process makes before its tables are read, never
# per sample the kernel unwinds; the parse stays in unwind) gave 16 KB.
# The drained counts, the gone processes' sweep and the kernel's naming of
# kernel frames (issue 32) took 12 KB past it again: the standard library's
# net/... (the --serve metrics server's net/http, and address formatting:
# per scrape or per printed line, never per traced event) gave 28 KB.
# The chunked row table, the two-pass parse and the symbol tables read in
# place took 12 KB past it again: the standard library's crypto/... (only
# net/http's TLS, which the metrics server, plain HTTP, never runs) gave
# 241 KB.
NOINLINE := github.com/tracekit/tracekit/.../prog github.com/tracekit/tracekit/filter/compile github.com/tracekit/tracekit/asm github.com/tracekit/tracekit/tracefs github.com/cilium/ebpf/asm github.com/ianlancetaylor/demangle \
	github.com/cilium/ebpf/... github.com/tracekit/tracekit/kbtf github.com/tracekit/tracekit/uprobe github.com/jessevdk/go-flags github.com/prometheus/... google.golang.org/protobuf/... \
	github.com/tracekit/tracekit/run github.com/tracekit/tracekit/procfs \
	github.com/tracekit/tracekit/internal/... github.com/tracekit/tracekit/kernel github.com/tracekit/tracekit/hook github.com/tracekit/tracekit/ldso \
	github.com/tracekit/tracekit/proctree github.com/tracekit/tracekit/metrics \
	github.com/tracekit/tracekit/terminal github.com/tracekit/tracekit/loader github.com/tracekit/tracekit/counts \
	github.com/gdamore/tcell/v2 github.com/tracekit/tracekit/writesize github.com/tracekit/tracekit/dropmon github.com/tracekit/tracekit/iolat \
	github.com/tracekit/tracekit/filter golang.org/x/sys/... github.com/tracekit/tracekit/profile net/... crypto/...
GOFLAGS := -trimpath -tags=$(TAGS) $(foreach p,$(NOINLINE),-gcflags='$(p)=-l')
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT  ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)
LDFLAGS := -s -w -X github.com/tracekit/tracekit/run.Version=$(VERSION) -X github.com/tracekit/tracekit/run.Commit=$(COMMIT)
export CGO_ENABLED := 0

.PHONY: all build dist run test test-vm bench vet help clean

all: build ## `make` alone builds every tool

build: ## build bin/tracekit, every tool in one static binary, and a link per tool (bin/writesize, ...)
	@mkdir -p $(BIN)
	$(GO) build $(GOFLAGS) -ldflags='$(LDFLAGS)' -o $(BIN)/tracekit ./cmd/tracekit
	@for t in $(TOOLS); do ln -sfn tracekit $(BIN)/$$t; done

dist: ## dist/tracekit-VERSION-linux-{amd64,arm64,riscv64,armv7}.tar.gz (binary, tool links, README) and dist/SHA256SUMS
	VERSION='$(VERSION)' LDFLAGS='$(LDFLAGS)' TAGS='$(TAGS)' NOINLINE='$(NOINLINE)' TOOLS='$(TOOLS)' bash scripts/dist.sh

run: build ## build, then run the showcase: the live IO latency heatmap (q quits)
	$(BIN)/iolat --heatmap

# The matrix's guests are prepared (kernels downloaded, each architecture's
# stage built, at nice 19) while the host's tests run, then booted.
test: vet ## every test: unit tests, the tests against this kernel (root), and the kernel matrix
	bash vmtest/run.sh install
	@mkdir -p .cache/vm
	nice -n 19 bash vmtest/run.sh prepare > .cache/vm/prepare.log 2>&1 & prep=$$!; \
	$(GO) test -count=1 -p 1 ./...; status=$$?; \
	wait $$prep || { echo "test-vm: preparing the guests failed:"; tail -20 .cache/vm/prepare.log; exit 1; }; \
	exit $$status
	bash vmtest/run.sh boot

test-vm: ## the kernel matrix: the privileged tests inside Debian's 6.1 and 6.12 kernels under qemu (root; installs qemu)
	bash vmtest/run.sh

vet: ## gofmt, go vet, and go.mod as go mod tidy leaves it
	@test -z "$$(gofmt -l .)" || { echo "gofmt would change:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod or go.sum is not tidy: run go mod tidy"; $(GO) mod tidy -diff; exit 1; }

bench: build ## added cost per event versus an empty program and bpftrace (root; installs bpftrace)
	bash bench/run.sh

clean: ## remove build outputs
	rm -rf $(BIN) dist

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'
