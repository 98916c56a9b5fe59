#!/usr/bin/env python3
"""The twin of a served model, checked against the server (issue 37; docs/simulation.md, "The twin
against vllm serve").

Against a real `vllm serve` of the tiny model (started here as tests/common/vllm_serve.rs starts it):
1. `batchlab calibrate scenarios/vllm-serve.toml` from its URL (or `--profile` from an earlier run);
2. `batchlab serve` with that profile (the twin), and with an in-process profile (`--inproc-profile`,
   from `batchlab calibrate scenarios/vllm-cpu.toml`), each serving the model's name;
3. every server driven by batchlab's own client (`batchlab run scenarios/vllm-serve.toml`, one prompt
   a request) and by `vllm bench serve` (scripts/vllm_bench_serve.py) at each concurrency of
   `--levels` and at a Poisson rate of 70 % of the real server's measured capacity (the most
   requests/s batchlab's client drew from it at a level of this run), in `--rounds` interleaved
   rounds: within a round, the servers' order alternates from one load to the next and from one
   round to the next;
4. each metric's median over the rounds (output throughput, TTFT p50, TPOT p50), the twin's error
   against the real server, the real server's spread ((max - min) / median of its rounds), and the
   knee (the lowest level whose TTFT p50 is at least twice that at the lowest level).

`--write-doc` replaces the text between the twin_check markers in docs/simulation.md with the
table, the date and the command. Run under the CPU lock (scripts that measure share 2 cores):

    flock /work/cpu.lock nice -n 10 python3 scripts/twin_check.py --batchlab target/fastrel/release/batchlab \\
        --inproc-profile inproc.toml --write-doc

`--levels 1,4 --no-poisson --profile url.toml --partial OUT.json` and then `--merge A.json B.json
--write-doc` split one check into pieces (each piece starts its own server; the table says so).
"""
import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time
import tomllib
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HOME = Path(os.environ.get("BATCHLAB_HOME", Path.home() / ".cache/batchlab"))
VENV_PY = HOME / "venv/bin/python"
MODEL = "tiny-llama"
PROMPT, OUTPUT = 64, 32
GOALS = {"output throughput": 0.05, "TTFT p50": 0.10, "TPOT p50": 0.10}
METRICS = list(GOALS)
BEGIN, END = "<!-- twin_check: begin -->", "<!-- twin_check: end -->"


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_vllm(work):
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", VLLM_CPU_KVCACHE_SPACE="1", VLLM_NO_USAGE_STATS="1",
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    out = open(work / "vllm.log", "w")
    proc = subprocess.Popen(
        [str(VENV_PY), "-m", "vllm.entrypoints.openai.api_server", "--model", str(HOME / "tiny-llama"),
         "--served-model-name", MODEL, "--host", "127.0.0.1", "--port", str(port), "--dtype", "float32",
         "--max-model-len", "512", "--enforce-eager"],
        env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    started = time.time()
    while True:
        if proc.poll() is not None:
            sys.exit(f"vllm serve exited; see {work / 'vllm.log'}")
        try:
            with urllib.request.urlopen(url + "/v1/models", timeout=2) as r:
                if MODEL in r.read().decode():
                    break
        except OSError:
            pass
        if time.time() - started > 300:
            stop(proc)
            sys.exit("vllm serve did not answer within 300 s")
        time.sleep(0.5)
    log(f"vllm serve at {url} after {time.time() - started:.0f} s")
    return proc, url


def start_twin(batchlab, profile, work, name):
    scenario = work / f"{name}-serve.toml"
    scenario.write_text(f'name = "{name}"\n[engine.sim]\nprofile = "{Path(profile).resolve()}"\n')
    proc = subprocess.Popen([batchlab, "serve", str(scenario), "--port", "0", "--model", MODEL],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    for line in proc.stdout:
        m = re.search(r"listening on (\S+)", line)
        if m:
            url = m.group(1) if m.group(1).startswith("http") else "http://" + m.group(1)
            log(f"batchlab serve ({name}) at {url}")
            return proc, url.rstrip("/")
    sys.exit(f"batchlab serve ({name}) exited before listening")


def stop(proc):
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def requests_for(load):
    """Requests a run measures: 8 waves of the concurrency, at least 96."""
    kind, value = load
    return max(96, 8 * value) if kind == "c" else 192


def run_batchlab(batchlab, url, load, out):
    kind, value = load
    n = requests_for(load)
    sets = [f'engine.openai.urls=["{url}"]', "batching.batch_size=1", f"workload.prompt_tokens={PROMPT}",
            f"workload.output_tokens={OUTPUT}", f"stop.max_requests={n}", f'expect.completed="== {n}"',
            f"warmup.requests={max(16, 2 * value) if kind == 'c' else 16}"]
    if kind == "c":
        sets += [f"batching.max_in_flight={value}", f"profile.max_concurrency={value}"]
    else:
        sets += ["batching.max_in_flight=64", 'profile.kind="poisson"', f"profile.rate={value:.2f}"]
    cmd = [batchlab, "run", "scenarios/vllm-serve.toml", "--quiet", "--output", str(out)]
    for s in sets:
        cmd += ["--set", s]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    b = json.loads((out / "report.json").read_text())["benchmarks"][0]
    d = b["distributions"]
    return {"output throughput": b["output_tokens_per_s"], "TTFT p50": d["ttft"]["p50"], "TPOT p50": d["tpot"]["p50"],
            "requests/s": b["requests_per_s"] if "requests_per_s" in b else n / b["duration_s"]}


def run_vllm_bench(url, load, out):
    kind, value = load
    n = requests_for(load)
    out.mkdir(parents=True, exist_ok=True)
    cmd = [str(VENV_PY), str(ROOT / "scripts/vllm_bench_serve.py"), "--backend", "openai", "--endpoint",
           "/v1/completions", "--base-url", url, "--model", MODEL, "--tokenizer", str(HOME / "tiny-llama"),
           "--dataset-name", "random", "--random-input-len", str(PROMPT), "--random-output-len", str(OUTPUT),
           "--num-prompts", str(n), "--ignore-eos", "--disable-tqdm", "--num-warmups", "16"]
    cmd += ["--max-concurrency", str(value), "--request-rate", "inf"] if kind == "c" else ["--request-rate", f"{value:.2f}"]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    (out / "bench.out").write_text(res.stdout + res.stderr)
    line = next((l for l in res.stdout.splitlines() if l.startswith("BENCH_RESULT ")), None)
    if res.returncode != 0 or line is None:
        sys.exit(f"vllm bench serve failed; see {out / 'bench.out'}")
    r = json.loads(line[len("BENCH_RESULT "):])
    return {"output throughput": r["output_throughput"], "TTFT p50": r["median_ttft_ms"], "TPOT p50": r["median_tpot_ms"],
            "requests/s": r["request_throughput"]}


def calibrate(batchlab, url, work):
    profile = work / "url.toml"
    started = time.time()
    res = subprocess.run([batchlab, "calibrate", "scenarios/vllm-serve.toml", "--quiet", "--output", str(profile),
                          "--runs", str(work / "calibrate-runs"), "--set", f'engine.openai.urls=["{url}"]'],
                         cwd=ROOT, capture_output=True, text=True)
    (work / "calibrate.out").write_text(res.stdout + res.stderr)
    if res.returncode != 0:
        sys.exit(f"calibrate failed:\n{res.stdout}\n{res.stderr}")
    log(res.stdout)
    return profile, time.time() - started


def measure(args, work):
    """Runs the rounds; returns the raw rows: {load, client, server, round, metrics}."""
    vllm, real_url = start_vllm(work)
    procs = [vllm]
    info = {"calibrate_s": None}
    try:
        profile = args.profile
        if profile is None:
            profile, info["calibrate_s"] = calibrate(args.batchlab, real_url, work)
        info["profile"] = str(profile)
        servers = {"real": real_url}
        twin, servers["twin"] = start_twin(args.batchlab, profile, work, "twin")
        procs.append(twin)
        if args.inproc_profile:
            inproc, servers["in-process"] = start_twin(args.batchlab, args.inproc_profile, work, "inproc")
            procs.append(inproc)
        loads = [("c", int(c)) for c in args.levels.split(",") if c]
        rows = []
        k = 0

        def run_load(load, r):
            nonlocal k
            names = list(servers)
            # Alternate which server goes first, per load and per round.
            if (k + r) % 2 == 1:
                names.reverse()
            k += 1
            for server in names:
                # The in-process profile with batchlab's client only: a row set of its own, at half
                # the cost of the run (vllm bench serve imports vLLM each time, ~10 s here).
                for client in ("batchlab",) if server == "in-process" else ("batchlab", "vllm bench serve"):
                    tag = f"{load[0]}{load[1] if load[0] == 'c' else round(load[1], 2)}-{server}-{client.split()[0]}-r{r}"
                    out = work / "runs" / tag.replace(" ", "_")
                    t0 = time.time()
                    m = (run_batchlab(args.batchlab, servers[server], load, out) if client == "batchlab"
                         else run_vllm_bench(servers[server], load, out))
                    log(f"{tag}: {m['output throughput']:.0f} tok/s, TTFT p50 {m['TTFT p50']:.2f} ms, "
                        f"TPOT p50 {m['TPOT p50']:.2f} ms ({time.time() - t0:.0f} s)")
                    rows.append({"load": list(load), "client": client, "server": server, "round": r, **m})

        for r in range(args.rounds):
            for load in loads:
                run_load(load, r)
        if args.poisson:
            # 70 % of the most requests/s the real server gave batchlab's client at a level here.
            cap = max((x["requests/s"] for x in rows if x["server"] == "real" and x["client"] == "batchlab"),
                      default=None)
            if cap is None:
                sys.exit("--poisson needs levels to measure the capacity")
            info["capacity_rps"] = cap
            for r in range(args.rounds):
                run_load(("poisson", round(0.7 * cap, 2)), r)
        info["rows"] = rows
        return info
    finally:
        for p in reversed(procs):
            stop(p)


def summarize(rows):
    """(load, client) -> server -> metric -> (median, spread, rounds)."""
    out = {}
    for row in rows:
        key = (tuple(row["load"]), row["client"])
        out.setdefault(key, {}).setdefault(row["server"], {m: [] for m in METRICS})
        for m in METRICS:
            out[key][row["server"]][m].append(row[m])
    return out


def spread(values):
    med = statistics.median(values)
    return (max(values) - min(values)) / med if med else 0.0


def table(info, command):
    s = summarize(info["rows"])
    servers = [x for x in ("twin", "in-process") if any(x in v for v in s.values())]
    lines = []
    load_name = lambda l: f"C = {l[1]}" if l[0] == "c" else f"Poisson {l[1]:.1f}/s"
    met = {x: {"goal": 0, "spread": 0, "neither": 0} for x in servers}
    for server in servers:
        lines += [f"**{'The URL-calibrated twin' if server == 'twin' else 'The in-process profile'}** against the real server"
                  " (medians over the rounds; error = (model − real) / real; spread = (max − min) / median of the real rounds):",
                  "", "| load | client | metric | real | model | error | real spread | |",
                  "|---|---|---|---:|---:|---:|---:|---|"]
        for (load, client), by in sorted(s.items(), key=lambda kv: (kv[0][0][0] != "c", kv[0][0][1], kv[0][1])):
            if server not in by:
                continue
            for m in METRICS:
                real, model = by["real"][m], by[server][m]
                rm, mm = statistics.median(real), statistics.median(model)
                err = (mm - rm) / rm if rm else 0.0
                sp = spread(real)
                verdict = "goal" if abs(err) <= GOALS[m] else ("spread" if abs(err) <= sp else "neither")
                met[server][verdict] += 1
                unit = " tok/s" if m == "output throughput" else " ms"
                fmt = (lambda v: f"{v:.0f}{unit}") if m == "output throughput" else (lambda v: f"{v:.2f}{unit}")
                mark = {"goal": "within the goal", "spread": "within the real spread only", "neither": "**outside both**"}
                lines.append(f"| {load_name(load)} | {client} | {m} | {fmt(rm)} | {fmt(mm)} | {err * 100:+.1f} % | "
                             f"{sp * 100:.1f} % | {mark[verdict]} |")
        lines.append("")
    # The knee: the lowest level whose TTFT p50 is at least twice that at the lowest level.
    lines += ["**The knee** (the lowest concurrency whose TTFT p50 is at least twice that at the lowest level):", "",
              "| client | real | " + " | ".join(servers) + " |", "|---|---:|" + "---:|" * len(servers)]
    for client in ("batchlab", "vllm bench serve"):
        cells = []
        for server in ["real"] + servers:
            levels = sorted((l[1], statistics.median(by[server]["TTFT p50"])) for (l, c), by in s.items()
                            if l[0] == "c" and c == client and server in by)
            base = levels[0][1] if levels else None
            knee = next((f"{c}" for c, t in levels if base and t >= 2 * base), f"none up to {levels[-1][0]}" if levels else "-")
            cells.append(knee)
        lines.append(f"| {client} | " + " | ".join(cells) + " |")
    lines.append("")
    n = max(r["round"] for r in info["rows"]) + 1
    lines.append(f"{n} interleaved rounds; {PROMPT} prompt and {OUTPUT} output tokens a request, one prompt a request "
                 f"(8 waves of the concurrency a run, at least 96 requests; the Poisson runs 192). "
                 + (f"Capacity: {info['capacity_rps']:.1f} requests/s (batchlab's client, the real server's best level). "
                    if info.get("capacity_rps") else "")
                 + (f"Calibrating from the URL took {info['calibrate_s']:.0f} s. " if info.get("calibrate_s") else "")
                 + "Verdicts: " + "; ".join(f"{x}: {v['goal']} within the goal, {v['spread']} within the real spread only, "
                                             f"{v['neither']} outside both" for x, v in met.items()) + ".")
    lines.append("")
    lines.append(f"Written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} by `{command}`"
                 + (f" ({info['pieces']})" if info.get("pieces") else "") + ".")
    return "\n".join(lines), met


def write_doc(text):
    doc = ROOT / "docs/simulation.md"
    body = doc.read_text()
    if BEGIN not in body or END not in body:
        sys.exit(f"docs/simulation.md has no {BEGIN} ... {END} markers")
    head, rest = body.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    doc.write_text(f"{head}{BEGIN}\n{text}\n{END}{tail}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batchlab", default=str(ROOT / "target/fastrel/release/batchlab"))
    p.add_argument("--levels", default="1,4,8,16,32")
    p.add_argument("--no-poisson", dest="poisson", action="store_false")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--profile", help="a URL-calibrated profile to use instead of calibrating")
    p.add_argument("--inproc-profile", help="a profile from `batchlab calibrate scenarios/vllm-cpu.toml`")
    p.add_argument("--work", default="/tmp/twin_check")
    p.add_argument("--partial", help="write the raw rows here (JSON) instead of a table")
    p.add_argument("--merge", nargs="+", help="partial files to merge into one table")
    p.add_argument("--write-doc", action="store_true")
    args = p.parse_args()
    command = "python3 scripts/twin_check.py " + " ".join(a if " " not in a else f"'{a}'" for a in sys.argv[1:])
    if args.merge:
        parts = [json.loads(Path(f).read_text()) for f in args.merge]
        info = {"rows": [r for part in parts for r in part["rows"]],
                "calibrate_s": next((x["calibrate_s"] for x in parts if x.get("calibrate_s")), None),
                "capacity_rps": next((x["capacity_rps"] for x in parts if x.get("capacity_rps")), None),
                "pieces": f"{len(parts)} pieces, each with its own start of the real server: "
                          + ", ".join(x.get("command", "?") for x in parts)}
    else:
        work = Path(args.work)
        work.mkdir(parents=True, exist_ok=True)
        started = time.time()
        info = measure(args, work)
        info["command"] = command
        info["seconds"] = time.time() - started
        log(f"measured in {info['seconds']:.0f} s")
        if args.partial:
            Path(args.partial).write_text(json.dumps(info))
            return
    text, _ = table(info, command)
    print(text)
    if args.write_doc:
        write_doc(text)


if __name__ == "__main__":
    main()
