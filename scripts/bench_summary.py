"""Summaries for scripts/bench.sh (plain Python 3, no packages).

  bench_summary.py batchlab ROUND BATCH_SIZE REPORT.json GENERATE.log  -> one JSON line
  bench_summary.py table RESULTS.jsonl                                 -> markdown (timing accuracy)

GENERATE.log has one "start end prompts" line per `LLM.generate`, written by
scripts/bench_timing/sitecustomize.py from inside the Python process (time.monotonic()).
"""

import json
import sys


def batchlab(round_, bs, report_path, log_path):
    with open(report_path) as f:
        b = json.load(f)["benchmarks"][0]
    with open(log_path) as f:
        calls = [tuple(float(x) for x in line.split()) for line in f if line.strip()]
    gen = b["distributions"]["generate"]
    lat = b["distributions"]["latency"]
    measured = calls[len(calls) - gen["count"] :]  # the warmup batches come first
    ind_generate = sum(e - s for s, e, _ in measured)
    ind_window = measured[-1][1] - measured[0][0]
    # Each request waits for its batch's generate (batches run back to back, submitted just before).
    ind_latency_mean = sum((e - s) * n for s, e, n in measured) / sum(n for _, _, n in measured)
    return {
        "side": "batchlab",
        "round": round_,
        "batch_size": bs,
        "output_tokens_per_s": b["output_tokens_per_s"],
        "completed": b["counts"]["completed"],
        "batchlab_generate_s": gen["mean"] * gen["count"] / 1e3,
        "independent_generate_s": ind_generate,
        "batchlab_window_s": b["duration_s"],
        "independent_window_s": ind_window,
        "batchlab_latency_mean_s": lat["mean"] / 1e3,
        "independent_latency_mean_s": ind_latency_mean,
        "batches": gen["count"],
    }


def pct(a, b):
    return 100.0 * (a - b) / b


def table(path):
    rows = [json.loads(line) for line in open(path) if line.strip()]
    out = []
    w = out.append
    w("## 5. Timing accuracy")
    w("")
    w("batchlab runs of `scenarios/vllm-cpu.toml` with `batching.batch_size=B`, `profile.max_concurrency=B`,")
    w("`warmup.requests=B` (one warmup batch, then batches back to back), checked against `time.monotonic()` read inside the Python process around")
    w("every `LLM.generate` (`scripts/bench_timing/sitecustomize.py` on `PYTHONPATH`, a clock batchlab")
    w("does not read): the sum of batchlab's reported generate durations vs the independently timed")
    w("generates; batchlab's measured window vs first measured generate start → last generate end;")
    w("batchlab's mean request latency vs the mean generate duration of each request's batch (batches")
    w("run back to back, each submitted just before it runs). Target: within 1 %.")
    w("")
    w("| batch size | round | batches | Σ generate: batchlab / independent (s) | error | window: batchlab / independent (s) | error | mean latency: batchlab / independent (s) | error |")
    w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    worst = 0.0
    for r in sorted((r for r in rows if r["side"] == "batchlab"), key=lambda r: (r["batch_size"], r["round"])):
        g = pct(r["batchlab_generate_s"], r["independent_generate_s"])
        win = pct(r["batchlab_window_s"], r["independent_window_s"])
        lat = pct(r["batchlab_latency_mean_s"], r["independent_latency_mean_s"])
        worst = max(worst, abs(g), abs(win), abs(lat))
        w(
            f"| {r['batch_size']} | {r['round']} | {r['batches']} "
            f"| {r['batchlab_generate_s']:.4f} / {r['independent_generate_s']:.4f} | {g:+.3f} % "
            f"| {r['batchlab_window_s']:.4f} / {r['independent_window_s']:.4f} | {win:+.3f} % "
            f"| {r['batchlab_latency_mean_s']:.4f} / {r['independent_latency_mean_s']:.4f} | {lat:+.3f} % |"
        )
    w("")
    w(f"Largest deviation: **{worst:.3f} %**.")
    print("\n".join(out))


def main():
    mode = sys.argv[1]
    if mode == "batchlab":
        print(json.dumps(batchlab(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])))
    elif mode == "table":
        table(sys.argv[2])
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()
