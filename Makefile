# noderollout: the two commands a newcomer needs are `make demo` and `make test`.
SHELL := /bin/bash
GO ?= go
# Build with the Go that go.mod's toolchain line names, fetched through the module proxy when
# the machine's own is older: a Go installation defaults to GOTOOLCHAIN=local, which ignores it.
export GOTOOLCHAIN := auto

.PHONY: all build vet unit up down status demo test e2e soak bench bench-quick clean

all: build

# The build stamps its version and commit (starter version, worker --version).
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS := -X github.com/noderollout/noderollout/internal/version.Version=$(VERSION) -X github.com/noderollout/noderollout/internal/version.Commit=$(COMMIT)

# The root module holds what the worker and starter need; the benchmark, the deploy checks
# and the end-to-end suite are modules of their own, so their dependencies (plotting, compose,
# kustomize) stay out of adopters' dependency graphs.
TOOL_MODULES := bench deploy test

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/ ./worker ./starter

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	$(GO) vet ./...
	for m in $(TOOL_MODULES); do (cd $$m && $(GO) vet -tags e2e ./...) || exit 1; done
	# Workflow code must be deterministic: no I/O, clocks, randomness, map order or goroutines.
	$(GO) run go.temporal.io/sdk/contrib/tools/workflowcheck@v0.6.0 ./workflows/...
	dev/lint.sh

# unit: no services needed.
unit: vet
	$(GO) test ./...
	for m in bench deploy; do (cd $$m && $(GO) test ./...) || exit 1; done

# up/down: the local stack (Temporal dev server, etcd, kube-apiserver, kube-controller-manager, kwok).
up:
	dev/up.sh
down:
	dev/down.sh
status:
	dev/status.sh

# demo: stack + 50 fake nodes + worker + a rollout of a sample Job, followed live.
demo:
	dev/demo.sh

# test: unit tests, then the end-to-end suite on the local stack (started and stopped here
# unless it was already up).
test: unit e2e

# e2e: every end-to-end test but the minutes-long soak tests (TestSoak*).
e2e:
	dev/e2e.sh -skip 'TestSoak'

# soak: the workflow model test over 5,000 more seeds (make test runs 1,000), and the
# fault tests of a minute or more (TestSoak*: worker writes refused for 2 min, a 40 s Pod
# termination grace on a shared node, the stack's recovery from a 45 s kube-apiserver stop,
# kube-apiserver down 20 s during a rollout, Temporal down for 30 s while short Jobs end or
# for minutes while long Jobs end or a node joins, a worker killed while long Jobs run or
# cut off from Temporal), and the short fault tests once more (CI runs those twice in all,
# with make test), so that make test stays near 30 minutes.
soak:
	NODEROLLOUT_MODEL_FROM=1001 NODEROLLOUT_MODEL_SEEDS=5000 $(GO) test -count=1 -timeout 30m -run TestModel ./workflows/
	dev/e2e.sh -run 'TestSoak|TestFault'

bench:
	dev/bench.sh full
bench-quick:
	dev/bench.sh quick

clean:
	rm -rf bin
