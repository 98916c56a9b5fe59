"""`just bench`'s section 10: vLLM with continuous admission, against the offline ceiling and
micro-batching, on the tiny model, in one run, interleaved.

Usage: python3 scripts/bench_continuous.py --bin VLLM_BATCHLAB --inputs INPUTS_BIN --python VENV_PYTHON
       --work DIR [--rounds R] [--quick]

Each round runs, in turn (the order reversed every other round), whole processes, each one engine
start on `scenarios/vllm-cpu.toml`'s settings (in-process):
- **continuous**: `batchlab run` with `engine.vllm.admission = "continuous"` (`batch_size = 1`,
  `max_in_flight = 256`), the scenario's workload (throughput profile, at most 256 in flight);
- **micro-batched**: `batchlab run` as the scenario is, batches of 32;
- **ceiling**: `scripts/bench_raw_vllm.py --whole`: the same `LLM`, the warmup prompts, then the
  measured prompts in one `LLM.generate`;
- **floor 32**: `scripts/bench_raw_vllm.py`: the same prompts in sequential `LLM.generate`s of 32;
- **TTFT continuous / TTFT micro-batched**: `batchlab run` at a low constant rate.
Throughput is output tokens per second of the measured requests (batchlab: its report's
`output_tokens_per_s`, first measured submit to last measured completion; the ceiling: the measured
generate's tokens over its seconds). Time to report is each process's whole wall time (start,
engine start, warmup, run, report); its floor is the raw script doing the same generates: the
ceiling script for continuous admission, the batches of 32 for micro-batching. Prints markdown.
"""

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

SCENARIO = "scenarios/vllm-cpu.toml"
CONTINUOUS = [
    "--set",
    "engine.vllm.admission=continuous",
    "--set",
    "batching.batch_size=1",
    "--set",
    "batching.max_in_flight=256",
]

# Two-sided 95 % quantiles of Student's t, by degrees of freedom (1..30).
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
        2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
        2.045, 2.042]


def log(*args):
    print(*args, file=sys.stderr, flush=True)


def geo_interval(ratios):
    """Geometric mean of `ratios` and its 95 % interval: t on the log ratios."""
    logs = [math.log(r) for r in ratios]
    mean = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mean), None, None
    half = T975[min(len(logs) - 1, len(T975)) - 1] * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mean), math.exp(mean - half), math.exp(mean + half)


