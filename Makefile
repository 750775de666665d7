# Substrat. Run `make help` to list the targets.

SHELL    := /bin/bash
GO       ?= go
TOOLS    := $(CURDIR)/.tools
BIN      := $(CURDIR)/bin
export PATH := $(TOOLS)/bin:$(PATH)

STATICCHECK_VERSION := v0.8.2
PKGS := ./...

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z][a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

.PHONY: build
build: ## build bin/substrat
	$(GO) build -o $(BIN)/substrat ./cmd/substrat

.PHONY: tools
tools: ## install the test tools (staticcheck) into .tools/ if missing
	@scripts/install-tools.sh

.PHONY: lint
lint: tools ## gofmt, go vet, staticcheck, and the package dependency rule
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(TOOLS)/bin/staticcheck $(PKGS)
	@scripts/check-deps.sh

.PHONY: test
test: lint ## everything CI runs: lint, then go test -race
	$(GO) test -race -count=1 $(PKGS)

.PHONY: race
race: ## go test -race only
	$(GO) test -race -count=1 $(PKGS)

FUZZTIME ?= 30s
.PHONY: fuzz
fuzz: ## run each fuzz target for FUZZTIME (default 30s)
	$(GO) test ./fsstore -run '^$$' -fuzz '^FuzzDecodeEvent$$' -fuzztime $(FUZZTIME)
	$(GO) test ./fsstore -run '^$$' -fuzz '^FuzzDecodeSession$$' -fuzztime $(FUZZTIME)
	$(GO) test ./fsstore -run '^$$' -fuzz '^FuzzScanLog$$' -fuzztime $(FUZZTIME)

.PHONY: bench
bench: ## go test benchmarks of the store against bare write+fsync
	$(GO) test ./fsstore -run '^$$' -bench . -benchtime 2s

.PHONY: demo
demo: build ## the main job: a team of scripted agents, a kill -9, recovery
	$(BIN)/substrat demo

.PHONY: clean
clean: ## remove build output and installed tools
	rm -rf $(BIN) $(TOOLS)
