use super::bars::bar_extent;
use super::*;
use crate::time::VirtualClock;
use indicatif::InMemoryTerm;
use tracing_subscriber::layer::SubscriberExt;

fn status(index: usize, phase: DisplayPhase, done: u64, total: Option<u64>) -> StepStatus {
    StepStatus {
        benchmark: if index == 0 { "throughput".into() } else { format!("constant@{index}.00/s") },
        index,
        count: Some(2),
        phase,
        done,
        total,
        elapsed_s: 0.0,
        duration_limit_s: None,
        requests_per_s: None,
        output_tokens_per_s: None,
        mean_batch_size: None,
        errors: 0,
    }
}

fn measuring(done: u64) -> StepStatus {
    StepStatus {
        requests_per_s: Some(52.14),
        output_tokens_per_s: Some(3334.4),
        mean_batch_size: Some(7.94),
        ..status(0, DisplayPhase::Measuring, done, Some(256))
    }
}

fn at_ms(ms: u64) -> Timestamp {
    VirtualClock::ORIGIN.saturating_add(Duration::from_millis(ms))
}

/// A screen in memory: the bars' rendered terminal, and the plain lines as written.
fn memory_screen(cols: u16) -> (Screen, InMemoryTerm, Arc<Mutex<String>>) {
    let term = InMemoryTerm::new(20, cols);
    let lines = Arc::new(Mutex::new(String::new()));
    (Screen::on(Terminal::Memory { bars: term.clone(), lines: lines.clone() }), term, lines)
}

/// A plain display on a buffer, timed by a virtual clock.
fn plain() -> (Progress, Arc<Mutex<String>>, VirtualClock) {
    let clock = VirtualClock::new();
    let (screen, _term, buf) = memory_screen(80);
    let p = Progress::with_clock(ProgressMode::Plain, &screen, Arc::new(clock.clone()));
    (p, buf, clock)
}

/// A terminal display on `screen`, without its own ticks.
fn terminal_on(screen: &Screen) -> (Progress, VirtualClock) {
    let clock = VirtualClock::new();
    (Progress::with_clock(ProgressMode::Terminal, screen, Arc::new(clock.clone())), clock)
}

/// A terminal display on an in-memory terminal, without its own ticks.
fn terminal_display(cols: u16) -> (Progress, InMemoryTerm, VirtualClock) {
    let (screen, term, _lines) = memory_screen(cols);
    let (p, clock) = terminal_on(&screen);
    (p, term, clock)
}

/// The screen without the ETA, which indicatif computes from wall time.
fn screen(term: &InMemoryTerm) -> String {
    term.contents().lines().map(|l| l.split(", ETA").next().unwrap_or(l)).collect::<Vec<_>>().join("\n")
}

fn text(buf: &Arc<Mutex<String>>) -> String {
    lock(buf).clone()
}

#[test]
fn details_read_well() {
    assert_eq!(details(&measuring(120)), "120/256 requests, 52.1 req/s, 3334 out tok/s, batch 7.9, 0 errors");
    let mut s = status(1, DisplayPhase::Measuring, 7, None);
    s.elapsed_s = 12.34;
    s.duration_limit_s = Some(30.0);
    s.errors = 1;
    assert_eq!(details(&s), "12.3/30.0 s, 7 requests, 1 error");
    assert_eq!(headline(&s), "measuring constant@1.00/s (2/2)");
    s.count = None;
    assert_eq!(done_headline(&s), "done constant@1.00/s (#2)");
    assert_eq!(bar_extent(&s), Some((12_340, 30_000)));
    assert_eq!(bar_extent(&status(0, DisplayPhase::Draining, 3, None)), None);
    assert_eq!(bar_extent(&status(0, DisplayPhase::Warmup, 9, Some(8))), Some((8, 8)), "never past the end");
}

