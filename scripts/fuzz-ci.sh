#!/usr/bin/env bash
# Builds every fuzz target, runs each for SECONDS, prints one line per target and exits non-zero
# on any crash. Usage: scripts/fuzz-ci.sh SECONDS [TARGET...]   (docs/fuzzing.md)
#
# Crash inputs are kept under fuzz/artifacts/<target>/ and the corpus under fuzz/corpus/<target>/
# (both git-ignored), so a later run starts where this one stopped.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:?usage: scripts/fuzz-ci.sh SECONDS [TARGET...]}"
shift

export PATH="$HOME/.cargo/bin:$PATH"
export CARGO_TERM_COLOR=never
# cargo-fuzz passes nightly-only flags (-Zsanitizer=address, ...); this lets stable rustc take them.
export RUSTC_BOOTSTRAP=1

if ! cargo fuzz --version >/dev/null 2>&1; then
    cargo install cargo-fuzz --locked
fi

cd fuzz
# -a: debug assertions and overflow checks on, so the library's `debug_assert!`s are checked too.
# -s none: no AddressSanitizer; the code under test is safe Rust, and runs are about twice as fast.
cargo fuzz build -a -s none
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo fuzz list)
fi

# The shipped scenarios seed the byte-level scenario target.
mkdir -p corpus/scenario
cp ../scenarios/*.toml corpus/scenario/

failed=0
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target" "artifacts/$target"
    log="artifacts/$target/last-run.log"
    before=$(find "artifacts/$target" -maxdepth 1 -type f ! -name '*.log' | wc -l)
    status=0
    # Per input: a time budget (a slow input fails like a crash) and a size limit. `cli` answers
    # every input at once, so its budget is tight; it builds big texts itself from small inputs.
    case "$target" in
        cli) limits=(-timeout=2 -max_len=65536) ;;
        *) limits=(-timeout=10) ;;
    esac
    cargo fuzz run -a -s none "$target" -- -max_total_time="$seconds" "${limits[@]}" -print_final_stats=1 >"$log" 2>&1 || status=$?
    after=$(find "artifacts/$target" -maxdepth 1 -type f ! -name '*.log' | wc -l)
    crashes=$((after - before))
    if [ "$status" -ne 0 ] && [ "$crashes" -eq 0 ]; then
        crashes=1 # the run failed without leaving an input (e.g. the build broke): count it.
    fi
    # libFuzzer's final stats; `Done N runs` as a fallback.
    execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
    if [ -z "$execs" ]; then
        execs=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -n 1)
    fi
    echo "fuzz $target: ${execs:-0} executions, $crashes crashes"
    if [ "$crashes" -ne 0 ]; then
        failed=1
        grep -m 1 -A 4 "panicked at" "$log" || tail -n 20 "$log"
        echo "  log: fuzz/$log; inputs: fuzz/artifacts/$target/"
    fi
done
exit "$failed"
