# vdifrec: `make demo` and `make test` work on a fresh Debian machine with Rust and Python 3.11.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.vdifrec-installed
# The extension is rebuilt (release, incremental) whenever the Rust or the packaging changes.
SOURCES := $(shell find src -name '*.rs' -o -name '*.html') benches/baseline.rs Cargo.toml Cargo.lock pyproject.toml

.PHONY: help install demo check test test-rust test-python docs wheel test-wheel bench bench-tiny soak soak-short fuzz lint format clean

FUZZ_SECONDS ?= 30
FUZZ_TARGETS := header_parse frame_validate datagram_classify

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

$(PY):
	python3 -m venv $(VENV)

$(STAMP): $(PY) $(SOURCES)
	MATURIN_PEP517_ARGS="--features python,bench" $(PY) -m pip install --quiet --disable-pip-version-check -e '.[test,plot,docs]'
	@touch $@

install: $(STAMP) ## create .venv, build vdifrec (release, with the benchmarks' baselines) and install it with the test and docs extras

demo: $(STAMP) ## the main job on the built-in example, with the per-second table and summary
	$(VENV)/bin/vdifrec demo

# pytest runs two test files at a time (pytest-xdist): most tests wait on streams paced in real
# time, so two share even a 2-core machine; a file's tests stay together (its fixtures run once).
PYTEST := $(PY) -m pytest -q -n 2 --dist loadfile

test: $(STAMP) ## every test: pytest (API, command line, baseband oracle, notebooks), cargo test
	$(PYTEST)
	cargo test --quiet

# The inner loop, before each commit: formatting, lints, types, the Rust unit tests and the
# quick part of pytest (tests marked `slow` left out: `make test` runs them), in about 3 minutes.
check: $(STAMP) ## before each commit: cargo fmt --check, clippy, mypy, cargo test, the quick pytest tests
	cargo fmt --check
	cargo clippy --all-targets --features python,bench --quiet -- -D warnings
	$(PY) -m mypy
	cargo test --quiet
	$(PYTEST) -m "not slow"

test-rust: ## only the Rust unit tests
	cargo test --quiet

test-python: $(STAMP) ## only pytest
	$(PYTEST)

# The documentation site: Sphinx (MyST pages, numpydoc, sphinx-argparse) from the `docs` extra,
# which $(STAMP) installs; warnings are errors.
docs: $(STAMP) ## the documentation site (user and operator guides, API, command reference) into docs/_build/html
	$(PY) -m sphinx -W --keep-going -q -b html docs docs/_build/html

# The wheel: release build without the benchmarks' baselines (pyproject's features), the `dist`
# profile (no debug line tables), abi3 for Python 3.10 and later, linked by zig against glibc
# 2.17 so that maturin's compliance check can give it the manylinux2014 tag.
WHEEL_TOOLS := $(VENV)/.wheel-tools

$(WHEEL_TOOLS): $(PY) tools/wheel-requirements.txt
	$(PY) -m pip install --quiet --disable-pip-version-check -r tools/wheel-requirements.txt
	@touch $@

wheel: $(WHEEL_TOOLS) ## the release wheel (abi3 for Python 3.10+, manylinux2014 x86_64) and the sdist, into dist/
	PATH="$(abspath $(VENV))/bin:$$PATH" maturin build --profile dist --zig --compatibility manylinux2014 \
		--auditwheel check --out dist
	PATH="$(abspath $(VENV))/bin:$$PATH" maturin sdist --out dist

test-wheel: wheel ## install the wheel into fresh environments of each Python 3.10-3.13 here, no Rust on PATH, and smoke-test it
	$(PY) tests/wheel/run.py

bench: $(STAMP) ## benchmarks, each against a baseline measured in the same run (ratios, medians)
	$(PY) benches/run.py

bench-tiny: $(STAMP) ## every benchmark at a size that takes seconds (figures meaningless; CI runs it so none rots)
	$(PY) benches/run.py --tiny

soak: $(STAMP) ## 10 minutes at 8.224 Gbit/s on loopback, every file checked against what was sent (SOAK_SECONDS)
	$(PY) benches/soak.py

soak-short: $(STAMP) ## the soak for 4 s at 41 Mbit/s (CI runs it, so that it cannot rot)
	SOAK_SECONDS=4 SOAK_FPS=5000 SOAK_RING=64MiB SOAK_FILE_SIZE=16MiB $(PY) benches/soak.py

fuzz: ## each fuzz target for FUZZ_SECONDS (default 30) with cargo fuzz on the stable compiler
	command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
	cd fuzz && for t in $(FUZZ_TARGETS); do \
		RUSTC_BOOTSTRAP=1 cargo fuzz run -O $$t corpus/$$t -- -max_total_time=$(FUZZ_SECONDS) || exit 1; \
	done

lint: $(STAMP) ## cargo fmt --check, clippy, mypy, stubtest
	cargo fmt --check
	cargo clippy --all-targets --features python,bench --quiet -- -D warnings
	$(PY) -m mypy
	$(PY) -m mypy.stubtest vdifrec._core --allowlist .mypy-stubtest-allowlist

format: ## cargo fmt
	cargo fmt

clean: ## remove the build and the virtual environment
	cargo clean
	rm -rf $(VENV) .pytest_cache .mypy_cache dist docs/_build
