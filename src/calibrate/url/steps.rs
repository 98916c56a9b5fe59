//! A server's engine steps, seen from outside: the token arrivals of a design point's requests
//! grouped into the steps that produced them (sans IO: observations in, steps out).
//!
//! An engine that batches continuously emits the tokens of one step together: every sequence it
//! holds gets its token when the step ends, and the client reads them within a fraction of a
//! step. So the arrivals of all requests, in time order, fall into clusters, one per step: a new
//! one starts when an arrival is later than [`CLUSTER_FRACTION`] of the median inter-token gap
//! after the cluster's first, or when a request already has a token in it (one token a step). A
//! step's load follows from whose tokens it holds: a request's first token ends the step that
//! computed its prompt (prefill tokens `P`, context `C` = the prompt), a later one a decode (one
//! token, context = prompt + tokens before). Prompts are shorter than a step's token budget in the
//! design, so no prompt is chunked over steps unseen.
//!
//! A step whose previous one ended while some request was still generating (it has tokens on
//! both sides) started at that end: the engine loops without a pause while it holds work. Its
//! duration is the gap between the two ends, and it is a row of the step-cost fit. A step after
//! an idle engine started when its first request reached the engine, a frontend after it was
//! sent: its end minus that request's dispatch is the frontend plus the step.

/// A cluster spans at most this fraction of the median gap between a request's tokens.
pub const CLUSTER_FRACTION: f64 = 0.4;

/// One request as the client saw it, times in ns on one clock.
#[derive(Clone, Debug, PartialEq)]
pub struct ObservedRequest {
    /// When the client sent it.
    pub dispatched_ns: f64,
    /// Its prompt tokens (the server's `usage`).
    pub prompt_tokens: u32,
    /// When each of its tokens arrived, in order.
    pub token_ns: Vec<f64>,
    /// The design's round it ran in ([`super::URL_ROUNDS`]): a point's rounds ran minutes
    /// apart, and how far they differ is the point's own noise.
    pub round: u32,
}

/// One engine step, inferred.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Step {
    /// When its tokens arrived (the earliest of them), ns.
    pub end_ns: f64,
    /// Its duration, when it followed the previous step without a pause.
    pub duration_ns: Option<f64>,
    /// When the step before it ended (`None` for a point's first).
    pub previous_end_ns: Option<f64>,
    /// Prompt tokens it computed.
    pub prefill_tokens: f64,
    /// Sequences it scheduled (each got a token).
    pub seqs: f64,
    /// Context tokens it attended over.
    pub context_tokens: f64,
    /// Requests whose first token it produced (indices into the observations).
    pub first_of: Vec<usize>,
}

/// [`CLUSTER_FRACTION`] of the median gap between a request's tokens, ns.
fn tolerance(requests: &[ObservedRequest]) -> f64 {
    let mut gaps: Vec<f64> = requests.iter().flat_map(|r| r.token_ns.windows(2).map(|w| w[1] - w[0])).collect();
    if gaps.is_empty() {
        // One token each: every arrival is a step of its own making.
        gaps.push(0.0);
    }
    gaps.sort_by(f64::total_cmp);
    gaps[gaps.len() / 2] * CLUSTER_FRACTION
}

/// The decode steps of one design point's `requests`, one per gap between a request's tokens:
/// a running sequence gets a token every step, so each gap is one step's duration, whatever the
/// others' tokens did on their way to the client. The step's load is read from every request's
/// span instead of from a cluster (which a client that reads 16 streams 1 ms apart splits):
/// `S` the requests whose tokens span its end, `P` the prompts of those whose first token came
/// with it (within the tolerance), `C` their prompts and tokens so far.
pub fn gap_steps(requests: &[ObservedRequest]) -> Vec<Step> {
    let tol = tolerance(requests);
    let mut steps = Vec::new();
    for r in requests {
        for w in r.token_ns.windows(2) {
            let (previous, end) = (w[0], w[1]);
            let mut step = Step {
                end_ns: end,
                duration_ns: Some(end - previous),
                previous_end_ns: Some(previous),
                ..Step::default()
            };
            for o in requests {
                let (Some(&first), Some(&last)) = (o.token_ns.first(), o.token_ns.last()) else { continue };
                if first > end + tol || last < end - tol {
                    continue;
                }
                let prompt = f64::from(o.prompt_tokens);
                step.seqs += 1.0;
                if (first - end).abs() <= tol {
                    step.prefill_tokens += prompt;
                    step.context_tokens += prompt;
                } else {
                    let before = o.token_ns.iter().take_while(|&&t| t < end - tol).count();
                    step.context_tokens += prompt + before as f64;
                }
            }
            steps.push(step);
        }
    }
    steps
}

