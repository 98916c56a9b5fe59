#!/usr/bin/env bash
# `batchlab serve`'s ceiling (docs/performance.md section 8): the server on a zero-cost engine under
# batchlab's own Rust client (benches/serve_load.rs) at two concurrencies, its memory, and the rate
# `vllm bench serve` can drive against it (when the venv exists). Prints the section's markdown;
# `scripts/bench.sh` (`just bench`) calls it, and `--into FILE` re-measures only this section and
# puts it into FILE (docs/performance.md) in place. `--quick`: a one-second smoke run, no vLLM.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=false into=""
while (($#)); do
    case "$1" in
        --quick) quick=true ;;
        --into) into="$2"; shift ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
home="${BATCHLAB_HOME:-$HOME/.cache/batchlab}"
venv_python="$home/venv/bin/python"
work="$(mktemp -d -t batchlab-bench-serve.XXXXXX)"
serve_pid=""
trap '[[ -n "$serve_pid" ]] && kill "$serve_pid" 2>/dev/null; rm -rf "$work"' EXIT
out="$work/section.md"
md() { printf '%s\n' "$*" >>"$out"; }
load_at_start=$(cut -d' ' -f1-3 /proc/loadavg)
# `--quick`: the dev build, as scripts/bench.sh --quick makes it (the binary and the benches in one
# `cargo bench --no-run`, warm after `just test`), not the release profile's fat LTO.
if $quick; then
    cargo bench --profile dev --quiet --no-run
    bin="$CARGO_TARGET_DIR/debug/batchlab" bench=(cargo bench --profile dev --quiet)
else
    cargo build --release --quiet
    bin="$CARGO_TARGET_DIR/release/batchlab" bench=(cargo bench --quiet)
fi

if $quick; then serve_secs=1; serve_warmup=1; serve_rows=(16 200); serve_prompts=200; else serve_secs=30; serve_warmup=10; serve_rows=(64 1000); serve_prompts=5000; fi
cat >"$work/serve-free.toml" <<'TOML'
name = "serve-free"
[engine.sim]
fixed_overhead = "0s"
decode_step = "0s"
prefill_per_token = "0s"
per_seq = "0s"
max_num_seqs = 1024
TOML
"$bin" serve "$work/serve-free.toml" --port 0 --max-waiting 100000 >"$work/serve.out" 2>"$work/serve.err" &
serve_pid=$!
for _ in $(seq 1 300); do grep -q listening "$work/serve.out" && break; sleep 0.1; done
serve_url=$(sed -n 's/listening on //p' "$work/serve.out")
[[ -n "$serve_url" ]] || { cat "$work/serve.err" >&2; exit 1; }
md "## 8. \`batchlab serve\`: its ceiling, next to \`vllm bench serve\`'s"
md ""
md "\`batchlab serve\` on a zero-cost engine (every cost 0, \`max_num_seqs = 1024\`; docs/serve.md) on this machine's $(nproc) CPUs, with the client on the same CPUs. **batchlab's client** (\`benches/serve_load.rs\`, reqwest on tokio): N tasks, each sending a streamed completion (16 tokens, \`ignore_eos\`) and reading it to \`[DONE]\`, then the next; ${serve_warmup} s of warmup (connections opened, buffers and allocator at their working size), then ${serve_secs} s measured. Memory is the server's resident set (\`/proc/PID/status\` VmRSS) at the start and end of the measurement, and its peak (VmHWM)."
md ""
md "\`\`\`sh"
md "batchlab serve serve-free.toml --port 0 --max-waiting 100000"
md "cargo bench --bench serve_load -- --url URL --concurrency N --seconds ${serve_secs} --warmup ${serve_warmup} --pid PID"
md "\`\`\`"
md ""
md "| open streams (client tasks) | completions/s | tokens/s | failed | server RSS start → end (MiB) | peak (MiB) |"
md "|---:|---:|---:|---:|---:|---:|"
for c in "${serve_rows[@]}"; do
    "${bench[@]}" --bench serve_load -- --url "$serve_url" --concurrency "$c" --seconds "$serve_secs" --warmup "$serve_warmup" \
        --pid "$serve_pid" | tee "$work/serve-load.txt" >&2
    grep '^SERVE_LOAD' "$work/serve-load.txt" | sed -E 's/.*concurrency=([0-9]+) completions_per_s=([0-9]+) tokens_per_s=([0-9]+) failed=([0-9]+) rss_start_kib=([0-9]+) rss_end_kib=([0-9]+) peak_kib=([0-9]+).*/\1 \2 \3 \4 \5 \6 \7/' \
        | awk '{printf "| %d | %d | %d | %d | %.1f → %.1f | %.1f |\n", $1, $2, $3, $4, $5/1024, $6/1024, $7/1024}' >>"$out"
