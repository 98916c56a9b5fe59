#!/usr/bin/env python3
"""How often `batchlab compare` cries wolf on real noise, and whether it still sees a real change
(docs/compare.md, "False alarms on real noise").

Runs scenarios/vllm-cpu.toml (vLLM's CPU backend in-process, the tiny model, 256 requests in 8
batches of 32) with --requests-jsonl:

1. `batchlab ab` with the same command on both sides, R rounds (default 6): 2·R unchanged runs,
   A and B alternated (A B, B A, …), in DIR/same/round-<i>/{a,b}.
2. `batchlab ab` with A at batch_size 32 and B at 8, R rounds too, in DIR/batch8.

Then it judges:

- **separate runs**: the R A-side runs are R unchanged runs one after the other (a B between
  each); every pair is compared with `batchlab compare` (R·(R−1)/2 pairs, the earlier as A). A
  pair may exit 4 only if the table names the machine's drift;
- **the A/B runner**: every window of 3 consecutive rounds of step 1, and all R rounds, judged by
  `batchlab ab --reuse` (nothing re-run): the share that exits 4 must be at most alpha;
- **batch 8 against 32**: the first round's two runs with `batchlab compare`, and step 2 by
  rounds: both must exit 4.

Prints Markdown tables: each comparison's exit code, how many gated rows pass, regress or are
inconclusive, the regressed metrics, and whether drift was named; then each run's output tokens/s
and machine probe.

    python3 scripts/compare_noise.py [--rounds 6] [--dir target/compare-noise] [--reuse] [--write]
                                     [--batchlab PATH]

--write replaces the section between `<!-- noise:start -->` and `<!-- noise:end -->` of
docs/compare.md with the output, the date and the commit.

--reuse keeps a run whose report.json exists (to re-judge saved runs with a newer compare).
Needs the venv and tiny model of `just setup-vllm`; builds batchlab with --features vllm.
"""
import argparse
import contextlib
import io
import itertools
import re
import json
import os
import shlex
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOME = os.environ.get("BATCHLAB_HOME", os.path.expanduser("~/.cache/batchlab"))
PYTHON = os.path.join(HOME, "venv", "bin", "python")
SCENARIO = "scenarios/vllm-cpu.toml"
ALPHA = 0.05


def build():
    env = dict(os.environ, PYO3_PYTHON=PYTHON)
    subprocess.run(["cargo", "build", "--release", "--quiet", "--features", "vllm"], cwd=ROOT, env=env, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    return os.path.join(target, "release", "batchlab")


def command(binary, sets=()):
    args = [binary, "run", SCENARIO, "--quiet", "--requests-jsonl"]
    for s in sets:
        args += ["--set", s]
    return " ".join(shlex.quote(a) for a in args)


def summarize(proc):
    """(exit code, #pass, #regression, #inconclusive, regressed metrics, drift named) of a table."""
    if proc.returncode not in (0, 4, 5):
        sys.exit(f"exited {proc.returncode}: {proc.stderr}")
    counts = {"pass": 0, "REGRESSION": 0, "INCONCLUSIVE": 0}
    regressed = []
    for line in proc.stdout.splitlines():
        words = line.split()
        if len(words) < 4 or line.startswith(" ") or words[-1] not in counts:
            continue
        counts[words[-1]] += 1
        if words[-1] == "REGRESSION":
            regressed.append(words[1])
    drift = "machine drifted" in proc.stdout
    return proc.returncode, counts["pass"], counts["REGRESSION"], counts["INCONCLUSIVE"], regressed, drift


def compare(binary, a, b):
    return summarize(subprocess.run([binary, "compare", a, b, "--output", os.path.dirname(b)], cwd=ROOT,
                                    capture_output=True, text=True))


def ab(binary, out, a_cmd, b_cmd, rounds, reuse=True):
    args = [binary, "ab", "--a", a_cmd, "--b", b_cmd, "--rounds", str(rounds), "--output", out]
    if reuse:
        args.append("--reuse")
    started = time.monotonic()
    proc = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    print(f"ab {out} in {time.monotonic() - started:.0f} s", file=sys.stderr)
    return summarize(proc)


def window(source, rounds, out):
    """A directory whose round-<k> links to source's round-<rounds[k]>."""
    os.makedirs(out, exist_ok=True)
    for k, r in enumerate(rounds):
        link = os.path.join(out, f"round-{k}")
        if os.path.islink(link):
            os.remove(link)
        os.symlink(os.path.join(source, f"round-{r}"), link)
    return out


def row(a, b, result):
    code, passed, regressions, inconclusive, regressed, drift = result
    return (f"| {a} | {b} | {code} | {passed} | {regressions} | {inconclusive} | "
            f"{' '.join(regressed) or '-'} | {'yes' if drift else '-'} |")


HEADER = "| A | B | exit | pass | regression | inconclusive | regressed | drift named |\n|---|---|---|---|---|---|---|---|"


def tokens_and_probe(run_dir):
    with open(os.path.join(run_dir, "report.json")) as f:
        report = json.load(f)
    tokens = " ".join(f"{b['output_tokens_per_s']:.0f}" for b in report["benchmarks"])
    machine = report.get("environment", {}).get("machine") or {}
    probe = machine.get("probe_start_ms"), machine.get("probe_end_ms")
    probe = "-" if probe[0] is None else f"{probe[0]:.1f}/{probe[1]:.1f} ms"
    return f"{tokens} tok/s (probe {probe})"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=6)
    p.add_argument("--dir", default=os.path.join(ROOT, "target", "compare-noise"))
    p.add_argument("--reuse", action="store_true")
    p.add_argument("--write", action="store_true")
    p.add_argument("--batchlab", help="a batchlab binary built with --features vllm (default: build one)")
    args = p.parse_args()
    if args.write:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            measure(args)
        text = out.getvalue()
        print(text)
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
        load = open("/proc/loadavg").read().split()[:3]
        stamp = (f"Generated by `python3 scripts/compare_noise.py {shlex.join(sys.argv[1:])}` on "
                 f"{time.strftime('%Y-%m-%d', time.gmtime())} "
                 f"at commit {commit}, load average at the end {' '.join(load)}.")
        doc_path = os.path.join(ROOT, "docs", "compare.md")
        with open(doc_path) as f:
            doc = f.read()
        block = f"<!-- noise:start -->\n{stamp}\n\n{text.strip()}\n<!-- noise:end -->"
        doc = re.sub(r"<!-- noise:start -->.*?<!-- noise:end -->", lambda _: block, doc, flags=re.S)
        with open(doc_path, "w") as f:
            f.write(doc)
        print(f"wrote {doc_path}", file=sys.stderr)
    else:
        measure(args)