/// Whether some of `request`'s tokens came in one chunk (two stamped at one instant): a server
/// whose frontend falls behind its engine (vLLM's, starved of CPU) merges the tokens waiting for
/// a stream into one chunk, so the arrivals time the frontend's catching up, not the steps.
pub fn coalesced(request: &ObservedRequest) -> bool {
    request.token_ns.windows(2).any(|w| w[1] <= w[0])
}

/// A request's steps between its first and last token, summed: how many, and their load and
/// duration as one [`Step`] (`end_ns` its last token's, `previous_end_ns` its first token's).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Span {
    /// Steps summed (its tokens but the first).
    pub steps: f64,
    /// Their durations and loads, summed.
    pub load: Step,
    /// The request's index in the observations.
    pub request: usize,
}

/// [`gap_steps`] summed per request: one row a request, from its first token to its last, its
/// load the sum of its steps' loads. A client that reads a step's token late makes one gap long
/// and the next short (and a server that falls behind its streams sends several tokens in one
/// chunk); inside a request's span these cancel, and only its two ends carry the client's jitter,
/// spread over all its steps. A [`coalesced`] request has no span.
pub fn span_steps(requests: &[ObservedRequest]) -> Vec<Span> {
    let gaps = gap_steps(requests);
    let mut rest = gaps.as_slice();
    let mut spans = Vec::with_capacity(requests.len());
    for (index, r) in requests.iter().enumerate() {
        let (mine, after) = rest.split_at(r.token_ns.len().saturating_sub(1).min(rest.len()));
        rest = after;
        if coalesced(r) {
            continue;
        }
        let (Some(first), Some(last)) = (mine.first(), mine.last()) else { continue };
        let mut span = Step {
            end_ns: last.end_ns,
            previous_end_ns: first.previous_end_ns,
            duration_ns: Some(mine.iter().filter_map(|s| s.duration_ns).sum()),
            ..Step::default()
        };
        for s in mine {
            span.prefill_tokens += s.prefill_tokens;
            span.seqs += s.seqs;
            span.context_tokens += s.context_tokens;
        }
        spans.push(Span { steps: mine.len() as f64, load: span, request: index });
    }
    spans
}