done
if $quick; then
    md ""
    md "Quick mode: no \`vllm bench serve\` row (it needs the venv)."
elif [[ ! -x "$venv_python" ]]; then
    md ""
    md "\`vllm bench serve\`: skipped, no vLLM venv at \`$home/venv\` (run \`just setup-vllm\`)."
else
    "$venv_python" scripts/vllm_bench_serve.py --backend openai --base-url "$serve_url" --endpoint /v1/completions \
        --model batchlab-sim --tokenizer "$home/tiny-llama" --dataset-name random --random-input-len 16 \
        --random-output-len 16 --num-prompts "$serve_prompts" --request-rate inf --max-concurrency 64 --ignore-eos \
        --disable-tqdm >"$work/vllm-bench.out" 2>"$work/vllm-bench.err" || { tail -n 30 "$work/vllm-bench.err" >&2; exit 1; }
    vllm_rate=$(sed -n 's/^BENCH_RESULT //p' "$work/vllm-bench.out" | python3 -c 'import json,sys; print("%.0f" % json.load(sys.stdin)["request_throughput"])')
    md ""
    md "**\`vllm bench serve\`'s ceiling** against the same server: its random dataset (16 prompt tokens, 16 output tokens, \`--ignore-eos\`), \`--request-rate inf --max-concurrency 64\`, $serve_prompts prompts: **$vllm_rate completions/s**. The client, not the server, is the limit there: a load test with vLLM's bench measures \`batchlab serve\` faithfully up to that rate."
    md ""
    md "\`\`\`sh"
    md "python scripts/vllm_bench_serve.py --backend openai --base-url URL --endpoint /v1/completions --model batchlab-sim --tokenizer ~/.cache/batchlab/tiny-llama --dataset-name random --random-input-len 16 --random-output-len 16 --num-prompts $serve_prompts --request-rate inf --max-concurrency 64 --ignore-eos"
    md "\`\`\`"
fi
kill -TERM "$serve_pid"
wait "$serve_pid" || { echo "batchlab serve did not exit cleanly on SIGTERM" >&2; exit 1; }
serve_pid=""

if [[ -z "$into" ]]; then
    cat "$out"
else
    md ""
    md "(This section measured alone by \`scripts/bench_serve.sh --into docs/performance.md\` on $(date -u +%Y-%m-%d), load average at start $load_at_start.)"
    # Replace the file's section 8 (up to the next section or the closing line), or insert it
    # before the closing "Whole `just bench`" line.
    python3 - "$into" "$out" <<'PY'
import re, sys
path, section = sys.argv[1], open(sys.argv[2]).read()
text = open(path).read()
start = text.find("## 8. ")
if start >= 0:
    rest = text[start:]
    m = re.search(r"\n(## \d+\. |Whole `just bench)", rest[1:])
    end = start + 1 + m.start() + 1 if m else len(text)
    text = text[:start] + section + "\n" + text[end:]
else:
    close = text.rfind("Whole `just bench")
    text = text[:close] + section + "\n" + text[close:] if close >= 0 else text + "\n" + section
open(path, "w").write(text)
PY
    echo "wrote section 8 of $into" >&2
fi