def measure(args):
    binary = os.path.abspath(args.batchlab) if args.batchlab else build()
    started = time.monotonic()
    same_dir, batch8_dir = os.path.join(args.dir, "same"), os.path.join(args.dir, "batch8")
    unchanged = command(binary)
    whole = ab(binary, same_dir, unchanged, unchanged, args.rounds, args.reuse)
    forward_ab = ab(binary, batch8_dir, unchanged, command(binary, ["batching.batch_size=8"]), args.rounds, args.reuse)

    runs = [os.path.join(same_dir, f"round-{r}", "a") for r in range(args.rounds)]
    print(f"Separate runs: the {args.rounds} A-side runs of `batchlab ab` (a B between each), every pair:\n")
    print(HEADER)
    unnamed = total = 0
    for i, j in itertools.combinations(range(len(runs)), 2):
        result = compare(binary, runs[i], runs[j])
        total += 1
        unnamed += result[0] == 4 and not result[5]
        print(row(f"same-{i}", f"same-{j}", result))
    print(f"\nunchanged pairs that exit 4 without naming drift: {unnamed} of {total}")

    print(f"\nThe A/B runner: windows of 3 consecutive rounds of the {args.rounds}, and all of them:\n")
    print(HEADER)
    windows = [list(range(k, k + 3)) for k in range(args.rounds - 2)] + [list(range(args.rounds))]
    alarms = 0
    for w in windows:
        name = f"rounds {w[0]}-{w[-1]}"
        if len(w) == args.rounds:
            result = whole
        else:
            out = window(same_dir, w, os.path.join(args.dir, f"window-{w[0]}"))
            result = ab(binary, out, unchanged, unchanged, len(w))
        alarms += result[0] == 4
        print(row(name + " (A)", name + " (B)", result))
    print(f"\nA/B pairs that exit 4: {alarms} of {len(windows)}, alpha {ALPHA}")

    print("\nBatch 32 (A) against batch 8 (B):\n")
    print(HEADER)
    separate = compare(binary, os.path.join(batch8_dir, "round-0", "a"), os.path.join(batch8_dir, "round-0", "b"))
    print(row("batch 32, round 0", "batch 8, round 0", separate))
    print(row(f"batch 32, {args.rounds} rounds", f"batch 8, {args.rounds} rounds", forward_ab))
    print("\noutput tokens/s per run (machine probe at start/end):")
    for r in range(args.rounds):
        for side in "ab":
            print(f"- same round {r} {side.upper()}: {tokens_and_probe(os.path.join(same_dir, f'round-{r}', side))}")
    for r in range(args.rounds):
        for side, label in (("a", "batch 32"), ("b", "batch 8")):
            print(f"- {label} round {r}: {tokens_and_probe(os.path.join(batch8_dir, f'round-{r}', side))}")
    print(f"\n{time.monotonic() - started:.0f} s in all", file=sys.stderr)


if __name__ == "__main__":
    main()
