#!/usr/bin/env python3
"""What `batchlab compare` can see: the power table of docs/compare.md ("Power: what the gate can see").

For every shape (an engine and a number of batches per run) and every injected change, it runs
seeded pairs: A is `batchlab run SCENARIO --seed s`, B the same with `--seed s+1000` and the change,
both with --requests-jsonl, then `batchlab compare A B`, and records its exit code: 0 (pass),
4 (regression) or 5 (inconclusive); anything else is an error, reported at the end (exit 1).
Each cell of the table is the share of pairs that exited 0 / 4 / 5.

Shapes, all with the same request counts (32 per batch of the micro-batched shape), so that a
column compares across rows:
  - sim-32:   scenarios/throughput.toml as shipped (the simulator in virtual time, batches of 32);
  - sim-1:    the same with batching.batch_size = 1 (every request its own generate);
  - http-1:   scenarios/http.toml with batch_size = 1 and 32 in flight, against a `batchlab serve`
              of throughput.toml's simulated engine with every cost x4 (HTTP_SERVER_COST), started
              for each run on a free port. At the shipped costs the server's simulated steps are
              not what bounds the run (the client and the host are: costs x1.25 moved requests/s
              by -17 % on a quiet machine, -4.5 % on a loaded one); at x4 they are (x5 against x4:
              129 -> 103.5 requests/s, -20 %), so the columns' changes are the changes they name.
              The server batches continuously, so this row is also continuous admission: the
              simulator has no in-process continuous admission (engine.vllm.admission is vLLM's,
              and a sim run with max_in_flight > 1 is refused), and `batchlab serve` is where it
              stands in for it.
Changes, injected in B only:
  - errors +1 pp, +10 pp, +50 pp, all: faults.fail_batch = { probability = p } on the client
    (a failed batch of 32 fails 32 requests, as production micro-batching does; with batch
    size 1 each request fails alone);
  - p99 x3: faults.slow = { every = 8 }, slow_factor = 3 (one generate call in eight answers 3x
    later; n/a with fewer than 8 batches of 32, which have no eighth batch);
  - latency +10 %: every cost key of the simulated engine x1.1 (the server's for http-1, on top
    of its x4);
  - throughput -20 %: every cost key x1.25 (likewise).

    python3 scripts/compare_power.py                 # the full table (it prints how long it took)
    python3 scripts/compare_power.py --quick         # a smoke run: 2 pairs, 1 and 8 batches, sim only
    python3 scripts/compare_power.py --write docs/compare.md

Options: --batchlab PATH (default: build target/release/batchlab), --pairs N (sim rows, default
20), --http-pairs N (default 5: HTTP runs take real time), --pairs-128 N and --http-pairs-128 N
(the rows at 128 batches, whose pairs take seconds: default 10 and 3), --batches 1,4,8 (default
1,4,8,32,128),
--no-http, --shapes KEYS and --changes KEYS (comma lists of the keys below: only those rows or
columns, to look at a few cells; `--write` refuses them, so the published table is always whole),
--jobs N (simulator pairs run at once, at most 2; HTTP pairs always run one at a time,
beside nothing else), --alpha (default 0.05), --dir DIR (scratch, default target/compare-power;
each pair's exit code and the gated rows that decided it are saved in DIR/pairs.jsonl), --resume (take the saved pairs of an
earlier run of the same binary instead of running them again), --write FILE (replace the section between
`<!-- power-table:start -->` and `<!-- power-table:end -->` with the table). The table goes to
stdout either way; progress goes to stderr.
"""
import argparse
import concurrent.futures
import datetime
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIM_SCENARIO = "scenarios/throughput.toml"
HTTP_SCENARIO = "scenarios/http.toml"
START_MARK = "<!-- power-table:start -->"
END_MARK = "<!-- power-table:end -->"
# Requests per batch of the micro-batched shape; every shape runs this many per batch counted.
PER_BATCH = 32
# The simulated engine's cost keys (docs/scenarios.md, [engine.sim]): all of a run's time.
COST_KEYS = ["fixed_overhead", "request_overhead", "decode_step", "prefill_per_token", "per_seq",
             "context_per_1k_tokens", "tokens_squared_per_1m", "finish_overhead", "finish_per_request"]
