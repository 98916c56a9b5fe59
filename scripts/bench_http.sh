#!/usr/bin/env bash
# The HTTP client, measured (docs/performance.md section 9; `scripts/bench.sh --only http`):
#   9a. accuracy: batchlab's client and `vllm bench serve`, each against `batchlab serve
#       --timing-log` with 1,000 streams open, every request's TTFT and ITL set against the
#       server's own send times (scripts/bench_http_compare.py);
#   9b. ceiling: streamed completions per second from one core (client pinned to CPU 0, the
#       server to CPU 1), batchlab's next to `vllm bench serve`'s, in interleaved rounds, and
#       their ratio with a 95 % interval over the rounds;
#   9c. the users' question on a real `vllm serve` of the tiny model: 1, 4, 16 and 64 prompts per
#       streamed request at the same number of prompts in flight, TTFT and throughput.
# Prints the section's body (bench.sh writes its heading). batchlab's rows need the HTTP engine
# (`engine.kind = "openai"`): without it this fails, saying so, unless `--vllm-only` asks for the
# `vllm bench serve` rows alone. `--quick`: small N, no vLLM (a smoke test). BENCH_HTTP_STREAMS,
# BENCH_HTTP_REQUESTS and BENCH_HTTP_PROMPTS change 9a's streams and requests and 9c's prompts,
# BENCH_HTTP_ROUNDS 9b's rounds. `--sections 9a,9b` runs and prints only those subsections.
set -euo pipefail
cd "$(dirname "$0")/.."

quick=false vllm_only=false sections=9a,9b,9c
while (($#)); do
    case "$1" in
        --quick) quick=true ;;
        --vllm-only) vllm_only=true ;;
        --sections) sections="${2:?--sections needs a list: 9a,9b,9c}"; shift ;;
        *) echo "usage: scripts/bench_http.sh [--quick] [--vllm-only] [--sections 9a,9b,9c]" >&2; exit 2 ;;
    esac
    shift
