# Quick start on a fresh Debian 12 machine:
#   make demo   fetch the Brown corpus, tokenize it, train the `small` model, print the validation perplexity
#   make test   build and run every test
# Both install what is missing first (scripts/setup.sh).
BUILD ?= build
JOBS ?= 2

.PHONY: setup build test demo clean
setup:
	@bash scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure --timeout 600 -j1

data/brown/manifest.json: | build
	@bash scripts/fetch-brown.sh
	@bash scripts/prepare-brown.sh $(BUILD)

demo: build data/brown/manifest.json
	@bash scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD)
