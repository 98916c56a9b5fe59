"""One batchlab benchmark from many hosts on a Ray cluster, merged exactly (docs/distributed.md).

    PYTHONPATH=python python -m batchlab_engines.ray_run SCENARIO --workers N [--address ADDR]

The launcher is a Ray driver. It places N actors with a SPREAD placement group (one per node where
the cluster has room), ships each the batchlab binary and the scenario's directory through Ray's
object store, measures each node's clock against its own, and has actor K run
`batchlab run SCENARIO --shard K/N --start-at T` as a child process. Every shard starts at the
same instant T of the driver's clock (each given T in its own clock). The shards' output
directories come back through the object store, and `batchlab merge` makes the one report: its
percentiles come from the union of the shards' raw records.

A shard whose actor dies (killed, its process gone) or stops answering (its node lost) is a failed
shard as soon as the driver sees it, not at the end of the run: the driver interrupts the other
shards (each writes the report of what it ran), merges, and the merged report is `incomplete`
and names the lost shard.

This module is not one of the engines compiled into batchlab: it runs in the driver's Python, with
`ray` installed (the venv of `scripts/setup-vllm.sh` has it, pinned).
"""

import argparse
import ctypes
import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

# What a shard's process does not need to be shipped: the scenario's directory is tarred whole
# unless it is larger than this (then `--files-on-nodes` is the way).
MAX_SHIPPED_DIR_BYTES = 256 * 1024 * 1024
# An actor that has not answered a progress call for this long is lost (its node gone): Ray's own
# node health check takes far longer to declare a node dead.
DEFAULT_LOST_AFTER_S = 5.0
# Round trips to measure a node's clock against the driver's; the one with the shortest round
# trip bounds the offset best.
CLOCK_ROUND_TRIPS = 7
# How long a shard has, after being told to stop, to write its report before it is killed.
STOP_GRACE_S = 20.0


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="python -m batchlab_engines.ray_run",
        description="Run one batchlab scenario from N Ray actors (shards of one seeded schedule) and merge exactly.",
    )
    p.add_argument("scenario", type=Path, help="the scenario file (TOML)")
    p.add_argument("--workers", type=int, required=True, help="N: the number of shards, one actor each")
    p.add_argument("--address", default=None, help="the Ray cluster (ray.init's address; default: RAY_ADDRESS, else a local Ray)")
    p.add_argument("--output", type=Path, default=None, help="where the shards and the merged report go [default: results/<scenario>-ray]")
    p.add_argument("--binary", type=Path, default=None, help="the batchlab binary [default: `batchlab` on PATH]")
    p.add_argument(
        "--files-on-nodes",
        action="store_true",
        help="the binary and the scenario are at the same paths on every node (a shared file system): run them there, ship nothing",
    )
    p.add_argument("--set", dest="sets", action="append", default=[], metavar="KEY=VALUE", help="a scenario override, passed to every shard")
    p.add_argument("--seed", type=int, default=None, help="the scenario's master seed, for every shard")
    p.add_argument("--start-delay", type=float, default=3.0, help="seconds from the last shard ready to the common start")
    p.add_argument("--cpus-per-worker", type=float, default=1.0, help="the CPUs each actor's bundle reserves")
    p.add_argument("--lost-after", type=float, default=DEFAULT_LOST_AFTER_S, help="seconds without an answer before a shard is lost")
    p.add_argument("--namespace", default="batchlab", help="the Ray namespace of the actors, named batchlab-shard-K")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    args = p.parse_args(argv)
    if args.workers < 1:
        p.error("--workers must be at least 1")
    if not args.scenario.is_file():
        p.error(f"{args.scenario}: no such scenario file")
    return args


def find_binary(given):
    if given is not None:
        path = Path(given)
    else:
        found = shutil.which("batchlab")
        if found is None:
            raise SystemExit("batchlab is not on PATH: give --binary")
        path = Path(found)
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise SystemExit(f"{path}: not an executable batchlab binary")
    return path.resolve()


