#!/usr/bin/env python3
"""Deliberately broken variants, and the test that must catch each.

Every property test, loom model and snapshot in batchlab was seen to fail against a broken
variant of the code it guards. This script keeps that evidence reproducible: it applies each
mutation in turn, runs the named test, checks that it FAILS, and restores the file.

    python3 scripts/mutants.py            # all
    python3 scripts/mutants.py loom       # only those whose name contains "loom"
    python3 scripts/mutants.py -loom -vllm   # all but those
    python3 scripts/mutants.py --changed BASE   # those a change since BASE touched
    python3 scripts/mutants.py --landed   # those the change since .ci/landed touched (CI)
    python3 scripts/mutants.py --landed --list   # which those are, without running them
    python3 scripts/mutants.py --landed --budget-minutes 10   # CI: start nothing new after 10 min
    python3 scripts/mutants.py --stale    # only check that every pattern is still there (seconds)
    python3 scripts/mutants.py --list     # what there is, and which test catches each

A variant is CAUGHT when its test command fails (or hangs past 15 minutes); MISSED when it
passes; STALE when its pattern is no longer in the file, or more than once (the code moved:
update the entry); BROKEN when it does not compile. Every run, whatever it selects, first checks
ALL variants' patterns and exits 1 on any STALE one, so a moved pattern fails CI even when its
variant is not run. Each command is then run on the unbroken code, which must pass and run at
least one test.

`--changed BASE` selects the variants whose file differs from BASE (a commit; the working tree
counts), whose test's file does (tests/NAME.rs and its snapshots for `--test NAME`, the file
that defines the test a filter names), and the entries of this list that are new or changed
since BASE.

`--landed` takes BASE from `.ci/landed`, the commit of main the change started from (a branch
records it when it starts: `--mark-landed`; docs/testing.md, "Which variants CI runs"). When the
file is missing, or names no commit that is an ancestor of HEAD, every variant is selected: the
change cannot be told apart from what landed before it. CI runs `--landed --budget-minutes 10`:
the change's own entries (new or changed since BASE) run first, then the other variants of the
files it touched, each command's baseline just before its first variant; once the budget is spent
nothing new starts, and every variant not run is listed as NOT RUN (a large landing's remainder is
run by hand, `--landed` without a budget, and reported with the landing).
"""
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOOM = {"RUSTFLAGS": "--cfg loom", "CARGO_TARGET_DIR": "target/loom"}

# Snapshot tests must fail on a mismatch, not write `.snap.new` files next to the reviewed ones.
SNAP = {"INSTA_UPDATE": "no"}
VLLM = {"PYO3_PYTHON": os.path.expanduser(os.environ.get("BATCHLAB_HOME", "~/.cache/batchlab") + "/venv/bin/python")}


def loom(model):
    """The cargo test arguments that run one loom model."""
    return ["--release", "--test", "loom_batcher", model]


# The shell's dispatch: the engine thread releases the batcher lock before it calls generate.
SHELL_DISPATCH = (
    "            drop(locked);\n"
    "            // The watchdog must learn the new generate deadline before generate can block.\n"
    "            shared.notify_waiting(waiting);\n"
    "            let result = match catch_engine_panic(|| engine.generate(&batch.requests)) {\n"
    "                Ok(r) => GenerateResult::from(r),\n"
    "                Err(p) => GenerateResult::Panicked(panic_message(&*p)),\n"
    "            };\n"
)
SHELL_DISPATCH_LOCKED = (
    "            shared.notify_waiting(waiting);\n"
    "            let result = match catch_engine_panic(|| engine.generate(&batch.requests)) {\n"
    "                Ok(r) => GenerateResult::from(r),\n"
    "                Err(p) => GenerateResult::Panicked(panic_message(&*p)),\n"
    "            };\n"
    "            drop(locked);\n"
)

