# utpmesh — build, test, lint, fuzz, bench.
# Every tool comes through the Go toolchain; nothing needs installing by hand.

GO          ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME    ?= 30s
BIN         ?= bin

# Fuzz targets: package:Target, one per line of `make fuzz` output.
FUZZ_TARGETS = \
	./subjects:FuzzParse \
	./subjects:FuzzTemplate \
	./pkg/card:FuzzDecode \
	./pkg/utp:FuzzParseCommand \
	./pkg/registry:FuzzParseYAML \
	./pkg/telemetry:FuzzExtractTraceparent \
	./pkg/turn:FuzzDiff \
	./pkg/mandate:FuzzDecode \
	./pkg/authz:FuzzExplainParseError \
	./services/atlas/internal/cron:FuzzParse \
	./services/atlas/internal/atime:FuzzParseHM \
	./services/atlas/internal/atime:FuzzParseDate

# Packages whose tests depend on timing between goroutines or processes
# (brokers, leases, group commit, redelivery, schedulers): `make stress`.
STRESS_PKGS  = ./pkg/inbox ./pkg/worker ./pkg/agent ./pkg/mesh ./pkg/svc ./pkg/turn \
	./pkg/registry/natsreg ./pkg/authz/... ./cardstore/... ./services/... ./cmd/utpmesh
STRESS_COUNT ?= 10

.PHONY: all build test stress lint fuzz bench clean

all: build test

## build: compile every package and the utpmesh binary into ./bin
build:
	$(GO) build ./...
	$(GO) build -o $(BIN)/utpmesh ./cmd/utpmesh

## test: go vet, then every test with the race detector (the mesh is concurrent
## throughout, so every package runs under -race)
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 12m ./...

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

## bench: the benchmarks behind docs/performance.md (fsync on, fixed op counts)
bench:
	$(GO) test -run '^$$' -bench 'RoundTrip' -benchtime 2000x ./pkg/mesh
	$(GO) test -run '^$$' -bench 'Put' -benchtime 2000x ./cardstore/boltstore
	$(GO) test -run '^$$' -bench 'ListTurn' -benchtime 10x ./cardstore/boltstore
	$(GO) test -run '^$$' -bench 'TurnShow' -benchtime 10x ./pkg/turn
	$(GO) test -run '^$$' -bench . -benchmem ./subjects
	$(GO) test -run '^$$' -bench 'Gate' -benchtime 2000x ./pkg/authz
	$(GO) test -run '^$$' -bench 'RoundTripGate' -benchtime 1000x -count 2 ./pkg/authz/natsauthz

clean:
	rm -rf $(BIN)