def timed(cmd, err_path):
    t0 = time.monotonic()
    with open(err_path, "w") as err:
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
    wall = time.monotonic() - t0
    if done.returncode != 0:
        log(open(err_path).read()[-4000:])
        sys.exit(f"{' '.join(cmd)} failed with status {done.returncode}")
    return wall, done.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--inputs", required=True)
    ap.add_argument("--python", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quick", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)

    size = ["--set", "stop.max_requests=64", "--set", "warmup.requests=8", "--set", "expect.completed=64"] if a.quick else []
    rate, rate_requests = (4.0, 16) if a.quick else (4.0, 40)
    low_rate = ["--set", "profile.kind=constant", "--set", f"profile.rates=[{rate}]", "--set",
                f"stop.max_requests={rate_requests}", "--set", "warmup.requests=4", "--set",
                f"expect.completed={rate_requests}"]

    inputs = os.path.join(a.work, "inputs.json")
    with open(inputs, "w") as f:
        subprocess.run([a.inputs, SCENARIO, *size], stdout=f, check=True)
    n_measured = len(json.load(open(inputs))["measured"])

    def batchlab(name, r, sets):
        out = os.path.join(a.work, f"{name}-{r}")
        wall, _ = timed([a.bin, "run", SCENARIO, *sets, "--quiet", "--output", out], out + ".err")
        b = json.load(open(os.path.join(out, "report.json")))["benchmarks"][0]
        assert b["counts"]["completed"] == b["counts"]["submitted"], (name, b["counts"])
        d = b["distributions"]
        return {
            "wall": wall,
            "tok_s": b["output_tokens_per_s"],
            "ttft_p50": (d.get("ttft") or {}).get("p50"),
            "ttft_p99": (d.get("ttft") or {}).get("p99"),
            "itl_p50": (d.get("itl") or {}).get("p50"),
            "batch_mean": b["batching"]["batch_size_mean"],
        }

    def raw(name, r, whole):
        wall, stdout = timed([a.python, "scripts/bench_raw_vllm.py", inputs, *(["--whole"] if whole else [])],
                             os.path.join(a.work, f"{name}-{r}.err"))
        j = json.loads(stdout.strip().splitlines()[-1])
        return {"wall": wall, "tok_s": j["measured_tokens"] / j["measured_s"]}

    sides = [
        ("continuous", lambda r: batchlab("continuous", r, CONTINUOUS + size)),
        ("micro32", lambda r: batchlab("micro32", r, size)),
        ("ceiling", lambda r: raw("ceiling", r, True)),
        ("floor32", lambda r: raw("floor32", r, False)),
        ("ttft_continuous", lambda r: batchlab("ttft_continuous", r, CONTINUOUS + low_rate)),
        ("ttft_micro32", lambda r: batchlab("ttft_micro32", r, low_rate)),
    ]
    results = {name: [] for name, _ in sides}
    for r in range(a.rounds):
        order = sides if r % 2 == 0 else sides[::-1]
        for name, run in order:
            res = run(r)
            results[name].append(res)
            log(f"round {r}: {name}: " + ", ".join(f"{k} {v:.4g}" for k, v in res.items() if v is not None))

    med = lambda name, key: statistics.median(x[key] for x in results[name])
    cont_ceiling = [c["tok_s"] / x["tok_s"] for c, x in zip(results["continuous"], results["ceiling"])]
    micro_ceiling = [c["tok_s"] / x["tok_s"] for c, x in zip(results["micro32"], results["ceiling"])]
    ttr_cont = [c["wall"] / x["wall"] for c, x in zip(results["continuous"], results["ceiling"])]
    ttr_micro = [c["wall"] / x["wall"] for c, x in zip(results["micro32"], results["floor32"])]
    ttft_ratio = [m["ttft_p50"] / c["ttft_p50"] for c, m in zip(results["ttft_continuous"], results["ttft_micro32"])]

    def fmt(g):
        mean, lo, hi = g
        return f"**{mean:.3f}**" + (f" (95 % interval {lo:.3f}–{hi:.3f})" if lo is not None else "")

    p = print
    p(f"{a.rounds} rounds, each process one engine start (in-process, tiny model, `{SCENARIO}`'s settings: "
      f"{n_measured} measured requests of 128 prompt → 64 output tokens after the warmup, at most 256 in flight), "
      "the order reversed every other round. Per round, ratio = one side over the other in that round; "
      "geometric mean of the rounds with a 95 % interval from the t-distribution on the log ratios.")
    p("")
    p("```sh")
    p(f"batchlab run {SCENARIO} {' '.join(CONTINUOUS)}   # continuous")
    p(f"batchlab run {SCENARIO}   # micro-batched: batch_size 32")
    p("venv/bin/python scripts/bench_raw_vllm.py INPUTS.json --whole   # the ceiling: one LLM.generate over the whole dataset")
    p("venv/bin/python scripts/bench_raw_vllm.py INPUTS.json           # the floor of micro-batching: LLM.generate of 32 in turn")
    p("```")
    p("")
    p("### Throughput (output tokens/s of the measured requests)")
    p("")
    p("| round | continuous | micro-batched (32) | ceiling (one `LLM.generate`) | continuous / ceiling | micro-batched / ceiling |")
    p("|---:|---:|---:|---:|---:|---:|")
    for r in range(a.rounds):
        c, m, x = results["continuous"][r], results["micro32"][r], results["ceiling"][r]
        p(f"| {r} | {c['tok_s']:.0f} | {m['tok_s']:.0f} | {x['tok_s']:.0f} | {cont_ceiling[r]:.3f} | {micro_ceiling[r]:.3f} |")
    p("")
    p(f"Continuous / ceiling: {fmt(geo_interval(cont_ceiling))} (goal ≥ 0.95); micro-batched at 32 / ceiling: "
      f"{fmt(geo_interval(micro_ceiling))}. Medians: continuous {med('continuous', 'tok_s'):.0f}, micro-batched "
      f"{med('micro32', 'tok_s'):.0f}, ceiling {med('ceiling', 'tok_s'):.0f} tokens/s. Mean batch: vLLM's step "
      f"(continuous) {med('continuous', 'batch_mean'):.1f} requests, the batcher's (micro-batched) "
      f"{med('micro32', 'batch_mean'):.1f}; ITL p50 (continuous only) {med('continuous', 'itl_p50'):.1f} ms.")
    p("")
    p(f"### TTFT at a low constant rate ({rate:g} requests/s, {rate_requests} measured requests)")
    p("")
    p("| round | continuous p50 (ms) | continuous p99 | micro-batched p50 (ms) | micro-batched p99 | micro-batched / continuous (p50) |")
    p("|---:|---:|---:|---:|---:|---:|")
    for r in range(a.rounds):
        c, m = results["ttft_continuous"][r], results["ttft_micro32"][r]
        p(f"| {r} | {c['ttft_p50']:.1f} | {c['ttft_p99']:.1f} | {m['ttft_p50']:.1f} | {m['ttft_p99']:.1f} | {ttft_ratio[r]:.2f} |")
    p("")
    p(f"Micro-batched TTFT p50 / continuous: {fmt(geo_interval(ttft_ratio))}: a micro-batch waits for "
      "`batch_timeout` (10 ms) and then for the whole batch before it, where continuous admission starts a "
      "request at vLLM's next step.")
    p("")
    p("### Time to report (whole process, start to report)")
    p("")
    p("| round | continuous (s) | its floor: ceiling script (s) | micro-batched (s) | its floor: batches of 32 (s) |")
    p("|---:|---:|---:|---:|---:|")
    for r in range(a.rounds):
        p(f"| {r} | {results['continuous'][r]['wall']:.1f} | {results['ceiling'][r]['wall']:.1f} | "
          f"{results['micro32'][r]['wall']:.1f} | {results['floor32'][r]['wall']:.1f} |")
    p("")
    p(f"Time to report / floor: continuous {fmt(geo_interval(ttr_cont))}, micro-batched {fmt(geo_interval(ttr_micro))} "
      "(≤ 1: at or under the floor).")


if __name__ == "__main__":
    main()
