# ddb-outbox — common tasks. Every target works offline against local servers;
# nothing here calls real AWS.
SHELL := /bin/bash
GO ?= go
FUNCTIONS := api relay reconciler ledger notifier fulfilment
LAMBDA_GOOS := linux
LAMBDA_GOARCH := arm64
DIST := dist

TOOLS := bin/tools
# The modules under tools/ pin developer tools and are not in go.work (their
# dependencies must not join the library's build list): build them on their own.
TOOLGO := GOWORK=off $(GO)
export CDK_DISABLE_VERSION_CHECK := true
export CDK_DISABLE_CLI_TELEMETRY := true

.PHONY: help deps dev demo test test-unit test-infra test-release test-examples proxy release build synth chaos chaos-history chaos-regions bench fuzz mutation clean FORCE lint apicheck licenses trace-screenshot console-screenshot

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund

# aws-cdk ships Go template files under node_modules; go.mod's `ignore
# ./node_modules` keeps every go command out of it, whatever installed it.
deps: node_modules/.package-lock.json ## install the pinned Node tools (Dynoxide, CDK CLI)

# The dev tools run as bin/outboxdev, exec'd by the recipe's shell, so make is
# their direct parent: killing make (any signal) makes the kernel SIGTERM
# outboxdev (PR_SET_PDEATHSIG), which stops the stack and Dynoxide.
OUTBOXDEV := bin/outboxdev

$(OUTBOXDEV): FORCE
	@test -x $@ || echo "building bin/outboxdev (the first run downloads Go modules and compiles for about two minutes, using about 1.5 GB of Go caches)"
	@$(GO) build -o $@ ./cmd/outboxdev

FORCE:

# --- tracing (issue 15) -------------------------------------------------------
# Jaeger is a Go tool of its own small module (tools/jaeger), never of the
# root module: its dependency tree stays out of the library's go.mod.
JAEGER := bin/jaeger

$(JAEGER): tools/jaeger/go.mod tools/jaeger/go.sum
	@echo "building bin/jaeger (tools/jaeger module; the first build takes a few minutes)"
	$(TOOLGO) build -C tools/jaeger -o ../../$(JAEGER) github.com/jaegertracing/jaeger/cmd/jaeger

# Not part of `make test`: it builds Jaeger first (minutes), and headless
# Chromium shoots its page (Debian's chromium, which .ci/run installs).
trace-screenshot: deps $(OUTBOXDEV) $(JAEGER) ## one order traced into Jaeger (re-send and duplicates forced), its trace page shot by headless Chromium into results/
	exec $(OUTBOXDEV) trace-screenshot $(ARGS)
# ------------------------------------------------------------------------------

# The console's browser test (part of make test) with its screenshot kept:
# a real run's page, shown in the README.
console-screenshot: deps ## run the console's browser test (headless Chromium) and save its page as docs/console.png
	CONSOLE_SCREENSHOT=$(CURDIR)/docs/console.png $(GO) test -count=1 -run TestConsoleInBrowser -v ./internal/devstack/

dev: deps $(OUTBOXDEV) $(if $(findstring -trace,$(ARGS)),$(JAEGER)) ## run the whole stack locally: Dynoxide, tables, API on :8080, relay, consumers, reconciler (ARGS='-data .outboxdev/dev.db' keeps data; ARGS=-trace: traces in Jaeger)
	exec $(OUTBOXDEV) dev $(ARGS)

demo: deps $(OUTBOXDEV) ## drive a few hundred orders through a fresh local stack (ARGS=-attach: the one make dev runs), audit, print the summary
	exec $(OUTBOXDEV) demo $(ARGS)

test: deps ## run every test (unit, integration against Dynoxide, end to end, CDK synth)
	$(GO) vet ./...
	$(GO) test -count=1 ./...
	$(MAKE) test-infra
	$(MAKE) test-release
	$(MAKE) test-examples

test-unit: ## only the runtime tests (no CDK)
	$(GO) test -count=1 ./...

test-infra: deps build ## CDK assertion tests on the synthesized template
	cd infra && $(GO) test -count=1 ./...

# The release (issue 33, docs/VERSIONING.md "Releasing"): tools/release is its
# own module (golang.org/x/mod stays out of the library's go.mod). Its tests
# run the release scripts in throwaway repositories and the release proof: a
# module outside the repository (tools/release/proof/testdata/outside, and
# each examples/*/go.mod) resolves both modules at the CHANGELOG's newest
# release from a module proxy built from this working tree, with no replace,
# and passes go mod tidy, build and test. Its module cache is one per working
# tree under ~/.cache/ddb-outbox-release-proof (RELEASE_PROOF_MODCACHE=...):
# the CDK modules are extracted there once.
test-release: ## the release proof: an outside module builds and tests against the release served from this working tree
	$(TOOLGO) test -C tools/release -count=1 ./...

