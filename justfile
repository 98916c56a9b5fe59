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
