# xdproce — see README.md. `make demo` runs the main job, `make test` runs the tests.
GO        ?= go
FUZZTIME  ?= 30s
BENCHTIME ?= 1x
PKGS      ?= ./...
export CGO_ENABLED ?= 0

.PHONY: all build deps test vet unit race interop-test bench-smoke fuzz bench generate generate-check demo interop clean

all: build

build:
	$(GO) build -o bin/xdproce ./cmd/xdproce

# The Debian packages the test stages need: installed when run as root, otherwise named with
# the stages that will skip without them (scripts/deps.sh).
deps:
	@./scripts/deps.sh

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet $(PKGS)
	$(GO) build $(PKGS)
	$(GO) tool staticcheck $(PKGS)
	./scripts/filesize.sh
	GOOS=darwin $(GO) vet $(PKGS)
	GOOS=freebsd $(GO) vet $(PKGS)
	GOOS=darwin $(GO) build $(PKGS)
	GOOS=freebsd $(GO) build $(PKGS)

# unit + privileged tests (privileged ones skip when not root unless XDPROCE_REQUIRE_PRIV=1),
# the interop suite on its own (its QEMU guest needs a core: running it beside the other
# packages starves their timers), every benchmark once as a smoke run, then every fuzz
# target for $(FUZZTIME).
test: deps vet generate-check unit race interop-test bench-smoke fuzz
	@echo "make test: all stages passed"

UNIT_PKGS = $$($(GO) list $(PKGS) | grep -v '/interop$$')

unit:
	$(GO) test -count=1 -timeout 20m $(UNIT_PKGS)

# Every package's unprivileged tests under the race detector (it needs cgo: this run alone
# uses CGO_ENABLED=1; the product stays cgo-free).
race:
	./scripts/race.sh

interop-test:
	$(GO) test -count=1 -timeout 25m ./interop

bench-smoke:
	$(GO) test -count=1 -run '^$$' -bench . -benchtime 1x -timeout 15m $(UNIT_PKGS)

fuzz:
	FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

generate:
	BPF2GO_CC=clang-19 $(GO) generate ./...

# CI: regenerated BPF objects must match the committed ones.
# Skipped (with a note) where clang-19 is missing, unless XDPROCE_REQUIRE_PRIV=1 (CI).
generate-check:
	@if command -v clang-19 >/dev/null 2>&1; then \
	  BPF2GO_CC=clang-19 $(GO) generate ./bpf/... && \
	  { git diff --exit-code --stat -- bpf/ || { echo "generated files are not up to date: run make generate"; exit 1; }; }; \
	elif [ "$$XDPROCE_REQUIRE_PRIV" = 1 ]; then echo "generate-check: clang-19 missing (apt-get install clang-19)"; exit 1; \
	else echo "generate-check: skipped, clang-19 not installed (apt-get install clang-19)"; fi

# The interop suite against Linux rxe in a QEMU guest, with its matrix (root; the first run
# builds the guest image, ~4 min, into /var/cache/xdproce-interop). See interop/README.md.
interop:
	GO=$(GO) ./interop/run.sh

demo: build
	./bin/xdproce demo

clean:
	rm -rf bin
