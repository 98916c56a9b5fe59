"""A Ray cluster of several nodes on this one machine, and the distributed launcher run on it.

    python scripts/ray_local.py --nodes 3 [--kill-shard K | --lose-node-of-shard K] [--kill-after S] -- SCENARIO --workers 3 --binary B ...

Starts `ray.cluster_utils.Cluster` (a head and NODES - 1 more raylets, each its own processes and
object store, one CPU each), runs `python -m batchlab_engines.ray_run ... --address <the cluster>`
as a separate driver, and shuts the cluster down. With `--kill-shard K`, kills shard K's actor
(`ray.kill`, as a crashed worker) once the shard has run for `--kill-after` seconds past the common
start, and prints, as one JSON line on stdout, when it killed it and when the launcher ended.
With `--lose-node-of-shard K`, removes that shard's node instead (a lost host: its raylet, object
store and workers killed at once), or the next shard's when K's is the head node.
tests/ray_run.rs runs it; docs/distributed.md shows it as the way to try the launcher without a
cluster. Exits with the launcher's exit code.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=3)
    p.add_argument("--cpus-per-node", type=int, default=1)
    p.add_argument("--kill-shard", type=int, default=None, help="kill this shard's actor (ray.kill)")
    p.add_argument(
        "--lose-node-of-shard",
        type=int,
        default=None,
        help="remove the node (its raylet, object store and workers) of this shard, or of the next shard not on the head node",
    )
    p.add_argument("--kill-after", type=float, default=2.0, help="seconds after the launcher prints its start")
    p.add_argument("launcher_args", nargs=argparse.REMAINDER)
    args = p.parse_args()
    launcher_args = [a for a in args.launcher_args if a != "--"]

    from ray.cluster_utils import Cluster

    t0 = time.monotonic()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": args.cpus_per_node})
    for _ in range(args.nodes - 1):
        cluster.add_node(num_cpus=args.cpus_per_node)
    cluster.wait_for_nodes()
    print(f"ray_local: {args.nodes} nodes up in {time.monotonic() - t0:.1f} s at {cluster.address}", file=sys.stderr, flush=True)

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent / "python")] + [x for x in [env.get("PYTHONPATH")] if x])
    cmd = [sys.executable, "-m", "batchlab_engines.ray_run", *launcher_args, "--address", cluster.address]
    killed_at = None
    try:
        losing = args.kill_shard is not None or args.lose_node_of_shard is not None
        # Only a run that loses a shard reads the launcher's lines (for its start); otherwise they
        # go straight to this stderr, a terminal keeping its redrawn display.
        launcher = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE if losing else None, text=True)
        started = None
        for line in launcher.stderr or []:
            sys.stderr.write(line)
            sys.stderr.flush()
            if started is None and line.startswith("start at "):
                started = time.monotonic()
                if losing:
                    victim = killer(cluster, started + 3.0 + args.kill_after, args)
                    killed_at = time.monotonic()
        code = launcher.wait()
        ended_at = time.monotonic()
    finally:
        cluster.shutdown()
    if killed_at is not None:
        print(json.dumps({"killed_shard": victim, "seconds_from_kill_to_end": ended_at - killed_at}))
    return code


def killer(cluster, at, args):
    """At monotonic instant `at` (the launcher's start delay is 3 s by default; its output waits in
    the pipe meanwhile), kills shard K's actor, or removes its node from the cluster. Returns the
    shard that was hit."""
    import ray

    # A second driver of the same cluster, in the launcher's namespace.
    ray.init(address=cluster.address, namespace="batchlab", logging_level="ERROR", log_to_driver=False)
    if args.kill_shard is not None:
        k = args.kill_shard
        actor = ray.get_actor(f"batchlab-shard-{k}")
        time.sleep(max(0.0, at - time.monotonic()))
        ray.kill(actor)
        ray.shutdown()
        print(f"ray_local: killed shard {k}'s actor", file=sys.stderr, flush=True)
        return k
    # The node of a shard that is not on the head: the head carries this driver and the GCS.
    head = cluster.head_node.node_id
    n = len(cluster.list_all_nodes())
    for k in [(args.lose_node_of_shard + i) % n for i in range(n)]:
        node_id = ray.get(ray.get_actor(f"batchlab-shard-{k}").host.remote())[2]
        if node_id != head:
            break
    else:
        raise SystemExit("every shard is on the head node: no node to lose")
    node = next(x for x in cluster.list_all_nodes() if x.node_id == node_id)
    ray.shutdown()
    time.sleep(max(0.0, at - time.monotonic()))
    cluster.remove_node(node, allow_graceful=False)
    print(f"ray_local: removed the node of shard {k} ({node_id[:8]})", file=sys.stderr, flush=True)
    return k


if __name__ == "__main__":
    sys.exit(main())
