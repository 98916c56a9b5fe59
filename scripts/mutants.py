#!/usr/bin/env python3
"""Deliberately broken variants, and the test that must catch each.

Every property test, loom model and snapshot in batchlab was seen to fail against a broken
variant of the code it guards. This script keeps that evidence reproducible: it applies each
mutation in turn, runs the named test, checks that it FAILS, and restores the file.

    python3 scripts/mutants.py            # all
    python3 scripts/mutants.py loom       # only those whose name contains "loom"
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOOM = {"RUSTFLAGS": "--cfg loom", "CARGO_TARGET_DIR": "target/loom"}

# name, file, original text, broken text, cargo test arguments, extra environment
MUTANTS = [
    ("core: batch larger than batch_size", "src/batcher/core.rs",
     "let n = self.queue.len().min(self.config.batch_size);", "let n = self.queue.len();",
     ["--test", "batcher_core_props"], {}),
    ("core: partial batch waits twice the timeout", "src/batcher/core.rs",
     "if now < oldest.saturating_add(self.config.batch_timeout) {",
     "if now < oldest.saturating_add(self.config.batch_timeout * 2) {",
     ["--test", "batcher_core_props"], {}),
    ("core: extra outputs accepted", "src/batcher/core.rs",
     "if outputs.len() != members.len() {", "if outputs.len() < members.len() {",
     ["--test", "batcher_core_props"], {}),
    ("core: cancelled request gets no outcome", "src/batcher/core.rs",
     "self.outcomes.push_back((id, Err(RequestError::Cancelled)));", "",
     ["--test", "batcher_core_props"], {}),
    ("core: second batch while one is in flight", "src/batcher/core.rs",
     "if self.in_flight.is_some() || self.queue.is_empty() {", "if self.queue.is_empty() {",
     ["--test", "batcher_core_props"], {}),
    ("core: outputs matched by position despite ids", "src/batcher/core.rs",
     "    if with_ids == 0 {\n        return Ok(outputs);", "    if with_ids < usize::MAX {\n        return Ok(outputs);",
     ["--test", "batcher_core_props"], {}),
    ("shell: lost wake-up (no notify after a state change)", "src/batcher/shell.rs",
     "        if notify {\n            self.notify_waiting(waiting);\n        }\n", "        let _ = (notify, waiting);\n",
     ["--release", "--test", "loom_batcher"], LOOM),
    # In the threaded shell the engine thread itself runs generate and shutdown, so this one can
    # only show in a driver that polls while a generate is out: the core's property test.
    ("core: engine shut down while a generate is in flight", "src/batcher/core.rs",
     "            && self.in_flight.is_none()\n            && self.queue.is_empty()\n", "            && self.queue.is_empty()\n",
     ["--test", "batcher_core_props"], {}),
    ("shell: engine thread never runs the start", "src/batcher/shell.rs",
     "        if locked.guard.core.state() == State::Starting && locked.guard.start_result.is_none() {",
     "        if locked.guard.core.state() == State::Starting && locked.guard.start_result.is_some() {",
     ["--release", "--test", "loom_batcher"], LOOM),
    ("shell: completer run under the batcher lock", "src/batcher/shell.rs",
     "        let ready = Self::collect(&mut locked.guard);\n        let waiting = locked.guard.waiting;\n        drop(locked);",
     "        let ready = Self::collect(&mut locked.guard);\n        for (id, complete, outcome) in ready { complete(id, outcome); }\n        let ready: Vec<(RequestId, Completer, Outcome)> = Vec::new();\n        let waiting = locked.guard.waiting;\n        drop(locked);",
     ["--test", "batcher_shell", "completer_may_submit_again"], {}),
    ("shell: batcher lock taken while holding a slot (lock order)", "src/batcher/shell.rs",
     "            let mut g = sync::lock(&self.slot.outcome);\n            loop {\n                if let Some(o) = g.take() {\n                    break o;",
     "            let mut g = sync::lock(&self.slot.outcome);\n            if let Some(b) = &self.batcher { cancel(b, self.id); }\n            loop {\n                if let Some(o) = g.take() {\n                    break o;",
     ["--release", "--test", "loom_batcher"], LOOM),
    ("shell: watchdog not told about a new generate (lost wake-up)", "src/batcher/shell.rs",
     "            // The watchdog must learn the new generate deadline before generate can block.\n            shared.notify_waiting(waiting);", "            let _ = waiting;",
     ["--test", "batcher_shell", "hung_partial_batch"], {}),
    ("shell: panic not caught on the engine thread", "src/batcher/shell.rs",
     "            let result = match catch_unwind(AssertUnwindSafe(|| engine.generate(&batch.requests))) {",
     "            let result = match Ok::<_, Box<dyn std::any::Any + Send>>(engine.generate(&batch.requests)) {",
     ["--test", "batcher_shell", "engine_panic"], {}),
    ("core: failed batch not logged", "src/batcher/core.rs",
     '        tracing::error!(batch_id, batch_size, cause = %failure, "batch failed");', "",
     ["--test", "batcher_shell", "logs_one_error"], {}),
    ("mapper: TPOT divides by n instead of n-1", "src/metrics/mapper.rs",
     "Some(span / (n - 1)),", "Some(span / n),",
     ["--test", "metrics_mapper"], {}),
    ("mapper: inconsistent first token not flagged", "src/metrics/mapper.rs",
     "            anomalies.first_token_before_arrival = true;\n", "",
     ["--test", "metrics_mapper"], {}),
    ("sim: decode cost ignores running sequences", "src/engine/sim/config.rs",
     "            + ns(self.decode_per_seq) * load.decode_seqs as f64\n", "",
     ["--lib", "engine::sim::tests::step_times_follow_the_formula"], {}),
    ("python engine: an output's unknown field is accepted", "src/engine/python/output.rs",
     "items.iter().find(|(k, _)| !known.contains(&k.as_str()))", "items.iter().find(|_| false)",
     ["--lib", "engine::python"], {}),
    ("python engine: output_tokens and output_token_ids may disagree", "src/engine/python/output.rs",
     "(Some(n), Some(ids)) if ids.len() != n as usize =>", "(Some(n), Some(ids)) if ids.len() == usize::MAX && n == 0 =>",
     ["--lib", "engine::python"], {}),
    # Slow (multiprocess vLLM starts): needs the venv from `just setup-vllm`.
    ("vllm: engine processes not reaped when a second Ctrl-C exits at once", "src/cli.rs",
     "            batchlab::sys::reap_descendants(Duration::from_secs(2));\n", "",
     ["--features", "vllm", "--test", "vllm_cli"],
     {"PYO3_PYTHON": os.path.expanduser(os.environ.get("BATCHLAB_HOME", "~/.cache/batchlab") + "/venv/bin/python")}),
    ("gamma: shape and scale swapped", "src/load/scheduler.rs",
     "Gaps::Gamma { shape, scale } => rng.gamma(shape, scale),", "Gaps::Gamma { shape, scale } => rng.gamma(1.0 / scale, 1.0 / shape),",
     ["--test", "load_arrivals", "gamma_gaps"], {}),
    ("gamma: the sampler's squeeze test accepts too much", "src/rng.rs",
     "if u < 1.0 - 0.0331 * x2 * x2 ||", "if u < 1.5 - 0.0331 * x2 * x2 ||",
     ["--test", "load_arrivals", "gamma_gaps"], {}),
    ("ramp-up: the rate jumps to full at once", "src/load/scheduler.rs",
     "if s <= t / 2.0 { (2.0 * t * s).sqrt() } else { s + t / 2.0 }", "if s <= t / 2.0 { 2.0 * s } else { s + t / 2.0 }",
     ["--test", "load_arrivals", "ramped_rates"], {}),
    ("trace: time_scale multiplies instead of dividing", "src/load/scheduler.rs",
     "Some(offset(self.start, (at - offsets[*first]) / time_scale))", "Some(offset(self.start, (at - offsets[*first]) * time_scale))",
     ["--test", "scenarios_shipped", "the_trace_is_replayed"], {}),
    ("prefix groups: the designed hit counts the partial block too", "src/load/workload.rs",
     "self.prefix_tokens / block * block", "self.prefix_tokens",
     ["--lib", "designed_hits"], {}),
    ("sim: the token budget ignored", "src/engine/sim/scheduler.rs",
     "let new = u64::from(seqs[r].num_tokens() - seqs[r].computed).min(budget) as u32;",
     "let new = u64::from(seqs[r].num_tokens() - seqs[r].computed) as u32;",
     ["--lib", "engine::sim::tests::schedules_respect_every_limit"], {}),
    ("sim: a preempted request's recomputation priced as decodes", "src/engine/sim/scheduler.rs",
     "if s.generated >= 1 && new == 1 && s.computed + 1 == s.num_tokens() {", "if s.generated >= 1 {",
     ["--lib", "engine::sim::tests::a_full_kv_cache_preempts_the_newest"], {}),
    ("calibrate: reported prefix-cache hits ignored", "src/calibrate/fit.rs",
     "prefix: PrefixSource::Known(r.cached_tokens),", "prefix: PrefixSource::Known(0),",
     ["--lib", "calibrate::tests::a_fit_takes_prefix_cache_hits_off_the_prefill"], {}),
    ("calibrate: scheduled_ts taken at the end of its step", "src/calibrate/fit.rs",
     "(r.scheduled_ns, seq.first_scheduled),", "(r.scheduled_ns, seq.first_scheduled.map(|k| k + 1)),",
     ["--lib", "calibrate::tests::a_fit_recovers_known_coefficients"], {}),
]


def cargo_test(args, env):
    e = dict(os.environ, **env)
    # A hang is a caught mutant too; tests bound their own waits, this is a backstop.
    try:
        r = subprocess.run(["cargo", "test", *args], cwd=ROOT, env=e, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return False, "timed out"
    return r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]


def run(name_filter):
    survived = []
    baseline = {}
    for name, path, old, new, args, env in MUTANTS:
        if name_filter and name_filter not in name:
            continue
        # The unbroken code must pass the same command, or a "caught" proves nothing.
        key = (tuple(args), tuple(sorted(env.items())))
        if key not in baseline:
            ok, out = cargo_test(args, env)
            baseline[key] = ok
            if not ok:
                print(f"BASELINE FAILS: cargo test {' '.join(args)}\n{out}")
                sys.exit(2)
        full = os.path.join(ROOT, path)
        original = open(full).read()
        if old not in original:
            print(f"STALE   {name}: pattern not found in {path}")
            survived.append(name)
            continue
        open(full, "w").write(original.replace(old, new, 1))
        try:
            passed, out = cargo_test(args, env)
        finally:
            open(full, "w").write(original)
        if "error[E" in out or "could not compile" in out:
            print(f"BROKEN  {name}: the mutant does not compile, so it proves nothing")
            survived.append(name)
            continue
        caught = not passed
        print(f"{'CAUGHT ' if caught else 'MISSED '} {name}  (cargo test {' '.join(args)})", flush=True)
        if not caught:
            survived.append(name)
    if survived:
        print(f"{len(survived)} mutant(s) not caught: {survived}")
        sys.exit(1)


if __name__ == "__main__":
    run(sys.argv[1] if len(sys.argv) > 1 else "")
