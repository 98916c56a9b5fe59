#!/usr/bin/env python3
"""`just bench` section 7: `batchlab tune`'s recommendation against a measured grid around it.

  bench_tune.py matrix TUNE_DIR SCENARIO      print SCENARIO with a [matrix] of batch size x batch
                                              timeout, 3 x 3 around the recommendation (one step of
                                              x2 in batch size, x10 in timeout, each way; at a bound
                                              of the searched space, two steps inward)
  bench_tune.py table TUNE_DIR MEASURED_DIR   the markdown: the search and its ties, then the grid's
                                              repeats, the recommendation against the grid's best
  bench_tune.py grid TUNE_GRID_OUTPUT         the markdown of `cargo bench --bench tune_grid`: the
                                              search against a blind grid of the same budget

Reads report.json files only (docs/report.md); standard library only.
"""

import json
import re
import sys
from pathlib import Path

WITHIN = 0.05  # the recommendation must be within 5 % of the grid's best


def load(path):
    return json.loads((Path(path) / "report.json").read_text())


def micros(d):
    return (d["secs"] * 1_000_000_000 + d["nanos"]) // 1000


def duration_us(us):
    """A timeout in µs as the DSL's text (`10ms`, `11800us`)."""
    for unit, scale in (("s", 10**6), ("ms", 10**3)):
        if us % scale == 0:
            return f"{us // scale}{unit}"
    return f"{us}us"


def recommendation(tune_dir):
    tune = load(tune_dir)["tune"]
    best = tune["result"]["points"][tune["result"]["best"]]
    return tune, best


def around(value, lo, hi, factor):
    """Three values one `factor` apart around `value`, two steps inward at a bound of [lo, hi]."""
    if value * factor > hi:
        vals = [value / factor**2, value / factor, value]
    elif value / factor < lo:
        vals = [value, value * factor, value * factor**2]
    else:
        vals = [value / factor, value, value * factor]
    return [min(max(v, lo), hi) for v in vals]


