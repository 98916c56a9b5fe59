//! The server's own view of a benchmark: the deltas of its counters (Prometheus `/metrics`,
//! through `engine::Concurrent::counters`) between the benchmark's start and its end.
//!
//! A run takes the counters before and after each benchmark; [`server_deltas`] subtracts them,
//! per endpoint. A counter that went down (the server restarted in between) has no delta: it is
//! listed in `reset` instead of giving a wrong number. An endpoint missing from either side (it
//! did not answer its `/metrics`) has no entry.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::engine::ServerCounters;

/// The counters whose deltas reports show first, in this order, with their headers: batchlab's
/// names for vLLM's `prompt_tokens`, `generation_tokens`, `prefix_cache_queries`,
/// `prefix_cache_hits` and `num_preemptions` counters.
pub const SHOWN_COUNTERS: [(&str, &str); 5] = [
    ("prompt_tokens", "prompt tok"),
    ("generation_tokens", "generation tok"),
    ("prefix_cache_queries", "prefix queries"),
    ("prefix_cache_hits", "prefix hits"),
    ("preemptions", "preemptions"),
];

/// One endpoint's counters over one benchmark.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerDelta {
    /// The endpoint's base URL.
    pub endpoint: String,
    /// After − before, by counter name, for every counter the server gave both times and that
    /// did not go down.
    pub counters: BTreeMap<String, f64>,
    /// `prefix_cache_hits / prefix_cache_queries` of the deltas; `None` without queries.
    pub prefix_cache_hit_rate: Option<f64>,
    /// `mm_cache_hits / mm_cache_queries` of the deltas (vLLM's multimodal cache: images it
    /// already had); left out without queries.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mm_cache_hit_rate: Option<f64>,
    /// Counters that went down between the two readings (the server restarted): no delta.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reset: Vec<String>,
}

/// The deltas from `before` to `after`, one per endpoint present in both, in `after`'s order.
pub fn server_deltas(before: &[ServerCounters], after: &[ServerCounters]) -> Vec<ServerDelta> {
    after
        .iter()
        .filter_map(|a| {
            let b = before.iter().find(|b| b.endpoint == a.endpoint)?;
            let mut counters = BTreeMap::new();
            let mut reset = Vec::new();
            for (name, &end) in &a.counters {
                let Some(&start) = b.counters.get(name) else { continue };
                if !(start.is_finite() && end.is_finite()) {
                    continue;
                }
                if end >= start {
                    counters.insert(name.clone(), end - start);
                } else {
                    reset.push(name.clone());
                }
            }
            let rate = |hits: &str, queries: &str| match (counters.get(hits), counters.get(queries)) {
                (Some(&hits), Some(&queries)) if queries > 0.0 => Some(hits / queries),
                _ => None,
            };
            let prefix_cache_hit_rate = rate("prefix_cache_hits", "prefix_cache_queries");
            let mm_cache_hit_rate = rate("mm_cache_hits", "mm_cache_queries");
            Some(ServerDelta {
                endpoint: a.endpoint.clone(),
                counters,
                prefix_cache_hit_rate,
                mm_cache_hit_rate,
                reset,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(endpoint: &str, counters: &[(&str, f64)]) -> ServerCounters {
        ServerCounters {
            endpoint: endpoint.to_owned(),
            counters: counters.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        }
    }

    #[test]
    fn deltas_per_endpoint_with_the_hit_rate_and_resets() {
        let before = [
            reading(
                "http://a",
                &[("prompt_tokens", 100.0), ("prefix_cache_queries", 40.0), ("prefix_cache_hits", 10.0)],
            ),
            reading("http://b", &[("prompt_tokens", 500.0), ("preemptions", 3.0)]),
            reading("http://gone", &[("prompt_tokens", 1.0)]),
        ];
        let after = [
            reading(
                "http://a",
                &[
                    ("prompt_tokens", 300.0),
                    ("prefix_cache_queries", 140.0),
                    ("prefix_cache_hits", 60.0),
                    ("generation_tokens", 9.0),
                ],
            ),
            // b restarted: its prompt tokens went down.
            reading("http://b", &[("prompt_tokens", 20.0), ("preemptions", 3.0)]),
            reading("http://new", &[("prompt_tokens", 5.0)]),
        ];
        let deltas = server_deltas(&before, &after);
        assert_eq!(deltas.len(), 2, "an endpoint read only once has no delta");
        let a = &deltas[0];
        assert_eq!(a.endpoint, "http://a");
        assert_eq!(
            a.counters,
            BTreeMap::from([
                ("prefix_cache_hits".to_string(), 50.0),
                ("prefix_cache_queries".to_string(), 100.0),
                ("prompt_tokens".to_string(), 200.0),
            ]),
            "a counter read only once has no delta"
        );
        assert_eq!(a.prefix_cache_hit_rate, Some(0.5));
        let b = &deltas[1];
        assert_eq!(b.counters, BTreeMap::from([("preemptions".to_string(), 0.0)]));
        assert_eq!((b.reset.as_slice(), b.prefix_cache_hit_rate), (&["prompt_tokens".to_string()][..], None));
        assert!(server_deltas(&[], &after).is_empty(), "no /metrics before: nothing");
    }
}
