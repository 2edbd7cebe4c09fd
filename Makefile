# ddb-outbox — common tasks. Every target works offline against local servers;
# nothing here calls real AWS.
SHELL := /bin/bash
GO ?= go
FUNCTIONS := api relay reconciler ledger notifier
LAMBDA_GOOS := linux
LAMBDA_GOARCH := arm64
DIST := dist

export CDK_DISABLE_VERSION_CHECK := true
export CDK_DISABLE_CLI_TELEMETRY := true

.PHONY: help deps dev demo test test-unit test-infra build synth chaos bench fuzz clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

node_modules/.package-lock.json: package.json package-lock.json
	npm ci --no-audit --no-fund

# aws-cdk ships Go template files under node_modules; go.mod's `ignore
# ./node_modules` keeps every go command out of it, whatever installed it.
deps: node_modules/.package-lock.json ## install the pinned Node tools (Dynoxide, CDK CLI)

dev: deps ## run the whole stack locally: Dynoxide, tables, API on :8080, relay, consumers, reconciler
	$(GO) run ./cmd/outboxdev dev $(ARGS)

demo: deps ## drive a few hundred orders through the local stack, audit, print the summary
	$(GO) run ./cmd/outboxdev demo $(ARGS)

test: deps ## run every test (unit, integration against Dynoxide, end to end, CDK synth)
	$(GO) vet ./...
	$(GO) test -count=1 ./...
	$(MAKE) test-infra

test-unit: ## only the runtime tests (no CDK)
	$(GO) test -count=1 ./...

test-infra: deps build ## CDK assertion tests on the synthesized template
	cd infra && $(GO) test -count=1 ./...

build: ## compile every Lambda for provided.al2023 arm64 into dist/<name>/bootstrap
	@for f in $(FUNCTIONS); do \
		echo "build $$f"; \
		CGO_ENABLED=0 GOOS=$(LAMBDA_GOOS) GOARCH=$(LAMBDA_GOARCH) $(GO) build -tags lambda.norpc -trimpath -ldflags='-s -w' -o $(DIST)/$$f/bootstrap ./functions/$$f || exit 1; \
	done

synth: deps build ## synthesize the CloudFormation template into cdk.out/ (offline, no credentials)
	npx cdk synth --no-notices --no-version-reporting -q

chaos: deps ## fault-injection audit: 10,000 orders (SEED, RATE, ORDERS overridable)
	$(GO) run ./cmd/outboxdev chaos $(ARGS)

bench: deps build ## measure the cost of an event and print the report
	$(GO) run ./cmd/outboxdev bench $(ARGS)

clean:
	rm -rf $(DIST) cdk.out results
