# v2bridge — etcd v2 keys/watch API served from etcd v3.
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
LDFLAGS  := -s -w -X main.version=$(VERSION) -X main.gitCommit=$(COMMIT)
TESTTIME ?= 20m

.PHONY: all build run test unit integration conformance conformance-long bench bench-quick bench-watch bench-failover vet tidy clean

all: build

## build: a static bridge binary in bin/, version stamped
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/bridge ./cmd/bridge

## run: the bridge on http://127.0.0.1:2379 over an embedded etcd (data in default.v2bridge/)
run: build
	./bin/bridge $(ARGS)

## test: every test (unit, integration against real etcd, conformance against a real v2 server)
test: vet
	$(GO) test -count=1 -timeout $(TESTTIME) ./...

unit:
	$(GO) test -count=1 ./translate/...

integration:
	$(GO) test -count=1 -timeout $(TESTTIME) ./integration/...

vet:
	$(GO) vet ./...

tidy:
	$(GO) mod tidy

clean:
	rm -rf bin default.v2bridge