# name, file, original text, broken text, cargo test arguments, extra environment.
# Each names the one test (or test file) that must catch it; docs/testing.md lists them by test.
MUTANTS = [
    # ---- the core's state machine (proptest: core_matches_model) ----
    ("core: batch larger than batch_size", "src/batcher/core/mod.rs",
     "let n = self.queue.len().min(self.config.batch_size);", "let n = self.queue.len();",
     ["--test", "batcher_core_props"], {}),
    ("core: partial batch waits twice the timeout", "src/batcher/core/mod.rs",
     "if now < oldest.saturating_add(self.config.batch_timeout) {",
     "if now < oldest.saturating_add(self.config.batch_timeout * 2) {",
     ["--test", "batcher_core_props"], {}),
    ("core: extra outputs accepted", "src/batcher/core/matching.rs",
     "if outputs.len() != members.len() {", "if outputs.len() < members.len() {",
     ["--test", "batcher_core_props"], {}),
    ("core: cancelled request gets no outcome", "src/batcher/core/mod.rs",
     "self.outcomes.push_back((id, Err(RequestError::Cancelled)));", "",
     ["--test", "batcher_core_props"], {}),
    ("core: a batch beyond max_in_flight (poll_dispatch ignores the slots)", "src/batcher/core/mod.rs",
     "if !self.slot_free() || self.queue.is_empty() {", "if self.queue.is_empty() {",
     ["--test", "batcher_core_props"], {}),
    ("core: outputs matched by position despite ids", "src/batcher/core/matching.rs",
     "    if with_ids == 0 {\n        return Ok(outputs);", "    if with_ids < usize::MAX {\n        return Ok(outputs);",
     ["--test", "batcher_core_props"], {}),
    # The threaded shell runs generate and shutdown on one thread, in order, so this one can only
    # show in a driver that polls while a generate is out: the core's property test.
    ("core: engine shut down while a generate is in flight", "src/batcher/core/mod.rs",
     "            && self.in_flight.is_empty()\n            && self.queue.is_empty();\n", "            && self.queue.is_empty();\n",
     ["--test", "batcher_core_props"], {}),
    # The core owns request ids: every submit, admitted or not, takes the next one.
    ("core: an id given twice (the counter stands still)", "src/batcher/core/mod.rs",
     "        self.next_request_id += 1;\n", "",
     ["--test", "batcher_core_props"], {}),
    ("core: a rejected submit takes no id (its event repeats the next one)", "src/batcher/core/mod.rs",
     "        self.next_request_id += 1;\n", "        self.next_request_id += u64::from(rejection.is_none());\n",
     ["--test", "batcher_core_props"], {}),

    # ---- loom models (tests/loom_batcher.rs), one model each ----
    ("loom: lost wake-up (no notify after a state change)", "src/batcher/shell/mod.rs",
     "        if notify {\n            self.notify_waiting(waiting);\n        }\n", "        let _ = (notify, waiting);\n",
     loom("submitters_racing_shutdown_all_get_answers_and_engine_stops_once"), LOOM),
    ("loom: a failed batch answers only its first request", "src/batcher/core/matching.rs",
     "        for (id, _) in f.members {\n            self.outcomes.push_back((id, Err(failure.clone())));",
     "        for (id, _) in f.members.into_iter().take(1) {\n            self.outcomes.push_back((id, Err(failure.clone())));",
     loom("engine_failure_answers_every_waiter"), LOOM),
    ("loom: engine thread never runs the start", "src/batcher/shell/engine_thread.rs",
     "        if starting && locked.guard.start_result.is_none() {",
     "        if starting && locked.guard.start_result.is_some() {",
     loom("concurrent_preload_loads_once"), LOOM),
    ("loom: cancel removes the queue's front, not the request", "src/batcher/core/mod.rs",
     "let Some(pos) = self.queue.iter().position(|q| q.request.id == id) else {",
     "let Some(pos) = self.queue.iter().position(|q| q.request.id == id || q.request.id != id) else {",
     loom("cancel_racing_dispatch_never_hangs"), LOOM),
    ("loom: batcher lock taken while holding a slot (lock order)", "src/batcher/shell/delivery.rs",
     "            let mut g = sync::lock(&self.slot.outcome);\n            loop {\n                if let Some(o) = g.take() {\n                    break o;",
     "            let mut g = sync::lock(&self.slot.outcome);\n            if let Some(b) = &self.batcher { cancel(b, self.id); }\n            loop {\n                if let Some(o) = g.take() {\n                    break o;",
     loom("cancel_racing_dispatch_never_hangs"), LOOM),
    ("loom: generate called with the batcher lock held", "src/batcher/shell/engine_thread.rs",
     SHELL_DISPATCH, SHELL_DISPATCH_LOCKED,
     loom("a_running_generate_lets_others_submit_and_shut_down_and_the_next_waits_for_it"), LOOM),
    ("loom: engine reported stopped before its shutdown returned", "src/batcher/shell/engine_thread.rs",
     "        if locked.guard.core.poll_engine_shutdown() {\n            drop(locked);\n",
     "        if locked.guard.core.poll_engine_shutdown() {\n            locked.guard.core.handle_engine_shutdown_done();\n            shared.release(locked);\n",
     loom("engine_shutdown_follows_the_last_generate_and_its_error_reaches_shutdown"), LOOM),
    ("loom: engine thread leaves without the shutdown a late generate is owed", "src/batcher/shell/engine_thread.rs",
     "        if locked.guard.core.poll_engine_shutdown() {\n",
     "        if locked.guard.closing {\n            shared.release(locked);\n            return;\n        }\n        if locked.guard.core.poll_engine_shutdown() {\n",
     loom("engine_death_from_a_watcher_releases_shutdown_and_a_late_generate_is_followed_by_the_shutdown"), LOOM),

    # ---- the threaded shell with real threads (tests/batcher_shell.rs) ----
    ("shell: generate called with the batcher lock held (mockall)", "src/batcher/shell/engine_thread.rs",
     SHELL_DISPATCH, SHELL_DISPATCH_LOCKED,
     ["--test", "batcher_shell", "mock_engine_loads_once_lets_submits_in_during_a_generate_and_shuts_down_once"], {}),
    ("shell: completer run under the batcher lock", "src/batcher/shell/mod.rs",
     "        let ready = Self::collect(&mut locked.guard);\n        let waiting = Self::to_wake(&locked.guard);\n        drop(locked);",
     "        let ready = Self::collect(&mut locked.guard);\n        for (id, complete, outcome) in ready.completers { complete(id, outcome); }\n        let ready = delivery::Ready { completers: Vec::new(), sunk: ready.sunk };\n        let waiting = Self::to_wake(&locked.guard);\n        drop(locked);",
     ["--test", "batcher_shell", "completer_may_submit_again"], {}),
    ("shell: an engine thread asleep until its idle tick not woken by a full batch", "src/batcher/shell/mod.rs",
     "            Some(until) => self.closing || self.core.dispatch_deadline().is_some_and(|d| d < until),",
     "            Some(_) => self.closing,",
     ["--test", "batcher_shell", "the_sink_gets_a_batchs_outcomes"], {}),
    ("shell: a batch's outcomes reach the sink one call each", "src/batcher/shell/mod.rs",
     "            if let Some(sink) = sink {\n                sink(ready.sunk);\n            }",
     "            if let Some(sink) = sink {\n                ready.sunk.into_iter().for_each(|o| sink(vec![o]));\n            }",
     ["--test", "batcher_shell", "the_sink_gets_a_batchs_outcomes"], {}),
    ("shell: watchdog not told about a new generate (lost wake-up)", "src/batcher/shell/engine_thread.rs",
     "            // The watchdog must learn the new generate deadline before generate can block.\n            shared.notify_waiting(waiting);", "            let _ = waiting;",
     ["--test", "batcher_shell", "hung_partial_batch"], {}),
    ("shell: panic not caught on the engine thread", "src/batcher/shell/engine_thread.rs",
     "            let result = match catch_engine_panic(|| engine.generate(&batch.requests)) {",
     "            let result = match Ok::<_, Box<dyn std::any::Any + Send>>(engine.generate(&batch.requests)) {",
     ["--test", "batcher_shell", "engine_panic"], {}),
    ("core: failed batch not logged", "src/batcher/core/matching.rs",
     '        tracing::error!(batch_id, batch_size, cause = %failure, "batch failed");', "",
     ["--test", "batcher_shell", "logs_one_error"], {}),

    # ---- several batches in flight (batching.max_in_flight, issue 24) ----
    # The property test catches the timeout and death variants only when its random run has two
    # batches out at the right moment: those name the core's unit tests, which always do.
    ("core: a slot too many (max_in_flight + 1 batches out)", "src/batcher/core/mod.rs",
     "        self.in_flight.len() < self.config.max_in_flight\n", "        self.in_flight.len() <= self.config.max_in_flight\n",
     ["--test", "batcher_core_props"], {}),
    ("core: a late result answers the oldest batch in flight, not its own", "src/batcher/core/matching.rs",
     "let Some(at) = self.in_flight.iter().position(|f| f.batch_id == batch_id) else { return };",
     "let Some(at) = self.in_flight.iter().position(|f| f.batch_id == batch_id).map(|_| 0) else { return };",
     ["--test", "batcher_core_props"], {}),
    ("core: the generate timeout counted from the oldest batch (it fails every batch in flight)", "src/batcher/core/mod.rs",
     "            if !f.abandoned && now >= f.dispatched_at.saturating_add(limit) {",
     "            if !f.abandoned && now >= self.in_flight[0].dispatched_at.saturating_add(limit) {",
     ["--lib", "batcher::core::tests::the_generate_timeout_is_per_batch_and_a_stuck_slot_stays_taken"], {}),
    ("core: queued requests fail behind a free slot (one abandoned generate is enough)", "src/batcher/core/mod.rs",
     "        !self.slot_free() && self.in_flight.iter().all(|f| f.abandoned)\n",
     "        self.in_flight.iter().any(|f| f.abandoned)\n",
     ["--lib", "batcher::core::tests::the_generate_timeout_is_per_batch_and_a_stuck_slot_stays_taken"], {}),
    ("core: a death fails only the oldest batch in flight", "src/batcher/core/failure.rs",
     "    fn abandon_in_flight(&mut self, error: &RequestError, now: Timestamp) {\n        for i in 0..self.in_flight.len() {",
     "    fn abandon_in_flight(&mut self, error: &RequestError, now: Timestamp) {\n        for i in 0..self.in_flight.len().min(1) {",
     ["--lib", "batcher::core::tests::death_fails_every_batch_in_flight_and_the_engine_stops_after_the_last_returns"], {}),
    ("loom: a done answers the oldest batch in flight, not its own", "src/batcher/core/matching.rs",
     "let Some(at) = self.in_flight.iter().position(|f| f.batch_id == batch_id) else { return };",
     "let Some(at) = self.in_flight.iter().position(|f| f.batch_id == batch_id).map(|_| 0) else { return };",
     loom("two_batches_in_flight_answered_out_of_order_on_another_thread_racing_submit_and_shutdown"), LOOM),
    ("loom: engine shut down while a concurrent generate is out", "src/batcher/core/mod.rs",
     "            && self.in_flight.is_empty()\n            && self.queue.is_empty();\n", "            && self.queue.is_empty();\n",
     loom("two_batches_in_flight_answered_out_of_order_on_another_thread_racing_submit_and_shutdown"), LOOM),
    ("loom: the engine thread leaves while a concurrent generate is out (its shutdown never runs)", "src/batcher/shell/engine_thread.rs",
     "if locked.guard.core.state() == State::Stopped || (locked.guard.closing && !owed) {",
     "if locked.guard.core.state() == State::Stopped || locked.guard.closing || owed && false {",
     loom("a_death_racing_two_concurrent_generates_answers_everyone_and_the_engine_stops_after_both_dones"), LOOM),
    ("shell: the engine thread leaves while a concurrent generate is out (threads)", "src/batcher/shell/engine_thread.rs",
     "if locked.guard.core.state() == State::Stopped || (locked.guard.closing && !owed) {",
     "if locked.guard.core.state() == State::Stopped || locked.guard.closing || owed && false {",
     ["--test", "batcher_in_flight", "a_generate_timeout_fails_only_its_batch_and_the_shutdown_waits_for_its_late_done"], {}),
    ("shell: a concurrent generate called with the batcher lock held", "src/batcher/shell/engine_thread.rs",
     "                drop(locked);\n                shared.notify_waiting(waiting);\n                generate_concurrently(&shared, &*face, batch);\n",
     "                shared.notify_waiting(waiting);\n                generate_concurrently(&shared, &*face, batch);\n                drop(locked);\n",
     ["--test", "batcher_in_flight", "done_inside_generate_on_another_thread_a_panic_or_a_dropped_done_each_answer_once"], {}),
    ("shell: a done dropped uncalled leaves its batch waiting", "src/batcher/shell/delivery.rs",
     "        if panicking && in_engine_call() {\n", "        if panicking || in_engine_call() {\n",
     ["--test", "batcher_in_flight", "done_inside_generate_on_another_thread_a_panic_or_a_dropped_done_each_answer_once"], {}),
    ("shell: a panic in a concurrent generate not caught", "src/batcher/shell/engine_thread.rs",
     "    if let Err(p) = catch_engine_panic(|| face.generate(batch.requests, done)) {",
     "    if let Err(p) = Ok::<(), Box<dyn std::any::Any + Send>>(face.generate(batch.requests, done)) {",
     ["--test", "batcher_in_flight", "done_inside_generate_on_another_thread_a_panic_or_a_dropped_done_each_answer_once"], {}),
    ("shell: the observer told after a concurrent batch's outcomes", "src/batcher/shell/delivery.rs",
     "        self.shared.observe(&BatchRun {\n            id: self.batch,\n            size: self.size,\n            reason: self.reason,\n            dispatched_at: self.dispatched_at,\n            returned_at,\n            phases: None,\n        });\n        let mut locked = self.shared.lock();\n        locked.guard.core.handle_generate_result(self.batch, result, returned_at);\n        self.shared.release(locked);\n", "        let mut locked = self.shared.lock();\n        locked.guard.core.handle_generate_result(self.batch, result, returned_at);\n        self.shared.release(locked);\n        self.shared.observe(&BatchRun {\n            id: self.batch,\n            size: self.size,\n            reason: self.reason,\n            dispatched_at: self.dispatched_at,\n            returned_at,\n            phases: None,\n        });\n",
     ["--test", "batcher_in_flight", "batches_overlap_up_to_max_in_flight_and_each_request_gets_its_own_outcome_once"], {}),
    ("shell: an engine without a concurrent face starts with max_in_flight > 1", "src/batcher/shell/engine_thread.rs",
     "                if max_in_flight > 1 && concurrent.is_none() {", "                if max_in_flight > 1 && concurrent.is_none() && false {",
     ["--test", "batcher_in_flight", "more_than_one_in_flight_is_refused_by_an_engine_that_runs_one_generate_at_a_time"], {}),
    ("preflight: several in flight accepted on an engine that runs one generate at a time", "src/run/preflight.rs",
     "    if max_in_flight == 1 || !ONE_GENERATE_AT_A_TIME.contains(&kind) {",
     "    if max_in_flight >= 1 || !ONE_GENERATE_AT_A_TIME.contains(&kind) {",
     ["--lib", "run::preflight"], {}),

    # ---- event traces (insta, tests/batcher_traces.rs) ----
    ("traces: step cost ignores the sequences it schedules", "src/engine/sim/config.rs",
     "            + self.per_seq * load.seqs as f64\n", "",
     ["--test", "batcher_traces"], SNAP),

    # ---- the mapper (tests/metrics_mapper.rs): the snapshot table and each property ----
    ("mapper: TPOT divides by n instead of n-1", "src/metrics/mapper.rs",
     "Some(span / (n - 1)),", "Some(span / n),",
     ["--test", "metrics_mapper", "canonical_mappings"], SNAP),
    ("mapper: inconsistent first token not flagged", "src/metrics/mapper.rs",
     "            anomalies.first_token_before_arrival = true;\n", "",
     ["--test", "metrics_mapper", "canonical_mappings"], SNAP),
    ("mapper: a first token after completion still gives a TTFT", "src/metrics/mapper.rs",
     "        if first > times.completed {", "        if first > times.completed && first < times.submitted {",
     ["--test", "metrics_mapper", "arbitrary_stats_never_panic_and_durations_stay_sane"], {}),
    ("mapper: TTFT measured from the dispatch, not the submit", "src/metrics/mapper.rs",
     "let ttft_from = e.sent.map_or(times.submitted, |sent| sent.max(times.submitted));",
     "let ttft_from = e.sent.map_or(times.dispatched, |sent| sent.max(times.submitted));",
     ["--test", "metrics_mapper", "consistent_stats_give_ordered_metrics"], {}),
    ("mapper: an HTTP engine's TTFT still from our submit, not its send", "src/metrics/mapper.rs",
     "let ttft_from = e.sent.map_or(times.submitted, |sent| sent.max(times.submitted));",
     "let ttft_from = times.submitted;",
     ["--test", "metrics_mapper", "ttft_runs_from_the_moment_an_http_engine_sent_the_request"], {}),

    # ---- distributions (proptest, src/metrics/distribution.rs) ----
    ("distribution: quantiles read at 90% of the rank", "src/metrics/distribution.rs",
     "Some(self.histogram.value_at_quantile(q).clamp(self.min, self.max))",
     "Some(self.histogram.value_at_quantile(q * 0.9).clamp(self.min, self.max))",
     ["--lib", "percentiles_match_sorted_vector"], {}),
    ("distribution: merge drops the other side's minimum", "src/metrics/distribution.rs",
     "        self.min = self.min.min(other.min);\n", "",
     ["--lib", "merge_is_like_recording_everything"], {}),

    ("distribution: every histogram sample one bin too high", "src/metrics/distribution.rs",
     "let bin = edges.partition_point(|&e| e <= value).saturating_sub(1).min(counts.len() - 1);",
     "let bin = edges.partition_point(|&e| e <= value).min(counts.len() - 1);",
     ["--lib", "histogram_bins_hold_every_sample_near_its_value"], {}),

    # ---- time series (proptest, src/metrics/series.rs) ----
    ("series: coarsening forgets where in the merged interval a request entered or left", "src/metrics/series.rs",
     "let shift = (9 - j as u128) * u128::from(old);", "let shift = 0u128 * (9 - j as u128) * u128::from(old);",
     ["--lib", "intervals_add_up_to_the_window"], {}),

    # ---- load: sweep, workload, scheduler (proptest) ----
    ("profile: sweep rates reach the throughput rate", "src/loadgen/profile.rs",
     "let r = lo + (hi - lo) * f64::from(i) / (f64::from(n) + 1.0);", "let r = lo + (hi - lo) * f64::from(i) / f64::from(n);",
     ["--lib", "sweep_rates_are_strictly_increasing_and_inside"], {}),
    ("workload: unique prefix off by one", "src/loadgen/workload/synthetic.rs",
     "tokens.push((rest % vocab) as u32);", "tokens.push(((rest + 1) % vocab) as u32);",
     ["--lib", "prompts_in_bounds_and_prefixes_unique"], {}),
    ("scheduler: constant arrivals one period late", "src/loadgen/scheduler.rs",
     "Pacing::Constant { rate, due } => *due = at(self.submitted as f64 / *rate),", "Pacing::Constant { rate, due } => *due = at((self.submitted + 1) as f64 / *rate),",
     ["--lib", "uncapped_constant_arrivals_are_exactly_on_time"], {}),
    ("scheduler: arrivals submitted up to 1 ms early", "src/loadgen/scheduler.rs",
     "            Some(due) if now < due => return Poll::At(due),",
     "            Some(due) if now.as_nanos() + 1_000_000 < due.as_nanos() => return Poll::At(due),",
     ["--lib", "constant_arrivals_are_never_early"], {}),
    ("scheduler: one request above the concurrency cap", "src/loadgen/scheduler.rs",
     "        if cap.is_some_and(|cap| in_flight >= cap) {", "        if cap.is_some_and(|cap| in_flight > cap) {",
     ["--lib", "in_flight_never_exceeds_the_cap"], {}),
    ("scheduler: closed loops keep one request fewer", "src/loadgen/scheduler.rs",
     "                (Pacing::Closed, Some(at_least_one(n)))", "                (Pacing::Closed, Some(at_least_one(n.saturating_sub(1))))",
     ["--lib", "closed_loops_keep_the_level_when_requests_are_slow"], {}),
    ("rng: exponential gaps 10% short", "src/rng.rs",
     "        -(1.0 - u).ln() / rate", "        -(1.0 - u).ln() / (rate * 1.1)",
     ["--lib", "poisson_mean_rate_matches"], {}),

    # ---- scenarios ----
    ("scenario: to_toml leaves out [stop]", "src/scenario/print.rs",
     '    doc["stop"] = Item::Table(stop);', "    let _ = stop;",
     ["--lib", "generated_plans_round_trip"], {}),

    # ---- engines ----
    ("sim: step cost ignores the sequences it schedules", "src/engine/sim/config.rs",
     "            + self.per_seq * load.seqs as f64\n", "",
     ["--lib", "engine::sim::tests::step_times_follow_the_formula"], {}),
    ("faults: slow returns one engine time early", "src/engine/faults.rs",
     "let hold = self.slow_factor.map(|factor| took.mul_f64((factor - 1.0).max(0.0)));",
     "let hold = self.slow_factor.map(|factor| took.mul_f64((factor - 2.0).max(0.0)));",
     ["--test", "engine_faults", "every_fault_around_a_user_engine"], {}),
    ("faults: the concurrent face drops runs_here", "src/engine/faults.rs",
     "            ..c\n", "            runs_here: false,\n            ..c\n",
     ["--lib", "engine::faults::tests::the_faulty_concurrent_face_keeps_every_capability"], {}),
    ("faults: the concurrent face drops the engine's steps", "src/engine/faults.rs",
     "            ..c\n", "            steps: None,\n            ..c\n",
     ["--lib", "engine::faults::tests::the_faulty_concurrent_face_keeps_every_capability"], {}),

    # ---- the other integration test files ----
    ("async: dropping the future does not cancel", "src/batcher/async_submit.rs",
     "            b.cancel(self.id);", "            let _ = (b, self.id);",
     ["--test", "batcher_async", "dropping_the_future_cancels_an_undispatched_request"], {}),
    ("scenario errors: no did-you-mean", "src/scenario/error.rs",
     ".filter(|(score, _)| *score >= 0.8)", ".filter(|(score, _)| *score > 1.0)",
     ["--test", "scenario_errors"], SNAP),
    ("cli: no did-you-mean in the typo error", "src/scenario/error.rs",
     ".filter(|(score, _)| *score >= 0.8)", ".filter(|(score, _)| *score > 1.0)",
     ["--test", "cli", "typo"], SNAP),
    ("library: an interrupted run is not marked incomplete", "src/run/driver.rs",
     "            incomplete = true;\n            break;",
     "            incomplete = false;\n            break;",
     ["--test", "library", "an_interrupt_drains_and_reports_an_incomplete_run"], {}),
    ("shipped scenarios: step cost ignores the sequences it schedules", "src/engine/sim/config.rs",
     "            + self.per_seq * load.seqs as f64\n", "",
     ["--test", "scenarios_shipped"], SNAP),
    ("architecture: the engine names a layer above it", "src/engine/mod.rs",
     "pub mod faults;\n", "pub mod faults;\n#[allow(unused_imports)]\nuse crate::run as _;\n",
     ["--test", "architecture_deps"], {}),
    # Issue 36 item 5: the dependency test reads imports, not text.
    ("architecture: a grouped import of a higher layer (the old text search missed it)", "src/loadgen/mod.rs",
     "mod workload;\n", "mod workload;\n#[allow(unused_imports)]\nuse crate::{scenario as _, time as _};\n",
     ["--test", "architecture_deps", "dependencies_point_down"], {}),
    ("architecture: the process boundary names an engine", "src/sys/mod.rs",
     "pub mod watch;\n", "pub mod watch;\n#[allow(unused_imports)]\nuse super::engine as _;\n",
     ["--test", "architecture_deps", "dependencies_point_down"], {}),
    ("architecture: Python named outside engine/python", "src/engine/mod.rs",
     "pub mod sim;\n", "pub mod sim;\n#[cfg(feature = \"vllm\")]\n#[allow(unused_imports)]\nuse pyo3 as _;\n",
     ["--test", "architecture_deps", "only_engine_python_names_pyo3"], {}),
    ("architecture: a sans-IO core reads the clock", "src/serve/core.rs",
     "use crate::time::Timestamp;\n",
     "use crate::time::Timestamp;\n#[allow(dead_code)]\nfn wall() -> std::time::Instant {\n    std::time::Instant::now()\n}\n",
     ["--test", "architecture_deps", "the_cores_read_no_clock_and_do_no_io"], {}),
    ("issue 36 files: a change reads its files from disk again", "src/scenario/files.rs",
     "        kept.insert(path.to_path_buf(), Arc::clone(&bytes));\n", "",
     ["--lib", "tune::search::tests::a_tune_reads_its_profile_once"], {}),
    ("issue 36 set: a float label written as TOML writes it", "src/scenario/set.rs",
     "            SetValue::Float(f) => f.to_string(),\n",
     "            SetValue::Float(f) => format!(\"{f:?}\"),\n",
     ["--lib", "scenario::change::tests::with_combinations_makes_a_matrix"], {}),
    ("issue 36 set: a section's nested key set flat", "src/scenario/set.rs",
     "            SetValue::insert(&mut entries, inner.unwrap_or(&set.path), set.value);\n",
     "            entries.push((inner.unwrap_or(&set.path).to_owned(), set.value));\n",
     ["--lib", "scenario::set::tests::a_section_is_built_from_its_keys"], {}),
    ("issue 36 architecture: a workflow names toml_edit", "src/tune/confirm.rs",
     "use super::search::point_sets;\n", "use super::search::point_sets;\n#[allow(unused_imports)]\nuse toml_edit as _;\n",
     ["--test", "architecture_deps", "only_scenario_names_toml_edit"], {}),
    # Issue 36 item 4: the load generator's files stay without a circle (error <-> dataset was one).
    ("issue 36 architecture: the loadgen error names the file reader back", "src/loadgen/error.rs",
     "use std::path::PathBuf;\n", "use std::path::PathBuf;\n#[allow(unused_imports)]\nuse super::dataset::DatasetOptions as _;\n",
     ["--test", "architecture_deps", "the_loadgen_files_form_no_circle"], {}),
    # Issue 37 (twin): calibrate from a URL, and the frontend term batchlab serve adds.
    ("issue 37 twin: serve's core ignores the frontend overhead", "src/serve/core.rs",
     "        if !self.cost.frontend_overhead.is_zero() || !self.cost.frontend_per_request.is_zero() {\n",
     "        if false {\n",
     ["--test", "serve_core", "the_frontend_delays_each_request_before_it_joins_the_waiting_queue"], {}),
    ("issue 37 twin: serve's frontend serves a wave all at once", "src/serve/core.rs",
     "self.frontend_free = now.max(self.frontend_free).saturating_add(self.cost.frontend_per_request);",
     "self.frontend_free = now.saturating_add(self.cost.frontend_per_request);",
     ["--test", "serve_core", "a_frontend_that_serves_one_request_at_a_time_spreads_a_wave"], {}),
    ("issue 37 twin: serve's frontend hands each request of a burst on as it is served", "src/serve/core.rs",
     "if self.cost.frontend_hands_off_bursts && busy {", "if self.cost.frontend_hands_off_bursts && !busy {",
     ["--test", "serve_core", "a_frontend_that_hands_a_burst_on_together_delivers_a_wave_to_one_step"], {}),
    ("issue 37 twin: the queue's search never tries a burst hand-off", "src/calibrate/url/replay.rs",
     "if burst_error < each_error { with(burst, true) }", "if burst_error < 0.0 { with(burst, true) }",
     ["--lib", "the_frontends_queue_is_found_from_the_waves"], {}),
    ("issue 37 twin: a point's noise without the t quantile of its rounds", "src/calibrate/url/fit.rs",
     "Some(t * se / ratio)", "Some(se / ratio)",
     ["--lib", "the_noise_is_the_interval_of_the_ratio_over_rounds"], {}),
    ("issue 37 twin: the frontend's worker added on top of what a request alone pays", "src/calibrate/url/replay.rs",
     "frontend_overhead_ns: Some(alone - s),", "frontend_overhead_ns: Some(alone),",
     ["--lib", "calibrate::url::replay::tests::the_frontends_queue_is_found_from_the_waves"], {}),
    ("issue 37 twin: calibrate from a URL keeps no frontend queue", "src/calibrate/url/mod.rs",
     "fitted.coefficients = fit_frontend_queue(&fitted.coefficients, fitted.engine, &queue);",
     "let _ = fit_frontend_queue(&fitted.coefficients, fitted.engine, &queue);",
     ["--test", "calibrate_url", "a_served_profile_is_recovered_from_its_url"], {}),
    ("issue 37 twin: a step after an idle engine fitted without the frontend", "src/calibrate/url/fit.rs",
     "(sent > previous && alone && !merged).then(|| (i, round, row(s, 1.0), s.end_ns - sent))",
     "(sent > previous && alone && !merged).then(|| (i, round, row(s, 0.0), s.end_ns - sent))",
     ["--lib", "calibrate::url::fit::tests"], {}),
    ("issue 37 twin: a gap's load misses the prefill that came with it", "src/calibrate/url/steps.rs",
     "                if (first - end).abs() <= tol {\n", "                if false {\n",
     ["--lib", "calibrate::url::steps::tests"], {}),
    ("issue 37 twin: the hidden max_num_seqs never estimated", "src/calibrate/url/fit.rs",
     "    let seqs = if most_seqs > 0 && most_seqs < concurrency {\n", "    let seqs = if false {\n",
     ["--lib", "calibrate::url::fit::tests"], {}),
    ("issue 37 twin: a point's residual is each step's own error, averaged away", "src/calibrate/url/fit.rs",
     "residual: if measured > 0.0 { (predicted - measured).abs() / measured } else { 0.0 }",
     "residual: if measured > 0.0 { (predicted - measured) / measured / mine.len().max(1) as f64 } else { 0.0 }",
     ["--lib", "calibrate::url::fit::tests"], {}),
    ("issue 37 twin: the replay error leaves TTFT out", "src/calibrate/url/replay.rs",
     "replay_error: rel(p_ttft, ttft).max(rel(p_tpot, tpot)),", "replay_error: rel(p_tpot, tpot),",
     ["--lib", "calibrate::url::replay::tests"], {}),
    ("issue 37 twin: the design runs each round in one order", "src/calibrate/url/mod.rs",
     "        if round % 2 == 1 {\n            order.reverse();\n", "        if false {\n            order.reverse();\n",
     ["--lib", "calibrate::url::tests"], {}),
    ("issue 37 twin: a point's run measures its first wave", "src/calibrate/url/mod.rs",
     "        keys::WARMUP.table([keys::WARMUP_REQUESTS.to(c)]),\n", "",
     ["--lib", "calibrate::url::tests"], {}),
    ("issue 37 twin: a span's fixed cost counted once", "src/calibrate/url/fit.rs",
     "let x = [s.steps, s.load.prefill_tokens,", "let x = [1.0, s.load.prefill_tokens,",
     ["--lib", "calibrate::url::fit::tests"], {}),
    ("issue 37 twin: a request whose tokens came merged keeps its span", "src/calibrate/url/steps.rs",
     "        if coalesced(r) {\n            continue;\n", "        if false {\n            continue;\n",
     ["--lib", "calibrate::url::steps::tests"], {}),
    ("issue 37 twin: the frontend fitted from waves", "src/calibrate/url/fit.rs",
     "                        .count()\n                        == 1;\n", "                        .count()\n                        >= 1;\n",
     ["--lib", "calibrate::url::fit::tests"], {}),
    ("issue 37 twin: a merged request's first token times the frontend", "src/calibrate/url/fit.rs",
     "let merged = s.first_of.iter().any(|&r| coalesced(&points[i].requests[r]));",
     "let merged = s.first_of.iter().all(|&r| coalesced(&points[i].requests[r])) && false;",
     ["--lib", "calibrate::url::fit::tests"], {}),
    ("issue 37 twin: the replay runs the whole point as one run", "src/calibrate/url/replay.rs",
     "replay(coefficients, engine, shape, per_run.max(1), stagger)", "replay(coefficients, engine, shape, requests.len(), stagger)",
     ["--test", "calibrate_url"], {}),
    ("public api: a method in another file than its type left out of the listing", "src/scenario/change.rs",
     "    pub fn with_sets(", "    #[doc(hidden)]\n    pub fn with_sets(",
     ["--test", "public_api"], SNAP),
    ("sys: descendants() misses grandchildren", "src/sys/mod.rs",
     "            frontier.push(entry.pid);\n", "",
     ["--lib", "sys::tests::finds_and_reaps_a_child_and_grandchild"], {}),
    # ---- vLLM's continuous admission (issue 25) ----
    ("stall: a concurrent engine that runs here is not watched", "src/batcher/core/stall.rs",
     "        if config.max_in_flight > 1 && !self.engine_runs_here {\n",
     "        if config.max_in_flight > 1 {\n",
     ["--lib", "batcher::core::tests::an_engine_that_runs_here_is_stall_watched"], {}),
    ("stall: another generate's result is no sign of the engine's life", "src/batcher/core/stall.rs",
     "self.last_result_at.map_or(f.last_progress, |r| r.max(f.last_progress))",
     "self.last_result_at.map_or(f.last_progress, |_| f.last_progress)",
     ["--lib", "batcher::core::tests::an_engine_that_runs_here_is_stall_watched"], {}),
    ("preflight: continuous admission with one request in vLLM at a time", "src/run/preflight.rs",
     "    let (key, problem) = if batching.max_in_flight() == 1 {",
     "    let (key, problem) = if batching.max_in_flight() == 0 {",
     ["--lib", "run::preflight"], {}),
    ("preflight: continuous admission refused on vLLM as one generate at a time", "src/run/preflight.rs",
     "    if admits_continuously(plan) {\n        return Ok(());\n    }\n",
     "",
     ["--lib", "run::preflight"], {}),
    ("engine steps: the batcher's hand-overs counted as batches beside vLLM's steps", "src/run/realtime.rs",
     "            self.hand_overs_count.store(false, Ordering::SeqCst);\n",
     "",
     ["--features", "vllm", "--test", "vllm_cli", "the_in_process_engine_times_every_request_and_counts_vllms_tokens::continuous"], VLLM),

    # ---- the engine watch: what is a death, what is a stall (issue 22) ----
    ("shell: the watchdog samples the engine's CPU time under the batcher lock", "src/batcher/shell/watchdog.rs",
     "        shared.release_and_notify(locked, false);\n        let cpu = probe();\n        locked = shared.lock();\n",
     "        let cpu = probe();\n",
     loom("a_frozen_generate_is_failed_by_the_watchdogs_stall_samples"), LOOM),
    ("death watch: a helper's exit with status 0 is a death", "src/run/engine_guard.rs",
     "Ownership::AliveAtStart => *cause != ExitCause::Exited(0),", "Ownership::AliveAtStart => true,",
     ["--lib", "run::engine_guard"], {}),
    ("death watch: a helper's exit with status 0 fails a Python engine's run", "src/run/engine_guard.rs",
     "Ownership::AliveAtStart => *cause != ExitCause::Exited(0),", "Ownership::AliveAtStart => true,",
     ["--features", "vllm", "--test", "python_engine", "helper_processes_of_an_engine_are_not_its_death"], VLLM),
    ("stall: any CPU tick counts as progress (a polling worker hides a frozen EngineCore)", "src/batcher/core/stall.rs",
     "let busy =\n            !used.is_zero() && used.as_secs_f64() >= now.saturating_since(base_at).as_secs_f64() * BUSY_CPU_SHARE;",
     "let busy = !used.is_zero();",
     ["--lib", "batcher::core::tests::a_generate_without_progress_stalls_the_engine_for_good"], {}),
    ("stall: the stall deadline passes unnoticed", "src/batcher/core/stall.rs",
     "            && now >= deadline\n", "            && now >= deadline.saturating_add(Duration::from_secs(3600))\n",
     ["--lib", "batcher::core::tests::a_generate_without_progress_stalls_the_engine_for_good"], {}),
    ("stall: a wedged user engine is never declared stalled (run_with)", "src/batcher/core/stall.rs",
     "            && now >= deadline\n", "            && now >= deadline.saturating_add(Duration::from_secs(3600))\n",
     ["--test", "library", "a_user_engine_wedged_in_generate_ends_the_run_once_it_stalls"], {}),
    ("python engine: an output's unknown field is accepted", "src/engine/python/output.rs",
     "items.iter().find(|(k, _)| !known.contains(&k.as_str()))", "items.iter().find(|_| false)",
     ["--lib", "engine::python"], {}),
    ("python engine: output_tokens and output_token_ids may disagree", "src/engine/python/output.rs",
     "(Some(n), Some(ids)) if ids.len() != n as usize =>", "(Some(n), Some(ids)) if ids.len() == usize::MAX && n == 0 =>",
     ["--lib", "engine::python"], {}),
    # Slow (real vLLM runs): need the venv from `just setup-vllm`.
    ("vllm: batchlab counts one token fewer than the engine returned", "src/engine/python/output.rs",
     "        output_tokens,\n        output_token_ids,\n        text: f.string(\"text\")?,",
     "        output_tokens: output_tokens.map(|n| n.saturating_sub(1)),\n        output_token_ids,\n        text: f.string(\"text\")?,",
     ["--features", "vllm", "--test", "vllm_cli", "the_in_process_engine_times_every_request_and_counts_vllms_tokens"], VLLM),
    ("vllm: the engine's first-token time dropped", "src/engine/python/output.rs",
     '            first_token_ts: f.seconds("first_token_ts")?,', "            first_token_ts: None,",
     ["--features", "vllm", "--test", "vllm_engine", "in_process_engine_generates_token_and_text_prompts"], VLLM),
    ("vllm: a Python engine output without a token count accepted", "src/engine/python/output.rs",
     '(None, None) => return Err("`output_tokens` or `output_token_ids` is required (both are missing)".into()),',
     "(None, None) => {}",
     ["--features", "vllm", "--test", "python_engine", "protocol_violations_are_engine_errors_naming_the_class_and_the_field"], VLLM),
    ("vllm: engine processes not reaped when a second Ctrl-C exits at once", "src/cli/session.rs",
     "            batchlab::sys::reap_descendants(Duration::from_secs(2));\n", "",
     ["--features", "vllm", "--test", "vllm_cli", "engine_processes_never_outlive_batchlab"], VLLM),
    ("gamma: shape and scale swapped", "src/loadgen/scheduler.rs",
     "Gaps::Gamma { shape, scale } => rng.gamma(shape, scale),", "Gaps::Gamma { shape, scale } => rng.gamma(1.0 / scale, 1.0 / shape),",
     ["--test", "loadgen_arrivals", "gamma_gaps"], {}),
    ("gamma: the sampler's squeeze test accepts too much", "src/rng.rs",
     "if u < 1.0 - 0.0331 * x2 * x2 ||", "if u < 1.5 - 0.0331 * x2 * x2 ||",
     ["--test", "loadgen_arrivals", "gamma_gaps"], {}),
    ("ramp-up: the rate jumps to full at once", "src/loadgen/scheduler.rs",
     "if s <= t / 2.0 { (2.0 * t * s).sqrt() } else { s + t / 2.0 }", "if s <= t / 2.0 { 2.0 * s } else { s + t / 2.0 }",
     ["--test", "loadgen_arrivals", "ramped_rates"], {}),
    ("ramp-up: once ramped up, arrivals lag the whole ramp, not half of it", "src/loadgen/scheduler.rs",
     "if s <= t / 2.0 { (2.0 * t * s).sqrt() } else { s + t / 2.0 }", "if s <= t / 2.0 { (2.0 * t * s).sqrt() } else { s + t }",
     ["--lib", "ramps_delay_each_arrival_by_at_most_half_the_ramp"], {}),
    ("trace: time_scale multiplies instead of dividing", "src/loadgen/scheduler.rs",
     "Some(offset(self.start, (at - offsets[*first]) / time_scale))", "Some(offset(self.start, (at - offsets[*first]) * time_scale))",
     ["--test", "scenarios_shipped", "the_trace_is_replayed"], {}),
    ("prefix groups: the designed hit counts the partial block too", "src/loadgen/workload/mod.rs",
     "self.prefix_tokens / block * block", "self.prefix_tokens",
     ["--lib", "designed_hits"], {}),
    ("sim: the token budget ignored", "src/engine/sim/scheduler/stepper.rs",
     "let new = u64::from(self.seq(r).num_tokens() - self.seq(r).computed).min(budget) as u32;",
     "let new = u64::from(self.seq(r).num_tokens() - self.seq(r).computed) as u32;",
     ["--lib", "engine::sim::tests::schedules_respect_every_limit"], {}),
    ("sim: a preempted request's recomputation priced as decodes", "src/engine/sim/scheduler/stepper.rs",
     "if new == 1 && s.is_decoding() {", "if s.generated >= 1 {",
     ["--lib", "engine::sim::tests::a_full_kv_cache_preempts_the_newest"], {}),
    ("sim: a decode run's steps priced one context token per sequence short", "src/engine/sim/scheduler/stepper.rs",
     "context_tokens: context + n as u64 * j as u64,", "context_tokens: context + n as u64 * (j as u64 - 1),",
     ["--lib", "engine::sim::tests::decode_runs_are_exactly_steps_one_by_one"], {}),
    ("mapper: a step engine's run of equal gaps cut at two", "src/metrics/mapper.rs",
     "t.gaps.push_n(clock.gap(k), (same_until + 1 - k) as u64);", "t.gaps.push_n(clock.gap(k), (same_until + 1 - k).min(2) as u64);",
     ["--test", "metrics_mapper", "step_token_times_map_as_the_same_times_one_per_token"], {}),
    ("sim: a prompt prepared under another block size taken", "src/engine/sim/mod.rs",
     "filter(|p| p.block_size == scheduler.block_size && p.prefix_caching == scheduler.prefix_caching)",
     "filter(|p| p.prefix_caching == scheduler.prefix_caching)",
     ["--lib", "engine::sim::tests::a_prompt_prepared_ahead_gives_exactly_what_the_engine_works_out_itself"], {}),
    ("sim: a block's third remainder token left out of its hash", "src/engine/sim/kv.rs",
     "fold(word(token(0), token(1)) ^ SECRETS[2], word(token(2), 0) ^ state)",
     "fold(word(token(0), token(1)) ^ SECRETS[2], state)",
     ["--lib", "engine::sim::kv::tests::every_token_of_a_block_is_in_its_hash"], {}),
    ("ahead: the engine's work on each request skipped", "src/run/ahead.rs",
     "                    prep(&mut request);", "                    let _ = prep;",
     ["--lib", "run::ahead::tests::each_request_goes_through_the_engines_prep"], {}),
    ("sim: a decode run that the KV cache cannot hold", "src/engine/sim/scheduler/stepper.rs",
     "if needed > self.kv.free_blocks() {", "if needed > u64::MAX - 1 {",
     ["--lib", "engine::sim::tests::decode_runs_are_exactly_steps_one_by_one"], {}),
    ("equivalence: a batch as large as the batch size taken as never reached", "src/metrics/result.rs",
     "self.largest < ran_with && self.largest < batch_size", "self.largest <= ran_with && self.largest < batch_size",
     ["--test", "batch_size_equivalence"], {}),
    ("batcher: a later process death replaces any death", "src/batcher/core/failure.rs",
     "if known.pid.is_none() && seen.pid.is_some()", "if seen.pid.is_some()",
     ["--lib", "batcher::core::tests::a_process_death_names_the_cause_of_an_engines_own_death"], {}),
    ("tune memo: a seed's run taken from another seed's", "src/tune/memo.rs",
     ".find(|r| r.key == key && ", ".find(|r| r.key.batch_timeout == key.batch_timeout && r.key.load == key.load && ",
     ["--test", "tune"], {}),
    ("tune memo: a run taken from one at another timeout", "src/tune/memo.rs",
     ".find(|r| r.key == key && ", ".find(|r| r.key.variant == key.variant && r.key.load == key.load && ",
     ["--test", "tune"], {}),
    ("calibrate: reported prefix-cache hits ignored", "src/calibrate/fit.rs",
     "prefix: PrefixSource::Known(r.cached_tokens),", "prefix: PrefixSource::Known(0),",
     ["--lib", "calibrate::tests::a_fit_takes_prefix_cache_hits_off_the_prefill"], {}),
    ("calibrate: scheduled_ts taken at the end of its step", "src/calibrate/fit.rs",
     "(r.scheduled_ns, seq.first_scheduled),", "(r.scheduled_ns, seq.first_scheduled.map(|k| k + 1)),",
     ["--lib", "calibrate::tests::a_fit_recovers_known_coefficients"], {}),
    # ---- compare: the units of independence and the tests (issue 22) ----
    ("compare: the bootstrap resamples requests, not batches", "src/compare/stats.rs",
     "let i = *index.entry(batch).or_insert_with(|| {", "let i = *index.entry(sorted.len() as u64 + 0 * batch).or_insert_with(|| {",
     ["--lib", "compare::stats::tests::bootstrap_takes_the_batch_not_the_request_as_the_unit"], {}),
    ("compare: every quantile tested as the median", "src/compare/stats.rs",
     "seen >= (QUANTILES[next].1 * n).ceil().max(1.0)", "seen >= (0.5 * n).ceil().max(1.0)",
     ["--lib", "compare::stats::tests::bootstrap_sees_a_tail_that_the_median_does_not"], {}),
    # ---- compare: a gate that passes only on evidence (issue 31) ----
    ("compare: inconclusive counted as pass", "src/compare/comparison.rs",
     "} else if self.inconclusive().next().is_some() {", "} else if false && self.inconclusive().next().is_some() {",
     ["--lib", "compare::tests::an_inconclusive_gate_is_not_a_pass"], {}),
    ("compare: errors divided by the batch size", "src/compare/stats.rs",
     "            Some(d) => n / d,\n", "            Some(_) => (self.fallback_units.max(1) as f64).min(n),\n",
     ["--lib", "compare::stats::tests::whole_failed_batches_are_one_event_each_and_independent_failures_are_many"], {}),
    ("compare: a pass judged by the estimate, not the interval's worse bound", "src/compare/gate.rs",
     "if worse < margin && shown.is_none_or(|s| s <= margin) {", "if est < margin && shown.is_none_or(|s| s <= margin) {",
     ["--lib", "compare::tests::errors_are_judged_against_a_limit_and_in_points"], {}),
    ("compare: byte-identical repeats counted as evidence", "src/compare/judge.rs",
     "        if !seen.contains(&value) {", "        if true {",
     ["--lib", "compare::tests::identical_repeats_count_once"], {}),
    ("compare: requests that are their own batches taken as units", "src/compare/judge.rs",
     "let unit = if steps || per_batch.is_some_and(|m| m <= 1.5) { UnitKind::TimeBlock } else { UnitKind::Batch };",
     "let unit = if steps { UnitKind::TimeBlock } else { UnitKind::Batch };",
     ["--lib", "compare::tests::requests_that_are_their_own_batches_are_judged_in_blocks_of_time"], {}),
    ("compare: overlapping requests' timings judged by one run's blocks of time", "src/compare/judge.rs",
     "if RHYTHM_TIMINGS.contains(&field) && (self.a.concurrent || self.b.concurrent) {",
     "if false && RHYTHM_TIMINGS.contains(&field) && (self.a.concurrent || self.b.concurrent) {",
     ["--lib", "compare::tests::phase_timings_of_overlapping_requests_are_judged_by_the_run"], {}),
    ("compare: requests in flight at once at batch size 1 not seen as overlapping", "src/compare/judge.rs",
     "let concurrent = unit == UnitKind::TimeBlock && (steps || in_flight > 1);",
     "let concurrent = unit == UnitKind::TimeBlock && steps;",
     ["--lib", "compare::tests::phase_timings_of_overlapping_requests_are_judged_by_the_run"], {}),
    ("compare: a regression read from the interval's own estimate alone", "src/compare/gate.rs",
     "if better > 0.0 && est > margin && shown.is_none_or(|s| s > margin) {", "if better > 0.0 && est > margin {",
     ["--lib", "compare::tests::a_change_the_table_shows_inside_the_margin_is_no_regression"], {}),
    ("compare: the p50 of requests' largest gaps taken for the p50 of all gaps", "src/compare/judge.rs",
     'if field == "itl_max_ms" && stat != "max" {', "if false {",
     ["--lib", "compare::tests::only_the_largest_gap_between_tokens_is_judged_from_requests"], {}),
    ("compare: batches pooled over repeats that differ more than the batches allow", "src/compare/judge.rs",
     "                    && spread > within_variance(j, alpha)", "                    && spread > f64::INFINITY",
     ["--lib", "compare::tests::repeats_that_differ_more_than_their_batches_allow_are_the_unit"], {}),
    ("ab: a regression of one gated metric among many taken at alpha", "src/compare/rounds.rs",
     "    if m > 1 {", "    if false {",
     ["--lib", "compare::rounds::tests::a_regression_holds_over_the_count_of_gated_metrics"], {}),
    ("compare: a drifting machine blamed on the change", "src/compare/mod.rs",
     "&& drift.abs() > options.max_regression", "&& drift.abs() > 1e9",
     ["--lib", "compare::tests::a_drifting_machine_is_named_not_blamed"], {}),
    ("ab: rounds judged unpaired", "src/compare/rounds.rs",
     "let Some(interval) = paired_interval(&va, &vb, options.alpha) else { continue };",
     "let Some(interval) = paired_interval(&va, &vb, options.alpha).filter(|_| false) else { continue };",
     ["--lib", "compare::rounds::tests::a_drifting_machine_is_paired_away"], {}),
    ("run: a run that completed nothing passes", "src/report/mod.rs",
     ".filter(|b| b.counts.completed == 0)", ".filter(|b| b.counts.completed == u64::MAX)",
     ["--test", "compare_cli", "reproduction_5_a_run_that_completed_nothing_exits_three"], {}),
    ("compare: throughput of one run not judged", "src/compare/judge.rs",
     '"requests_per_s" => Some(SeriesField::Completed),', '"requests_per_s" => None,',
     ["--lib", "compare::tests::throughput_of_one_run_is_judged_on_its_time_series"], {}),
    ("slo: a one-token completion unmeasurable again", "src/metrics/slo.rs",
     "m.output_tokens.is_some_and(|n| n <= 1)", "m.output_tokens.is_some_and(|n| n < 1)",
     ["--lib", "metrics::slo::tests::verdicts"], {}),
    # ---- tune's recommendation (issue 22: ties said, and given to the simpler setting) ----
    ("tune: a tie goes to the higher score, not the simpler setting", "src/tune/search.rs",
     "let best = tied.iter().copied().min_by(|&a, &b| simpler(&s.points[a], &s.points[b]).then(a.cmp(&b)));",
     "let best = tied.first().copied();",
     ["--test", "tune", "ties_within_noise_are_marked_and_the_simplest_is_recommended"], {}),
    ("tune: the paired tie check forgets the seeds' spread", "src/tune/ties.rs",
     "mean >= -(T_975_4 * se).max(PLATEAU * best_mean.abs())", "mean >= -(PLATEAU * best_mean.abs())",
     ["--test", "tune", "a_tie_is_judged_on_the_difference_over_the_same_seeds"], {}),
    # ---- tune's runs on several threads (issue 25: the serial search's answer, to the byte) ----
    ("tune: the parallel runs' results kept in another order than the points'", "src/tune/parallel.rs",
     "*slots[i].lock().unwrap_or_else(|e| e.into_inner()) = Some(outcome);",
     "*slots[items.len() - 1 - i].lock().unwrap_or_else(|e| e.into_inner()) = Some(outcome);",
     ["--test", "tune", "the_search_on_several_threads_gives_the_serial_result_to_the_byte"], {}),
    ("tune: a point tried twice in one refinement round runs twice", "src/tune/search.rs",
     "if self.seen.contains_key(&c.key) || fresh_keys.contains(&c.key) {",
     "if self.seen.contains_key(&c.key) {",
     ["--test", "tune", "the_result_is_within_the_plateau_of_every_point_and_its_snippet_is_a_valid_batching_section"], {}),
    ("tune: a phase's new points forget the budget of the ones before them", "src/tune/search.rs",
     "if self.points.len() + fresh.len() >= self.budget {",
     "if self.points.len() >= self.budget {",
     ["--test", "tune", "the_search_on_several_threads_gives_the_serial_result_to_the_byte"], {}),
    # ---- tune on the middle level, its order in tune::tune (issue 36, item 3) ----
    ("issue 36 tune: each point runs the top level again (preflight, /proc, a report, a table)", "src/tune/search.rs",
     "Ok(run_plan_benchmarks(plan, RunOptions::quiet())?.benchmarks.into_iter().next())",
     "Ok(crate::run::run_blocking(plan, RunOptions::quiet())?.report.benchmarks.into_iter().next())",
     ["--lib", "tune::workflow::tests::a_tune_makes_one_report_its_recommendations_and_no_point_makes_one"], {}),
    ("issue 36 tune: a point's plan is built before the memo is asked", "src/tune/search.rs",
     "        let benchmark = self.memo.get_or_run(key, c.batch_size as usize, || {\n"
     "            let plan = with_point(self.plan, c.batch_size, c.batch_timeout, c.load)?;\n",
     "        let plan = with_point(self.plan, c.batch_size, c.batch_timeout, c.load)?;\n"
     "        let benchmark = self.memo.get_or_run(key, c.batch_size as usize, || {\n",
     ["--lib", "tune::search::tests::a_point_the_memo_answers_builds_no_plan"], {}),
    ("issue 36 tune: the search's plan is not checked before its points", "src/tune/search.rs",
     "    preflight(plan).map_err(TuneError::Preflight)?;\n", "",
     ["--lib", "tune::search::tests::a_plan_a_run_refuses_is_refused_before_the_first_point"], {}),
    ("issue 36 capabilities: the plan's own simulator has no prompts read ahead", "src/run/session.rs",
     "(EngineSource::Plan, EnginePlan::Sim(sim)) => Some(crate::engine::sim::request_prep(sim.scheduler)),",
     "(EngineSource::Plan, EnginePlan::Sim(_)) => None,",
     ["--lib", "run::session::tests::only_the_plans_own_simulator_has_its_prompts_read_ahead"], {}),
    ("issue 36 tune: tune::tune skips the confirmation on a real engine", "src/tune/workflow.rs",
     "let mut report = if real && options.profile.is_some() && options.confirm > 0 {",
     "let mut report = if real && options.profile.is_some() && options.confirm > usize::MAX - 1 {",
     ["--lib", "tune::workflow::tests::a_real_engine_scenario_on_a_profile_is_confirmed_through_the_caller"], {}),
    # ---- the stall default from a calibrated profile (issue 22) ----
    ("stall: the profile's prediction is not multiplied by the stall factor", "src/scenario/lower.rs",
     "let limit = floor.max(expected.saturating_mul(crate::batcher::STALL_FACTOR));",
     "let limit = floor.max(expected);",
     ["--lib", "a_calibrated_profile_sets_the_stall_default_from_a_full_batchs_predicted_generate"], {}),
    # ---- the HTTP client's timing by the kernel's stamps (issue 24: accurate at 1,000 streams) ----
    ("http timing: a chunk timed when it was read, not when it came", "src/sys/stamped.rs",
     "Some(at) => this.stamps.note_received(at, true),",
     "Some(_) => this.stamps.note_received(MonotonicClock::read(), true),",
     ["--lib", "a_response_chunk_is_timed_when_it_came_not_when_it_was_read"], {}),
    ("http timing: a read's stamp may go back before the read before it", "src/sys/stamped.rs",
     "self.received.fetch_max(at.as_nanos().max(1), Ordering::AcqRel);",
     "self.received.store(at.as_nanos().max(1), Ordering::Release);",
     ["--lib", "receive_stamps_never_go_backwards_and_never_into_the_future"], {}),
    ("http timing: a wall-clock stamp from the future is kept", "src/sys/stamped.rs",
     "let at = (nanos(stamp) + offset).min(now);",
     "let at = nanos(stamp) + offset;",
     ["--lib", "receive_stamps_never_go_backwards_and_never_into_the_future"], {}),
    ("http timing: a request timed when its answer began, not when it was written", "src/engine/openai/client.rs",
     "self.stamps.as_ref().and_then(|s| s.last_sent()).unwrap_or_else(MonotonicClock::read)",
     "MonotonicClock::read()",
     ["--lib", "a_response_chunk_is_timed_when_it_came_not_when_it_was_read"], {}),
    # ---- issue 32 serve ----
    # `batchlab serve` refuses what can never succeed, naming the field, and bounds its peers.
    ("serve: more prompts than max_waiting is a 503 to retry for ever", "src/serve/core.rs",
     "        if sequences.len() > self.max_waiting {\n",
     "        if sequences.len() > self.max_waiting && false {\n",
     ["--test", "serve_core", "a_request_with_more_prompts_than_may_ever_wait_is_refused_as_impossible_not_overloaded"], {}),
    ("serve: a prompt too long blamed on its output (checked with its output, not alone)", "src/serve/core.rs",
     "                prompt_len: spec.prompt_len,\n                output_len: 1,\n",
     "                prompt_len: spec.prompt_len,\n                output_len: spec.output_len,\n",
     ["--test", "serve_core", "a_request_too_long_for_the_kv_cache_is_refused_and_the_prompt_or_the_output_is_blamed"], {}),
    ("serve: an impossible prompt answered with param max_tokens", "src/serve/http.rs",
     "            ApiError::bad_field(prompt_param, e.to_string())\n",
     "            ApiError::bad_field(\"max_tokens\", e.to_string())\n",
     ["--test", "serve_http", "impossible_requests_get_a_4xx_that_names_the_field"], {}),
    ("serve: an empty prompt accepted (counted as one token)", "src/serve/api.rs",
     "matches!(p, Prompt::Text(s) if s.is_empty())",
     "matches!(p, Prompt::Text(s) if s.is_empty() && s.len() > 1)",
     ["--test", "serve_http", "impossible_requests_get_a_4xx_that_names_the_field"], {}),
    ("serve: a body past --max-body-bytes is not a 413", "src/serve/http.rs",
     "            Ok(Err(e)) if is_too_large(&e) => ApiError::status(\n",
     "            Ok(Err(e)) if is_too_large(&e) && false => ApiError::status(\n",
     ["--test", "serve_http", "impossible_requests_get_a_4xx_that_names_the_field"], {}),
    ("serve: no header-read timeout (silent, partial-head and idle connections held)", "src/serve/conn.rs",
     ".header_read_timeout(limits.header_read_timeout)",
     ".header_read_timeout(None)",
     ["--test", "serve_http", "slow_partial_and_idle_connections_are_closed_within_their_timeouts"], {}),
    ("serve: no header-read timeout, 1,000 idle connections keep a new client out", "src/serve/conn.rs",
     ".header_read_timeout(limits.header_read_timeout)",
     ".header_read_timeout(None)",
     ["--test", "serve_http", "a_thousand_idle_connections_do_not_keep_a_new_client_out"], {}),
    ("serve: no body-read timeout (a partial body holds its connection)", "src/serve/http.rs",
     "tokio::time::timeout(limits.body_read_timeout, read)",
     "tokio::time::timeout(limits.body_read_timeout * 1000, read)",
     ["--test", "serve_http", "slow_partial_and_idle_connections_are_closed_within_their_timeouts"], {}),
    ("serve: no connection cap (past it, served as any other)", "src/serve/conn.rs",
     "        if let Ok(permit) = served.clone().try_acquire_owned() {\n",
     "        if let Ok(permit) = served.clone().try_acquire_owned().or_else(|_| Arc::new(Semaphore::new(1)).try_acquire_owned()) {\n",
     ["--test", "serve_http", "past_max_connections_a_new_connection_gets_503_and_is_closed"], {}),
    ("serve: a failed accept stops the server accepting (new clients left unanswered)", "src/serve/conn.rs",
     "                backoff = (backoff * 2).min(ACCEPT_BACKOFF.1);\n                continue;\n",
     "                backoff = (backoff * 2).min(ACCEPT_BACKOFF.1);\n                break;\n",
     ["--test", "serve_http", "when_accept_fails_for_want_of_descriptors_the_server_backs_off_and_serves_again"], {}),
    ("serve: the connection cap kept above the descriptor limit", "src/cli/serve.rs",
     "    if fits < max_connections {\n",
     "    if fits < max_connections && false {\n",
     ["--test", "serve_http", "the_connection_cap_is_lowered_to_what_the_descriptor_limit_allows"], {}),
    # ---- issue 31 probe ----
    ("probe: the machine's drift divided by the later run's speed", "src/report/environment.rs",
     "Some((b - a) / a)", "Some((b - a) / b)",
     ["--lib", "drift_is_the_relative_change_of_the_mean_probe_time"], {}),
    ("probe: a virtual-time run is probed too", "src/run/session.rs",
     "let machine_start = (!self.driver.virtual_time()).then(MachineSample::take);",
     "let machine_start = Some(MachineSample::take());",
     ["--test", "cli", "run_writes_reports_and_exits_zero"], {}),
    ("probe: its samples taken back to back, one moment of the machine", "src/sys/machine.rs",
     "                std::thread::sleep(PROBE_GAP);\n", "",
     ["--lib", "this_machine_reads_and_the_probe_does_its_work"], {}),
    ("probe: the first sample taken for the probe", "src/sys/machine.rs",
     "Ok(n) if n > 0 => samples.iter().sum::<Duration>() / n,", "Ok(n) if n > 0 => samples[0],",
     ["--lib", "the_probe_is_the_mean_of_its_samples"], {}),
    # ---- issue 32 client ----
    # The SSE parser (src/engine/openai/sse.rs).
    ("issue 32 client, sse: a CR at the end of one read and the LF of the next end two lines", "src/engine/openai/sse.rs",
     "                    None => self.after_cr = true,\n", "                    None => {}\n",
     ["--lib", "engine::openai::sse::tests::a_cr_then_lf_in_the_next_read_is_one_line_end"], {}),
    ("issue 32 client, sse: the space after a field's colon kept in its value", "src/engine/openai/sse.rs",
     '(&line[..colon], value.strip_prefix(b" ").unwrap_or(value))', "(&line[..colon], value)",
     ["--lib", "engine::openai::sse::tests::line_ends_comments_and_fields"], {}),
    ("issue 32 client, sse: data lines joined without a line end", "src/engine/openai/sse.rs",
     "                self.data.push('\\n');\n", "",
     ["--lib", "engine::openai::sse::tests::line_ends_comments_and_fields"], {}),
    # The routing of choices to requests (stream.rs, engine.rs).
    ("issue 32 client, stream: every chunk credited to the first choice", "src/engine/openai/stream.rs",
     "        let state = &mut self.choices[index];", "        let state = &mut self.choices[0];",
     ["--lib", "engine::openai::stream::tests::each_choice_is_timed_by_its_own_chunks"], {}),
    ("issue 32 client, engine: a batch's outputs in the order of its HTTP requests, not its own", "src/engine/openai/engine/batch.rs",
     "        for (&i, output) in group.iter().zip(result) {",
     "        for (i, output) in (0..len).filter(|&i| outputs[i].is_none()).zip(result).collect::<Vec<_>>() {",
     ["--test", "http_misbehaving", "a_failed_sub_request_fails_only_its_own_prompts_charged_to_its_endpoint"], {}),
    ("issue 32 client, engine: one failed sub-request fails the whole batch", "src/engine/openai/engine/batch.rs",
     "        Some(first) if outputs.iter().all(|o| o.failure.as_ref() == Some(first)) => {",
     "        Some(first) if outputs.iter().any(|o| o.failure.is_some()) => {",
     # Deterministic: the batch's first request goes to the broken endpoint, its second to the
     # healthy one. (The two-endpoint run above caught it only when a batch happened to split.)
     ["--test", "http_misbehaving", "a_failed_sub_request_fails_only_its_own_prompts_charged_to_its_endpoint"], {}),
    # The router's backoff (route.rs).
    ("issue 32 client, route: the backoff does not double", "src/engine/openai/route.rs",
     "FIRST_BACKOFF.saturating_mul(1 << doublings).min(MAX_BACKOFF)", "FIRST_BACKOFF.min(MAX_BACKOFF)",
     ["--lib", "engine::openai::route::tests::backoff_doubles_up_to_its_cap"], {}),
    ("issue 32 client, route: several probes at once to an endpoint out of rotation", "src/engine/openai/route.rs",
     "            e.out_until.is_some_and(|t| t <= now) && !e.probing", "            e.out_until.is_some_and(|t| t <= now)",
     ["--lib", "engine::openai::route::tests::a_failed_endpoint_is_skipped_then_probed_then_back"], {}),
    ("issue 32 client, route: a failed probe does not lengthen the backoff", "src/engine/openai/route.rs",
     "            Health::Down => self.mark_down(pick.index, now),",
     "            Health::Down => e.out_until = Some(now.saturating_add(backoff(e.failures.max(1)))),",
     ["--lib", "engine::openai::route::tests::a_failed_endpoint_is_skipped_then_probed_then_back"], {}),
    # Bounds on a server's answer, and the stall watch.
    ("issue 32 client, bounds: tokens past max_tokens accepted while streaming", "src/engine/openai/stream.rs",
     "        if sent > u64::from(max_tokens) {", "        if false && sent > u64::from(max_tokens) {",
     ["--lib", "engine::openai::stream::tests::a_choice_past_its_max_tokens_fails_alone_by_every_count"], {}),
    ("issue 32 client, bounds: the final usage not checked against max_tokens", "src/engine/openai/stream.rs",
     "                    if output_tokens > max_tokens {", "                    if false && output_tokens > max_tokens {",
     ["--lib", "engine::openai::stream::tests::a_choice_past_its_max_tokens_fails_alone_by_every_count"], {}),
    ("issue 32 client, bounds: no byte cap per choice", "src/engine/openai/stream.rs",
     "        if bytes > cap {", "        if false && bytes > cap {",
     ["--lib", "engine::openai::stream::tests::a_flooding_choice_is_refused_at_its_byte_cap_and_nothing_more_is_kept"], {}),
    ("issue 32 client, bounds: a streamed choice unbounded (the flood kept)", "src/engine/openai/stream.rs",
     "        let max_tokens = self.max_tokens;\n        let state = &mut self.choices[index];",
     "        let max_tokens = u32::MAX;\n        let state = &mut self.choices[index];",
     ["--test", "http_misbehaving", "a_flooding_server_leaves_the_client_under_100_mb"], {}),
    ("issue 32 client, bounds: a 200 body that is no event stream filed as a dropped stream", "src/engine/openai/engine/batch.rs",
     "    if !seen_event && parser.pending() {", "    if false && !seen_event && parser.pending() {",
     ["--test", "http_misbehaving", "a_200_with_a_json_body_is_bad_response_never_stream_dropped"], {}),
    ("issue 32 client, stall: SSE comments count as progress", "src/engine/openai/engine/batch.rs",
     "                if !events.is_empty() {\n                    let now", "                if !bytes.is_empty() {\n                    let now",
     ["--test", "http_misbehaving", "an_endpoint_sending_only_comments_is_out_of_rotation_within_its_stall_timeout"], {}),
    ("issue 32 client, stall: no watch on the response head", "src/engine/openai/engine/send.rs",
     "match watched(shared, endpoint, sent_at, shared.client.send(http)).await {",
     "match Some(shared.client.send(http).await) {",
     ["--test", "http_misbehaving", "a_hung_endpoint_is_out_of_rotation_within_its_stall_timeout"], {}),
    ("issue 32 client, stall: a stalled endpoint stays in rotation", "src/engine/openai/engine/batch.rs",
     "        RemoteErrorKind::Http429 | RemoteErrorKind::Http4xx => Health::Up,",
     "        RemoteErrorKind::Http429 | RemoteErrorKind::Http4xx | RemoteErrorKind::Stalled => Health::Up,",
     ["--test", "http_misbehaving", "a_hung_endpoint_is_out_of_rotation_within_its_stall_timeout"], {}),
    # The key never shows; conversations refused on the completions API.
    ("issue 32 client, key: a pasted key left unmasked in source excerpts", "src/scenario/keys/codec/text.rs",
     "    cx.mask(field, &name);\n", "",
     ["--test", "http_engine", "a_pasted_key_is_refused_and_no_line_of_any_output_shows_it"], {}),
    ("issue 32 client, key: an hf_ token taken for a variable's name", "src/engine/openai/config.rs",
     '"sk-", "sk_", "hf_", ', '"sk-", "sk_", ',
     ["--lib", "engine::openai::config::tests::secrets_are_told_from_names"], {}),
    ("issue 32 client, check: chat = true accepted on the completions API", "src/scenario/lower.rs",
     "            if chat.enabled && *request_format != RequestFormat::Plain =>",
     "            if false && chat.enabled && *request_format != RequestFormat::Plain =>",
     ["--test", "http_engine", "check_refuses_chat_prompts_on_the_completions_api_at_the_keys_place"], {}),
    # What went on the wire, and TTFT from the submit.
    ("issue 32 client, wire: every request said to go alone", "src/engine/openai/engine/batch.rs",
     "        wire_batch: u32::try_from(wire_batch).ok(),", "        wire_batch: Some(1),",
     ["--test", "http_engine", "the_wire_batches_in_the_report_match_the_servers_timing_log_and_the_split_is_warned"], {}),
    ("issue 32 client, wire: a split micro-batch not counted (no warning)", "src/metrics/client.rs",
     "            self.wire_split += u64::from((wire as usize) < batch);", "            self.wire_split += 0;",
     ["--test", "http_engine", "the_wire_batches_in_the_report_match_the_servers_timing_log_and_the_split_is_warned"], {}),
    ("issue 32 client, ttft_from_submit timed from the send", "src/run/step/events.rs",
     "                    c.times.submitted,\n                    metrics.engine_first_token,",
     "                    metrics.sent.unwrap_or(c.times.submitted),\n                    metrics.engine_first_token,",
     ["--test", "http_engine", "the_wire_batches_in_the_report_match_the_servers_timing_log_and_the_split_is_warned"], {}),
    ("issue 32 client, stall: the watch per request, not per endpoint", "src/engine/openai/engine/mod.rs",
     "        if endpoint.progress() + shared.stall_limit() <= tokio::time::Instant::now() {\n            return None;\n        }",
     "        return None;",
     ["--test", "http_misbehaving", "a_request_queued_behind_others_on_a_busy_server_is_not_stalled"], {}),
    ("issue 32 client, timeout: the default back to 5 minutes whatever the request", "src/engine/openai/config.rs",
     "configured.unwrap_or_else(|| (TIMEOUT_BASE + TIMEOUT_PER_TOKEN.saturating_mul(asked)).min(TIMEOUT_CAP))",
     "configured.unwrap_or(Duration::from_secs(300))",
     ["--lib", "engine::openai::config::tests::the_default_timeout_fits_the_request_not_five_minutes"], {}),
    ("issue 32 client, check: a JSONL file's messages accepted on the completions API", "src/run/preflight.rs",
     "    check_chat_prompts(plan, &workload)?;\n", "",
     ["--test", "http_engine", "check_refuses_chat_prompts_on_the_completions_api_at_the_keys_place"], {}),
    # Issue 33: the model's own tokenizer (workload.tokenizer, serve --tokenizer).
    ("issue 33 tokenizer, exact text: the re-encode loop stops one short", "src/engine/tokenizer.rs",
     "                if ids.len() == target {", "                if ids.len() + 1 >= target {",
     ["--test", "workload_tokenizer", "a_thousand_text_and_a_thousand_chat_prompts_have_exactly_the_drawn_count"], {}),
    ("issue 33 tokenizer, exact text: special and added tokens drawn", "src/engine/tokenizer.rs",
     "tokenizer.get_vocab(false).into_values().filter(|id| !added.contains_key(id)).collect();",
     "tokenizer.get_vocab(true).into_values().collect();",
     ["--test", "workload_tokenizer", "a_thousand_text_and_a_thousand_chat_prompts_have_exactly_the_drawn_count"], {}),
    ("issue 33 tokenizer, chat sizing ignores the model's template", "src/loadgen/tokenizer.rs",
     "            RequestFormat::ChatTemplate => self.tokenizer.chat_template(),",
     "            RequestFormat::ChatTemplate => None,",
     ["--test", "workload_tokenizer", "a_thousand_text_and_a_thousand_chat_prompts_have_exactly_the_drawn_count"], {}),
    ("issue 33 tokenizer, file limits: the workload's tokenizer not passed to the reader", "src/loadgen/workload/mod.rs",
     "dataset::read(&bytes, path, dataset, &TokenCounter::of(tokenizer.as_ref()))?;",
     "dataset::read(&bytes, path, dataset, &TokenCounter::FourBytes)?;",
     ["--test", "workload_tokenizer", "file_limits_count_real_tokens"], {}),
    ("issue 33 tokenizer, serve: --tokenizer loaded but not used", "src/cli/serve.rs",
     "            Ok(t) => config.counter = batchlab::engine::tokenizer::TokenCounter::Tokenizer(t),",
     "            Ok(_) => {}",
     ["--test", "serve_tokenizer", "tokenize_usage_and_the_prefix_cache_are_in_the_tokenizers_tokens"], {}),
    # ---- issue 33, images ([workload.images], docs/workloads.md) ----
    ("issue 33 images, check: a bucket of size 0 accepted", "src/loadgen/images.rs",
     "        if b.height == 0 || b.width == 0 {", "        if false {",
     ["--test", "workload_images", "check_refuses_bad_image_settings_at_their_line"], {}),
    ("issue 33 images, check: probabilities that do not sum to 1 accepted", "src/loadgen/images.rs",
     "    if (sum - 1.0).abs() > 1e-6 {", "    if (sum - 1.0).abs() > 1.0 {",
     ["--test", "workload_images", "check_refuses_bad_image_settings_at_their_line"], {}),
    ("issue 33 images, check: a limit below the base count accepted", "src/scenario/images.rs",
     "    if spec.limit < spec.base_items {", "    if false {",
     ["--test", "workload_images", "check_refuses_bad_image_settings_at_their_line"], {}),
    ("issue 33 images, check: images accepted on the completions API", "src/scenario/images.rs",
     "    if let EnginePlan::OpenAi(OpenAiConfig { api: api @ (Api::Completions | Api::Embeddings), .. }) = engine {",
     "    if let EnginePlan::OpenAi(OpenAiConfig { api: api @ (Api::Completions | Api::Embeddings), .. }) = engine && false {",
     ["--test", "workload_images", "check_refuses_bad_image_settings_at_their_line"], {}),
    ("issue 33 images, presets: widths not rounded down to even", "src/loadgen/images.rs",
     "    let width = height * 16 / 9 / 2 * 2;", "    let width = height * 16 / 9;",
     ["--lib", "loadgen::images::tests::presets_are_sixteen_by_nine_rounded_down_to_even"], {}),
    ("issue 33 images, seeds: every image of a request the same", "src/loadgen/images.rs",
     "                let mut rng = SplitMix64::derive(items, i);", "                let mut rng = SplitMix64::derive(items, 0);",
     ["--lib", "loadgen::images::tests::images_are_reproducible_and_all_differ_without_a_pool"], {}),
    ("issue 33 images, pool: never drawn from", "src/loadgen/images.rs",
     "if self.spec.pool > 0 && rng.chance(self.spec.pool_rate) {", "if self.spec.pool > 0 && rng.chance(0.0) {",
     ["--lib", "loadgen::images::tests::a_pool_repeats_its_images_at_the_set_rate"], {}),
    ("issue 33 images, wire: the text part left out of a turn with images", "src/engine/openai/request.rs",
     '    parts.push(json!({"type": "text", "text": m.content}));\n', "",
     ["--lib", "engine::openai::request::tests::a_turn_with_images_is_its_text_then_one_image_url_part_each"], {}),
    ("issue 33 images, sim: images cost no prompt tokens", "src/engine/sim/prompt.rs",
     "    prompt_images(prompt).for_each(|image| ids.extend(image_ids(image)));\n", "",
     ["--test", "workload_images", "batchlab_serve_takes_image_parts_and_charges_their_tokens"], {}),
    ("issue 33 images, sim: the encoder cache never hits", "src/engine/sim/encoder.rs",
     "                self.by_age.remove(&before);\n                true", "                self.by_age.remove(&before);\n                false",
     ["--test", "workload_images", "the_vision_scenario_on_the_simulator_hits_its_designed_reuse_and_is_reproducible"], {}),
    ("issue 33 images, count_in_prompt: the text not sized to the target", "src/loadgen/workload/synthetic.rs",
     "            if self.images.as_ref().is_some_and(|g| g.spec().count_in_prompt) {",
     "            if false && self.images.as_ref().is_some_and(|g| g.spec().count_in_prompt) {",
     ["--test", "workload_images", "the_vision_scenario_on_the_simulator_hits_its_designed_reuse_and_is_reproducible"], {}),
    # Issue 36, item 1: the engine's capabilities are data, handed out once.
    ("issue 36 capabilities: the batcher ignores runs_here (no stall watch with several in flight)", "src/batcher/shell/engine_thread.rs",
     "set_engine_runs_here(concurrent.as_ref().is_some_and(|c| c.runs_here));",
     "set_engine_runs_here(false);",
     ["--lib", "run::realtime::tests::the_stall_watch_applies_through_two_fault_layers"], {}),
    ("issue 36 capabilities: the faults wrapper hands out a bare face (every capability lost)", "src/engine/faults.rs",
     "            ..c\n", "            ..Concurrent::new(c.face.clone())\n",
     ["--lib", "run::realtime::tests::the_steps_reach_the_run_through_two_fault_layers"], {}),
    ("issue 36 capabilities: the run never takes the engine's steps", "src/run/realtime.rs",
     "if let Some(take) = concurrent.as_ref().and_then(|c| c.steps.clone()) {",
     "if let Some(take) = concurrent.as_ref().and_then(|_| None::<TakeSteps>) {",
     ["--lib", "run::realtime::tests::the_steps_reach_the_run_through_two_fault_layers"], {}),
    ("issue 36 capabilities: the session gives the loop no counters", "src/run/session.rs",
     "let counters = concurrent.as_ref().and_then(|c| c.counters.clone());",
     "let counters = concurrent.as_ref().and_then(|_| None);",
     ["--test", "http_engine", "two_endpoints_one_dies_mid_run_the_other_carries_on"], {}),
    ("issue 36 faults, one decision: a slow batch with an output fault is not slow", "src/engine/faults.rs",
     "        Decision::Call(Effect { output, stranger, slow_factor: slow.then_some(self.slow_factor) })",
     "        Decision::Call(Effect { output, stranger, slow_factor: (slow && output == OutputFault::None).then_some(self.slow_factor) })",
     ["--lib", "engine::faults::tests::one_decision_and_one_effect_serve_both_faces"], {}),
    ("issue 36 capabilities, vLLM: under [faults] continuous admission loses its stall watch", "src/engine/faults.rs",
     "            ..c\n", "            runs_here: false,\n            ..c\n",
     ["--features", "vllm", "--test", "vllm_stall", "a_stopped_engine_core_under_faults_ends_a_continuous_run_within_a_minute"], VLLM),
    ("issue 33 images, report: the prompt target not recorded", "src/run/driver.rs",
     "                                run.on_prompt_target(id, target);\n", "",
     ["--test", "workload_images", "the_vision_scenario_on_the_simulator_hits_its_designed_reuse_and_is_reproducible"], {}),
    ("issue 33 images, report: a missed target counted as hit", "src/metrics/prompt_target.rs",
     "        self.differ += u64::from(diff != 0);", "        self.differ += 0;",
     ["--test", "workload_images", "a_target_the_images_overshoot_is_reported_as_missed"], {}),
    ("issue 33 encoder, sim: a cache hit costs the encoder too", "src/engine/sim/encoder.rs",
     "            if self.touch(image.hash) {\n                work.hits += 1;\n            } else {",
     "            if self.touch(image.hash) {\n                work.hits += 1;\n                work.tokens += image.tokens;\n            } else {",
     ["--lib", "engine::sim::tests::an_image_that_misses_the_encoder_cache_costs_its_tokens_and_a_hit_costs_nothing"], {}),
    ("issue 33 encoder, sim: charged again when a preempted sequence is readmitted", "src/engine/sim/scheduler/stepper.rs",
     "            if !s.admitted {\n                s.admitted = true;\n                encoder_tokens += u64::from(s.encoder_tokens);",
     "            encoder_tokens += u64::from(s.encoder_tokens);\n            if !s.admitted {\n                s.admitted = true;",
     ["--lib", "engine::sim::tests::a_replay_charges_the_encoder_in_the_step_that_first_schedules_a_sequence"], {}),
    ("issue 33 encoder, serve: images never charged", "src/serve/core.rs",
     "            spec.encoder_tokens = work.tokens;\n", "",
     ["--test", "serve_core", "images_cost_the_encoder_as_in_the_simulated_engine"], {}),
    ("issue 33 encoder, calibrate: the encoder's column always left out", "src/calibrate/fit.rs",
     "    let left_out: &[usize] = if images { &[] } else { &[ENCODER] };", "    let left_out: &[usize] = &[ENCODER];",
     ["--test", "calibrate_cli", "calibrate_recovers_the_encoder_cost_per_image_token_from_a_run_with_images"], {}),
    ("issue 33 encoder, calibrate: cache hits counted as encoded", "src/calibrate/read.rs",
     "    let misses = s.images - r.image_cache_hits.unwrap_or(0).min(s.images);", "    let misses = s.images;",
     ["--test", "calibrate_cli", "calibrate_recovers_the_encoder_cost_per_image_token_from_a_run_with_images"], {}),
    ("issue 34 embeddings, counts: the larger remainder loses", "src/engine/openai/embed.rs",
     "    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));",
     "    remainders.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));",
     ["--lib", "engine::openai::embed::tests::shares_add_up_to_the_total_and_the_larger_remainder_wins"], {}),
    ("issue 34 embeddings, counts: the list's usage taken for every input", "src/engine/openai/embed.rs",
     "                (None, _) if requests.len() == 1 && total.is_some() =>",
     "                (None, _) if total.is_some() =>",
     ["--test", "http_embeddings", "a_batch_is_one_embeddings_request_and_each_input_gets_its_own_vector_and_count"], {}),
    ("issue 34 embeddings, answer: the items' index ignored", "src/engine/openai/embed.rs",
     "        let index = match item.get(\"index\") {", "        let index = match None::<&Value> {",
     ["--lib", "engine::openai::embed::tests::each_input_gets_its_own_count_and_says_where_it_came_from"], {}),
    ("issue 34 embeddings, bounds: no byte cap on the answer", "src/engine/openai/engine/embed.rs",
     "                if answer.len() as u64 + bytes.len() as u64 > cap {",
     "                if answer.len() as u64 + bytes.len() as u64 > u64::MAX - 1 {",
     ["--test", "http_embeddings", "an_answer_past_the_byte_cap_or_one_that_stalls_fails_its_batch_and_nothing_hangs"], {}),
    ("issue 34 embeddings, serve: a decode step after the prefill", "src/serve/core.rs",
     "NewSequence { prompt_ids, output_tokens: 1, max_tokens: 1, images: Vec::new() }",
     "NewSequence { prompt_ids, output_tokens: 2, max_tokens: 2, images: Vec::new() }",
     ["--test", "serve_core", "an_embedding_is_its_prefill_alone"], {}),
    ("issue 34 embeddings, serve: an embedding counted as a generated token", "src/serve/core.rs",
     "            if !live.pooling {\n                self.metrics.generation_tokens.inc();",
     "            if true {\n                self.metrics.generation_tokens.inc();",
     ["--test", "serve_core", "an_embedding_is_its_prefill_alone"], {}),
    ("issue 34 embeddings, report: each embedding counted twice", "src/metrics/aggregate.rs",
     "            e.count += 1;", "            e.count += 2;",
     ["--test", "http_embeddings", "the_shipped_embeddings_scenario_reports_embeddings_per_second_and_no_token_timings"], {}),
    ("issue 34 embeddings, check: output keys and token objectives accepted", "src/scenario/embeddings.rs",
     "            if let Some(field) = cx.field(t, key) {",
     "            if let Some(field) = cx.field(t, key).filter(|_| false) {",
     ["--test", "http_embeddings", "check_refuses_output_keys_token_objectives_and_images_with_embeddings_at_their_lines"], {}),
    ("issue 34 embeddings, check: images accepted on the embeddings API", "src/scenario/images.rs",
     "        let api = if *api == Api::Embeddings { \"embeddings\" } else { \"completions\" };",
     "        let api = if *api == Api::Embeddings { return } else { \"completions\" };",
     ["--test", "http_embeddings", "check_refuses_output_keys_token_objectives_and_images_with_embeddings_at_their_lines"], {}),
    ("issue 34 embeddings, python: an output's embedding_dims dropped", "src/engine/python/output.rs",
     "        embedding_dims: f.int(\"embedding_dims\", max)?.map(|n| n as u32),", "        embedding_dims: None,",
     ["--features", "vllm", "--lib", "engine::python::output::tests::an_embedding_keeps_its_length_and_generates_nothing"], VLLM),
    ("issue 34 embeddings, check: a vLLM pooling runner not seen", "src/scenario/embeddings.rs",
     "        EnginePlan::Vllm(v) if v.engine_args.get(\"runner\").and_then(|r| r.as_str()) == Some(\"pooling\") => {",
     "        EnginePlan::Vllm(v) if v.engine_args.get(\"runner\").and_then(|r| r.as_str()) == Some(\"pool\") => {",
     ["--test", "http_embeddings", "check_refuses_output_keys_token_objectives_and_images_with_embeddings_at_their_lines"], {}),
    ("issue 34 embeddings, timeout: an embeddings request's derived bound grows with output_tokens", "src/engine/openai/config.rs",
     "        Api::Embeddings => 0,\n", "        Api::Embeddings => max_tokens,\n",
     ["--lib", "engine::openai::config::tests::the_default_timeout_fits_the_request_not_five_minutes"], {}),
    ("issue 34 sessions: the simulator's reply left out of the history (half of it kept)", "src/loadgen/sessions.rs",
     "                None => ids(*vocab, count, None, &mut rng),", "                None => ids(*vocab, count / 2, None, &mut rng),",
     ["--test", "workload_sessions", "the_sessions_scenario_chains_its_turns_hits_more_with_each_and_is_reproducible"], {}),
    ("issue 34 sessions: end_session drops the oldest turns instead", "src/loadgen/sessions.rs",
     "                if self.spec.context_full == ContextFull::DropOldest && !session.history.is_empty() {",
     "                if !session.history.is_empty() {",
     ["--lib", "loadgen::sessions::tests::a_full_context_ends_the_session_or_drops_the_oldest_pairs"], {}),
    ("issue 34 sessions: a failed turn does not end its session", "src/loadgen/sessions.rs",
     "        self.end(number, SessionEnd::Failed, Some(now));\n", "",
     ["--lib", "loadgen::sessions::tests::a_failed_turn_ends_its_session_failed_and_think_time_holds_the_next_turn"], {}),
    ("issue 34 sessions: think time counted as client lag", "src/run/step/events.rs",
     "            Some((_, Some(due), false)) => due.min(now),",
     "            Some((_, Some(due), false)) => due.min(now).min(self.started_at),",
     ["--test", "workload_sessions", "the_sessions_scenario_chains_its_turns_hits_more_with_each_and_is_reproducible"], {}),
    ("issue 34 sessions: concurrency counts requests in flight, not active sessions", "src/run/step/sessions.rs",
     "        let load = if queued { in_flight } else { s.sessions.active() };", "        let load = in_flight;",
     ["--test", "workload_sessions", "the_sessions_scenario_chains_its_turns_hits_more_with_each_and_is_reproducible"], {}),
    ("issue 34 sessions, check: max_context_tokens below the first turn accepted", "src/scenario/sessions.rs",
     "        if limit < first {", "        if false {",
     ["--test", "workload_sessions", "check_refuses_bad_session_settings_at_their_line"], {}),
    ("issue 34 sessions, HTTP: the session header not sent", "src/engine/openai/engine/batch.rs",
     "        session: session_of(requests)\n", "        session: session_of(requests).filter(|_| false)\n",
     ["--test", "http_sessions", "each_turn_carries_the_previous_turn_and_the_servers_exact_reply_and_its_session_header"], {}),
    ("issue 34 sessions, HTTP: the server's reply text not carried (a stand-in instead)", "src/loadgen/sessions.rs",
     "                Some(text) => text.to_owned(),", "                Some(_) => words(count, None, &mut rng),",
     ["--test", "http_sessions", "each_turn_carries_the_previous_turn_and_the_servers_exact_reply_and_its_session_header"], {}),
    ("issue 34 sessions, route: session_affinity ignores the session", "src/engine/openai/route.rs",
     "            if self.endpoints[index].out_until.is_none() {", "            if false {",
     ["--test", "http_sessions", "session_affinity_keeps_each_session_on_one_of_two_batchlab_serve_endpoints"], {}),
    ("issue 34 sessions, rate_tick: turns sent when their think time ends, not at the next arrival", "src/run/step/sessions.rs",
     "        let rate_tick = s.sessions.spec().next_turn == NextTurn::RateTick && self.scheduler.next_arrival().is_some();",
     "        let rate_tick = false;",
     ["--test", "workload_sessions", "rate_tick_sends_queued_turns_at_the_profiles_arrivals_before_new_sessions"], {}),
    ("issue 34 sessions, rate_tick: a new session before a queued turn", "src/run/step/sessions.rs",
     "                let turn = if queued { s.sessions.take_queued(now) } else { s.sessions.start() };",
     "                let turn = if queued && s.sessions.started() % 2 == 1 { s.sessions.take_queued(now) } else { s.sessions.start() };",
     ["--test", "workload_sessions", "rate_tick_sends_queued_turns_at_the_profiles_arrivals_before_new_sessions"], {}),
    ("issue 34 sessions, file: every turn replays the conversation's first user turn", "src/loadgen/sessions.rs",
     "                Piece::Text(c.users.get(k as usize).cloned().unwrap_or_default())",
     "                Piece::Text(c.users.first().cloned().unwrap_or_default())",
     ["--test", "http_sessions", "a_files_conversations_are_replayed_with_the_servers_replies"], {}),
    ("issue 34 sessions, check: sessions accepted on a pooling engine", "src/scenario/sessions.rs",
     "    if let Some(how) = super::embeddings::pooling(engine) {", "    if let Some(how) = super::embeddings::pooling(engine).filter(|_| false) {",
     ["--test", "workload_sessions", "check_refuses_bad_session_settings_at_their_line"], {}),
    ("issue 34 tests: a vLLM test file without its feature gate (it runs in just test)", "tests/vllm_sessions.rs",
     "#![cfg(feature = \"vllm\")]\n", "\n",
     ["--test", "architecture_deps", "every_vllm_test_file_is_gated_and_run_by_test_vllm"], {}),
    ("issue 34 sessions, console: the sessions line shows every turn's hit rate, not the first eight", "src/report/table.rs",
     "s.by_turn.iter().take(SESSION_TURNS_SHOWN).map(", "s.by_turn.iter().map(",
     ["--lib", "report::table::tests::a_sessions_benchmark_prints_how_its_sessions_went"], {}),
    ("duplicates D6: a session's turn made without its session number (no X-Session-ID, no affinity)", "src/loadgen/workload/mod.rs",
     "        session,\n        prepared: None,", "        session: None,\n        prepared: None,",
     ["--test", "http_sessions"], {}),
    ("issue 35 shard: arrival i goes to shard (i + 1) mod n, not i mod n", "src/loadgen/shard.rs",
     "i % u64::from(self.n) == u64::from(self.k)", "(i + 1) % u64::from(self.n) == u64::from(self.k)",
     ["--test", "distributed_shard"], {}),
    ("issue 35 shard: every shard takes the rounded-down share, so the shares do not sum to the whole",
     "src/loadgen/shard.rs",
     "let before = |x: u64| x / n + u64::from(k < x % n);", "let before = |x: u64| x / n;",
     ["--lib", "loadgen::shard"], {}),
    ("issue 35 shard: counted limits count only the shard's own requests", "src/run/step/phases.rs",
     "self.submitted + self.passed", "self.submitted",
     ["--test", "distributed_shard"], {}),
    ("issue 35 shard: a shard's record carries the batcher's id, not its index in the run", "src/run/step/events.rs",
     "RequestRecord::completed(flight.index,", "RequestRecord::completed(id,",
     ["--lib", "run::step::tests::a_shard_passes_over"], {}),
    ("issue 35 merge: the union keeps only the first shard's records", "src/report/merge/mod.rs",
     "parts[i].push(r);", "if i == 0 {\n                parts[i].push(r);\n            }",
     ["--test", "distributed_merge", "merged_shard_runs_give_the_percentiles"], {}),
    ("issue 35 merge: a missing or failed shard leaves the merged report complete", "src/report/merge/mod.rs",
     "report.incomplete = !problems.is_empty();", "report.incomplete = false;",
     ["--test", "distributed_merge", "shard_makes_the_report_incomplete"], {}),
    ("issue 35 merge: the last expected shard is never missing", "src/report/merge/mod.rs",
     "let missing: Vec<u32> = (0..n).filter(", "let missing: Vec<u32> = (0..n.saturating_sub(1)).filter(",
     ["--test", "distributed_merge", "a_missing_shard"], {}),
    ("issue 35 merge, verdict: a client lag p99 at the bound is lagged", "src/report/merge/verdict.rs",
     "lag > bounds.max_client_lag_p99_ms", "lag >= bounds.max_client_lag_p99_ms",
     ["--lib", "report::merge::verdict"], {}),
    ("issue 35 merge, verdict: a start lateness at the bound is late", "src/report/merge/verdict.rs",
     "late > bounds.max_start_lateness_ms", "late >= bounds.max_start_lateness_ms",
     ["--lib", "report::merge::verdict"], {}),
    ("issue 35 merge, verdict: a clock behind by more than the bound is not off", "src/report/merge/verdict.rs",
     "offset.abs() > bounds.max_clock_offset_ms", "offset > bounds.max_clock_offset_ms",
     ["--lib", "report::merge::verdict"], {}),
    ("issue 35 ray: a shard the launcher lost is also listed missing", "src/report/merge/mod.rs",
     "!by_k.contains_key(k) && !lost.contains(k)", "!by_k.contains_key(k)",
     ["--test", "distributed_merge", "launcher_lost"], {}),
    ("issue 35 ray: merge ignores a launcher's shard-failed.json", "src/cli/merge.rs",
     "    if marker.exists() {", "    if false && marker.exists() {",
     ["--test", "distributed_merge", "launcher_lost"], {}),
    ("issue 35 ray: a lost shard does not stop the others (they run out their schedule)", "python/batchlab_engines/ray_run.py",
     "                    a.stop.remote()", "                    pass",
     ["--features", "vllm", "--test", "ray_run", "a_killed_shard_actor"], VLLM),
    ("issue 35 merge: a server's counters from the first shard that read them, not the widest window", "src/report/merge/mod.rs",
     "                Some(slot) if slot.0 >= part.duration_s => {}", "                Some(_) => {}",
     ["--lib", "report::merge::tests::a_servers_counters_come_from_the_widest_window_never_summed"], {}),
    ("issue 35 shard, display: a shard counts to the whole run's requests, not its own part", "src/run/step/display.rs",
     "let measured_total = self.own_part(self.stop.max_requests());", "let measured_total = self.stop.max_requests();",
     ["--lib", "run::step::tests::a_shard_passes_over_the_others_arrivals"], {}),
    ("issue 35 shard: a shard's part of a counted phase counts one arrival too many", "src/loadgen/shard.rs",
     "let before = |x: u64| x / n + u64::from(k < x % n);", "let before = |x: u64| x / n + u64::from(k <= x % n);",
     ["--lib", "loadgen::shard::tests::a_shards_part_of_a_counted_phase_is_the_arrivals_it_owns"], {}),
    # ---- issue 35: one client on several workers (engine.openai.threads) ----
    ("issue 35 client: the threads key ignored (tokio's own default workers)", "src/engine/openai/engine/mod.rs",
     "            .worker_threads(threads)\n", "",
     ["--test", "http_client_threads", "the_client_runs_on_the_configured_workers_and_by_default_on_every_usable_cpu"], {}),
    ("issue 35 client: the default is one worker, not the CPUs batchlab may use", "src/engine/openai/engine/mod.rs",
     "map_or_else(|| crate::sys::usable_cpus().get(),", "map_or_else(|| 1,",
     ["--test", "http_client_threads", "the_client_runs_on_the_configured_workers_and_by_default_on_every_usable_cpu"], {}),
    ("issue 35 client: threads = 0 accepted", "src/scenario/keys/engine.rs",
     "        threads: Opt(U32(1)),", "        threads: Opt(U32(0)),",
     ["--test", "http_client_threads", "check_prints_the_resolved_threads_and_refuses_zero_at_its_line"], {}),
    ("issue 35 client: check prints no resolved default for threads", "src/scenario/print.rs",
     "        && openai.threads.is_none()\n", "        && openai.threads.is_some()\n",
     ["--test", "http_client_threads", "check_prints_the_resolved_threads_and_refuses_zero_at_its_line"], {}),
    ("issue 35 client, chunk: a null index read as an absent one", "src/engine/openai/chunk.rs",
     "any(|c| c.0.index == Some(None));", "any(|_| false);",
     ["--lib", "engine::openai::stream::tests::the_typed_chunk_reads_every_event_as_the_json_value_does"], {}),
    ("issue 35 client, chunk: a list read as an object", "src/engine/openai/chunk.rs",
     "deserializer.deserialize_map(ObjectOnly(PhantomData)).map(Object)", "T::deserialize(deserializer).map(Object)",
     ["--lib", "engine::openai::stream::tests::the_typed_chunk_reads_every_event_as_the_json_value_does"], {}),
    ("issue 35 client, chunk: an error object read as a chunk", "src/engine/openai/chunk.rs",
     "(chunk.error.is_none() && !index_null)", "(!index_null)",
     ["--lib", "engine::openai::stream::tests::the_typed_chunk_reads_every_event_as_the_json_value_does"], {}),
    ("issue 35 client, chunk: reasoning before content", "src/engine/openai/chunk.rs",
     "[self.content, self.reasoning_content, self.reasoning]", "[self.reasoning_content, self.content, self.reasoning]",
     ["--lib", "engine::openai::stream::tests::the_typed_chunk_reads_every_event_as_the_json_value_does"], {}),
    # ---- issue 35: batchlab serve's streamed chunks rendered without a JSON tree ----
    ("issue 35 serve: a chunk's strings written unescaped", "src/serve/chunk.rs",
     "    let _ = serde_json::to_writer(&mut *out, s);",
     "    out.push(b'\"');\n    out.extend_from_slice(s.as_bytes());\n    out.push(b'\"');",
     ["--lib", "serve::chunk"], {}),
    ("issue 35 serve: the chat role on every chunk, not the first", "src/serve/chunk.rs",
     "                if first {", "                if true {",
     ["--lib", "serve::chunk"], {}),
    ("issue 35 serve: a finish reason rendered as null", "src/serve/chunk.rs",
     "        Some(f) => json_str(out, f),", "        Some(_) => out.extend_from_slice(b\"null\"),",
     ["--lib", "serve::chunk"], {}),
    ("issue 35 serve: the usage chunk dropped from a stream's end", "src/serve/http.rs",
     "        if self.include_usage {", "        if false && self.include_usage {",
     ["--test", "serve_http"], {}),
    ("issue 35 serve: a stream's frame stamps only its first token in the timing log", "src/serve/http.rs",
     "        for (choice, last) in self.batch.drain(..) {", "        for (choice, last) in self.batch.drain(..).take(1) {",
     ["--test", "serve_timing"], {}),
    ("issue 35 client: the run's loop keeps preempting the client thread", "src/run/realtime.rs",
     "        if concurrent.as_ref().is_some_and(|c| !c.runs_here) {", "        if false {",
     ["--lib", "run::realtime"], {}),
    ("issue 35 client: the engine thread yields even for an engine that runs here", "src/batcher/shell/engine_thread.rs",
     "let elsewhere = locked.guard.concurrent.as_ref().is_some_and(|c| !c.runs_here);", "let elsewhere = locked.guard.concurrent.as_ref().is_some();",
     ["--lib", "run::realtime"], {}),
]


