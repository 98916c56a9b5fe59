//! The order a run's benchmarks go in: rounds (`--repeat`), in each round every segment (a
//! `[matrix]` run's combinations, or the one plan), in each segment the steps of its profile.
//!
//! Repeats are interleaved: the whole profile runs, then runs again (`a b c a b c`), so a drift of
//! the engine over time spreads over every benchmark instead of biasing one. A sweep's steps are
//! planned one at a time from the rate the step before measured ([`StepSchedule::measured`]), so
//! the schedule is an iterator fed by the loop, not a list made up front; later rounds rerun
//! exactly the first round's steps.

use crate::loadgen::{Expansion, Step, StepPlanner, Workload, expand};
use crate::scenario::plan::Plan;

/// One part of a run: the plan its benchmarks follow, its workload, and (in a `[matrix]` run) the
/// combination's label, which names its benchmarks.
pub(super) struct Segment<'a> {
    pub plan: &'a Plan,
    pub workload: &'a Workload,
    pub label: Option<&'a crate::scenario::matrix::Combination>,
}

/// The benchmarks of a run, one at a time; see the module docs for the order.
pub(super) struct StepSchedule<'s, 'a> {
    segments: &'s [Segment<'a>],
    repeats: u32,
    /// How many benchmarks the run has, when known up front (no sweep).
    count: Option<usize>,
    /// Per segment: how its steps are planned, and the first round's steps.
    planned: Vec<SegmentSteps>,
    /// Where the schedule is: the round, the segment in it, the step in the segment.
    round: u32,
    segment: usize,
    position: usize,
    /// How many steps were handed out.
    given: usize,
}

/// One segment's steps.
struct SegmentSteps {
    planner: StepPlanner,
    /// The requests/s its latest first-round step measured: a sweep plans the next from it.
    last_rps: Option<f64>,
    /// The first round's steps, which later rounds rerun.
    first_round: Vec<Step>,
    /// The profile has exactly one step: a `[matrix]` benchmark is then named by its combination
    /// alone.
    single_step: bool,
}

/// A benchmark to run, and its place in the run.
pub(super) struct ScheduledStep<'s, 'a> {
    /// The step, named for its combination in a `[matrix]` run.
    pub step: Step,
    /// The segment it belongs to: its plan, workload and combination.
    pub segment: &'s Segment<'a>,
    /// 0-based position in the run, and how many benchmarks the run has when known.
    pub index: usize,
    pub count: Option<usize>,
    /// 0-based round, and how many rounds there are.
    pub round: u32,
    pub repeats: u32,
}

impl<'s, 'a> StepSchedule<'s, 'a> {
    /// Every step of every segment, `repeats` times (at least once).
    pub(super) fn new(segments: &'s [Segment<'a>], repeats: u32) -> Self {
        let repeats = repeats.max(1);
        let count = segments
            .iter()
            .map(|seg| match expand(seg.plan.profile()) {
                Expansion::Fixed(steps) => Some(steps.len() * repeats as usize),
                Expansion::Sweep { .. } => None,
            })
            .sum::<Option<usize>>();
        let planned = segments
            .iter()
            .map(|seg| SegmentSteps {
                planner: StepPlanner::new(seg.plan.profile()),
                last_rps: None,
                first_round: Vec::new(),
                single_step: matches!(expand(seg.plan.profile()), Expansion::Fixed(ref s) if s.len() == 1),
            })
            .collect();
        StepSchedule { segments, repeats, count, planned, round: 0, segment: 0, position: 0, given: 0 }
    }

    /// The next benchmark, or `None` when the run is done. In the first round a segment's next
    /// step is planned now, from what [`Self::measured`] was told about the one before.
    pub(super) fn next_step(&mut self) -> Option<ScheduledStep<'s, 'a>> {
        while self.round < self.repeats {
            let (Some(segment), Some(steps)) = (self.segments.get(self.segment), self.planned.get_mut(self.segment))
            else {
                (self.round, self.segment, self.position) = (self.round + 1, 0, 0);
                continue;
            };
            let step = if self.round == 0 {
                let step = steps.planner.next_step(steps.last_rps);
                steps.first_round.extend(step.clone());
                step
            } else {
                steps.first_round.get(self.position).cloned()
            };
            let Some(mut step) = step else {
                (self.segment, self.position) = (self.segment + 1, 0);
                continue;
            };
            self.position += 1;
            if let Some(c) = segment.label {
                step.name =
                    if steps.single_step { c.label().to_owned() } else { format!("{}/{}", c.label(), step.name) };
            }
            let index = self.given;
            self.given += 1;
            let (count, round, repeats) = (self.count, self.round, self.repeats);
            return Some(ScheduledStep { step, segment, index, count, round, repeats });
        }
        None
    }

    /// The requests/s the step [`Self::next_step`] gave last measured: in the first round, its
    /// segment's next step (a sweep's next rate) is planned from it.
    pub(super) fn measured(&mut self, requests_per_s: Option<f64>) {
        if self.round == 0
            && let Some(steps) = self.planned.get_mut(self.segment)
        {
            steps.last_rps = requests_per_s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::Workload;
    use crate::scenario::{Overrides, Plan, ScenarioError, parse_str};

    fn plan(profile: &str) -> Result<Plan, ScenarioError> {
        let text = format!("name = \"t\"\n[profile]\n{profile}\n");
        parse_str(&text, "t.toml", std::path::Path::new("."), &Overrides::default())
    }

    /// The rounds and names a schedule gives, telling it `rps` times the benchmark's number (a
    /// later round would measure other rates than the first).
    fn names(segments: &[Segment<'_>], repeats: u32, rps: f64) -> Vec<String> {
        let mut schedule = StepSchedule::new(segments, repeats);
        let mut out = Vec::new();
        while let Some(s) = schedule.next_step() {
            assert_eq!(s.index, out.len());
            out.push(format!("{}:{}", s.round, s.step.name));
            schedule.measured(Some(rps * (out.len() as f64)));
        }
        out
    }

    #[test]
    fn repeats_are_interleaved_and_a_sweep_reruns_its_first_rounds_rates() {
        let steps = plan("kind = \"constant\"\nrates = [10.0, 2.0]").expect("a valid scenario");
        let workload = Workload::from_plan(steps.workload()).expect("a workload");
        let segments = [Segment { plan: &steps, workload: &workload, label: None }];
        assert_eq!(StepSchedule::new(&segments, 2).count, Some(4));
        assert_eq!(
            names(&segments, 2, 10.0),
            ["0:constant@10.00/s", "0:constant@2.00/s", "1:constant@10.00/s", "1:constant@2.00/s"]
        );

        let sweep = plan("kind = \"sweep\"\nrates = 2").expect("a valid scenario");
        let segments = [Segment { plan: &sweep, workload: &workload, label: None }];
        assert_eq!(StepSchedule::new(&segments, 2).count, None);
        let first = names(&segments, 2, 10.0);
        assert_eq!(first.len(), 8, "synchronous, throughput and 2 rates, twice: {first:?}");
        let (round0, round1) = first.split_at(4);
        let rerun: Vec<_> = round1.iter().map(|n| n.replacen("1:", "0:", 1)).collect();
        assert_eq!(round0, rerun, "the second round reruns the first round's rates");
    }
}
