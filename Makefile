# Quick start: `make demo` trains the small model on Brown; `make test` builds and runs every test.
BUILD ?= build
JOBS ?= 2

.PHONY: setup build test demo clean
setup:
	@bash scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

test: build data/brown
	@cd $(BUILD) && ctest --output-on-failure --timeout 600 -j1

data/brown: | setup
	@bash scripts/fetch-brown.sh
	@bash scripts/prepare-brown.sh $(BUILD)

demo: build data/brown
	@bash scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD)