def grid_axes(tune_dir):
    tune, best = recommendation(tune_dir)
    space = tune["result"]["space"]
    sizes = sorted({round(v) for v in around(best["batch_size"], *space["batch_size"], 2)})
    raster = lambda us: max(100, -(-round(us) // 100) * 100)  # noqa: E731 (tune's 100 µs raster)
    timeouts = sorted({raster(v) for v in around(micros(best["batch_timeout"]), *space["batch_timeout_us"], 10)})
    return sizes, timeouts


def matrix(tune_dir, scenario):
    sizes, timeouts = grid_axes(tune_dir)
    print(Path(scenario).read_text())
    print("[matrix]  # bench_tune.py: a 3 x 3 grid around tune's recommendation")
    print(f'"batching.batch_size" = {json.dumps(sizes)}')
    print(f'"batching.batch_timeout" = {json.dumps([duration_us(t) for t in timeouts])}')


def fmt(v, digits=1):
    return "-" if v is None else f"{v:.{digits}f}"


def label(p):
    return f"batch_size={p['batch_size']},batch_timeout={duration_us(micros(p['batch_timeout']))}"


def table(tune_dir, measured_dir):
    tune, best = recommendation(tune_dir)
    result = tune["result"]
    name = label(best)
    measured = load(measured_dir)
    runs = {}
    for b in measured["benchmarks"]:
        runs.setdefault(b["name"], []).append(b)
    repeats = {r["benchmark"]: r["metrics"] for r in measured["repeats"]}
    tied = [p for p in result["points"] if p.get("tied")]
    noise = result.get("noise")
    out = [
        f"`batchlab tune` searched {len(result['points'])} points in the simulator in {tune['search_s']:.2f} s "
        f"(objective: {tune['objective']}) and recommended `batch_size = {best['batch_size']}`, "
        f"`batch_timeout = \"{duration_us(micros(best['batch_timeout']))}\"` (predicted goodput {fmt(best['score'])} "
        f"output tok/s, latency p99 {fmt(best['latency_p99_ms'])} ms)."
    ]
    if len(tied) > 1 and noise is not None:
        sizes = sorted({p["batch_size"] for p in tied})
        band = max(0.02, 1.96 * 2**0.5 * noise)
        out[-1] += (
            f" {len(tied)} points tied with it within the noise (scores within {band * 100:.1f} % at the scenario's "
            f"load and at 1.5× it; the best point's spread over 5 seeds was {noise * 100:.1f} %, so the 2 % floor "
            f"applied{'' if noise * 2.77 <= 0.02 else ' no more'}): batch sizes {', '.join(map(str, sizes))}, "
            f"timeouts from {duration_us(min(micros(p['batch_timeout']) for p in tied))} to "
            f"{duration_us(max(micros(p['batch_timeout']) for p in tied))}; tune says so and recommends the simplest "
            "(the smallest batch, then the longest timeout)."
        )
    n = max((len(v) for v in runs.values()), default=0)
    out += [
        "",
        f"Then the grid around it on vLLM: one `[matrix]` run, one engine start, `--repeat {n}` interleaved "
        "(every combination once per round):",
        "",
        "| settings | goodput out tok/s per repeat | SLO attainment per repeat | goodput mean ± 95 % CI "
        "| out tok/s mean | latency p99 ms, mean |",
        "|---|---|---|---:|---:|---:|",
    ]

    def mean(bench, key):
        m = repeats.get(bench, {}).get(key)
        if m:
            return m["mean"]
        vals = [v for v in (value(b, key) for b in runs[bench]) if v is not None]
        return sum(vals) / len(vals) if vals else None

    def value(b, key):
        if key == "goodput_output_tokens_per_s":
            return (b.get("slo") or {}).get(key)
        if key == "latency_p99_ms":
            return b["distributions"]["latency_ms"]["p99"] if b["distributions"].get("latency_ms") else None
        return b.get(key)

    def ci(bench, key):
        m = repeats.get(bench, {}).get(key)
        if not m:
            return fmt(mean(bench, key))
        return f"{m['mean']:.1f} ± {(m['ci95_high'] - m['ci95_low']) / 2:.1f}"

    goodput = {bench: mean(bench, "goodput_output_tokens_per_s") for bench in runs}
    top = max(goodput, key=lambda b: goodput[b] or 0.0)
    binding = 0
    for bench, bs in runs.items():
        attain = [(b.get("slo") or {}).get("attainment") for b in bs]
        if any(a is not None and a < 1.0 for a in attain):
            binding += 1
        shown = bench
        if bench == name:
            shown = f"**{bench} (tune's recommendation)**"
        if bench == top:
            shown += " (the grid's best)"
        per = ", ".join(fmt(value(b, "goodput_output_tokens_per_s")) for b in bs)
        att = ", ".join("-" if a is None else f"{a * 100:.1f} %" for a in attain)
        out.append(
            f"| {shown} | {per} | {att} | {ci(bench, 'goodput_output_tokens_per_s')} "
            f"| {fmt(mean(bench, 'output_tokens_per_s'))} | {fmt(mean(bench, 'latency_p99_ms'))} |"
        )
    out.append("")
    if binding:
        out.append(f"The SLO binds: attainment below 100 % in at least one repeat of {binding} of the {len(runs)} settings.")
    else:
        out.append(
            f"The SLO did not bind in this run: every repeat of all {len(runs)} settings met it (the machine was faster "
            "than when it was calibrated), so goodput is throughput here."
        )
    if name in goodput and goodput[name] is not None and goodput[top]:
        ratio = goodput[name] / goodput[top]
        verdict = "within" if ratio >= 1 - WITHIN else "NOT within"
        out.append("")
        out.append(
            f"**Measured: the recommendation's goodput is {ratio * 100:.1f} % of the grid's best ({fmt(goodput[name])} "
            f"against {fmt(goodput[top])} output tok/s under the SLO, `{top}`; means over the repeats): {verdict} "
            f"{WITHIN * 100:.0f} %.**"
        )
        # Whether this run's own noise can tell the two apart: the 95 % intervals of the means.
        half = {b: (lambda m: (m["ci95_high"] - m["ci95_low"]) / 2 if m else None)(
            repeats.get(b, {}).get("goodput_output_tokens_per_s")) for b in (name, top)}
        if name != top and None not in half.values():
            gap = goodput[top] - goodput[name]
            apart = gap > half[name] + half[top]
            out.append(
                f"The gap ({gap:.1f} tok/s) is {'larger' if apart else 'smaller'} than the two 95 % intervals together "
                f"(± {half[name]:.1f} and ± {half[top]:.1f}): "
                + ("this run tells them apart." if apart else "this run's noise cannot tell them apart.")
            )
    else:
        out.append("")
        out.append(f"**The recommendation `{name}` is not among the grid's benchmarks.**")
    print("\n".join(out))


def grid(path):
    rows = [dict(re.findall(r"(\w+)=(\S+)", line)) for line in Path(path).read_text().splitlines() if line.startswith("TUNE_GRID ")]
    out = [
        "| budget (points) | scenarios | search found the better point | the grid did | tie (within 1 %) "
        "| recommendation within 1 % of the grid's best or better | search best / grid best: median | worst |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['budget']} | {r['scenarios']} | {r['search_better']} | {r['grid_better']} | {r['ties']} "
            f"| {r['recommended_not_worse']} | {r['median_ratio']} | {r['worst_ratio']} |"
        )
    print("\n".join(out))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "matrix":
        matrix(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == "table":
        table(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 3 and sys.argv[1] == "grid":
        grid(sys.argv[2])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
