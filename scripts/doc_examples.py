#!/usr/bin/env python3
"""Runs the shell examples of README.md and docs/*.md, so every example shown was seen to work.

    python3 scripts/doc_examples.py                  # the simulator's examples (a minute or two)
    python3 scripts/doc_examples.py --vllm           # and the vLLM / Python-engine ones (the venv of `just setup-vllm`; ~20 min)
    python3 scripts/doc_examples.py docs/vllm.md     # one file's
    python3 scripts/doc_examples.py --vllm --vllm-bin PATH docs/vllm.md   # with a `--features vllm` binary already built

Every line of every ```sh block runs, in order, in a scratch directory per file (so outputs such
as `results/base` or `profile.toml` never land in the clone; `scenarios/`, `tests/` and `scripts/`
are linked in). A line is skipped only when it says why: a block whose first line is
`# not run here: REASON`, or a line whose comment says `not run here`. docs/performance.md is not run:
it is written by scripts/bench.sh, and its commands are the ones that produced its numbers.

Lines are mapped onto the builds this script makes (`cargo build --release`, and with `--vllm`
`--features vllm` into target/vllm, as scripts/bench.sh does): `batchlab`, `cargo run --release
--`, `target/*/batchlab` and `just scenario F` run the matching binary (the vLLM one when the line
names a vLLM, transformers or Python-engine scenario); `cargo build` and `export PYO3_PYTHON=`
are what this script already did. A line whose comment says `exit N` must exit N; every other
line must exit 0. A line with no rule fails: a new kind of example needs a rule here or a
`# not run here` with its reason.

Stand-ins for names the docs use for the reader's own files (made in the scratch directory):
`my-plan.toml` is scenarios/throughput.toml, `my-vllm.toml` is scenarios/vllm-cpu.toml,
`profile.toml` a copy of scenarios/profiles/example.toml (until a `calibrate` line of the
same file writes its own), `baseline/` a run of scenarios/throughput.toml with `--repeat 5
--requests-jsonl`. A line needs `--vllm` when its command (not its comment) names vLLM, transformers or a
Python-engine scenario, or reads the `--output` of an earlier line of its block that needs it.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HOME = os.environ.get("BATCHLAB_HOME", os.path.expanduser("~/.cache/batchlab"))
VENV_PYTHON = os.path.join(HOME, "venv/bin/python")
NEEDS_PYTHON = re.compile(r"vllm|transformers|echo\.toml|my-vllm|PYO3_PYTHON")
EXPECTED_EXIT = re.compile(r"#.*\bexit (\d+)")
LIMIT_S = 1800
PROFILE = "scenarios/profiles/example.toml"


def blocks(path):
    """(line number, [lines]) of each ```sh block."""
    lines = open(path).read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```sh":
            start, body = i + 1, []
            i += 1
            while lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            out.append((start + 1, body))
        i += 1
    return out


def command_lines(body):
    """Joins `\\` continuations; drops blank and comment-only lines."""
    cmds, cur = [], ""
    for line in body:
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1] + " "
            continue
        cur += line
        if cur.strip() and not cur.strip().startswith("#"):
            cmds.append(cur.strip())
        cur = ""
    return cmds


def rewrite(cmd, bins):
    """The command to run for a doc line, or (None, what) when this script already did it."""
    python = bool(NEEDS_PYTHON.search(cmd.split(" #")[0]))
    b = bins["vllm"] if python else bins["sim"]
    if re.match(r"cargo build\b", cmd):
        return None, "built by this script"
    if re.match(r"export PYO3_PYTHON=", cmd):
        return None, "set by this script"
    rules = [
        (r"^cargo run --release(?: --features vllm)? --(?= )", b),
        (r"^(?:time )?just scenario (\S+)", lambda m: f"{b} run scenarios/{m.group(1)}"),
        (r"^just setup-vllm\b", f"{ROOT}/scripts/setup-vllm.sh"),
        (r"^target/(?:release|debug)/batchlab\b", b),
        (r"^batchlab\b", b),
        (r"^(?:jq|grep|python3 scripts/mutants.py --(?:list|stale|landed --list))\b", lambda m: m.group(0)),
    ]
    for pattern, repl in rules:
        if re.search(pattern, cmd):
            return re.sub(pattern, repl, cmd, count=1), None
    return False, "no rule for this line: add one to scripts/doc_examples.py, or mark it `# not run here: REASON`"


def scratch_dir(tmp, name, bins):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    for link in ("scenarios", "tests", "scripts", "python"):
        os.symlink(os.path.join(ROOT, link), os.path.join(d, link))
    os.symlink(os.path.join(ROOT, "scenarios/throughput.toml"), os.path.join(d, "my-plan.toml"))
    os.symlink(os.path.join(ROOT, "scenarios/vllm-cpu.toml"), os.path.join(d, "my-vllm.toml"))
    # A copy: a `calibrate --output profile.toml` line overwrites it.
    shutil.copy(os.path.join(ROOT, PROFILE), os.path.join(d, "profile.toml"))
    # mutants.py's --list and --stale read the clone's files: they run from there.
    return d