# Every variant rebuilds batchlab, so builds dominate a run. They go to target dirs of their own
# (the developer's target/ stays as it was), without debug info (a test binary links in a fraction
# of the time), and release builds (the loom models) are incremental and without whole-program
# optimization: only the broken crate is compiled again.
FAST = {
    "CARGO_PROFILE_DEV_DEBUG": "0",
    "CARGO_PROFILE_TEST_DEBUG": "0",
    "CARGO_PROFILE_RELEASE_DEBUG": "0",
    "CARGO_PROFILE_RELEASE_INCREMENTAL": "true",
    "CARGO_PROFILE_RELEASE_LTO": "false",
    "CARGO_PROFILE_RELEASE_CODEGEN_UNITS": "16",
}


def cargo_test(args, env):
    """Runs `cargo test ARGS`: (passed, tail of the output, number of tests that ran)."""
    # A variant's failing proptest cases must not be saved as regressions of the unbroken code.
    e = dict(os.environ, PROPTEST_DISABLE_FAILURE_PERSISTENCE="1", **FAST, **env)
    e["CARGO_TARGET_DIR"] = os.path.join(ROOT, "target", "mutants-" + os.path.basename(env.get("CARGO_TARGET_DIR", "debug")))
    # A hang is a caught mutant too; tests bound their own waits, this is a backstop.
    try:
        r = subprocess.run(["cargo", "test", *args], cwd=ROOT, env=e, capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        return False, "timed out", 0
    ran = sum(int(p) + int(f) for p, f in re.findall(r"test result: \w+\. (\d+) passed; (\d+) failed", r.stdout))
    return r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:], ran