proxy: ## a Go module proxy directory serving both modules at the CHANGELOG's release from this tree (OUT=DIR): depend on a release before its tags are published
	@test -n "$(OUT)" || { echo "usage: make proxy OUT=DIR"; exit 2; }
	$(TOOLGO) run -C tools/release ./cmd/modproxy -repo $(CURDIR) -out $(abspath $(OUT))

release: ## tag vX.Y.Z and infra/vX.Y.Z at HEAD (VERSION=X.Y.Z; refuses a dirty tree, a version CHANGELOG.md does not name, existing tags); never pushes
	tools/release/release.sh $(VERSION)

# The examples that are modules of their own (issue 33: examples/wallet, the
# guide docs/ADOPT.md walks through). Their go.mod requires the library and
# the CDK module at the release, no replace; inside this repository go.work
# points those versions at this tree. Dynoxide is found in the root's
# node_modules (pkg/dynoxide walks up from the test's directory); the CDK
# assertions synthesize under node against placeholder bootstraps.
EXAMPLES := examples/wallet

test-examples: deps ## the example modules' vet and tests (wallet: end to end on the local stack, CDK assertions)
	@for m in $(EXAMPLES); do \
		echo "test $$m"; \
		(cd $$m && $(GO) vet ./... && $(GO) test -count=1 ./...) || exit 1; \
	done

# TRACING=1 links the OpenTelemetry SDK, exporter and instrumentation into
# the functions (needed with ddb-outbox:telemetryLayerArn); without it they
# are built with the tag notrace: half the size, no tracing cost at all.
comma := ,
LAMBDA_TAGS := lambda.norpc$(if $(TRACING),,$(comma)notrace)

build: ## compile every Lambda for provided.al2023 arm64 into dist/<name>/bootstrap (TRACING=1: with OpenTelemetry)
	@for f in $(FUNCTIONS); do \
		echo "build $$f"; \
		CGO_ENABLED=0 GOOS=$(LAMBDA_GOOS) GOARCH=$(LAMBDA_GOARCH) $(GO) build -tags $(LAMBDA_TAGS) -trimpath -ldflags='-s -w' -o $(DIST)/$$f/bootstrap ./functions/$$f || exit 1; \
	done

synth: deps build ## synthesize the CloudFormation template into cdk.out/ (offline, no credentials)
	npx cdk synth --no-notices --no-version-reporting -q

# make chaos SEED=7 RATE=0.1 ORDERS=2000 (or ARGS='-seed 7 ...')
CHAOS_ARGS := $(if $(SEED),-seed $(SEED)) $(if $(RATE),-rate $(RATE)) $(if $(ORDERS),-orders $(ORDERS))

chaos: deps $(OUTBOXDEV) ## fault-injection audit: 10,000 orders by default (SEED=, RATE=, ORDERS=, or ARGS='...')
	exec $(OUTBOXDEV) chaos $(CHAOS_ARGS) $(ARGS)

# make chaos-history SEED=7 ORDERS=800 (or ARGS='-seed 7 -epoch 2 -v ...')
chaos-history: deps $(OUTBOXDEV) ## history paths under faults, audited: replays, late consumer, switch to ordered, restore, failing drains and DLQ sends, concurrent adjacent events; 3,200 orders by default (SEED=, RATE=, ORDERS=, or ARGS='...')
	exec $(OUTBOXDEV) chaos-history $(CHAOS_ARGS) $(ARGS)

# make chaos-regions SEED=7 EVENTS=1000 (or ARGS='-seed 7 -tail-prob 0.05 -v ...')
chaos-regions: deps $(OUTBOXDEV) ## two local Regions under replication faults (internal/mrec), one lost, taken over and recovered, wrong-Region writes fenced, audited; 3,000 operations by default, about 25 s on a quiet 2-core machine (SEED=, EVENTS=, or ARGS='...')
	exec $(OUTBOXDEV) chaos-regions $(if $(SEED),-seed $(SEED)) $(if $(EVENTS),-events $(EVENTS)) $(ARGS)

bench: deps build $(OUTBOXDEV) ## measure the cost of an event and print the report under results/ (ARGS='...')
	exec $(OUTBOXDEV) bench $(ARGS)

FUZZTIME ?= 30s
fuzz: deps ## run each fuzz target for FUZZTIME (default 30s): API requests, stream records, stream images
	$(GO) test -run '^$$' -fuzz '^FuzzAPIRequest$$' -fuzztime $(FUZZTIME) ./internal/orders/api
	$(GO) test -run '^$$' -fuzz '^FuzzStreamRecord$$' -fuzztime $(FUZZTIME) ./pkg/relay
	$(GO) test -run '^$$' -fuzz '^FuzzImageRoundTrip$$' -fuzztime $(FUZZTIME) ./pkg/streamimage