def main(argv):
    vllm = "--vllm" in argv
    vllm_bin = None
    if "--vllm-bin" in argv:
        i = argv.index("--vllm-bin")
        vllm_bin = os.path.abspath(argv[i + 1])
        argv = argv[:i] + argv[i + 2:]
    files = [a for a in argv if not a.startswith("--")] or ["README.md", *sorted(glob.glob("docs/*.md", root_dir=ROOT))]
    env = dict(os.environ, CARGO_TERM_COLOR="never")
    print("building target/release/batchlab", flush=True)
    subprocess.run(["cargo", "build", "--release", "--quiet"], cwd=ROOT, check=True)
    bins = {"sim": os.path.join(ROOT, "target/release/batchlab"), "vllm": None}
    # A command an example quotes for another to run (`batchlab ab --a "batchlab run …"`) finds
    # the same build.
    env["PATH"] = os.path.dirname(bins["sim"]) + os.pathsep + env.get("PATH", "")
    if vllm:
        if not os.path.exists(VENV_PYTHON):
            sys.exit(f"--vllm: no venv at {VENV_PYTHON}; run `just setup-vllm`")
        env["PYO3_PYTHON"] = VENV_PYTHON
        if vllm_bin:
            print(f"vLLM examples on {vllm_bin}", flush=True)
            bins["vllm"] = vllm_bin
        else:
            print("building target/vllm/release/batchlab (--features vllm)", flush=True)
            subprocess.run(["cargo", "build", "--release", "--quiet", "--features", "vllm"], cwd=ROOT, check=True,
                           env=dict(env, CARGO_TARGET_DIR=os.path.join(ROOT, "target/vllm")))
            bins["vllm"] = os.path.join(ROOT, "target/vllm/release/batchlab")
    tmp = tempfile.mkdtemp(prefix="batchlab-doc-examples.")
    ran = skipped = 0
    failed = []
    try:
        for doc in files:
            if doc.endswith("performance.md"):
                print(f"{doc}: not run (written by scripts/bench.sh, whose commands it shows)")
                continue
            work = scratch_dir(tmp, re.sub(r"\W", "_", doc), bins)
            for line_no, body in blocks(os.path.join(ROOT, doc)):
                first = next((l for l in body if l.strip()), "")
                if first.strip().startswith("# not run here"):
                    print(f"{doc}:{line_no}: block not run: {first.strip()[2:]}")
                    skipped += len(command_lines(body))
                    continue
                # What lines skipped for want of --vllm would have written: a later line that
                # reads it is skipped too.
                missing_outputs = []
                for cmd in command_lines(body):
                    where = f"{doc}:{line_no}"
                    if re.search(r"#.*not run here", cmd):
                        print(f"{where}: not run: {cmd}")
                        skipped += 1
                        continue
                    command = cmd.split(" #")[0]
                    needs = NEEDS_PYTHON.search(command) or any(o in command for o in missing_outputs)
                    if needs and not vllm:
                        print(f"{where}: needs --vllm: {cmd}")
                        missing_outputs += re.findall(r"--output (\S+)", command)
                        skipped += 1
                        continue
                    run_cmd, note = rewrite(cmd, bins)
                    if run_cmd is None:
                        print(f"{where}: ok ({note}): {cmd}")
                        ran += 1
                        continue
                    if run_cmd is False:
                        print(f"{where}: FAIL ({note}): {cmd}")
                        failed.append(f"{where}: {cmd}")
                        continue
                    if "baseline/" in cmd and not os.path.exists(os.path.join(work, "baseline")):
                        subprocess.run([bins["sim"], "run", "scenarios/throughput.toml", "--repeat", "5",
                                        "--requests-jsonl", "--quiet", "--output", "baseline"],
                                       cwd=work, env=env, check=True, capture_output=True)
                    cwd = ROOT if "scripts/mutants.py" in run_cmd else work
                    expected = int(m.group(1)) if (m := EXPECTED_EXIT.search(cmd)) else 0
                    t0 = time.monotonic()
                    try:
                        r = subprocess.run(["bash", "-o", "pipefail", "-c", run_cmd], cwd=cwd, env=env,
                                           capture_output=True, text=True, timeout=LIMIT_S)
                        code, out = r.returncode, r.stdout[-1500:] + r.stderr[-1500:]
                    except subprocess.TimeoutExpired:
                        code, out = None, f"timed out after {LIMIT_S} s"
                    took = time.monotonic() - t0
                    if code == expected:
                        print(f"{where}: ok (exit {code}, {took:.1f} s): {cmd}", flush=True)
                        ran += 1
                    else:
                        print(f"{where}: FAIL (exit {code}, expected {expected}, {took:.1f} s): {cmd}\n{out}", flush=True)
                        failed.append(f"{where}: {cmd}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{ran} example line(s) ran, {skipped} not run (each says why), {len(failed)} failed")
    if failed:
        print("failed:\n  " + "\n  ".join(failed))
        sys.exit(1)


if __name__ == "__main__":
    main(sys.argv[1:])