UNITS_NS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000}
# Every run may fail requests: the change under test decides how many.
RELAXED = ["expect.errors=>=0", "expect.completed=>=0"]
RUN_TIMEOUT_S = 900
# The HTTP row's server runs throughput.toml's engine with every cost this many times over, in A
# and B alike, so that its simulated steps bound the run (see the docstring); a change's factor
# multiplies it.
HTTP_SERVER_COST = 4.0


class Shape:
    """An engine and its settings; `batches` is set per row."""

    def __init__(self, key, label, scenario, sets, http):
        self.key, self.label, self.scenario, self.sets, self.http = key, label, scenario, sets, http


SHAPES = [
    Shape("sim-32", "simulator, batches of 32", SIM_SCENARIO, [], False),
    Shape("sim-1", "simulator, batch size 1", SIM_SCENARIO, ["batching.batch_size=1"], False),
    Shape("http-1", "HTTP, batch size 1, `batchlab serve` (continuous)", HTTP_SCENARIO,
          ["batching.batch_size=1", "batching.max_in_flight=32", "profile.levels=[32]"], True),
]


class Change:
    """What B gets: `client` sets go to B's run, `cost_factor` scales the simulated engine's costs
    (the run's, or the server's for an HTTP shape). `real` changes are the issue's requirement
    (1): the gate must not pass them."""

    def __init__(self, key, label, client=(), cost_factor=None, real=False):
        self.key, self.label, self.client, self.cost_factor, self.real = key, label, list(client), cost_factor, real

    def not_applicable(self, shape, batches):
        """Why this change cannot be injected in this shape, or None."""
        if self.key == "p99x3" and not shape.http and shape_batch_size(shape) > 1 and batches < 8:
            return f"{batches} batch(es): no eighth batch to slow"
        return None


def fail(p):
    return [f"faults.fail_batch={{ probability = {p} }}"]


CHANGES = [
    Change("none", "none"),
    Change("err1", "errors +1 pp", fail(0.01)),
    Change("err10", "errors +10 pp", fail(0.1), real=True),
    Change("err50", "errors +50 pp", fail(0.5), real=True),
    Change("errall", "errors: all", fail(1.0), real=True),
    Change("p99x3", "p99 ×3 in 1 batch of 8", ["faults.slow={ every = 8 }", "faults.slow_factor=3"], real=True),
    Change("lat10", "latency +10 %", cost_factor=1.1),
    Change("thr20", "throughput −20 %", cost_factor=1.25, real=True),
]


def shape_batch_size(shape):
    return 1 if any(s == "batching.batch_size=1" for s in shape.sets) else PER_BATCH


def parse_duration_ns(text):
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)(ns|us|ms|s|m|h)", text)
    if not m:
        raise ValueError(f"not a duration: {text!r}")
    return float(m.group(1)) * UNITS_NS[m.group(2)]


def scaled_costs(binary, scenario, factor):
    """`--set`s that multiply every non-zero cost key of the scenario's simulated engine by
    `factor`, read from `batchlab check` (every default filled in)."""
    o = subprocess.run([binary, "check", scenario], cwd=ROOT, capture_output=True, text=True)
    if o.returncode != 0:
        sys.exit(f"batchlab check {scenario} failed: {o.stderr}")
    sim = tomllib.loads(o.stdout)["engine"]["sim"]
    sets = []
    for key in COST_KEYS:
        ns = parse_duration_ns(sim[key])
        if ns > 0:
            sets.append(f'engine.sim.{key}="{round(ns * factor)}ns"')
    return sets


