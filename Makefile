# utpmesh — build, test, lint, fuzz, bench.
# Every Go tool comes through the Go toolchain; `make test` installs what the
# tests need beyond Go when it is missing: Debian's chromium, git and
# bubblewrap (apt-get), the MCP TypeScript SDK and the TypeScript SDK's
# dependencies (npm ci, from their committed lockfiles).

GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME    ?= 30s
BIN         ?= bin

# Fuzz targets: package:Target, one per line of `make fuzz` output.
FUZZ_TARGETS = \
	./subjects:FuzzParse \
	./subjects:FuzzTemplate \
	./pkg/card:FuzzDecode \
	./pkg/card:FuzzFastDecode \
	./pkg/card:FuzzParseList \
	./pkg/card:FuzzEncode \
	./pkg/utp:FuzzParseCommand \
	./pkg/registry:FuzzParseYAML \
	./pkg/registry:FuzzCompileSchema \
	./pkg/confirm:FuzzParse \
	./cardstore:FuzzCallKey \
	./cardstore/boltstore:FuzzSplitTurnRec \
	./pkg/telemetry:FuzzExtractTraceparent \
	./pkg/turn:FuzzDiff \
	./pkg/mandate:FuzzDecode \
	./pkg/authz:FuzzExplainParseError \
	./pkg/authz:FuzzParseAuditRecords \
	./services/atlas/internal/cron:FuzzParse \
	./services/atlas/internal/atime:FuzzParseHM \
	./services/atlas/internal/atime:FuzzParseDate \
	./services/cynode/store:FuzzListCursor \
	./services/cynode/db:FuzzCheckValue \
	./services/cynode/skills:FuzzCreate \
	./services/cynode/artifact:FuzzPut \
	./services/cynode/api:FuzzParams

# Packages whose tests depend on timing between goroutines or processes
# (brokers, leases, group commit, redelivery, schedulers): `make stress`.
STRESS_PKGS  = ./pkg/inbox/... ./pkg/worker ./pkg/agent ./pkg/mesh ./pkg/svc ./pkg/turn ./pkg/streams ./pkg/unrouted \
	./pkg/registry/... ./pkg/authz/... ./cardstore/... ./services/... ./cmd/utpmesh \
	./pkg/apps/... ./pkg/mandate ./pkg/sdk ./internal/meshtest ./internal/jskv/...
STRESS_COUNT ?= 10


.PHONY: all build test test-norace test-deps bench-deps mcp-client ts-sdk stress ui-screenshot lint fuzz bench clean

all: build test

## build: compile every package and the utpmesh binary into ./bin
build:
	$(GO) build ./...
	$(GO) build -o $(BIN)/utpmesh ./cmd/utpmesh

## test: go vet, then every test with the race detector (the mesh is concurrent
## throughout, so every package runs under -race). The UI's browser test
## (cmd/utpmesh TestUIBrowser) must run here: UTPMESH_REQUIRE_BROWSER=1 makes
## it fail, not skip, when no Chromium is found; UTPMESH_REQUIRE_GIT=1 does the
## same for the cynode git.* tests and the git binary, UTPMESH_REQUIRE_BWRAP=1
## for the cynode sandbox tests and bubblewrap. The utpmesh processes that
## cmd/utpmesh's tests start (up, workers, cluster nodes) are bin/utpmesh,
## built first without the race detector (UTPMESH_TEST_BIN): their code is
## raced in process by the packages' tests, and a whole mesh under -race in
## each of three cluster nodes made the suite CPU-bound on two cores.
test: test-deps mcp-client ts-sdk
	$(GO) vet ./...
	$(GO) build -o $(BIN)/utpmesh ./cmd/utpmesh
	UTPMESH_TEST_BIN=$(CURDIR)/$(BIN)/utpmesh UTPMESH_REQUIRE_BROWSER=1 UTPMESH_REQUIRE_GIT=1 UTPMESH_REQUIRE_BWRAP=1 $(GO) test -race -count=1 -timeout 12m ./...
	$(MAKE) --no-print-directory test-norace

## test-norace: the tests built only without the race detector (//go:build
## !race): a cluster node healing its full disk re-enables JetStream, and
## nats-server's EnableJetStream races its own route readers (see the files)
NORACE_TESTS = ^(TestClusterNodeDiskFull|TestClusterNodeDiskFullMesh|TestStatusClusterDiskFull)$$
test-norace:
	$(GO) test -count=1 -timeout 10m -run '$(NORACE_TESTS)' ./pkg/embednats ./pkg/mesh ./cmd/utpmesh

## test-deps: install, with one apt-get, the Debian packages the tests need
## and the machine lacks: chromium (the web UI's browser test), git (cynode
## git.*), bubblewrap (cynode sandboxes). Quiet and non-interactive; sudo
## when not root; nothing to do when all are there.
test-deps:
	@pkgs=; \
	{ [ -n "$$UTPMESH_CHROMIUM" ] || command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || command -v google-chrome >/dev/null 2>&1; } || pkgs="$$pkgs chromium"; \
	command -v git >/dev/null 2>&1 || pkgs="$$pkgs git"; \
	command -v bwrap >/dev/null 2>&1 || pkgs="$$pkgs bubblewrap"; \
	[ -n "$$pkgs" ] || exit 0; \
	echo "make: installing$$pkgs (apt-get) for the tests"; \
	command -v apt-get >/dev/null 2>&1 || { echo "make: missing$$pkgs and no apt-get: install them (or set UTPMESH_CHROMIUM=/path/to/chrome)"; exit 1; }; \
	SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && \
	$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$pkgs >/dev/null