def stale(mutants):
    """The names of the variants whose pattern is not exactly once in its file, each printed."""
    found = []
    for name, path, old, _, _, _ in mutants:
        full = os.path.join(ROOT, path)
        text = open(full).read() if os.path.exists(full) else ""
        n = text.count(old)
        if n != 1:
            where = "not found in" if n == 0 else f"found {n} times in (the variant would break the first)"
            print(f"STALE   {name}: pattern {where} {path}")
            found.append(name)
    return found


def git(*args):
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)


def entry_key(m):
    """A variant entry as a comparable value (its lists and dicts made hashable)."""
    name, path, old, new, args, env = m
    return (name, path, old, new, tuple(args), tuple(sorted(env.items())))


def test_files(args):
    """The files that hold a variant's test: tests/NAME.rs and its snapshots for `--test NAME`,
    and the file that defines the function a name filter ends with."""
    files, prefixes = set(), []
    rest = list(args)
    if "--test" in rest:
        target = rest[rest.index("--test") + 1]
        files.add(f"tests/{target}.rs")
        prefixes.append(f"tests/snapshots/{target}__")
    flags_with_values = {"--test", "--features", "--bench", "--example"}
    filters = [a for i, a in enumerate(rest) if not a.startswith("-") and (i == 0 or rest[i - 1] not in flags_with_values)]
    for f in filters:
        name = f.split("::")[-1]
        fn = re.compile(r"\bfn " + re.escape(name) + r"\b")
        # The substring first: a regex search of every file for every variant takes seconds.
        files.update(path for path, text in rust_sources().items() if "fn " + name in text and fn.search(text))
    return files, prefixes


