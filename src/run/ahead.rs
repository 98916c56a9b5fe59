//! A workload's requests made ahead, in order, on a thread of their own: for a run in virtual
//! time, where the loop never waits in real time and making a request (drawing a prompt's
//! tokens) is a sixth of a simulated request's cost, so the machine's second core makes them while
//! the first simulates.
//!
//! The requests are exactly those `workload.request(k)` gives, in the order of `k`: a workload is
//! a pure function of `k` (see [`crate::loadgen`]), so where they are made changes nothing. The
//! thread lives in a [`std::thread::Scope`], so it may borrow the workload; it stops when the
//! [`RequestsAhead`] is dropped (its next hand-over fails), at most one chunk later.
//!
//! The engine's own work on a request alone ([`RequestPrep`]: the plan's simulator's prompt
//! hashing) is done there too, on each request as it is made.

use std::sync::mpsc::{Receiver, sync_channel};
use std::thread::Scope;

use crate::engine::{EngineRequest, RequestPrep};
use crate::loadgen::Workload;

/// Requests per hand-over between the threads.
const CHUNK: usize = 1024;
/// Chunks made before the loop takes them.
const CHUNKS_AHEAD: usize = 2;

/// Requests `first, first + 1, ...` of a workload, made on a thread of `scope`.
pub(crate) struct RequestsAhead {
    chunks: Receiver<Vec<EngineRequest<()>>>,
    /// The chunk being taken, reversed: the next request is its last.
    current: Vec<EngineRequest<()>>,
    /// The index of the next request [`next`](Self::next) gives.
    next: u64,
}

impl RequestsAhead {
    /// Starts making requests `first, first + 1, ...` of `workload` on a thread of `scope`, each
    /// through `prep` when there is one.
    pub(crate) fn spawn<'scope, 'env: 'scope>(
        scope: &'scope Scope<'scope, 'env>,
        workload: &'env Workload,
        first: u64,
        prep: Option<RequestPrep>,
    ) -> Self {
        let (tx, chunks) = sync_channel(CHUNKS_AHEAD);
        scope.spawn(move || {
            let make = |i| {
                let mut request = workload.request(i);
                if let Some(prep) = &prep {
                    prep(&mut request);
                }
                request
            };
            let mut k = first;
            loop {
                let mut chunk: Vec<_> = (k..k + CHUNK as u64).map(make).collect();
                chunk.reverse();
                k += CHUNK as u64;
                if tx.send(chunk).is_err() {
                    return;
                }
            }
        });
        RequestsAhead { chunks, current: Vec::new(), next: first }
    }

    /// The request of index `k`: the next one in order. `None` when `k` is not (the caller
    /// then makes it itself) or the thread is gone.
    pub(crate) fn take(&mut self, k: u64) -> Option<EngineRequest<()>> {
        if k != self.next {
            return None;
        }
        if self.current.is_empty() {
            self.current = self.chunks.recv().ok()?;
        }
        let request = self.current.pop()?;
        self.next += 1;
        Some(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_requests_are_the_workloads_in_order_across_chunks() {
        let text = "[engine]\nkind = \"sim\"\n[workload]\nprompt_tokens = { dist = \"uniform\", min = 1, max = 300 }\n\
                    output_tokens = 5\n[stop]\nmax_requests = 10\n";
        let plan = crate::scenario::parse_str(text, "ahead.toml", std::path::Path::new("."), &Default::default())
            .expect("a scenario");
        let workload = Workload::from_plan(plan.workload()).expect("synthetic");
        std::thread::scope(|scope| {
            let mut ahead = RequestsAhead::spawn(scope, &workload, 100, None);
            for k in 100..100 + 3 * CHUNK as u64 + 17 {
                assert_eq!(ahead.take(k), Some(workload.request(k)), "request {k}");
            }
            // Out of order: the caller makes it itself.
            assert_eq!(ahead.take(5), None);
        });
    }

    #[test]
    fn each_request_goes_through_the_engines_prep() {
        let text = "[engine]\nkind = \"sim\"\n[workload]\noutput_tokens = 5\n[stop]\nmax_requests = 10\n";
        let plan = crate::scenario::parse_str(text, "ahead.toml", std::path::Path::new("."), &Default::default())
            .expect("a scenario");
        let workload = Workload::from_plan(plan.workload()).expect("synthetic");
        let prep: RequestPrep = std::sync::Arc::new(|r: &mut EngineRequest<()>| r.max_tokens += 1000);
        std::thread::scope(|scope| {
            let mut ahead = RequestsAhead::spawn(scope, &workload, 0, Some(prep));
            for k in 0..CHUNK as u64 + 3 {
                assert_eq!(ahead.take(k).map(|r| r.max_tokens), Some(workload.request(k).max_tokens + 1000));
            }
        });
    }
}
