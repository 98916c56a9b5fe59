#!/usr/bin/env python3
"""`just bench` section 7: `batchlab tune`'s recommendation against the defaults, measured.

  bench_tune.py matrix TUNE_DIR SCENARIO      print SCENARIO with a [matrix] of the defaults
                                              (batch_size 32, batch_timeout 10ms: batchlab's and
                                              guidellm's) and the recommendation
  bench_tune.py table TUNE_DIR MEASURED_DIR   the markdown: the recommendation, tune's own
                                              confirmation, and the matrix run's repeats side by side

Reads report.json files only (docs/report.md); standard library only.
"""

import json
import sys
from pathlib import Path

DEFAULT_BATCH_SIZE = 32
DEFAULT_TIMEOUT = "10ms"


def load(path):
    return json.loads((Path(path) / "report.json").read_text())


def duration(d):
    """serde's Duration `{secs, nanos}` as the DSL's text (`10ms`, `11800us`)."""
    ns = d["secs"] * 1_000_000_000 + d["nanos"]
    for unit, scale in (("s", 10**9), ("ms", 10**6), ("us", 10**3)):
        if ns % scale == 0:
            return f"{ns // scale}{unit}"
    return f"{ns}ns"


def recommendation(tune_dir):
    tune = load(tune_dir)["tune"]
    best = tune["result"]["points"][tune["result"]["best"]]
    return tune, best["batch_size"], duration(best["batch_timeout"])


def matrix(tune_dir, scenario):
    _, size, timeout = recommendation(tune_dir)
    sizes = sorted({DEFAULT_BATCH_SIZE, size}, key=lambda s: s != DEFAULT_BATCH_SIZE)
    timeouts = [DEFAULT_TIMEOUT] + ([timeout] if timeout != DEFAULT_TIMEOUT else [])
    text = Path(scenario).read_text()
    print(text)
    print("[matrix]  # bench_tune.py: the defaults and tune's recommendation")
    print(f'"batching.batch_size" = {json.dumps(sizes)}')
    print(f'"batching.batch_timeout" = {json.dumps(timeouts)}')


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def table(tune_dir, measured_dir):
    tune, size, timeout = recommendation(tune_dir)
    measured = load(measured_dir)
    name = f"batch_size={size},batch_timeout={timeout}"
    default = f"batch_size={DEFAULT_BATCH_SIZE},batch_timeout={DEFAULT_TIMEOUT}"
    runs = {}
    for b in measured["benchmarks"]:
        runs.setdefault(b["name"], []).append(b)
    repeats = {r["benchmark"]: r["metrics"] for r in measured["repeats"]}
    out = []
    out.append(
        f"`batchlab tune` searched {len(tune['result']['points'])} points in the simulator in "
        f"{tune['search_s']:.2f} s (objective: {tune['objective']}) and recommended "
        f"`batch_size = {size}`, `batch_timeout = \"{timeout}\"`. "
        + (
            "Its own confirmation on vLLM (one engine start, the recommendation first):"
            if tune["confirmed"]
            else "(A simulator scenario: no confirmation run.)"
        )
    )
    out.append("")
    if tune["confirmed"]:
        out.append("| point | predicted | measured | error % | predicted p99 ms | measured p99 ms |")
        out.append("|---|---:|---:|---:|---:|---:|")
    for c in tune["confirmed"]:
        p, m = c["predicted"], c["measured"]
        err = f"{(p - m) / m * 100:+.1f}" if p is not None and m else "-"
        out.append(
            f"| {c['point']} | {fmt(p)} | {fmt(m)} | {err} | {fmt(c['predicted_latency_p99_ms'])} "
            f"| {fmt(c['measured_latency_p99_ms'])} |"
        )
    if tune["confirmed"]:
        out.append("")
    n = max((len(v) for v in runs.values()), default=0)
    out.append(
        f"Then one `[matrix]` run of the defaults and the recommendation (and their cross), one engine "
        f"start, `--repeat {n}` interleaved (every combination once per round):"
    )
    out.append("")
    out.append(
        "| settings | goodput out tok/s per repeat | SLO attainment per repeat | goodput mean ± 95 % CI "
        "| out tok/s mean ± 95 % CI | latency p99 ms, mean |"
    )
    out.append("|---|---|---|---:|---:|---:|")

    def ci(metrics, key, digits=1):
        m = metrics.get(key)
        if not m:
            return "-"
        return f"{m['mean']:.{digits}f} ± {(m['ci95_high'] - m['ci95_low']) / 2:.{digits}f}"

    for bench, bs in runs.items():
        label = bench
        if bench == default:
            label = f"{bench} (batchlab's and guidellm's defaults)"
        if bench == name:
            label = f"**{bench} (tune's recommendation)**"
        goodput = ", ".join(fmt(b["slo"]["goodput_output_tokens_per_s"] if b.get("slo") else None) for b in bs)
        attain = ", ".join(
            f"{b['slo']['attainment'] * 100:.1f} %" if b.get("slo") and b["slo"]["attainment"] is not None else "-"
            for b in bs
        )
        metrics = repeats.get(bench, {})
        p99 = metrics.get("latency_p99_ms", {}).get("mean")
        out.append(
            f"| {label} | {goodput} | {attain} | {ci(metrics, 'goodput_output_tokens_per_s')} "
            f"| {ci(metrics, 'output_tokens_per_s')} | {fmt(p99)} |"
        )
    g = {b: repeats.get(b, {}).get("goodput_output_tokens_per_s", {}).get("mean") for b in (name, default)}
    out.append("")
    if g[name] is not None and g[default]:
        out.append(
            f"**Measured: the recommendation's goodput is {g[name] / g[default]:.2f}× the defaults' "
            f"({g[name]:.1f} against {g[default]:.1f} output tok/s under the SLO, means over the repeats).**"
        )
    print("\n".join(out))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "matrix":
        matrix(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "table":
        table(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