_RUST_SOURCES = {}


def rust_sources():
    """Every .rs file under src/ and tests/, path to text, read once."""
    if not _RUST_SOURCES:
        for top in ("src", "tests"):
            for d, _, names in os.walk(os.path.join(ROOT, top)):
                for n in names:
                    if n.endswith(".rs"):
                        full = os.path.join(d, n)
                        with open(full, errors="replace") as f:
                            _RUST_SOURCES[os.path.relpath(full, ROOT)] = f.read()
    return _RUST_SOURCES


def changed_since(base):
    """The variants a change since `base` touched (see the module docs)."""
    if git("rev-parse", "--verify", "--quiet", base + "^{commit}").returncode != 0:
        print(f"--changed: {base!r} is not a commit")
        sys.exit(2)
    diff = git("diff", "--name-only", base, "--")
    untracked = git("ls-files", "--others", "--exclude-standard")
    changed = set(diff.stdout.split()) | set(untracked.stdout.split())
    before = git("show", f"{base}:scripts/mutants.py")
    old_entries = set()
    if before.returncode == 0:
        scope = {"__name__": "mutants_at_base", "__file__": __file__}
        try:
            exec(compile(before.stdout, "mutants.py@base", "exec"), scope)
            old_entries = {entry_key(m) for m in scope.get("MUTANTS", [])}
        except Exception as e:  # an unreadable old list: every entry counts as new
            print(f"--changed: could not read scripts/mutants.py at {base} ({e}); every entry counts as changed")
    selected = []
    for m in MUTANTS:
        files, prefixes = test_files(m[4])
        why = None
        if m[1] in changed:
            why = m[1]
        elif files & changed:
            why = sorted(files & changed)[0]
        elif any(c.startswith(p) for c in changed for p in prefixes):
            why = "its snapshots"
        elif entry_key(m) not in old_entries:
            why = "new or changed entry"
        if why:
            print(f"selected  {m[0]}  ({why})")
            selected.append(m)
    print(f"{len(changed)} file(s) changed since {base}: {len(selected)} of {len(MUTANTS)} variant(s) to run", flush=True)
    # The change's own checks first (entries new or changed since base), so that a run cut short by
    # --budget-minutes has run those.
    return sorted(selected, key=lambda m: entry_key(m) in old_entries)