#[test]
fn plain_lines_at_phase_changes_every_five_seconds_and_per_benchmark() {
    let (mut p, buf, clock) = plain();
    p.engine_step("loading engine");
    clock.advance_to(at_ms(1200));
    p.engine_step("warming up");
    for done in 0..=4 {
        p.status(&status(0, DisplayPhase::Warmup, done, Some(4)));
    }
    for (ms, done) in (0..=256).map(|d| (1300 + d * 40, d)) {
        clock.advance_to(at_ms(ms));
        p.status(&measuring(done));
    }
    p.benchmark_done(&measuring(256));
    let mut limited = status(1, DisplayPhase::Measuring, 0, None);
    limited.duration_limit_s = Some(10.0);
    for tenth in 0..=100 {
        clock.advance_to(at_ms(11_600 + tenth * 100));
        limited.elapsed_s = tenth as f64 / 10.0;
        limited.done = tenth * 2;
        p.status(&limited);
    }
    p.benchmark_done(&limited);
    p.engine_step("stopping engine");
    insta::assert_snapshot!(text(&buf), @r"
    [    0.0s] loading engine
    [    1.2s] warming up
    [    1.2s] warmup throughput (1/2): 0/4 requests, 0 errors
    [    1.3s] measuring throughput (1/2): 0/256 requests, 52.1 req/s, 3334 out tok/s, batch 7.9, 0 errors
    [    6.3s] measuring throughput (1/2): 125/256 requests, 52.1 req/s, 3334 out tok/s, batch 7.9, 0 errors
    [   11.3s] measuring throughput (1/2): 250/256 requests, 52.1 req/s, 3334 out tok/s, batch 7.9, 0 errors
    [   11.5s] done throughput (1/2): 256/256 requests, 52.1 req/s, 3334 out tok/s, batch 7.9, 0 errors
    [   11.6s] measuring constant@1.00/s (2/2): 0.0/10.0 s, 0 requests, 0 errors
    [   16.6s] measuring constant@1.00/s (2/2): 5.0/10.0 s, 100 requests, 0 errors
    [   21.6s] measuring constant@1.00/s (2/2): 10.0/10.0 s, 200 requests, 0 errors
    [   21.6s] done constant@1.00/s (2/2): 10.0/10.0 s, 200 requests, 0 errors
    [   21.6s] stopping engine
    ");
}

#[test]
fn plain_output_has_no_escape_byte() {
    let (mut p, buf, clock) = plain();
    p.engine_step("loading engine");
    for done in 0..300 {
        clock.advance_to(at_ms(done * 100));
        p.status(&measuring(done));
    }
    p.benchmark_done(&measuring(300));
    p.clear();
    drop(p);
    let out = text(&buf);
    assert!(out.lines().count() >= 6, "{out}");
    assert!(!out.contains('\x1b'), "{out:?}");
    assert!(!out.contains('\r'), "{out:?}");
}

#[test]
fn warmup_is_shown_as_warmup_with_its_own_count_and_total() {
    let (mut p, term, _clock) = terminal_display(160);
    p.status(&status(0, DisplayPhase::Warmup, 3, Some(8)));
    assert_eq!(screen(&term), "warmup throughput (1/2) [=========>              ] 3/8 requests, 0 errors");
    // The measurement starts over: its own count and total, not the warmup's.
    p.status(&measuring(0));
    assert!(term.contents().ends_with(", ETA ?"), "no ETA before a rate: {}", term.contents());
    assert_eq!(
        screen(&term),
        "measuring throughput (1/2) [                        ] 0/256 requests, 52.1 req/s, 3334 out tok/s, batch 7.9, \
         0 errors"
    );
}

#[test]
fn terminal_shows_a_spinner_then_one_bar_per_benchmark_then_nothing() {
    let (mut p, term, clock) = terminal_display(140);
    p.engine_step("loading engine");
    assert!(term.contents().contains("loading engine ["), "{}", term.contents());
    p.engine_step("importing vLLM");
    let spinner = term.contents();
    assert!(spinner.contains("importing vLLM [") && !spinner.contains("loading"), "{spinner}");
    assert_eq!(spinner.lines().count(), 1);

    p.status(&measuring(128));
    assert_eq!(
        screen(&term),
        "✔ engine ready [0s]\nmeasuring throughput (1/2) [============>           ] 128/256 requests, 52.1 req/s, \
         3334 out tok/s, batch 7.9, 0 errors"
    );
    p.benchmark_done(&measuring(256));
    let mut limited = status(1, DisplayPhase::Measuring, 20, None);
    limited.elapsed_s = 2.5;
    limited.duration_limit_s = Some(10.0);
    limited.errors = 2;
    clock.advance_to(at_ms(1000));
    p.status(&limited);
    assert_eq!(
        screen(&term),
        "✔ engine ready [0s]\n\
         ✔ done throughput (1/2): 256/256 requests, 52.1 req/s, 3334 out tok/s, batch 7.9, 0 errors\n\
         measuring constant@1.00/s (2/2) [======>                 ] 2.5/10.0 s, 20 requests, 2 errors"
    );
    let mut draining = limited.clone();
    draining.phase = DisplayPhase::Draining;
    draining.duration_limit_s = None;
    p.status(&draining);
    let last = screen(&term).lines().last().unwrap_or_default().to_string();
    assert!(last.starts_with("draining constant@1.00/s (2/2) ") && last.ends_with(" 20 requests, 2 errors"), "{last}");
    p.benchmark_done(&draining);
    p.engine_step("stopping engine");
    assert_eq!(term.contents().lines().count(), 4, "{}", term.contents());
    assert!(term.contents().lines().last().is_some_and(|l| l.contains("stopping engine [")));
    p.clear();
    assert_eq!(term.contents(), "", "clear removes every bar and spinner");
}

#[test]
fn drop_clears_the_terminal() {
    let (mut p, term, _clock) = terminal_display(100);
    p.engine_step("loading engine");
    p.status(&measuring(1));
    assert!(!term.contents().is_empty());
    drop(p);
    assert_eq!(term.contents(), "");
}

#[test]
fn many_calls_draw_about_ten_times_a_second() {
    let (mut p, term, clock) = terminal_display(120);
    // A million calls in one second of clock time, one per microsecond.
    for i in 0..1_000_000u64 {
        clock.advance_to(VirtualClock::ORIGIN.saturating_add(Duration::from_micros(i)));
        p.status(&measuring(i / 4000));
    }
    assert!((10..=11).contains(&p.draws), "{} draws", p.draws);
    // The screen shows the state of the last draw, which is at most 100 ms old.
    assert!(screen(&term).contains("/256 requests"), "{}", screen(&term));
    // A phase change draws at once.
    let before = p.draws;
    p.status(&status(0, DisplayPhase::Cooldown, 0, Some(4)));
    assert_eq!(p.draws, before + 1);
    assert!(screen(&term).starts_with("cooldown throughput (1/2)"));
}

#[test]
fn plain_mode_throttles_to_one_line_every_five_seconds() {
    let (mut p, buf, clock) = plain();
    for i in 0..100_000u64 {
        clock.advance_to(VirtualClock::ORIGIN.saturating_add(Duration::from_micros(i * 200)));
        p.status(&measuring(i / 1000));
    }
    // 20 s: lines at 0, 5, 10 and 15 s.
    assert_eq!(p.draws, 4);
    assert_eq!(text(&buf).lines().count(), 4, "{}", text(&buf));
}

#[test]
fn off_draws_nothing() {
    let mut p = Progress::new(ProgressMode::Off, &Screen::stderr());
    p.engine_step("loading engine");
    for i in 0..1000 {
        p.status(&measuring(i));
    }
    p.benchmark_done(&measuring(1000));
    assert_eq!(p.draws, 0);
    assert!(p.active_id.is_none(), "an Off display is never the active one");
}

#[test]
fn engine_step_events_reach_the_active_spinner() {
    let (screen, term, _lines) = memory_screen(100);
    let (p, _clock) = terminal_on(&screen);
    let subscriber = tracing_subscriber::registry().with(EngineStepLayer::new(&screen));
    tracing::subscriber::with_default(subscriber, || {
        tracing::info!(target: "batchlab::engine_step", "importing vLLM");
        assert!(term.contents().contains("importing vLLM ["), "{}", term.contents());
        tracing::info!(target: "batchlab::engine_step", "building the {}", "engine");
        assert!(term.contents().contains("building the engine ["), "{}", term.contents());
        tracing::info!("an ordinary event");
        assert!(!term.contents().contains("ordinary"), "{}", term.contents());
    });
    assert_eq!(term.contents().lines().count(), 1, "one spinner, its text replaced");
    drop(p);
    assert!(screen.active_display().is_none(), "a dropped display is no longer active");
}

#[test]
fn log_lines_are_written_with_the_bars_hidden_then_the_bars_come_back() {
    let (screen, term, _lines) = memory_screen(140);
    let (mut p, _clock) = terminal_on(&screen);
    p.status(&measuring(10));
    let bars = term.contents();
    assert!(bars.starts_with("measuring throughput"), "{bars}");
    let during = screen.suspend(|| term.contents());
    assert_eq!(during, "", "hidden while a log line is written");
    assert_eq!(term.contents(), bars, "redrawn after it");

    // From a panicking thread too (a panic hook that prints), where indicatif itself does not draw.
    struct DuringUnwind(Screen, InMemoryTerm, Arc<Mutex<Option<String>>>);
    impl Drop for DuringUnwind {
        fn drop(&mut self) {
            *lock(&self.2) = Some(self.0.suspend(|| self.1.contents()));
        }
    }
    let seen = Arc::new(Mutex::new(None));
    let (sc, t, s) = (screen.clone(), term.clone(), seen.clone());
    let _ = std::thread::spawn(move || {
        let _guard = DuringUnwind(sc, t, s);
        std::panic::resume_unwind(Box::new("unwinding on purpose"));
    })
    .join();
    assert_eq!(lock(&seen).as_deref(), Some(""));
    assert_eq!(term.contents(), bars);
}

#[test]
fn engine_steps_and_log_lines_stay_on_their_own_screen() {
    let (a, _term_a, lines_a) = memory_screen(80);
    let (b, _term_b, lines_b) = memory_screen(80);
    let clock = VirtualClock::new();
    let _on_a = Progress::with_clock(ProgressMode::Plain, &a, Arc::new(clock.clone()));
    let _on_b = Progress::with_clock(ProgressMode::Plain, &b, Arc::new(clock));
    let log = tracing_subscriber::fmt::layer().with_writer(LogWriter::new(&a)).with_ansi(false).without_time();
    let subscriber = tracing_subscriber::registry().with(EngineStepLayer::new(&a)).with(log);
    tracing::subscriber::with_default(subscriber, || {
        tracing::info!(target: "batchlab::engine_step", "importing vLLM");
        tracing::warn!("a log line");
    });
    let a = text(&lines_a);
    assert!(a.starts_with("[    0.0s] importing vLLM\n"), "{a}");
    assert!(a.contains("a log line"), "{a}");
    assert_eq!(text(&lines_b), "", "another screen sees nothing");
}
