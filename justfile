# batchlab's tasks. `just --list` shows them all.

set shell := ["bash", "-euo", "pipefail", "-c"]

# Everything CI checks without Python: format, lints, all tests (loom included), shipped scenarios.
test: fmt-check clippy test-unit test-loom test-scripts

# Check formatting.
fmt-check:
    cargo fmt --check

# Lints, warnings denied.
clippy:
    cargo clippy --all-targets -- -D warnings

# Unit, property, snapshot and integration tests.
test-unit:
    cargo test --all-targets

# The scripts' own tests (standard-library Python, seconds): CI's mutant selection on a landing.
test-scripts:
    python3 scripts/test_mutants_landed.py

# Model-check the threaded batcher with loom (its own target dir: loom changes cfg for every crate;
# optimized, without the release profile's whole-program optimization, which only slows the build).
test-loom:
    RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 cargo test --release --test loom_batcher

# Run a shipped scenario, e.g. `just scenario throughput.toml --set batching.batch_size=64`.
# A vLLM or Python-engine scenario (as resolved, `--set engine.kind=vllm` included) sets up the
# venv (once) and builds with the `vllm` feature.
scenario FILE *ARGS:
    #!/usr/bin/env bash
    set -euo pipefail
    f="scenarios/{{FILE}}"
    kind="$(cargo run --release --quiet -- run --engine-kind "$f" {{ARGS}})"
    if [[ $kind == vllm || $kind == python ]]; then
        scripts/setup-vllm.sh >&2
        export PYO3_PYTHON="${BATCHLAB_HOME:-$HOME/.cache/batchlab}/venv/bin/python"
        exec cargo run --release --quiet --features vllm -- run "$f" {{ARGS}}
    fi
    exec cargo run --release --quiet -- run "$f" {{ARGS}}

# Install vLLM (CPU) into $BATCHLAB_HOME/venv (default ~/.cache/batchlab) and build the tiny test model. Idempotent.
setup-vllm:
    scripts/setup-vllm.sh

# The Python engines' tests (vLLM, transformers, the echo engine of docs/engines.md) against the tiny model,
# `vllm bench serve` and the openai package against `batchlab serve` (tests/serve_vllm.rs), and the HTTP
# engine against a real `vllm serve` (tests/vllm_serve_http.rs), and the other tests that need the venv:
# the Ray launcher on a local three-node cluster (tests/ray_run.rs) and the Kubernetes manifests
# against the `kubernetes` package's models (tests/distributed_k8s.rs)
# (sets everything up first; minutes the first time).
test-vllm: setup-vllm
    PYO3_PYTHON="${BATCHLAB_HOME:-$HOME/.cache/batchlab}/venv/bin/python" cargo test --features vllm --test vllm_engine --test vllm_cli --test vllm_calibrate --test python_engine --test vllm_matrix --test vllm_stall --test serve_vllm --test vllm_compare --test vllm_calibrate_http --test vllm_serve_http --test vllm_tokenizer --test vllm_images --test vllm_embeddings --test vllm_sessions --test ray_run --test distributed_k8s -- --nocapture

# Lints with the vllm feature (needs a Python 3 for pyo3's build; the venv's when it exists).
clippy-vllm:
    PYO3_PYTHON="${PYO3_PYTHON:-$(v="${BATCHLAB_HOME:-$HOME/.cache/batchlab}/venv/bin/python"; [[ -x $v ]] && echo "$v" || command -v python3)}" cargo clippy --all-targets --features vllm -- -D warnings

# Fuzz one target for SECONDS (default 60): `just fuzz mapper 30`. `cd fuzz && cargo fuzz list` names them.
fuzz TARGET SECONDS="60":
    mkdir -p fuzz/corpus/scenario && cp scenarios/*.toml fuzz/corpus/scenario/
    cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run -a -s none {{TARGET}} -- -max_total_time={{SECONDS}} -timeout=10

# Build and fuzz every target for SECONDS each; one line per target, fails on any crash.
fuzz-all SECONDS:
    scripts/fuzz-ci.sh {{SECONDS}}

# Benchmarks: harness overhead (an engine that answers at once), the simulator's speed, memory at scale, vLLM vs raw vLLM alternated in one engine (when
# the venv exists), time to report against its floor, timing accuracy, the calibrated simulator's
# fidelity against vLLM, `batchlab serve`'s ceiling next to `vllm bench serve`'s; writes
# docs/performance.md (~20 minutes). `just bench --quick`: a smoke run for CI (small N, the dev build
# `just test` leaves warm, no vLLM but section 10's short round, no file written, asserts nothing about speed). `just bench --only harness,memory`: only those parts,
# replacing only their sections of docs/performance.md.
bench *ARGS:
    scripts/bench.sh {{ARGS}}

# `just bench --quick`.
bench-quick:
    scripts/bench.sh --quick

# The power table of docs/compare.md: how often `batchlab compare` passes, fails or cannot tell
# injected changes, per shape (`just compare-power --quick`: a smoke run; `--write docs/compare.md`
# replaces the table there).
compare-power *ARGS:
    python3 scripts/compare_power.py {{ARGS}}

# Run every shell example of README.md and docs/ (`--vllm`: the vLLM ones too; a file name: its own).
doc-examples *ARGS:
    python3 scripts/doc_examples.py {{ARGS}}
