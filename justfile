# batchlab's tasks. `just --list` shows them all.

set shell := ["bash", "-euo", "pipefail", "-c"]

# Everything CI checks without Python: format, lints, all tests (loom included), shipped scenarios.
test: fmt-check clippy test-unit test-loom

# Check formatting.
fmt-check:
    cargo fmt --check

# Lints, warnings denied.
clippy:
    cargo clippy --all-targets -- -D warnings

# Unit, property, snapshot and integration tests.
test-unit:
    cargo test --all-targets

# Model-check the threaded batcher with loom (its own target dir: loom changes cfg for every crate).
test-loom:
    RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test --release --test loom_batcher

# Run a shipped scenario, e.g. `just scenario throughput.toml --set batching.batch_size=64`.
scenario FILE *ARGS:
    cargo run --release --quiet -- run scenarios/{{FILE}} {{ARGS}}

# Install vLLM (CPU) into $BATCHLAB_HOME/venv (default ~/.cache/batchlab) and build the tiny test model. Idempotent.
setup-vllm:
    scripts/setup-vllm.sh

# The real vLLM engine's tests against the tiny model (sets everything up first; minutes the first time).
test-vllm: setup-vllm
    PYO3_PYTHON="${BATCHLAB_HOME:-$HOME/.cache/batchlab}/venv/bin/python" cargo test --features vllm --test vllm_engine -- --nocapture

# Lints with the vllm feature (needs a Python 3 for pyo3's build; the venv's when it exists).
clippy-vllm:
    PYO3_PYTHON="${PYO3_PYTHON:-$(v="${BATCHLAB_HOME:-$HOME/.cache/batchlab}/venv/bin/python"; [[ -x $v ]] && echo "$v" || command -v python3)}" cargo clippy --all-targets --features vllm -- -D warnings

# Benchmarks: harness overhead, memory at scale, vLLM vs raw vLLM (when the venv exists), time to
# report, timing accuracy; writes docs/performance.md (~10 minutes). `just bench --quick`: a smoke
# run for CI (small N, no vLLM, no file written, asserts nothing about speed).
bench *ARGS:
    scripts/bench.sh {{ARGS}}

# `just bench --quick`.
bench-quick:
    scripts/bench.sh --quick