# Mutation testing with gremlins (a Go tool pinned in its own module,
# tools/gremlins, built into bin/tools/gremlins). Slow (each mutant reruns a package's tests, Dynoxide ones
# included), so not part of `make test`. One JSON report per package under
# results/mutation/. MUTATION_PKGS= picks packages, MUTATION_WORKERS= the
# mutants run in parallel (each test run gets one CPU; the timeout of a
# mutant's run is MUTATION_TIMEOUT_COEFF times the unmutated run's: with 3,
# a package whose tests take a second timed out on the recompile alone).
# gremlins skips mutants it counts as not covered, and a `case` expression
# of a switch is never in a Go coverage block: read those as untested.
MUTATION_PKGS ?= pkg/outbox pkg/relay pkg/reconciler pkg/dedup internal/orders/order pkg/streamimage
MUTATION_WORKERS ?= 2
MUTATION_TIMEOUT_COEFF ?= 10
MUTATION_OUT := results/mutation

mutation: deps $(TOOLS)/gremlins ## mutation testing of the promise-critical packages, slow (MUTATION_PKGS='pkg/relay pkg/outbox', MUTATION_WORKERS=2)
	@mkdir -p $(MUTATION_OUT)
	@for p in $(MUTATION_PKGS); do \
		echo "== mutation testing $$p"; \
		$(TOOLS)/gremlins unleash ./$$p --workers $(MUTATION_WORKERS) --test-cpu 1 \
			--timeout-coefficient $(MUTATION_TIMEOUT_COEFF) -o $(MUTATION_OUT)/$$(basename $$p).json || exit 1; \
	done

# --- lint and licences (issue 17) ---------------------------------------------
# The linters and the licence reader are Go tools pinned in their own modules
# (tools/lint, tools/actionlint, tools/licenses), not in the root go.mod that
# library users import. They are built into bin/tools/ (go's build cache makes
# a rebuild quick).

$(TOOLS)/gremlins: tools/gremlins/go.mod tools/gremlins/go.sum
	cd tools/gremlins && $(TOOLGO) build -o ../../$@ github.com/go-gremlins/gremlins/cmd/gremlins

$(TOOLS)/golangci-lint: tools/lint/go.mod tools/lint/go.sum
	cd tools/lint && $(TOOLGO) build -o ../../$@ github.com/golangci/golangci-lint/v2/cmd/golangci-lint

# actionlint has its own module: it needs go.yaml.in/yaml/v4 v4.0.0-rc.3,
# whose API gosec's rc.6 (inside golangci-lint) no longer has.
$(TOOLS)/actionlint: tools/actionlint/go.mod tools/actionlint/go.sum
	cd tools/actionlint && $(TOOLGO) build -o ../../$@ github.com/rhysd/actionlint/cmd/actionlint

$(TOOLS)/go-licenses: tools/licenses/go.mod tools/licenses/go.sum
	cd tools/licenses && $(TOOLGO) build -o ../../$@ github.com/google/go-licenses

# The API guard (issue 24): tools/apidiff/apicheck compares the exported API
# of pkg/ (not pkg/internal/) with the commit in api/baseline using
# golang.org/x/exp/apidiff, and fails on a change CHANGELOG.md's Unreleased
# section does not name. Its own tests (a throwaway repository per case)
# run first. It needs the baseline commit in the clone (not a shallow one).
$(TOOLS)/apicheck: tools/apidiff/go.mod tools/apidiff/go.sum tools/apidiff/apicheck/main.go
	cd tools/apidiff && $(TOOLGO) build -o ../../$@ ./apicheck

apicheck: $(TOOLS)/apicheck ## the library's API against api/baseline: every change named in CHANGELOG.md's Unreleased section
	$(TOOLGO) test -C tools/apidiff -count=1 ./...
	$(TOOLS)/apicheck -repo . -baseline api/baseline > /dev/null

lint: $(TOOLS)/golangci-lint $(TOOLS)/actionlint $(TOOLS)/go-licenses apicheck ## golangci-lint (root, infra and example modules), actionlint (workflows), licence allow-list, API guard
	$(TOOLS)/golangci-lint run ./...
	cd infra && ../$(TOOLS)/golangci-lint run --config ../.golangci.yml ./...
	cd tools/apidiff && GOWORK=off ../../$(TOOLS)/golangci-lint run --config ../../.golangci.yml ./...
	cd tools/release && GOWORK=off ../../$(TOOLS)/golangci-lint run --config ../../.golangci.yml ./...

	@for m in $(EXAMPLES); do (cd $$m && $(CURDIR)/$(TOOLS)/golangci-lint run --config $(CURDIR)/.golangci.yml ./...) || exit 1; done
	cd tools/apidiff && GOWORK=off ../../$(TOOLS)/golangci-lint run --config ../../.golangci.yml ./...
	$(TOOLS)/actionlint
	GO_LICENSES=$(TOOLS)/go-licenses tools/licenses/licenses.sh check

licenses: $(TOOLS)/go-licenses ## regenerate docs/THIRD-PARTY-LICENSES.md (after changing a dependency)
	GO_LICENSES=$(TOOLS)/go-licenses tools/licenses/licenses.sh report
# --- end lint and licences ------------------------------------------------------

clean: ## remove build outputs, cdk.out, results and bin/
	rm -rf $(DIST) cdk.out results bin