def tar_dir(directory):
    """The directory as a tar archive in memory, refused above MAX_SHIPPED_DIR_BYTES."""
    total = sum(f.stat().st_size for f in directory.rglob("*") if f.is_file())
    if total > MAX_SHIPPED_DIR_BYTES:
        raise SystemExit(
            f"{directory}: {total / 1e6:.0f} MB is too much to ship to every node; put it on a shared file system and pass --files-on-nodes"
        )
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(directory, arcname=".")
    return buf.getvalue()


def _shard_child_setup():
    """In the shard's child, before it runs batchlab: SIGKILL when the actor's process dies, so a
    killed actor leaves no shard running on (Linux's PR_SET_PDEATHSIG); and SIGINT deliverable
    again: a Ray worker ignores and blocks it, and both are inherited, so the stop the driver sends
    would never reach the shard."""
    libc = ctypes.CDLL(None, use_errno=True)
    PR_SET_PDEATHSIG = 1
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    for sig in (signal.SIGINT, signal.SIGTERM):
        libc.signal(int(sig), 0)  # SIG_DFL; signal.signal() is refused off the main thread
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})


class ShardWorker:
    """One shard: its files on its node, its `batchlab run` child, its last progress line."""

    def __init__(self, k, n):
        self.k = k
        self.n = n
        self.child = None
        self.last_line = "starting"
        self.tail = []
        self.lock = threading.Lock()
        self.workdir = Path(tempfile.mkdtemp(prefix=f"batchlab-shard-{k}-"))

    def host(self):
        return socket.gethostname(), os.getpid(), ray_node_id()

    def now(self):
        return time.time()

    def prepare(self, binary, scenario, shipped):
        """Makes the binary and the scenario runnable here; returns their paths on this node."""
        if shipped is None:
            return str(binary), str(scenario)
        binary_bytes, dir_tar, scenario_name = shipped
        exe = self.workdir / "batchlab"
        exe.write_bytes(binary_bytes)
        exe.chmod(0o755)
        files = self.workdir / "scenario"
        files.mkdir()
        with tarfile.open(fileobj=io.BytesIO(dir_tar), mode="r") as tar:
            tar.extractall(files, filter="data")
        return str(exe), str(files / scenario_name)

    def run(self, binary, scenario, start_at, clock_offset_ms, extra):
        """Runs the shard to its end; returns its exit code, its output files and its log's tail."""
        out = self.workdir / "out"
        cmd = [
            binary, "run", scenario,
            "--shard", f"{self.k}/{self.n}",
            "--start-at", f"{start_at:.6f}",
            "--clock-offset-ms", f"{clock_offset_ms:.3f}",
            "--output", str(out),
        ] + extra
        with self.lock:
            self.child = subprocess.Popen(
                cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, preexec_fn=_shard_child_setup
            )
        for line in self.child.stderr:
            line = line.rstrip("\n")
            if not line:
                continue
            with self.lock:
                # The progress lines are batchlab's time-stamped ones; the rest (the table, the
                # files written) goes to the tail only.
                if line.startswith("[") and not line.endswith("] stopping engine"):
                    self.last_line = line
                self.tail = (self.tail + [line])[-40:]
        code = self.child.wait()
        files = {}
        if out.is_dir():
            for f in sorted(out.iterdir()):
                if f.is_file():
                    files[f.name] = f.read_bytes()
        shutil.rmtree(self.workdir, ignore_errors=True)
        return {
            "k": self.k,
            "exit": code,
            "files": files,
            "tail": self.tail,
            "last": self.last_line,
            "host": socket.gethostname(),
        }

    def progress(self):
        with self.lock:
            return self.last_line

    def stop(self):
        """Interrupts the shard as Ctrl-C would: it writes the report of what it ran."""
        with self.lock:
            if self.child is not None and self.child.poll() is None:
                self.child.send_signal(signal.SIGINT)
                return True
        return False


