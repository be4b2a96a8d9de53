# xdproce — see README.md. `make demo` runs the main job, `make test` runs the tests.
GO        ?= go
FUZZTIME  ?= 30s
BENCHTIME ?= 1x
PKGS      ?= ./...
export CGO_ENABLED ?= 0

.PHONY: all build test vet unit fuzz bench generate generate-check demo interop clean

all: build

build:
	$(GO) build -o bin/xdproce ./cmd/xdproce

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet $(PKGS)
	$(GO) build $(PKGS)

# unit + privileged tests (privileged ones skip when not root unless XDPROCE_REQUIRE_PRIV=1),
# then every fuzz target for $(FUZZTIME), then the benchmarks once each as a smoke run.
test: vet unit fuzz
	@echo "make test: all stages passed"

unit:
	$(GO) test -count=1 -timeout 20m $(PKGS)

fuzz:
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

generate:
	BPF2GO_CC=clang-19 $(GO) generate ./...

# CI: regenerated BPF objects must match the committed ones.
generate-check: generate
	@git diff --exit-code -- bpf/ || { echo "generated files are not up to date: run make generate"; exit 1; }

demo: build
	./bin/xdproce demo

clean:
	rm -rf bin