LANDED = ".ci/landed"


def landed_base():
    """The commit `.ci/landed` names, if it is an ancestor of HEAD; else None, printing why."""
    path = os.path.join(ROOT, LANDED)
    try:
        lines = [l.split("#")[0].strip() for l in open(path)]
    except OSError:
        print(f"--landed: no {LANDED}: every variant is selected")
        return None
    commit = next((l for l in lines if l), "")
    if not commit or git("rev-parse", "--verify", "--quiet", commit + "^{commit}").returncode != 0:
        print(f"--landed: {LANDED} names {commit!r}, not a commit of this clone: every variant is selected")
        return None
    if git("merge-base", "--is-ancestor", commit, "HEAD").returncode != 0:
        print(f"--landed: {LANDED} names {commit[:12]}, not an ancestor of HEAD: every variant is selected")
        return None
    return commit


def mark_landed():
    """Writes HEAD into `.ci/landed`: run on a new branch, as its first commit (docs/testing.md)."""
    head = git("rev-parse", "HEAD").stdout.strip()
    with open(os.path.join(ROOT, LANDED), "w") as f:
        f.write(f"{head}\n# The commit of main this change started from: CI's mutants run the variants of every\n"
                f"# file changed since it (scripts/mutants.py --landed; docs/testing.md).\n")
    print(f"{LANDED}: {head}; commit it (`git commit {LANDED}`)")


