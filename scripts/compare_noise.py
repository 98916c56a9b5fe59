#!/usr/bin/env python3
"""How often `batchlab compare` cries wolf on real noise (docs/compare.md, "False alarms").

Separate runs: runs scenarios/vllm-cpu.toml N times unchanged (default 6) and once with
batching.batch_size=8, each with --requests-jsonl into DIR/same-<i> and DIR/batch8, then compares
every pair of the unchanged runs (N·(N−1)/2 pairs, the earlier run as A) and the batch-size pair
both ways.

Interleaved runs: one run of the scenario with --repeat 2·N into DIR/interleaved, split into N
runs of 2 repeats each (repeat r goes to run r mod N, so every run has one repeat from each half
of the time), DIR/interleaved-<i>, whose every pair is compared the same way: the machine's drift
then falls on A and B alike.

Prints one Markdown table row per comparison: the exit code, how many rows were called better,
worse or differs, and which gated metrics regressed; and each run's output tokens/s.

    python3 scripts/compare_noise.py [--runs 6] [--dir target/compare-noise] [--reuse]

--reuse keeps a run whose report.json exists (to re-judge saved runs with a newer compare).
Needs the venv and tiny model of `just setup-vllm`; builds batchlab with --features vllm.
"""
import argparse
import itertools
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOME = os.environ.get("BATCHLAB_HOME", os.path.expanduser("~/.cache/batchlab"))
PYTHON = os.path.join(HOME, "venv", "bin", "python")
SCENARIO = "scenarios/vllm-cpu.toml"


def build():
    env = dict(os.environ, PYO3_PYTHON=PYTHON)
    subprocess.run(["cargo", "build", "--release", "--quiet", "--features", "vllm"], cwd=ROOT, env=env, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    return os.path.join(target, "release", "batchlab")


def run(binary, out, sets, reuse, extra=()):
    if reuse and os.path.exists(os.path.join(out, "report.json")):
        return
    args = [binary, "run", SCENARIO, "--quiet", "--requests-jsonl", "--output", out, *extra]
    for s in sets:
        args += ["--set", s]
    started = time.monotonic()
    subprocess.run(args, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    print(f"ran {out} in {time.monotonic() - started:.0f} s", file=sys.stderr)


def compare(binary, a, b):
    """(exit code, #better, #worse, #differs, regressed metrics) of `batchlab compare a b`."""
    o = subprocess.run([binary, "compare", a, b, "--output", os.path.dirname(b)], cwd=ROOT,
                       capture_output=True, text=True)
    if o.returncode not in (0, 4):
        sys.exit(f"compare {a} {b} exited {o.returncode}: {o.stderr}")
    counts = {"better": 0, "worse": 0, "differs": 0}
    regressed = []
    for line in o.stdout.splitlines():
        # Table rows only: not the lists below the table, nor the gate's closing line.
        if line.startswith((" ", "no gated", "A:", "B:")):
            continue
        words = line.split()
        for verdict in counts:
            if len(words) > 2 and verdict in words[2:]:
                counts[verdict] += 1
        if "REGRESSION" in line:
            regressed.append(words[1])
    return o.returncode, counts["better"], counts["worse"], counts["differs"], regressed


def split(run_dir, parts):
    """Splits a --repeat run into `parts` runs: repeat r goes to part r mod parts, renumbered."""
    with open(os.path.join(run_dir, "report.json")) as f:
        report = json.load(f)
    with open(os.path.join(run_dir, "requests.jsonl")) as f:
        records = [json.loads(line) for line in f if line.strip()]
    out = []
    for part in range(parts):
        d = f"{run_dir}-{part}"
        os.makedirs(d, exist_ok=True)
        new = lambda r: r // parts  # noqa: E731
        mine = dict(report, repeats=[], benchmarks=[dict(b, repeat=new(b["repeat"]))
                                                    for b in report["benchmarks"] if b["repeat"] % parts == part])
        with open(os.path.join(d, "report.json"), "w") as f:
            json.dump(mine, f)
        with open(os.path.join(d, "requests.jsonl"), "w") as f:
            for r in records:
                if r["repeat"] % parts == part:
                    f.write(json.dumps(dict(r, repeat=new(r["repeat"]))) + "\n")
        out.append(d)
    return out


def throughput(run_dir):
    with open(os.path.join(run_dir, "report.json")) as f:
        values = [b["output_tokens_per_s"] for b in json.load(f)["benchmarks"]]
    return " ".join(f"{v:.0f}" for v in values)


def pairs_table(binary, runs, names):
    print("| A | B | exit | better | worse | differs | regressions |")
    print("|---|---|---|---|---|---|---|")
    alarms = 0
    pairs = list(itertools.combinations(range(len(runs)), 2))
    for i, j in pairs:
        code, better, worse, differs, regressed = compare(binary, runs[i], runs[j])
        alarms += code == 4
        print(f"| {names[i]} | {names[j]} | {code} | {better} | {worse} | {differs} | {' '.join(regressed) or '-'} |")
    return alarms, len(pairs)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=6)
    p.add_argument("--dir", default=os.path.join(ROOT, "target", "compare-noise"))
    p.add_argument("--reuse", action="store_true")
    args = p.parse_args()
    binary = build()
    same = [os.path.join(args.dir, f"same-{i}") for i in range(args.runs)]
    batch8 = os.path.join(args.dir, "batch8")
    for i, out in enumerate(same):
        run(binary, out, [], args.reuse)
        if i == 0:
            # Between the unchanged runs, so that it sees the same drift of the machine.
            run(binary, batch8, ["batching.batch_size=8"], args.reuse)
    print("Separate runs, one after the other:\n")
    alarms, pairs = pairs_table(binary, same, [f"same-{i}" for i in range(args.runs)])
    for a, b, la, lb in [(same[0], batch8, "same-0 (32)", "batch8"), (batch8, same[0], "batch8", "same-0 (32)")]:
        code, better, worse, differs, regressed = compare(binary, a, b)
        print(f"| {la} | {lb} | {code} | {better} | {worse} | {differs} | {' '.join(regressed) or '-'} |")
    print(f"\nunchanged pairs that exit 4: {alarms} of {pairs} ({100 * alarms / pairs:.0f} %), alpha 0.05")
    print("output tokens/s per run: " + ", ".join(f"same-{i} {throughput(d)}" for i, d in enumerate(same))
          + f", batch8 {throughput(batch8)}")

    interleaved = os.path.join(args.dir, "interleaved")
    run(binary, interleaved, [], args.reuse, ["--repeat", str(2 * args.runs)])
    parts = split(interleaved, args.runs)
    print(f"\nInterleaved: one run with --repeat {2 * args.runs}, repeat r in run r mod {args.runs}:\n")
    alarms, pairs = pairs_table(binary, parts, [f"interleaved-{i}" for i in range(args.runs)])
    print(f"\nunchanged pairs that exit 4: {alarms} of {pairs} ({100 * alarms / pairs:.0f} %), alpha 0.05")
    print("output tokens/s per repeat: " + throughput(interleaved))


if __name__ == "__main__":
    main()
