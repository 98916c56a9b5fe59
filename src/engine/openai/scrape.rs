//! A server's `/metrics`: the Prometheus (or OpenMetrics) text parsed with `nom-openmetrics`,
//! and vLLM's counters under batchlab's names.
//!
//! `nom-openmetrics` rather than `prometheus-parse`: the latter's names are `\w+`, so it cannot
//! read vLLM's `vllm:`-prefixed metrics at all. The text is parsed one metric family at a time;
//! a family the parser cannot read (a timestamp, an exemplar, a line of a newer format) is
//! skipped line by line, so one odd metric never hides the counters around it.

use std::collections::BTreeMap;

/// vLLM's counter names (as exposed, `_total` included) and batchlab's name for each; a name
/// older vLLMs used maps to the same one. Samples with different labels (one per engine of a
/// data-parallel server) are added up.
pub const COUNTERS: &[(&str, &str)] = &[
    ("vllm:prompt_tokens_total", "prompt_tokens"),
    ("vllm:generation_tokens_total", "generation_tokens"),
    ("vllm:prefix_cache_queries_total", "prefix_cache_queries"),
    ("vllm:prefix_cache_hits_total", "prefix_cache_hits"),
    ("vllm:gpu_prefix_cache_queries_total", "prefix_cache_queries"),
    ("vllm:gpu_prefix_cache_hits_total", "prefix_cache_hits"),
    ("vllm:num_preemptions_total", "preemptions"),
    ("vllm:request_success_total", "requests_finished"),
    ("vllm:mm_cache_queries_total", "mm_cache_queries"),
    ("vllm:mm_cache_hits_total", "mm_cache_hits"),
];

/// The counters of [`COUNTERS`] found in `text`, by batchlab's names.
pub fn parse_counters(text: &str) -> BTreeMap<String, f64> {
    let mut counters = BTreeMap::new();
    let mut rest = text;
    while !rest.is_empty() {
        match nom_openmetrics::parser::family(rest) {
            Ok((after, family)) if after.len() < rest.len() => {
                for sample in &family.samples {
                    let Some((_, name)) = COUNTERS.iter().find(|(vllm, _)| *vllm == sample.name()) else { continue };
                    if sample.number().is_finite() {
                        *counters.entry((*name).to_owned()).or_insert(0.0) += sample.number();
                    }
                }
                rest = after;
            }
            // Not a family here (a comment, `# EOF`, a line the parser does not know): skip a line.
            _ => rest = rest.split_once('\n').map_or("", |(_, after)| after),
        }
    }
    counters
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::FinishReason;
    use crate::serve::metrics::{ServeMetrics, render};

    #[test]
    fn vllms_prometheus_text_is_read_label_sets_added_up() {
        let text = "\
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine=\"0\",model_name=\"m\"} 120.0
vllm:prompt_tokens_total{engine=\"1\",model_name=\"m\"} 30.0
# HELP vllm:prompt_tokens_created Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_created gauge
vllm:prompt_tokens_created{engine=\"0\",model_name=\"m\"} 1.7e+09
vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0
odd line the parser cannot read 1 2 3
vllm:generation_tokens_total{engine=\"0\",model_name=\"m\"} 64.0 1700000000000
vllm:num_preemptions_total{engine=\"0\",model_name=\"m\"} 2.0
vllm:gpu_prefix_cache_hits_total 16.0
";
        let counters = parse_counters(text);
        let expected: BTreeMap<String, f64> =
            [("prompt_tokens", 150.0), ("preemptions", 2.0), ("prefix_cache_hits", 16.0)]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect();
        // The sample with a timestamp is one the parser does not read: skipped, nothing else lost.
        assert_eq!(counters, expected);
        assert!(parse_counters("").is_empty() && parse_counters("# EOF\n").is_empty());
    }

    /// A whole `/metrics` of `vllm serve` (vLLM 0.32, CPU, the tiny model, after 66 requests):
    /// histograms, gauges, Python's own metrics and all.
    #[test]
    fn a_real_vllm_exposition_is_read() {
        let text = include_str!("../../../tests/fixtures/vllm-0.32-metrics.txt");
        let counters = parse_counters(text);
        let expected: BTreeMap<String, f64> = [
            ("prompt_tokens", 5188.0),
            ("generation_tokens", 518.0),
            ("prefix_cache_queries", 5188.0),
            ("prefix_cache_hits", 0.0),
            ("preemptions", 0.0),
            ("requests_finished", 66.0),
            ("mm_cache_queries", 0.0),
            ("mm_cache_hits", 0.0),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        assert_eq!(counters, expected);
    }

    #[test]
    fn batchlab_serves_openmetrics_is_read() {
        let (metrics, registry) = ServeMetrics::new("batchlab-sim");
        metrics.prompt_tokens.inc_by(11);
        metrics.generation_tokens.inc_by(22);
        metrics.prefix_cache_queries.inc_by(8);
        metrics.prefix_cache_hits.inc_by(4);
        metrics.preemptions.inc();
        metrics.mm_cache_queries.inc_by(3);
        metrics.mm_cache_hits.inc();
        metrics.finished(&FinishReason::Length);
        metrics.finished(&FinishReason::Stop);
        let counters = parse_counters(&render(&registry));
        let get = |k: &str| counters.get(k).copied();
        assert_eq!(get("prompt_tokens"), Some(11.0));
        assert_eq!(get("generation_tokens"), Some(22.0));
        assert_eq!((get("prefix_cache_queries"), get("prefix_cache_hits")), (Some(8.0), Some(4.0)));
        assert_eq!((get("preemptions"), get("requests_finished")), (Some(1.0), Some(2.0)));
        assert_eq!((get("mm_cache_queries"), get("mm_cache_hits")), (Some(3.0), Some(1.0)));
    }
}
