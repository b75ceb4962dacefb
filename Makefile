# tracekit: hand-assembled BPF tracing tools. `make help` lists the targets.
GO      ?= go
TOOLS   := writesize dropmon iolat filter profile bpftrace
BIN     := bin
# One build, in scripts/build.sh: make build, make dist, the tests, the
# kernel matrix's guests and make bench all run the binary it makes.
export CGO_ENABLED := 0

.PHONY: all build dist man run test test-host test-vm bench vet help clean

all: build ## `make` alone builds every tool

build: ## build bin/tracekit, every tool in one static binary, and a link per tool (bin/writesize, ...)
	@mkdir -p $(BIN)
	bash scripts/build.sh $(BIN)/tracekit
	@for t in $(TOOLS); do ln -sfn tracekit $(BIN)/$$t; done

dist: ## dist/tracekit-VERSION-linux-{amd64,arm64,riscv64,armv7}.tar.gz (binary, tool links, man pages, README) and dist/SHA256SUMS
	TOOLS='$(TOOLS)' bash scripts/dist.sh

man: ## write man/TOOL.8 from each tool's --help texts (make test fails while one is stale)
	$(GO) test -count=1 -run TestManPages ./cmd/tracekit -update

run: build ## build, then run the showcase: the live IO latency heatmap (q quits)
	$(BIN)/iolat --heatmap

# The matrix's guests are prepared (kernels downloaded, each architecture's
# stage built, at nice 19) while the host's tests run, then booted. The
# host's run lists the tests that touch the kernel (privtest's gates
# record them): the x86-64 guests run only those, the host having just run
# the rest on the same architecture; the other architectures run them all.
test: vet ## every test: unit tests, the tests against this kernel (root), and the kernel matrix
	bash vmtest/run.sh install
	@mkdir -p .cache/vm && rm -f .cache/vm/kernel-tests
	nice -n 19 bash vmtest/run.sh prepare > .cache/vm/prepare.log 2>&1 & prep=$$!; \
	TRACEKIT_KERNEL_TESTS=$(CURDIR)/.cache/vm/kernel-tests $(GO) test -count=1 -p 1 ./...; status=$$?; \
	wait $$prep || { echo "test-vm: preparing the guests failed:"; tail -20 .cache/vm/prepare.log; exit 1; }; \
	exit $$status
	TRACEKIT_KERNEL_TESTS=$(CURDIR)/.cache/vm/kernel-tests bash vmtest/run.sh boot

test-host: vet ## the quick one (minutes): unit tests and the tests against this kernel (root), no kernel matrix
	$(GO) test -count=1 -p 1 ./...

test-vm: ## the kernel matrix: the privileged tests inside Debian's 5.10, 6.1, 6.12 and 7.x kernels, arm64, riscv64 and armv7 under qemu (root; installs qemu)
	bash vmtest/run.sh

# vet runs for every architecture the guests run: a test that builds on
# amd64 but not on 32-bit armv7 (an int64 constant in an int32 field)
# fails here, in a minute, not after the host's tests.
vet: ## gofmt, go vet (amd64, arm64, riscv64, armv7), and go.mod as go mod tidy leaves it
	@test -z "$$(gofmt -l .)" || { echo "gofmt would change:"; gofmt -l .; exit 1; }
	$(GO) vet ./...
	@for arch in arm64 riscv64 arm; do GOARCH=$$arch $(GO) vet ./... || { echo "go vet failed for GOARCH=$$arch"; exit 1; }; done
	@$(GO) mod tidy -diff >/dev/null || { echo "go.mod or go.sum is not tidy: run go mod tidy"; $(GO) mod tidy -diff; exit 1; }

bench: build ## added cost per event versus an empty program and bpftrace (root; installs bpftrace)
	bash bench/run.sh

clean: ## remove build outputs
	rm -rf $(BIN) dist

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'