class Server:
    """`batchlab serve` on a free loopback port, for one run."""

    def __init__(self, binary, sets):
        args = [binary, "serve", SIM_SCENARIO, "--port", "0", "--grace", "1"]
        for s in sets:
            args += ["--set", s]
        self.proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.url = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith("listening on "):
                self.url = line.split()[-1]
                break
        if self.url is None:
            self.stop()
            raise RuntimeError(f"batchlab serve did not start: {self.proc.stderr.read()[-2000:]}")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdout, self.proc.stderr):
            pipe.close()


class PairError(Exception):
    pass


def run(binary, shape, batches, seed, sets, server_sets, out):
    args = [binary, "run", shape.scenario, "--quiet", "--requests-jsonl", "--output", out, "--seed", str(seed)]
    all_sets = shape.sets + [f"stop.max_requests={PER_BATCH * batches}"] + RELAXED + sets
    server = Server(binary, server_sets) if shape.http else None
    try:
        if server:
            all_sets.append(f'engine.openai.urls=["{server.url}"]')
        for s in all_sets:
            args += ["--set", s]
        o = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        raise PairError(f"timed out after {RUN_TIMEOUT_S} s: {shlex.join(args)}")
    finally:
        if server:
            server.stop()
    if o.returncode != 0:
        raise PairError(f"exit {o.returncode}: {shlex.join(args)}\n{o.stderr.strip()[-1500:]}")


def pair(binary, shape, batches, change, index, costs, scratch):
    """Runs one seeded pair and compares it: compare's exit code (0, 4 or 5)."""
    seed = 1 + index
    base = os.path.join(scratch, f"{shape.key}-{batches}-{change.key}-{index}")
    a, b = base + "-a", base + "-b"
    try:
        b_client = list(change.client)
        a_server = costs[HTTP_SERVER_COST] if shape.http else []
        b_server = list(a_server)
        if change.cost_factor is not None:
            if shape.http:
                b_server = costs[HTTP_SERVER_COST * change.cost_factor]
            else:
                b_client.extend(costs[change.cost_factor])
        run(binary, shape, batches, seed, [], a_server, a)
        run(binary, shape, batches, seed + 1000, b_client, b_server, b)
        args = [binary, "compare", a, b]
        o = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        if o.returncode not in (0, 4, 5):
            raise PairError(f"compare exited {o.returncode}: {shlex.join(args)}\n{o.stderr.strip()[-1500:]}")
        # The rows that decided the exit (a gated regression or inconclusive), kept beside the code
        # in pairs.jsonl so that a surprising cell can be read without running it again.
        decided = [" ".join(line.split()) for line in o.stdout.splitlines()
                   if line.rstrip().endswith(("REGRESSION", "INCONCLUSIVE"))]
        return o.returncode, decided
    finally:
        for d in (a, b):
            shutil.rmtree(d, ignore_errors=True)


def pair_key(shape, batches, change, index):
    return f"{shape.key}/{batches}/{change.key}/{index}"


def binary_digest(binary):
    """What identifies the binary a saved pair came from: its content's hash."""
    h = hashlib.sha256()
    with open(binary, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def build():
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
    return os.path.join(target, "release", "batchlab")


def commit():
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    if head.returncode != 0:
        return "unknown"
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                           capture_output=True, text=True).stdout.strip()
    return head.stdout.strip() + (" with uncommitted changes" if dirty else "")


def pct(n, total):
    return f"{100 * n / total:.0f}"


