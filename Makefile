# idlepool build tasks. `make pi` is the main job; `make test` is what CI runs.
GO        ?= go
BIN       := bin
EXAMPLES  := pi ising kfold csvstats
WASM      := $(foreach e,$(EXAMPLES),examples/$(e)/$(e).wasm)
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME  ?= 10s

.PHONY: all build examples pi run-examples test crossvet fuzz bench fmt vet lint clean

all: build examples

build:
	$(GO) build -o $(BIN)/idlepool ./cmd/idlepool

# Job programs are compiled to WebAssembly (WASI preview 1) by the standard Go toolchain.
examples/%.wasm: FORCE
	GOOS=wasip1 GOARCH=wasm $(GO) build -trimpath -o $@ ./$(dir $@)
FORCE:

examples/csvstats/data.csv:
	$(GO) run ./examples/csvstats/gen -rows 200000 -o $@

examples: $(WASM) examples/csvstats/data.csv

# The main job: 10^9 Monte Carlo samples for pi, alone and offline.
pi: build examples/pi/pi.wasm
	$(BIN)/idlepool run examples/pi/pi.toml

run-examples: build examples
	for e in $(EXAMPLES); do $(BIN)/idlepool run examples/$$e/$$e.toml || exit 1; done

# The test command: every test with the race detector, go vet for Windows and
# macOS (cgo off, as in any cross build), then each fuzz target briefly.
test:
	$(GO) test -race -count=1 -timeout 30m ./...
	$(MAKE) crossvet
	$(MAKE) fuzz

crossvet:
	GOOS=windows CGO_ENABLED=0 $(GO) vet ./...
	GOOS=darwin CGO_ENABLED=0 $(GO) vet ./...

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzParseManifest$$' -fuzztime $(FUZZTIME) ./job
	$(GO) test -run '^$$' -fuzz '^FuzzMergerAdd$$' -fuzztime $(FUZZTIME) ./job
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeFrame$$' -fuzztime $(FUZZTIME) ./worker
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeSubmission$$' -fuzztime $(FUZZTIME) ./coord

bench: build examples
	./scripts/bench.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

vet: crossvet
	$(GO) vet ./...

lint:
	$(GO) run $(STATICCHECK) ./...

clean:
	rm -rf $(BIN) $(WASM)