## mcp-client: install the MCP TypeScript SDK (npm, from the committed
## package-lock) for the MCP bridge's foreign-client test, when npm is there
## and it is not installed yet; without Node the test skips and says why
mcp-client:
	@d=pkg/apps/mcpbridge/testdata/tsclient; \
	if [ -d $$d/node_modules/@modelcontextprotocol/sdk ]; then exit 0; fi; \
	if ! command -v npm >/dev/null 2>&1; then echo "make: no npm: the MCP foreign-client test will skip"; exit 0; fi; \
	echo "make: installing the MCP TypeScript SDK for the foreign-client test (npm ci)"; \
	npm ci --prefix $$d --no-audit --no-fund --loglevel=error >/dev/null

## ts-sdk: install the TypeScript SDK's dependencies (npm ci, from
## pkg/sdk/typescript/package-lock.json) for cmd/utpmesh TestTypeScriptSDK,
## when npm is there and they are missing or older than the lockfile; without
## Node the test skips and says why
ts-sdk:
	@d=pkg/sdk/typescript; \
	if [ $$d/node_modules/.package-lock.json -nt $$d/package-lock.json ]; then exit 0; fi; \
	if ! command -v npm >/dev/null 2>&1; then echo "make: no npm: the TypeScript SDK test will skip"; exit 0; fi; \
	echo "make: installing the TypeScript SDK's dependencies (npm ci)"; \
	npm ci --prefix $$d --no-audit --no-fund --loglevel=error >/dev/null

## ui-screenshot: re-take docs/img/ui-turn.png with the browser test
ui-screenshot: test-deps
	UTPMESH_UI_SCREENSHOT=1 $(GO) test -count=1 -run '^TestUIBrowser$$' ./cmd/utpmesh

## stress: the timing-sensitive packages STRESS_COUNT times each under -race,
## to catch flaky tests before CI does (about 15 min on 2 cores)
stress:
	$(GO) test -race -count=$(STRESS_COUNT) -timeout 60m $(STRESS_PKGS)

## lint: formatting, vet and staticcheck (fetched by the Go toolchain)
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

## fuzz: run each fuzz target for FUZZTIME
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; \
		echo "== fuzz $$pkg $$fn ($(FUZZTIME))"; \
		$(GO) test -run '^$$' -fuzz "^$$fn$$" -fuzztime $(FUZZTIME) $$pkg; \
	done

## bench-deps: install strace (apt-get), which BenchmarkWireRoundTrip uses to
## count fsyncs per call; nothing to do when it is there
bench-deps:
	@command -v strace >/dev/null 2>&1 && exit 0; \
	echo "make: installing strace (apt-get) to count fsyncs per call"; \
	command -v apt-get >/dev/null 2>&1 || { echo "make: no strace and no apt-get: install strace"; exit 1; }; \
	SUDO=; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null && \
	$$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends strace >/dev/null

## bench: the benchmarks behind docs/performance.md (fsync on, fixed op counts);
## the first line is issue 27's bar: a real `utpmesh up` against the fair hop
## over the wire, fsyncs per call counted with strace
bench: bench-deps
	UTPMESH_REQUIRE_STRACE=1 $(GO) test -run '^$$' -bench 'WireRoundTrip' -benchtime 2000x -timeout 30m ./cmd/utpmesh
	$(GO) test -run '^$$' -bench 'RoundTrip' -benchtime 2000x ./pkg/mesh
	$(GO) test -run '^$$' -bench 'DispatchLinger' -benchtime 500x ./pkg/mesh
	$(GO) test -run '^$$' -bench 'Put' -benchtime 2000x ./cardstore/boltstore
	$(GO) test -run '^$$' -bench 'ListTurn' -benchtime 10x ./cardstore/boltstore
	$(GO) test -run '^$$' -bench 'UpgradeFromVersion3' -benchtime 1x ./cardstore/boltstore
	$(GO) test -run '^$$' -bench 'TurnShow' -benchtime 10x ./pkg/turn
	$(GO) test -run '^$$' -bench 'Decode|Encode' -benchtime 20000x ./pkg/card
	$(GO) test -run '^$$' -bench 'PagesThenSync' -benchtime 500x ./internal/boltfile
	$(GO) test -run '^$$' -bench . -benchmem ./subjects
	$(GO) test -run '^$$' -bench 'Gate' -benchtime 2000x ./pkg/authz
	$(GO) test -run '^$$' -bench 'RoundTripGate' -benchtime 1000x -count 2 ./pkg/authz/natsauthz
	$(GO) test -run '^$$' -bench 'Failover' -benchtime 5x ./pkg/worker
	$(GO) test -run '^$$' -bench 'Disk' -benchtime 5000x ./pkg/retention
	$(GO) test -run '^$$' -bench 'List' -benchtime 10x ./pkg/inbox/kvinbox
	$(GO) test -run '^$$' -bench 'Catalogue' -benchtime 400x ./services/catalog
	$(GO) test -run '^$$' -bench 'PutGet' -benchtime 200x ./services/state/blob/objblob
	$(GO) test -run '^$$' -bench 'ClusterFailover' -benchtime 1x -timeout 15m ./pkg/mesh

clean:
	rm -rf $(BIN)
