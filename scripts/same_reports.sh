#!/usr/bin/env bash
# Whether two batchlab binaries give byte-identical results on every shipped simulator scenario:
# report.json and requests.jsonl of each, in virtual time. For changes that must not change
# behaviour (a refactor, a move of code): build the old and the new binary, then
#
#     scripts/same_reports.sh OLD_BATCHLAB NEW_BATCHLAB [OUT_DIR]
#
# One line per scenario; exits 1 when any file differs or any run's exit code does. The simulator
# scenarios are those whose [engine] is not vllm, openai or python (those need a real engine).
set -euo pipefail
old="${1:?usage: scripts/same_reports.sh OLD_BATCHLAB NEW_BATCHLAB [OUT_DIR]}"
new="${2:?usage: scripts/same_reports.sh OLD_BATCHLAB NEW_BATCHLAB [OUT_DIR]}"
out="${3:-$(mktemp -d)}"
mkdir -p "$out"
cd "$(dirname "$0")/.."
differ=0
for file in scenarios/*.toml; do
    if grep -q '^kind = "\(vllm\|openai\|python\)"' "$file"; then
        continue
    fi
    name="$(basename "$file" .toml)"
    codes=()
    for side in old new; do
        bin="$old"
        [[ $side == new ]] && bin="$new"
        rc=0
        "$bin" run "$file" --quiet --requests-jsonl --output "$out/$side/$name" >"$out/$side-$name.log" 2>&1 || rc=$?
        codes+=("$rc")
    done
    line="$name: exit ${codes[0]}/${codes[1]}"
    [[ ${codes[0]} == "${codes[1]}" ]] || differ=1
    for f in report.json requests.jsonl; do
        if cmp -s "$out/old/$name/$f" "$out/new/$name/$f"; then
            line+=" $f same"
        else
            line+=" $f DIFFERS"
            differ=1
        fi
    done
    echo "$line"
done
echo "outputs in $out"
exit "$differ"