def run(selected, budget_s=None):
    """Runs each variant's test against it; with `budget_s`, starts nothing new once that many
    seconds have passed, and lists what it did not run (CI's time is bounded; docs/testing.md)."""
    started = time.monotonic()
    # The unbroken code must pass each command, running at least one test, or a "caught" proves
    # nothing. A command's baseline runs just before its first variant; variants are grouped by
    # command (in order of first appearance), so a baseline's build serves the variants after it.
    order = []
    for m in selected:
        if m not in order:
            order.extend(x for x in selected if x[4:] == m[4:] and x not in order)
    baselined = set()
    survived, not_run = [], []
    for m in order:
        name, path, old, new, args, env = m
        if budget_s is not None and time.monotonic() - started > budget_s:
            not_run.append(name)
            continue
        key = (tuple(args), tuple(sorted(env.items())))
        if key not in baselined:
            ok, out, ran = cargo_test(list(args), dict(env))
            if not ok:
                print(f"BASELINE FAILS: cargo test {' '.join(args)}\n{out}")
                sys.exit(2)
            if ran == 0:
                print(f"BASELINE RUNS NO TEST: cargo test {' '.join(args)}")
                sys.exit(2)
            baselined.add(key)
        t0 = time.monotonic()
        full = os.path.join(ROOT, path)
        original = open(full).read()
        open(full, "w").write(original.replace(old, new, 1))
        try:
            passed, out, _ = cargo_test(args, env)
        finally:
            open(full, "w").write(original)
        took = f"{time.monotonic() - t0:.0f} s"
        if "error[E" in out or "could not compile" in out:
            print(f"BROKEN  {name}: the mutant does not compile, so it proves nothing  ({took})")
            survived.append(name)
            continue
        caught = not passed
        print(f"{'CAUGHT ' if caught else 'MISSED '} {name}  (cargo test {' '.join(args)}; {took})", flush=True)
        if not caught:
            survived.append(name)
    ran = len(order) - len(not_run)
    print(f"{ran - len(survived)} of {ran} variant(s) run caught, {len(baselined)} baseline(s), in {time.monotonic() - started:.0f} s")
    if not_run:
        print(f"NOT RUN: {len(not_run)} of {len(order)} variant(s), the budget of {budget_s / 60:.0f} min spent "
              f"(the change's new entries ran first; run them with --landed and no budget):")
        for name in not_run:
            print(f"  NOT RUN  {name}")
    if survived:
        print(f"{len(survived)} mutant(s) not caught: {survived}")
        sys.exit(1)