/// The steps of one design point's `requests`, in time order.
pub fn infer_steps(requests: &[ObservedRequest]) -> Vec<Step> {
    let tolerance = tolerance(requests);
    let mut arrivals: Vec<(f64, usize, usize)> = requests
        .iter()
        .enumerate()
        .flat_map(|(r, req)| req.token_ns.iter().enumerate().map(move |(k, &t)| (t, r, k)))
        .collect();
    arrivals.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Clusters of (request, token index); each request's token k lands in `step_of[r][k]`.
    let mut clusters: Vec<(f64, Vec<(usize, usize)>)> = Vec::new();
    for (t, r, k) in arrivals {
        match clusters.last_mut() {
            Some((start, members)) if t - *start <= tolerance && !members.iter().any(|(m, _)| *m == r) => {
                members.push((r, k));
            }
            _ => clusters.push((t, vec![(r, k)])),
        }
    }
    let mut step_of: Vec<Vec<usize>> = requests.iter().map(|r| vec![0; r.token_ns.len()]).collect();
    for (j, (_, members)) in clusters.iter().enumerate() {
        for &(r, k) in members {
            step_of[r][k] = j;
        }
    }
    let mut steps = Vec::with_capacity(clusters.len());
    for (j, (end, members)) in clusters.iter().enumerate() {
        let previous_end_ns = j.checked_sub(1).map(|p| clusters[p].0);
        let mut step = Step { end_ns: *end, previous_end_ns, ..Step::default() };
        for &(r, k) in members {
            let prompt = f64::from(requests[r].prompt_tokens);
            step.seqs += 1.0;
            if k == 0 {
                step.prefill_tokens += prompt;
                step.context_tokens += prompt;
                step.first_of.push(r);
            } else {
                step.context_tokens += prompt + k as f64;
            }
        }
        // Busy across the boundary: some request has a token at or before step j - 1 and at or
        // after step j.
        let busy = j > 0
            && step_of.iter().any(|s| {
                let (Some(first), Some(last)) = (s.first(), s.last()) else { return false };
                *first < j && *last >= j
            });
        if busy {
            step.duration_ns = Some(end - clusters[j - 1].0);
        }
        steps.push(step);
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: f64 = 1e6;

    fn request(dispatched_ms: f64, prompt: u32, tokens_ms: &[f64]) -> ObservedRequest {
        ObservedRequest {
            dispatched_ns: dispatched_ms * MS,
            prompt_tokens: prompt,
            token_ns: tokens_ms.iter().map(|t| t * MS).collect(),
            round: 0,
        }
    }

    #[test]
    fn arrivals_of_one_step_group_and_a_request_that_joins_is_its_prefill() {
        // a alone (steps end at 10, 15), b joins the step ending at 21, both decode to 26 and 31;
        // arrivals of one step differ by up to 0.3 ms, less than 0.4 of a 5 ms gap.
        let a = request(0.0, 100, &[10.0, 15.0, 21.0, 26.2, 31.0]);
        let b = request(14.0, 40, &[21.3, 26.0, 31.1]);
        let steps = infer_steps(&[a, b]);
        let ends: Vec<f64> = steps.iter().map(|s| s.end_ns / MS).collect();
        assert_eq!(ends, [10.0, 15.0, 21.0, 26.0, 31.0]);
        // The first step followed an idle engine: no duration, a's prefill.
        assert_eq!(steps[0].duration_ns, None);
        assert_eq!((steps[0].prefill_tokens, steps[0].seqs, steps[0].first_of.clone()), (100.0, 1.0, vec![0]));
        // b's prefill joins a's third token: P = 40, S = 2, C = 40 + (100 + 2).
        let s = &steps[2];
        assert_eq!((s.duration_ns, s.prefill_tokens, s.seqs, s.context_tokens), (Some(6.0 * MS), 40.0, 2.0, 142.0));
        assert_eq!(s.first_of, [1]);
        // Decodes: a's 4th and b's 2nd token.
        assert_eq!((steps[3].prefill_tokens, steps[3].seqs, steps[3].context_tokens), (0.0, 2.0, 103.0 + 41.0));
    }

    #[test]
    fn each_gap_of_a_request_is_a_step_loaded_by_every_request_it_spans() {
        let a = request(0.0, 100, &[10.0, 15.0, 21.0, 26.2, 31.0]);
        let b = request(14.0, 40, &[21.3, 26.0, 31.1]);
        let steps = gap_steps(&[a, b]);
        assert_eq!(steps.len(), 4 + 2);
        let load = |s: &Step| (s.duration_ns.unwrap() / MS, s.prefill_tokens, s.seqs, s.context_tokens);
        // a's first gap: alone, decoding its first token (C = 100 + 1).
        assert_eq!(load(&steps[0]), (5.0, 0.0, 1.0, 101.0));
        // a's gap ending at 21: b's prefill came with it (P = 40), C = 40 + (100 + 2).
        assert_eq!(load(&steps[1]), (6.0, 40.0, 2.0, 142.0));
        // b's first gap, ending at 26: both decode, C = (40 + 1) + (100 + 3).
        let b_first = &steps[4];
        assert!((b_first.duration_ns.unwrap() / MS - 4.7).abs() < 1e-9);
        assert_eq!((b_first.prefill_tokens, b_first.seqs, b_first.context_tokens), (0.0, 2.0, 144.0));
    }

    #[test]
    fn a_span_is_a_requests_gaps_summed() {
        let a = request(0.0, 100, &[10.0, 15.0, 21.0, 26.2, 31.0]);
        let b = request(14.0, 40, &[21.3, 26.0, 31.1]);
        let c = request(40.0, 8, &[45.0]);
        // Three tokens in one chunk: the frontend's timing, no span (its steps still load b's).
        let d = request(14.5, 8, &[21.2, 31.0, 31.0]);
        assert!(coalesced(&d) && !coalesced(&a));
        let requests = [a, b, c, d];
        let gaps = gap_steps(&requests[..3]);
        let spans = span_steps(&requests[..3]);
        assert_eq!(span_steps(&requests).len(), 2, "no span for d");
        // One token: no span.
        assert_eq!(spans.len(), 2);
        let sum = |s: &[Step]| {
            s.iter().fold((0.0, 0.0, 0.0, 0.0, 0.0), |t, s| {
                (t.0 + 1.0, t.1 + s.duration_ns.unwrap(), t.2 + s.prefill_tokens, t.3 + s.seqs, t.4 + s.context_tokens)
            })
        };
        let span = |s: &Span| {
            let l = &s.load;
            (s.steps, l.duration_ns.unwrap(), l.prefill_tokens, l.seqs, l.context_tokens)
        };
        assert_eq!(span(&spans[0]), sum(&gaps[..4]));
        assert_eq!(span(&spans[1]), sum(&gaps[4..]));
        assert_eq!(spans[0].load.duration_ns.unwrap() / MS, 21.0, "first to last token");
        assert_eq!((spans[1].load.end_ns / MS, spans[1].load.previous_end_ns.unwrap() / MS), (31.1, 21.3));
    }

    #[test]
    fn a_step_after_an_idle_engine_has_no_duration() {
        // Two requests one after the other: the second's first step follows a pause.
        let a = request(0.0, 10, &[5.0, 9.0, 13.0]);
        let b = request(20.0, 10, &[27.0, 31.0, 35.0]);
        let steps = infer_steps(&[a, b]);
        let durations: Vec<Option<f64>> = steps.iter().map(|s| s.duration_ns.map(|d| d / MS)).collect();
        assert_eq!(durations, [None, Some(4.0), Some(4.0), None, Some(4.0), Some(4.0)]);
    }
}