def ray_node_id():
    import ray

    return ray.get_runtime_context().get_node_id()


def measure_offset(ray, actor):
    """This node's clock minus the driver's, in ms, from the round trip of CLOCK_ROUND_TRIPS calls
    with the shortest time (NTP's rule): (offset, half that round trip)."""
    best = None
    for _ in range(CLOCK_ROUND_TRIPS):
        t0 = time.time()
        remote = ray.get(actor.now.remote())
        t2 = time.time()
        rtt = t2 - t0
        if best is None or rtt < best[1]:
            best = (remote - (t0 + t2) / 2.0, rtt)
    return best[0] * 1000.0, best[1] * 500.0


class Display:
    """A line per shard: on a terminal redrawn in place every second, else printed every 5 s."""

    def __init__(self, n, quiet):
        self.n = n
        self.quiet = quiet
        self.tty = sys.stderr.isatty()
        self.drawn = 0
        self.last = 0.0

    def show(self, states, force=False):
        if self.quiet:
            return
        now = time.monotonic()
        if not force and now - self.last < (1.0 if self.tty else 5.0):
            return
        self.last = now
        lines = [f"shard {k}/{self.n} {states[k]}" for k in range(self.n)]
        if self.tty:
            if self.drawn:
                sys.stderr.write(f"\x1b[{self.drawn}F")
            for line in lines:
                sys.stderr.write("\x1b[2K" + line[:200] + "\n")
            self.drawn = len(lines)
        else:
            for line in lines:
                sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def say(self, text):
        self.drawn = 0
        print(text, file=sys.stderr, flush=True)


