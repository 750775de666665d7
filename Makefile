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
	@grep -hE '^[a-z][a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F ':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

.PHONY: build
build: ## build bin/substrat
	$(GO) build -o $(BIN)/substrat ./cmd/substrat

.PHONY: tools
tools: ## install the test tools (staticcheck) into .tools/ if missing
	@scripts/install-tools.sh

.PHONY: lint
lint: tools ## gofmt, go vet, staticcheck, go mod tidy -diff, and the package dependency rule
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(TOOLS)/bin/staticcheck $(PKGS)
	$(GO) mod tidy -diff
	@scripts/check-deps.sh

.PHONY: k8s
k8s: ## build the Kubernetes control plane the tests run against, once per machine (cached in SUBSTRAT_K8S_CACHE, default ~/.cache/substrat/k8s)
	@scripts/k8s-control-plane.sh build

# The timeout only catches a hang: cmd/substrat, the end-to-end package
# (the real daemon, CLIs, sshd and control plane, under -race), takes 11
# to 14 minutes on 2 cores shared with the other packages, and a slow
# machine is not a failure.
TESTTIMEOUT ?= 40m

.PHONY: test
test: lint k8s ## everything CI runs: lint, the control plane's build, then go test -race
	SUBSTRAT_K8S_REQUIRE=1 $(GO) test -race -count=1 -timeout $(TESTTIMEOUT) $(PKGS)

.PHONY: race
race: ## go test -race only
	$(GO) test -race -count=1 -timeout $(TESTTIMEOUT) $(PKGS)

FUZZTIME ?= 30s
.PHONY: fuzz
fuzz: ## run each fuzz target for FUZZTIME (default 30s)
	$(GO) test ./fsstore -run '^$$' -fuzz '^FuzzDecodeEvent$$' -fuzztime $(FUZZTIME)
	$(GO) test ./fsstore -run '^$$' -fuzz '^FuzzDecodeSession$$' -fuzztime $(FUZZTIME)
	$(GO) test ./fsstore -run '^$$' -fuzz '^FuzzScanLog$$' -fuzztime $(FUZZTIME)
	$(GO) test ./supervisor -run '^$$' -fuzz '^FuzzRenderPrompt$$' -fuzztime $(FUZZTIME)

BENCHFLAGS ?=
.PHONY: bench
bench: build ## substrat-bench: the disk's limits, Substrat and SQLite in one run (BENCHFLAGS=--quick, --json)
	$(GO) build -o $(BIN)/substrat-bench ./cmd/substrat-bench
	$(BIN)/substrat-bench --daemon $(BIN)/substrat $(BENCHFLAGS)

.PHONY: bench-go
bench-go: ## go test benchmarks of the store against bare write+fsync
	$(GO) test ./fsstore -run '^$$' -bench . -benchtime 2s

SEEDS ?= 1000
STEPS ?= 40
CRASH ?= -1
SEED  ?= 1
.PHONY: sim
sim: ## crash simulation, long: SEEDS seeds (default 1000) from SEED, STEPS actions each; CRASH=K BUG=name to replay one
	$(GO) test ./sim -run '^TestSim$$' -count=1 -v -timeout 0 -sim.seed=$(SEED) -sim.seeds=$(SEEDS) -sim.steps=$(STEPS) -sim.crash=$(CRASH) $(if $(BUG),-sim.bug=$(BUG))

N ?= 1000
.PHONY: chaos
chaos: ## kill -9 chaos with the real daemon: N kills (default 1000)
	$(GO) test ./sim -run '^TestChaos$$' -count=1 -v -timeout 0 -chaos.kills=$(N)

.PHONY: demo
demo: build ## the main job: a team of scripted agents, a kill -9, recovery
	$(BIN)/substrat demo

.PHONY: clean
clean: ## remove build output and installed tools
	rm -rf $(BIN) $(TOOLS)