def render(rows, changes, args, command, seconds):
    """The Markdown: the table, what it ran, and the three requirements, computed."""
    lines = [
        f"Generated by `{command}` on {datetime.date.today().isoformat()}, batchlab at commit {commit()}, "
        f"in {seconds / 60:.1f} minutes.",
        "",
        "Each cell: the share of seeded pairs for which `batchlab compare A B` exited **0 / 4 / 5**, in % "
        "(A with seed s, B with seed s + 1000 and the change).",
        "",
        "| shape | batches | requests | pairs | " + " | ".join(c.label for c in changes) + " |",
        "|---|---|---|---|" + "---|" * len(changes),
    ]
    for (shape, batches, pairs), cells in rows:
        out = []
        for c in changes:
            cell = cells[c.key]
            if cell["na"]:
                out.append(f"n/a ({cell['na']})")
                continue
            codes, errors = cell["codes"], cell["errors"]
            n = len(codes)
            text = "/".join(pct(codes.count(k), n) for k in (0, 4, 5)) if n else "-"
            if errors:
                text += f" ({errors} errors)"
            out.append(text)
        lines.append(f"| {shape.label} | {batches} | {PER_BATCH * batches} | {pairs} | " + " | ".join(out) + " |")

    alpha = args.alpha
    judged = [(shape, batches, c, cells[c.key]) for (shape, batches, _), cells in rows for c in changes
              if not cells[c.key]["na"] and cells[c.key]["codes"]]

    def share(cell, code):
        return cell["codes"].count(code) / len(cell["codes"])

    def name(shape, batches, c):
        return f"{shape.key} × {batches} batches, {c.label}"

    passed_real = [name(s, b, c) + f" ({100 * share(cell, 0):.0f} % exit 0)" for s, b, c, cell in judged
                   if c.real and share(cell, 0) > alpha]
    false_alarms = [name(s, b, c) + f" ({100 * share(cell, 4):.0f} % exit 4)" for s, b, c, cell in judged
                    if c.key == "none" and share(cell, 4) > alpha]
    at_128 = [(s, b, c, cell) for s, b, c, cell in judged if b == 128 and c.real]
    missed_128 = [name(s, b, c) + f" ({100 * share(cell, 4):.0f} % exit 4)" for s, b, c, cell in at_128
                  if share(cell, 4) < 1.0]

    def verdict(failures, checked):
        if not checked:
            return "not checked (no such cell in this table)"
        return "**holds**" if not failures else "**fails**: " + "; ".join(failures)

    real_labels = ", ".join(c.label for c in changes if c.real)
    lines += [
        "",
        f"Requirements (issue 31), alpha {alpha}, computed from the cells above (n/a cells left out):",
        "",
        f"1. No cell with a real change ({real_labels}) exits 0 in more than alpha of its pairs: "
        + verdict(passed_real, any(c.real for _, _, c, _ in judged)) + ".",
        "2. Unchanged pairs exit 4 in at most alpha of their pairs: "
        + verdict(false_alarms, any(c.key == "none" for _, _, c, _ in judged)) + ".",
        "3. At 128 batches, every such change exits 4 in every pair: " + verdict(missed_128, at_128) + ".",
        "",
        "How each change is injected: errors as `faults.fail_batch = { probability = p }` on the client "
        "(a failed batch of 32 fails its 32 requests); p99 ×3 as `faults.slow = { every = 8 }`, "
        "`slow_factor = 3`; latency +10 % and throughput −20 % as every cost key of the simulated engine "
        "×1.1 and ×1.25 (for the HTTP row, the server's, whose costs are ×4 in A and B alike so that its "
        f"simulated steps bound the run: ×{HTTP_SERVER_COST:g} against ×{HTTP_SERVER_COST * 1.25:g}). "
        "Every run relaxes `[expect]` "
        "(`expect.errors=>=0`, `expect.completed=>=0`). Continuous admission: the simulator has none "
        "in-process (a sim run with `batching.max_in_flight > 1` is refused, and `engine.vllm.admission` "
        "is vLLM's); the HTTP row's `batchlab serve` admits every request continuously into one running "
        "batch, so that row is the simulator standing in for it.",
    ]
    lines.append("Pairs per cell (the `pairs` column): fewer where a pair takes long, HTTP runs (real time) "
                 "and 128 batches (4096 requests); requirement 3 asks every one of them to exit 4.")
    return "\n".join(lines) + "\n"