def run(args):
    """The whole run; returns the process's exit code (batchlab merge's)."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    n = args.workers
    binary = find_binary(args.binary)
    scenario = args.scenario.resolve()
    out = (args.output or Path("results") / f"{scenario.stem}-ray").resolve()
    out.mkdir(parents=True, exist_ok=True)
    display = Display(n, args.quiet)

    # The actor class travels by value, so the nodes need not have this package installed.
    if __name__ != "__main__":
        ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    if not ray.is_initialized():
        ray.init(address=args.address, namespace=args.namespace, logging_level="ERROR", log_to_driver=False)
    pg = placement_group([{"CPU": args.cpus_per_worker}] * n, strategy="SPREAD")
    if not pg.wait(timeout_seconds=60):
        remove_placement_group(pg)
        raise SystemExit(f"Ray could not place {n} workers of {args.cpus_per_worker} CPU each within 60 s: {ray.cluster_resources()}")
    worker_cls = ray.remote(max_concurrency=4)(ShardWorker)
    actors = [
        worker_cls.options(
            num_cpus=args.cpus_per_worker,
            scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group=pg, placement_group_bundle_index=k),
            name=f"batchlab-shard-{k}",
        ).remote(k, n)
        for k in range(n)
    ]
    try:
        return drive(ray, args, n, binary, scenario, out, actors, display)
    finally:
        for a in actors:
            try:
                ray.kill(a)
            except Exception:
                pass
        remove_placement_group(pg)


def drive(ray, args, n, binary, scenario, out, actors, display):
    hosts = ray.get([a.host.remote() for a in actors])
    nodes = len({h[2] for h in hosts})
    display.say(f"{n} shards on {nodes} node(s): " + ", ".join(f"{k}@{h[0]}:{h[2][:8]}" for k, h in enumerate(hosts)))

    shipped = None
    if not args.files_on_nodes:
        shipped = ray.put((binary.read_bytes(), tar_dir(scenario.parent), scenario.name))
    paths = ray.get([a.prepare.remote(str(binary), str(scenario), shipped) for a in actors])
    offsets = [measure_offset(ray, a) for a in actors]

    extra = []
    for s in args.sets:
        extra += ["--set", s]
    if args.seed is not None:
        extra += ["--seed", str(args.seed)]
    start_at = time.time() + args.start_delay
    refs = {}
    for k, a in enumerate(actors):
        exe, scen = paths[k]
        offset_ms = offsets[k][0]
        # T of the driver's clock is T + offset in the node's.
        refs[a.run.remote(exe, scen, start_at + offset_ms / 1000.0, offset_ms, extra)] = k
    display.say(
        f"start at {time.strftime('%H:%M:%S', time.localtime(start_at))} (+{args.start_delay:.1f} s); clock offsets (ms): "
        + ", ".join(f"{o:+.2f} ±{e:.2f}" for o, e in offsets)
    )

    results = {}
    lost = {}
    states = {k: "waiting for the start" for k in range(n)}
    answered = {k: time.monotonic() for k in range(n)}
    pending_progress = {}
    stopping = False
    while len(results) + len(lost) < n:
        ready, _ = ray.wait(list(refs), num_returns=1, timeout=0.5)
        for ref in ready:
            k = refs.pop(ref)
            try:
                results[k] = ray.get(ref)
                states[k] = f"ended (exit {results[k]['exit']}): {results[k]['last']}"
            except Exception as e:  # the actor died: RayActorError and its kin
                lost[k] = f"its actor died or became unreachable ({type(e).__name__})"
                states[k] = "LOST: " + lost[k]
        # Progress, which doubles as the liveness check of a shard whose node may be gone.
        now = time.monotonic()
        for k, a in enumerate(actors):
            if k in results or k in lost:
                continue
            if k not in pending_progress:
                pending_progress[k] = a.progress.remote()
            done, _ = ray.wait([pending_progress[k]], timeout=0)
            if done:
                try:
                    states[k] = ray.get(done[0])
                    answered[k] = now
                except Exception as e:
                    lost[k] = f"its actor died or became unreachable ({type(e).__name__})"
                    states[k] = "LOST: " + lost[k]
                del pending_progress[k]
            elif now - answered[k] > args.lost_after:
                lost[k] = f"no answer for {args.lost_after:.0f} s (its node lost?)"
                states[k] = "LOST: " + lost[k]
                for ref, kk in list(refs.items()):
                    if kk == k:
                        del refs[ref]
        if lost and not stopping:
            stopping = True
            stop_sent = time.monotonic()
            display.say(f"shard(s) {', '.join(str(k) for k in sorted(lost))} lost: stopping the others, then merging")
            for k, a in enumerate(actors):
                if k not in results and k not in lost:
                    a.stop.remote()
        if stopping and time.monotonic() - stop_sent > STOP_GRACE_S:
            for ref, k in list(refs.items()):
                lost[k] = "did not stop within its grace after another shard was lost"
                del refs[ref]
        display.show(states, force=False)
    display.show(states, force=True)

    shard_dirs = []
    for k in range(n):
        d = out / f"shard-{k}"
        shutil.rmtree(d, ignore_errors=True)
        if k in results:
            d.mkdir(parents=True)
            for name, data in results[k]["files"].items():
                (d / name).write_bytes(data)
            (d / "shard.log").write_text("\n".join(results[k]["tail"]) + "\n")
            shard_dirs.append(str(d))
    for k, why in sorted(lost.items()):
        display.say(f"shard {k}/{n}: failed, {why}")
        # batchlab merge names it failed, with this reason (not merely missing).
        d = out / f"shard-{k}"
        d.mkdir(parents=True)
        (d / "shard-failed.json").write_text(json.dumps({"k": k, "n": n, "reason": f"lost by the Ray launcher: {why}"}))
        shard_dirs.append(str(d))
    merged = out / "merged"
    cmd = [str(binary), "merge", *shard_dirs, "--expect", str(n), "--output", str(merged)]
    display.say("merging: " + " ".join(cmd))
    return subprocess.run(cmd).returncode


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    sys.exit(run(args))


if __name__ == "__main__":
    main()