done
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-target}"
home="${BATCHLAB_HOME:-$HOME/.cache/batchlab}"
venv_python="$home/venv/bin/python"
work="$(mktemp -d -t batchlab-bench-http.XXXXXX)"
serve_pid="" vllm_pgid=""
cleanup() {
    [[ -n "$serve_pid" ]] && kill "$serve_pid" 2>/dev/null
    [[ -n "$vllm_pgid" ]] && kill -KILL -- "-$vllm_pgid" 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
out="$work/section.md"
md() { printf '%s\n' "$*" >>"$out"; }
log() { printf 'bench_http: %s\n' "$*" >&2; }
# When a subsection's runs started: each says so under its heading, so a subsection kept from an
# earlier run (`scripts/bench.sh --only http` with BENCH_HTTP_ARGS=--sections) keeps its own date.
started_at() { echo "$(date -u +%Y-%m-%d), load average at start $(cut -d' ' -f1-3 /proc/loadavg)"; }
measured() { md "Measured on $1."; md ""; }
compare=(python3 scripts/bench_http_compare.py)
"${compare[@]}" selftest >&2

if $quick; then
    streams="${BENCH_HTTP_STREAMS:-100}" requests="${BENCH_HTTP_REQUESTS:-400}"
    ceiling_rows=(16) ceiling_requests=400 accuracy_steps=(100) ceiling_rounds=1
else
    streams="${BENCH_HTTP_STREAMS:-1000}" requests="${BENCH_HTTP_REQUESTS:-5000}"
    ceiling_rows=(64 256) ceiling_requests=20000 accuracy_steps=(100 50) ceiling_rounds="${BENCH_HTTP_ROUNDS:-3}"
fi
prompts="${BENCH_HTTP_PROMPTS:-512}"   # 9c, per row
have_vllm=false
if ! $quick && [[ -x "$venv_python" ]]; then have_vllm=true; fi
if $vllm_only && ! $have_vllm; then echo "--vllm-only needs the venv ($venv_python; run \`just setup-vllm\`)" >&2; exit 1; fi

# `--quick`: the dev build scripts/bench.sh --quick makes (warm after `just test`), not the release
# profile's fat LTO.
if $quick; then
    cargo bench --profile dev --quiet --no-run
    bin="$CARGO_TARGET_DIR/debug/batchlab"
else
    cargo build --release --quiet
    bin="$CARGO_TARGET_DIR/release/batchlab"
fi

# batchlab's client is the HTTP engine. Fail clearly, before anything runs, if this build lacks it.
cat >"$work/probe.toml" <<'TOML'
name = "probe"
[engine]
kind = "openai"
[engine.openai]
urls = ["http://127.0.0.1:9"]
model = "m"
[batching]
batch_size = 1
max_in_flight = 2
TOML
if ! $vllm_only && ! "$bin" check "$work/probe.toml" >/dev/null 2>"$work/probe.err"; then
    cat "$work/probe.err" >&2
    echo "error: this batchlab has no HTTP engine (\`engine.kind = \"openai\"\`, \`[engine.openai]\`, \`batching.max_in_flight\`; issue 24), which every batchlab row of section 9 needs. \`scripts/bench_http.sh --vllm-only\` measures the \`vllm bench serve\` rows alone." >&2
    exit 1
fi
batchlab_rows() { ! $vllm_only; }
section_on() { [[ ",$sections," == *",$1,"* ]]; }

# ---- servers ----------------------------------------------------------------------------------
# `batchlab serve SCENARIO ARGS...`, optionally under a CPU pin (`pin=(env BATCHLAB_CPUS=1 taskset -c 1)`:
# batchlab widens an inherited mask to the cgroup's cpuset unless BATCHLAB_CPUS asks for one).
pin=()
start_serve() {
    local scenario=$1; shift
    # Emptied here, not by the background job's redirection, which may come after the wait below
    # has read the last server's `listening` line.
    : >"$work/serve.out"
    "${pin[@]}" "$bin" serve "$scenario" --port 0 --max-waiting 1000000 "$@" >"$work/serve.out" 2>"$work/serve.err" &
    serve_pid=$!
    for _ in $(seq 1 300); do grep -q listening "$work/serve.out" && break; sleep 0.1; done
    serve_url=$(sed -n 's/listening on //p' "$work/serve.out")
    [[ -n "$serve_url" ]] || { cat "$work/serve.err" >&2; exit 1; }
}
stop_serve() {
    kill -TERM "$serve_pid"
    wait "$serve_pid" || { cat "$work/serve.err" >&2; echo "batchlab serve did not exit cleanly" >&2; exit 1; }
    serve_pid=""
    cat "$work/serve.err" >&2
}
# CPU seconds the server has used so far.
serve_cpu() { awk -v hz="$(getconf CLK_TCK)" '{ split($0, a, ") "); split(a[2], f, " "); printf "%.3f\n", (f[12] + f[13]) / hz }' "/proc/$serve_pid/stat"; }

# `vllm bench serve` through scripts/vllm_bench_serve.py; its result file is $work/$1.json.
vllm_bench() {
    local name=$1; shift
    "${pin[@]}" "$venv_python" scripts/vllm_bench_serve.py --backend openai --endpoint /v1/completions \
        --dataset-name random --request-rate inf --ignore-eos --disable-tqdm \
        --save-result --save-detailed --result-dir "$work" --result-filename "$name.json" "$@" \
        >"$work/$name.out" 2>"$work/$name.err" || { tail -n 30 "$work/$name.err" >&2; exit 1; }
}
json_field() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$@"; }

# ---- 9a. accuracy ------------------------------------------------------------------------------
section_on 9a || accuracy_steps=()
log "9a: accuracy, $streams streams"
started_9a=$(started_at)
: >"$work/accuracy.jsonl"
cpu_notes=() validity_notes=()
for step in "${accuracy_steps[@]}"; do
    cat >"$work/accuracy-server.toml" <<TOML
name = "accuracy-server"
[engine.sim]
fixed_overhead = "0s"
prefill_per_token = "0s"
per_seq = "0s"
decode_step = "${step}ms"
max_num_seqs = 1024
max_num_batched_tokens = 131072
TOML
    label="$streams streams, ${step} ms steps"
    if batchlab_rows; then
        pin=(env BATCHLAB_CPUS=1 taskset -c 1) && start_serve "$work/accuracy-server.toml" --timing-log "$work/timing-batchlab.jsonl" && pin=()
        cat >"$work/accuracy-client.toml" <<TOML
name = "accuracy-client"
seed = 1
[engine]
kind = "openai"
[engine.openai]
urls = ["$serve_url"]
model = "batchlab-sim"
max_connections = $streams
[batching]
batch_size = 1
max_in_flight = $streams
[workload]
source = "synthetic"
prompt_tokens = 64
output_tokens = 16
ignore_eos = true
[profile]
kind = "throughput"
max_concurrency = $streams
[stop]
max_requests = $requests
[warmup]
requests = $streams
TOML
        rm -rf "$work/accuracy-batchlab"
        /usr/bin/time -f '%U %S' -o "$work/time" env BATCHLAB_CPUS=0 taskset -c 0 "$bin" run "$work/accuracy-client.toml" \
            --requests-jsonl --quiet --output "$work/accuracy-batchlab" >&2
        server_cpu=$(serve_cpu)
        stop_serve
        # CPU per chunk (a token's chunk each, and the usage chunk), warm-up requests included.
        log "9a $label: client CPU (user sys) $(cat "$work/time"), server CPU $server_cpu s"
        chunks=$(( (requests + streams) * 17 ))
        cpu_notes+=("$(awk -v t="$(cat "$work/time")" -v s="$server_cpu" -v n="$chunks" -v l="$label" 'BEGIN { split(t, c, " "); printf "%s: batchlab'"'"'s client %.1f µs of CPU a chunk, the server %.1f µs", l, (c[1] + c[2]) / n * 1e6, s / n * 1e6 }')")
        # What batchlab's own report says of this run's validity (its client falling behind: client_lag).
        validity_notes+=("$label: $(python3 -c '
import json, sys
b = json.load(open(sys.argv[1]))["benchmarks"][0]
lag = b["dispatch"]["client_lag"]
w = b.get("validity_warnings") or []
said = "; ".join("`%s`: %s" % (x["kind"], x["message"]) for x in w) or "none"
print("client_lag p50 %.3f ms, p99 %.3f ms; validity warnings: %s" % (lag["p50"], lag["p99"], said))
' "$work/accuracy-batchlab/report.json")")
        "${compare[@]}" batchlab "$work/timing-batchlab.jsonl" "$work/accuracy-batchlab/requests.jsonl" "$label" \
            | tee -a "$work/accuracy.jsonl" >&2
    fi
    if $have_vllm; then
        pin=(env BATCHLAB_CPUS=1 taskset -c 1) && start_serve "$work/accuracy-server.toml" --timing-log "$work/timing-vllm.jsonl"
        pin=(taskset -c 0)
        vllm_bench accuracy-vllm --base-url "$serve_url" --model batchlab-sim --tokenizer "$home/tiny-llama" \
            --random-input-len 64 --random-output-len 16 --num-prompts "$requests" --max-concurrency "$streams" \
            --request-id-prefix acc-
        pin=()
        stop_serve
        "${compare[@]}" vllm "$work/timing-vllm.jsonl" "$work/accuracy-vllm.json" acc- "$label" \
            | tee -a "$work/accuracy.jsonl" >&2
    fi
done
if section_on 9a; then
md "### 9a. Client accuracy: each request's TTFT and ITL against the server's own send times"
md ""
measured "$started_9a"
md "\`batchlab serve --timing-log\` (docs/serve.md) writes when it handed each token of each streamed request to the socket, and when the request arrived, in ns on CLOCK_MONOTONIC, the clock batchlab's records and Python's \`time.perf_counter()\` (vLLM's bench) read too: on one machine, a client's times and the server's are on one timeline. The server: a simulated engine of $(printf '%s ms' "${accuracy_steps[0]}"; printf ' and %s ms' "${accuracy_steps[@]:1}") steps (one row each; no other cost, up to 1024 sequences at once), pinned to CPU 1; the client pinned to CPU 0. Every step sends a token to each of the $streams streams at once, so a client has one step to read $streams chunks before the next come (CPU per chunk, below the table: a step's chunks take the client $streams times that). A client that falls behind by more than a step reads two of a stream's chunks together, and TCP has merged them under the later one's arrival time, so the earlier one is timed late: on a machine busy with other work, where the client needs longer than a step to read a step's chunks, that shows in the ITL columns (and \`client_lag\` in the report warns that the client fell behind). Each client keeps $streams streamed completions open (64 prompt tokens, 16 output tokens, \`ignore_eos\`; one prompt per request) for $requests requests; a server of its own each. \`scripts/bench_http_compare.py\` matches every request to the server's line (by the \`X-Request-Id\` each client sends) and takes client − server: TTFT (first chunk's arrival − the send, against first token's write − the receipt), and every gap between two tokens (ITL). Median of the signed difference, p99 and max of its absolute value. batchlab times a chunk by the kernel's receive stamp of the read that brought it and a request by the start of its write (docs/http.md, \"Timing\"); the server's receipt is its kernel's stamp too, and its send times are taken as it hands each token to the socket."
md ""
md "\`\`\`sh"
md "BATCHLAB_CPUS=1 batchlab serve server.toml --port 0 --timing-log timing.jsonl"
batchlab_rows && md "BATCHLAB_CPUS=0 batchlab run client.toml --requests-jsonl   # engine.kind = \"openai\", batch_size = 1, max_in_flight = $streams"
md "taskset -c 0 python scripts/vllm_bench_serve.py --base-url URL --model batchlab-sim --random-input-len 64 --random-output-len 16 --num-prompts $requests --max-concurrency $streams --request-rate inf --ignore-eos --save-result --save-detailed --request-id-prefix acc-"
md "python3 scripts/bench_http_compare.py batchlab|vllm timing.jsonl ...   # then: table"
md "\`\`\`"
md ""
if [[ -s "$work/accuracy.jsonl" ]]; then "${compare[@]}" table "$work/accuracy.jsonl" >>"$out"; fi
if ((${#cpu_notes[@]})); then
    md ""
    for note in "${cpu_notes[@]}"; do md "- $note (user + system time over every chunk of the run)."; done
fi
if ((${#validity_notes[@]})); then
    md ""
    md "batchlab's own verdict on each of its runs above (report.json: \`dispatch.client_lag\` and \`validity_warnings\`; a \`client_lag\` p99 above 10 ms warns that the client fell behind its load and that its numbers are in doubt):"
    md ""
    for note in "${validity_notes[@]}"; do md "- $note"; done
fi
$vllm_only && { md ""; md "batchlab's row: not measured (\`--vllm-only\`: this build has no HTTP engine yet)."; }
$have_vllm || { md ""; md "\`vllm bench serve\`'s row: not measured ($($quick && echo 'quick mode' || echo "no venv at \`$home/venv\`"))."; }
fi

# ---- 9b. ceiling -------------------------------------------------------------------------------
log "9b: ceiling on one core"
started_9b=$(started_at)
cat >"$work/ceiling-server.toml" <<'TOML'
name = "ceiling-server"
[engine.sim]
fixed_overhead = "0s"
decode_step = "0s"
prefill_per_token = "0s"
per_seq = "0s"
max_num_seqs = 1024
TOML
section_on 9b || ceiling_rounds=0
: >"$work/ceiling.txt"
# One side of a round: `ceiling_side batchlab|vllm C ROUND` appends its line to ceiling.txt.
ceiling_side() {
    local client=$1 c=$2 round=$3
    pin=(env BATCHLAB_CPUS=1 taskset -c 1) && start_serve "$work/ceiling-server.toml" && pin=()
    cpu0=$(serve_cpu)
    if [[ $client == batchlab ]]; then
        /usr/bin/time -f '%e %U %S %c %w' -o "$work/time" env BATCHLAB_CPUS=0 taskset -c 0 "$bin" run scenarios/vllm-serve.toml --quiet \
            --output "$work/ceiling-batchlab-$c" --set "engine.openai.urls=[\"$serve_url\"]" --set engine.openai.model=batchlab-sim \
            --set "engine.openai.max_connections=$c" --set batching.batch_size=1 --set "batching.max_in_flight=$c" \
            --set "profile.max_concurrency=$c" --set workload.prompt_tokens=16 --set workload.output_tokens=16 \
            --set "stop.max_requests=$ceiling_requests" --set "expect.completed=\"== $ceiling_requests\"" \
            --set "warmup.requests=$((c * 4))" >&2
        cpu1=$(serve_cpu)
        stop_serve
        read -r wall user sys involuntary voluntary <"$work/time"
        rate=$(python3 -c 'import json,sys; print("%.0f" % json.load(open(sys.argv[1]))["benchmarks"][0]["requests_per_s"])' \
            "$work/ceiling-batchlab-$c/report.json")
        rm -rf "$work/ceiling-batchlab-$c"
        # Context switches a request: the whole process's (warm-up, start and end included), over
        # every request it sent.
        switches=$(awk "BEGIN{printf \"%.2f\", ($involuntary+$voluntary)/($ceiling_requests+4*$c)}")
        echo "$round batchlab $c $rate $(awk "BEGIN{printf \"%.0f\", 100*($user+$sys)/$wall}") $(awk "BEGIN{printf \"%.0f\", 100*($cpu1-$cpu0)/$wall}") $switches" >>"$work/ceiling.txt"
    else
        pin=(taskset -c 0)
        vllm_bench "ceiling-vllm-$c" --base-url "$serve_url" --model batchlab-sim --tokenizer "$home/tiny-llama" \
            --random-input-len 16 --random-output-len 16 --num-prompts "$ceiling_requests" --max-concurrency "$c"
        pin=()
        cpu1=$(serve_cpu)
        stop_serve
        rate=$(json_field "$work/ceiling-vllm-$c.json" request_throughput)
        duration=$(json_field "$work/ceiling-vllm-$c.json" duration)
        echo "$round vllm $c $(printf '%.0f' "$rate") – $(awk "BEGIN{printf \"%.0f\", 100*($cpu1-$cpu0)/$duration}") –" >>"$work/ceiling.txt"
    fi
    log "9b round $round: $(tail -n 1 "$work/ceiling.txt")"
}
# Rounds of every row, each row's two clients back to back, which goes first alternating: a slow
# phase of this shared machine hits both sides of a ratio.
sides=()
batchlab_rows && sides+=(batchlab)
$have_vllm && sides+=(vllm)
for round in $(seq 1 "$ceiling_rounds"); do
    row=0
    for c in "${ceiling_rows[@]}"; do
        # Alternating from row to row and, for each row, from round to round.
        order=("${sides[@]}")
        if (((round + row) % 2 == 0 && ${#sides[@]} == 2)); then order=("${sides[1]}" "${sides[0]}"); fi
        for client in "${order[@]}"; do ceiling_side "$client" "$c" "$round"; done
        row=$((row + 1))
    done
done
if section_on 9b; then
md ""
md "### 9b. Client ceiling: streamed requests per second from one core"
md ""
measured "$started_9b"
md "The client pinned to CPU 0 (\`taskset -c 0\`; batchlab with \`BATCHLAB_CPUS=0\` too, since it widens an inherited mask to its cgroup's otherwise), \`batchlab serve\` on a zero-cost engine (every cost 0, up to 1024 sequences) pinned to CPU 1; one prompt per streamed request (16 prompt tokens, 16 output tokens, \`ignore_eos\`), C requests open at once, $ceiling_requests requests. batchlab: \`scenarios/vllm-serve.toml\` with \`batching.batch_size = 1\`, \`batching.max_in_flight = C\` (and warm-up 4 × C requests, not in the rate); \`vllm bench serve\`: \`--max-concurrency C --request-rate inf\`, its \`request_throughput\`. Client CPU: user + system time over wall time (\`/usr/bin/time\`; for vLLM's bench, whose process also imports vLLM and builds its dataset, not separable); server CPU: its CPU time while driven (\`/proc/PID/stat\`) over the same wall time. batchlab's client runs on \`engine.openai.threads\`' default, the CPUs it may use: 1 here (\`BATCHLAB_CPUS=0\`), with its book-keeping threads (the run's loop, the batcher's engine thread) as \`SCHED_BATCH\`, so that their wake-ups do not preempt the client thread on the one core (docs/http.md, \"The client's threads on a shared core\"); client context switches a request: voluntary + involuntary (\`/usr/bin/time\`), over every request the process sent, warm-up included. A server near 100 % means the server, not the client, set the rate. $ceiling_rounds round(s): in each, every C, its two clients back to back, which one first alternating from one C to the next and, for each C, from one round to the next (this machine's 2 CPUs are shared with other work, whose phases then hit both sides of a pair). Ratio = batchlab's rate / \`vllm bench serve\`'s in the same round and C; geometric mean over the pairs with a 95 % interval from the t-distribution on the log ratios."
md ""
md "\`\`\`sh"
md "BATCHLAB_CPUS=1 batchlab serve ceiling-server.toml --port 0"
batchlab_rows && md "BATCHLAB_CPUS=0 batchlab run scenarios/vllm-serve.toml --set 'engine.openai.urls=[\"URL\"]' --set engine.openai.model=batchlab-sim --set batching.batch_size=1 --set batching.max_in_flight=C --set profile.max_concurrency=C --set engine.openai.max_connections=C ..."
md "taskset -c 0 python scripts/vllm_bench_serve.py --base-url URL --model batchlab-sim --random-input-len 16 --random-output-len 16 --num-prompts $ceiling_requests --max-concurrency C --request-rate inf --ignore-eos"
md "\`\`\`"
md ""
md "| round | client | requests open (C) | streamed completions/s | client CPU (% of one core) | server CPU (% of one core) | client context switches a request |"
md "|---:|---|---:|---:|---:|---:|---:|"
while read -r round client c rate ccpu scpu switches; do
    name=$([[ $client == batchlab ]] && echo batchlab || echo '`vllm bench serve`')
    md "| $round | $name | $c | $rate | $ccpu | $scpu | $switches |"
done <"$work/ceiling.txt"
if $have_vllm && batchlab_rows; then
    md ""
    python3 - "$work/ceiling.txt" >>"$out" <<'PY'
import math, statistics, sys
# Two-sided 95 % quantiles of Student's t, by degrees of freedom (1..10).
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228]
rates = {}
for line in open(sys.argv[1]):
    round_, client, c, rate = line.split()[:4]
    rates[(round_, int(c), client)] = float(rate)
def geo(ratios):
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return f"**{math.exp(mean):.1f}×**"
    half = T975[min(len(logs) - 1, len(T975)) - 1] * statistics.stdev(logs) / math.sqrt(len(logs))
    return f"**{math.exp(mean):.1f}×** (95 % interval {math.exp(mean - half):.1f}–{math.exp(mean + half):.1f})"
pairs = {key[:2]: rates[key[:2] + ("batchlab",)] / rates[key[:2] + ("vllm",)]
         for key in rates if key[2] == "batchlab" and key[:2] + ("vllm",) in rates}
by_c = sorted({c for _, c in pairs})
parts = [f"C = {c}: {geo([r for (_, cc), r in pairs.items() if cc == c])}" for c in by_c]
print(f"batchlab / `vllm bench serve`, streamed completions/s: {geo(list(pairs.values()))} over all "
      f"{len(pairs)} pairs; " + "; ".join(parts) + ". Goal: ≥ 10×: "
      + ("**met**." if math.exp(statistics.fmean(math.log(r) for r in pairs.values())) >= 10 else "**not met**."))
PY
fi
$vllm_only && { md ""; md "batchlab's rows: not measured (\`--vllm-only\`: this build has no HTTP engine yet)."; }
$have_vllm || { md ""; md "\`vllm bench serve\`'s rows: not measured ($($quick && echo 'quick mode' || echo "no venv at \`$home/venv\`"))."; }

# ---- 9c. batch size over the API, on vllm serve ------------------------------------------------
fi
if ! section_on 9c; then cat "$out"; exit 0; fi
md ""
md "### 9c. The users' question: several prompts per request, or one, on \`vllm serve\`"
md ""
measured "$(started_at)"
if ! $have_vllm; then
    md "Not measured ($($quick && echo 'quick mode' || echo "no venv at \`$home/venv\`")): it needs a real \`vllm serve\`."
else
    log "9c: vllm serve of the tiny model"
    in_flight=64
    port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    vllm_url="http://127.0.0.1:$port"
    vllm_args=(--model "$home/tiny-llama" --served-model-name tiny-llama --host 127.0.0.1 --port "$port"
        --dtype float32 --max-model-len 512)
    # Its own process group (setsid), so the EngineCore and workers go with it.
    OMP_NUM_THREADS=1 VLLM_CPU_KVCACHE_SPACE=1 VLLM_NO_USAGE_STATS=1 HF_HUB_OFFLINE=1 \
        setsid "$venv_python" -m vllm.entrypoints.openai.api_server "${vllm_args[@]}" >"$work/vllm-serve.log" 2>&1 &
    vllm_pgid=$!
    started=$(date +%s)
    until curl -sf "$vllm_url/v1/models" >/dev/null; do
        kill -0 "$vllm_pgid" 2>/dev/null || { tail -n 30 "$work/vllm-serve.log" >&2; echo "vllm serve exited" >&2; exit 1; }
        (($(date +%s) - started < 600)) || { tail -n 30 "$work/vllm-serve.log" >&2; echo "vllm serve did not start in 600 s" >&2; exit 1; }
        sleep 1
    done
    log "vllm serve up after $(($(date +%s) - started)) s"
    : >"$work/batch.txt"
    # One unmeasured pass first: the server's first requests compile and warm up.
    if batchlab_rows; then
        for b in 1 4 16 64; do
            dir="$work/batch-$b"
            "$bin" run scenarios/vllm-serve.toml --quiet --output "$dir" --set "engine.openai.urls=[\"$vllm_url\"]" \
                --set "batching.batch_size=$b" --set "batching.max_in_flight=$((in_flight / b))" \
                --set "profile.max_concurrency=$in_flight" --set "engine.openai.max_connections=$in_flight" \
                --set workload.prompt_tokens=128 --set workload.output_tokens=64 --set "warmup.requests=$in_flight" \
                --set "stop.max_requests=$prompts" --set "expect.completed=\"== $prompts\"" >&2
            python3 - "$dir/report.json" "$b" "$((in_flight / b))" >>"$work/batch.txt" <<'PY'
import json, sys
b = json.load(open(sys.argv[1]))["benchmarks"][0]
d = b["distributions"]
s = b["dispatch"]["ttft_from_submit"]
print("batchlab", sys.argv[2], sys.argv[3], "%.1f %.1f %.1f %.1f %.1f %.0f %.1f" % (d["ttft"]["p50"], d["ttft"]["p99"], s["p50"], s["p99"], d["latency"]["p50"], b["output_tokens_per_s"], b["requests_per_s"]))
PY
            log "$(tail -n 1 "$work/batch.txt")"
        done
    fi
    vllm_bench batch-vllm --base-url "$vllm_url" --model tiny-llama --tokenizer "$home/tiny-llama" \
        --random-input-len 128 --random-output-len 64 --num-prompts "$prompts" --max-concurrency "$in_flight" \
        --num-warmups "$in_flight" --percentile-metrics ttft,e2el --metric-percentiles 50,99
    python3 - "$work/batch-vllm.json" "$in_flight" >>"$work/batch.txt" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print("vllm 1", sys.argv[2], "%.1f %.1f - - %.1f %.0f %.1f" % (r["median_ttft_ms"], r["p99_ttft_ms"], r["median_e2el_ms"], r["output_throughput"], r["request_throughput"]))
PY
    log "$(tail -n 1 "$work/batch.txt")"
    kill -TERM -- "-$vllm_pgid"
    for _ in $(seq 1 200); do kill -0 -- "-$vllm_pgid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL -- "-$vllm_pgid" 2>/dev/null || true
    vllm_pgid=""
    md "Does sending several prompts in one streamed \`/v1/completions\` request (a list of prompts, each timed by its own \`choices[].index\`) change TTFT or throughput against sending each alone, at the same number of prompts in flight? \`vllm serve\` of the tiny model (vLLM $("$venv_python" -c 'import importlib.metadata as m; print(m.version("vllm-cpu"))' 2>/dev/null || echo '?'), CPU backend, float32, \`OMP_NUM_THREADS=1\`; vLLM binds its engine to one core and leaves the other to the API server and the client), $in_flight prompts in flight throughout: B prompts per request and $in_flight / B requests at once. 128 prompt tokens (ids), 64 output tokens (\`ignore_eos\`), $prompts prompts measured after $in_flight of warm-up. TTFT and latency are per prompt, from its request's send; **TTFT from submit** is from the moment the prompt was submitted to batchlab's batcher, so it includes the wait for its batch to fill (a prompt of a B-prompt request waits for B − 1 others), which TTFT from the send hides: it is the answer to "how does batch size change TTFT". \`vllm bench serve\` sends each prompt as it is made, so its TTFT is from the send only. Tokens/s and prompts/s over the measured window. \`vllm bench serve\` (one prompt per request, \`--max-concurrency $in_flight\`, its own random prompts of the same lengths and $in_flight warm-up requests) is the other tools' client in the same setting."
    md ""
    md "\`\`\`sh"
    md "OMP_NUM_THREADS=1 python -m vllm.entrypoints.openai.api_server --model ~/.cache/batchlab/tiny-llama --served-model-name tiny-llama --dtype float32 --max-model-len 512 --port P"
    batchlab_rows && md "batchlab run scenarios/vllm-serve.toml --set 'engine.openai.urls=[\"http://127.0.0.1:P\"]' --set batching.batch_size=B --set batching.max_in_flight=$in_flight/B --set profile.max_concurrency=$in_flight --set workload.prompt_tokens=128 --set workload.output_tokens=64 --set stop.max_requests=$prompts ..."
    md "python scripts/vllm_bench_serve.py --base-url http://127.0.0.1:P --model tiny-llama --random-input-len 128 --random-output-len 64 --num-prompts $prompts --max-concurrency $in_flight --num-warmups $in_flight --ignore-eos"
    md "\`\`\`"
    md ""
    md "| client | prompts per request (B) | requests in flight | TTFT p50 (ms) | TTFT p99 (ms) | TTFT from submit p50 (ms) | TTFT from submit p99 (ms) | latency p50 (ms) | output tokens/s | prompts/s |"
    md "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    while read -r client b r t50 t99 s50 s99 l50 tps pps; do
        name=$([[ $client == batchlab ]] && echo batchlab || echo '`vllm bench serve`')
        md "| $name | $b | $r | $t50 | $t99 | $s50 | $s99 | $l50 | $tps | $pps |"
    done <"$work/batch.txt"
    $vllm_only && { md ""; md "batchlab's rows: not measured (\`--vllm-only\`: this build has no HTTP engine yet)."; }
fi
cat "$out"