def write_section(path, markdown):
    with open(path) as f:
        text = f.read()
    start, end = text.find(START_MARK), text.find(END_MARK)
    if start < 0 or end < start:
        sys.exit(f"{path}: no `{START_MARK}` ... `{END_MARK}` section to replace")
    text = text[:start + len(START_MARK)] + "\n" + markdown + text[end:]
    with open(path, "w") as f:
        f.write(text)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batchlab", help="the batchlab binary (default: cargo build --release)")
    p.add_argument("--pairs", type=int, default=20)
    p.add_argument("--http-pairs", type=int, default=5)
    p.add_argument("--pairs-128", type=int, default=10, help="pairs of a simulator row at 128 batches")
    p.add_argument("--http-pairs-128", type=int, default=3, help="pairs of the HTTP row at 128 batches")
    p.add_argument("--batches", default="1,4,8,32,128")
    p.add_argument("--no-http", action="store_true")
    p.add_argument("--shapes", help="only these rows' shapes (comma list of " + ", ".join(s.key for s in SHAPES) + ")")
    p.add_argument("--changes", help="only these columns (comma list of keys: " + ", ".join(c.key for c in CHANGES) + ")")
    p.add_argument("--quick", action="store_true", help="2 pairs, 1 and 8 batches, the simulator only")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--alpha", type=float, default=0.05)
    p.add_argument("--dir", default=os.path.join(ROOT, "target", "compare-power"))
    p.add_argument("--write", metavar="FILE")
    p.add_argument("--resume", action="store_true",
                   help="take the pairs DIR/pairs.jsonl saved from an earlier run of the same binary")
    args = p.parse_args()
    if args.quick:
        args.pairs, args.batches, args.no_http = 2, "1,8", True
    if args.write and (args.shapes or args.changes):
        sys.exit("--write publishes the whole table: no --shapes or --changes with it")
    wanted = {}
    for name, given, known in (("shapes", args.shapes, [s.key for s in SHAPES]),
                               ("changes", args.changes, [c.key for c in CHANGES])):
        wanted[name] = given.split(",") if given else known
        unknown = [k for k in wanted[name] if k not in known]
        if unknown:
            sys.exit(f"unknown key(s) {', '.join(unknown)}: expected some of {', '.join(known)}")
    if not 1 <= args.jobs <= 2:
        sys.exit("--jobs: 1 or 2 (the machine has 2 cores)")
    batch_counts = [int(b) for b in args.batches.split(",")]
    command = "python3 scripts/compare_power.py " + shlex.join(sys.argv[1:])
    if args.write:
        with open(args.write) as f:
            if START_MARK not in f.read():
                sys.exit(f"{args.write}: no `{START_MARK}` marker")
    started = time.monotonic()
    binary = os.path.abspath(args.batchlab) if args.batchlab else build()
    os.makedirs(args.dir, exist_ok=True)
    factors = {c.cost_factor for c in CHANGES if c.cost_factor}
    factors |= {HTTP_SERVER_COST} | {HTTP_SERVER_COST * f for f in factors}
    costs = {f: scaled_costs(binary, SIM_SCENARIO, f) for f in factors}

    shapes = [s for s in SHAPES if not (s.http and args.no_http) and s.key in wanted["shapes"]]
    changes = [c for c in CHANGES if c.key in wanted["changes"]]
    rows, tasks = [], []
    for shape in shapes:
        for batches in batch_counts:
            pairs = args.http_pairs if shape.http else args.pairs
            if batches >= 128:
                # Where a pair takes seconds (4096 requests, each its own batch or HTTP request).
                pairs = args.http_pairs_128 if shape.http else args.pairs_128
            cells = {}
            for c in changes:
                na = c.not_applicable(shape, batches)
                cells[c.key] = {"na": na, "codes": [], "errors": 0, "left": 0 if na else pairs}
                if not na:
                    tasks += [(shape, batches, c, i, cells[c.key]) for i in range(pairs)]
            rows.append(((shape, batches, pairs), cells))

    # Each pair's exit code is kept in DIR/pairs.jsonl as it comes; --resume takes those of an
    # earlier run of the same binary and settings instead of running them again.
    saved_path = os.path.join(args.dir, "pairs.jsonl")
    fingerprint = f"{binary_digest(binary)} {HTTP_SERVER_COST}"
    saved = {}
    if args.resume and os.path.exists(saved_path):
        with open(saved_path) as f:
            for line in f:
                r = json.loads(line)
                if r["fingerprint"] == fingerprint:
                    saved[r["pair"]] = r["code"]
    elif os.path.exists(saved_path):
        os.remove(saved_path)
    errors, lock = [], threading.Lock()

    def done(shape, batches, change, index, cell, code=None, error=None, decided=()):
        with lock:
            if error is None:
                cell["codes"].append(code)
                if pair_key(shape, batches, change, index) not in saved:
                    with open(saved_path, "a") as f:
                        f.write(json.dumps({"pair": pair_key(shape, batches, change, index), "code": code,
                                            "fingerprint": fingerprint, "decided": list(decided)}) + "\n")
            else:
                cell["errors"] += 1
                errors.append(f"{shape.key} × {batches} batches, {change.label}: {error}")
            cell["left"] -= 1
            if cell["left"] == 0:
                codes = cell["codes"]
                summary = " ".join(f"{k}:{codes.count(k)}" for k in (0, 4, 5))
                print(f"{time.monotonic() - started:6.0f} s  {shape.key} × {batches} batches, {change.label}: "
                      f"{summary}" + (f", {cell['errors']} errors" if cell["errors"] else ""), file=sys.stderr)

    fresh = []
    for task in tasks:
        shape, batches, change, index, cell = task
        key = pair_key(shape, batches, change, index)
        if key in saved:
            done(shape, batches, change, index, cell, code=saved[key])
        else:
            fresh.append(task)
    # The simulator's pairs (virtual time: the machine's load changes how long they take, never
    # what they give) on --jobs workers, the longest first so that the jobs end together; then
    # the HTTP pairs (real time) one at a time and beside nothing else, since a second pair's CPU
    # use is a machine drift to the speed probe of the first.
    sim = sorted((t for t in fresh if not t[0].http), key=lambda t: -t[1])
    http = sorted((t for t in fresh if t[0].http), key=lambda t: -t[1])
    print(f"{len(tasks)} pairs: {len(tasks) - len(fresh)} saved, {len(sim)} simulator pairs on {args.jobs} "
          f"job(s), then {len(http)} HTTP pairs one at a time", file=sys.stderr)
    for batch, jobs in ((sim, args.jobs), (http, 1)):
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(pair, binary, s, b, c, i, costs, args.dir): (s, b, c, i, cell)
                       for s, b, c, i, cell in batch}
            for future in concurrent.futures.as_completed(futures):
                shape, batches, change, index, cell = futures[future]
                try:
                    code, decided = future.result()
                    done(shape, batches, change, index, cell, code=code, decided=decided)
                except (PairError, RuntimeError) as e:
                    done(shape, batches, change, index, cell, error=e)

    seconds = time.monotonic() - started
    markdown = render(rows, changes, args, command, seconds)
    print(markdown)
    print(f"took {seconds:.0f} s ({len(tasks)} pairs)", file=sys.stderr)
    if errors:
        print(f"{len(errors)} pair(s) failed:", file=sys.stderr)
        for e in errors:
            print("  " + e.replace("\n", "\n    "), file=sys.stderr)
        sys.exit(1)
    if args.write:
        write_section(args.write, markdown)
        print(f"wrote the table into {args.write}", file=sys.stderr)


if __name__ == "__main__":
    main()