def list_variants(variants):
    for name, path, _, _, args, _ in variants:
        print(f"{name}  [{path}]  cargo test {' '.join(args)}")


def main(argv):
    if argv == ["--list"]:
        list_variants(MUTANTS)
        return
    if argv == ["--mark-landed"]:
        mark_landed()
        return
    # Whatever is selected, every pattern must still be there: a moved one fails the run.
    bad = stale(MUTANTS)
    if bad:
        print(f"{len(bad)} STALE variant(s): update their entries in scripts/mutants.py")
        sys.exit(1)
    if argv == ["--stale"]:
        print(f"all {len(MUTANTS)} patterns found, once each")
        return
    base = None
    if "--changed" in argv:
        i = argv.index("--changed")
        if i + 1 >= len(argv):
            print("--changed needs a BASE commit, e.g. `--changed origin/main`")
            sys.exit(2)
        base = argv[i + 1]
        argv = argv[:i] + argv[i + 2:]
    everything = False
    if "--landed" in argv:
        argv = [a for a in argv if a != "--landed"]
        base = landed_base()
        everything = base is None
    budget_s = None
    if "--budget-minutes" in argv:
        i = argv.index("--budget-minutes")
        try:
            budget_s = float(argv[i + 1]) * 60
        except (IndexError, ValueError):
            print("--budget-minutes needs a number of minutes, e.g. `--budget-minutes 25`")
            sys.exit(2)
        argv = argv[:i] + argv[i + 2:]
    only_list = "--list" in argv
    argv = [a for a in argv if a != "--list"]
    unknown = [a for a in argv if a.startswith("--")]
    if unknown:
        print(f"unknown option(s) {unknown}; see the usage at the top of scripts/mutants.py")
        sys.exit(2)
    wanted = [a for a in argv if not a.startswith("-")]
    unwanted = [a[1:] for a in argv if a.startswith("-") and a != "-"]
    pool = changed_since(base) if base else MUTANTS
    if everything:
        print(f"{len(MUTANTS)} of {len(MUTANTS)} variant(s) to run")
    selected = [m for m in pool if (not wanted or any(w in m[0] for w in wanted)) and not any(u in m[0] for u in unwanted)]
    if only_list:
        list_variants(selected)
        return
    if not selected:
        print("no variant selected")
        return
    run(selected, budget_s)


if __name__ == "__main__":
    main(sys.argv[1:])
