//! `batchlab merge DIR... --output DIR`: reads each shard's report.json and requests.jsonl, merges
//! them (`report::merge`), writes the merged report.json, requests.jsonl, report.csv and
//! report.html, and prints the table, the shard table and the exit code (docs/distributed.md).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use batchlab::report::merge::verdict::ValidityBounds;
use batchlab::report::merge::{LOST_SHARD_FILE, LostShard, MergeOptions, ShardOutput, merge, table::render_shards};
use batchlab::report::{RequestsJsonl, read_records, read_report};

use super::{EXIT_BAD_INPUT, EXIT_ERROR, EXIT_EXPECTATIONS, EXIT_INCOMPLETE};

/// `batchlab merge`'s arguments.
#[derive(clap::Args, Debug)]
pub(crate) struct MergeArgs {
    /// The shards' output directories (each with report.json and requests.jsonl).
    #[arg(required = true, value_name = "DIR")]
    shards: Vec<PathBuf>,
    /// Where to write the merged report.json, requests.jsonl, report.csv and report.html.
    #[arg(long, value_name = "DIR")]
    output: PathBuf,
    /// The number of shards expected [default: the shards' own N].
    #[arg(long, value_name = "N")]
    expect: Option<u32>,
    /// A shard whose client lag p99 exceeds this (ms) is judged "lagged".
    #[arg(long, value_name = "MS", default_value_t = ValidityBounds::default().max_client_lag_p99_ms)]
    max_client_lag_ms: f64,
    /// A shard that started later than this after --start-at (ms) is judged "started late".
    #[arg(long, value_name = "MS", default_value_t = ValidityBounds::default().max_start_lateness_ms)]
    max_start_lateness_ms: f64,
    /// A shard whose measured clock offset is beyond this either way (ms) is judged "clock off".
    #[arg(long, value_name = "MS", default_value_t = ValidityBounds::default().max_clock_offset_ms)]
    max_clock_offset_ms: f64,
}

/// Reads one shard's directory: each file's problem is kept, so the shard is named as failed. A
/// launcher's `shard-failed.json` says the shard was lost; one that cannot be read is a problem
/// of its own.
fn read_shard(dir: &Path) -> ShardOutput {
    let source = dir.display().to_string();
    let marker = dir.join(LOST_SHARD_FILE);
    if marker.exists() {
        let lost = std::fs::read_to_string(&marker)
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str::<LostShard>(&text).map_err(|e| e.to_string()));
        return match lost {
            Ok(lost) => {
                ShardOutput { source, report: Err(lost.reason.clone()), records: Ok(Vec::new()), lost: Some(lost) }
            }
            Err(e) => {
                let why = format!("{}: {e}", marker.display());
                ShardOutput { source, report: Err(why.clone()), records: Err(why), lost: None }
            }
        };
    }
    let report = read_report(dir).map_err(|e| e.to_string());
    let path = dir.join(batchlab::report::requests::REQUESTS_FILE);
    let records = read_records(&path).and_then(|r| r.collect::<Result<Vec<_>, _>>()).map_err(|e| e.to_string());
    ShardOutput { source, report, records, lost: None }
}

pub(crate) fn main(args: MergeArgs) -> ExitCode {
    let bounds = ValidityBounds {
        max_client_lag_p99_ms: args.max_client_lag_ms,
        max_start_lateness_ms: args.max_start_lateness_ms,
        max_clock_offset_ms: args.max_clock_offset_ms,
    };
    let shards = args.shards.iter().map(|d| read_shard(d)).collect();
    let (report, records) = match merge(shards, &MergeOptions { expect: args.expect, bounds }) {
        Ok(merged) => merged,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    if let Err(e) = batchlab::report::prepare_output_dir(&args.output) {
        eprintln!("error: {e}");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    let mut errors = Vec::new();
    let mut written = Vec::new();
    for write in [batchlab::report::write_json, batchlab::report::write_csv, batchlab::report::write_html] {
        match write(&report, &args.output) {
            Ok(path) => written.push(path),
            Err(e) => errors.push(e.to_string()),
        }
    }
    let jsonl = RequestsJsonl::create(&args.output).and_then(|mut j| {
        records.iter().try_for_each(|r| j.write(r))?;
        j.finish().map(|_| args.output.join(batchlab::report::requests::REQUESTS_FILE))
    });
    match jsonl {
        Ok(path) => written.push(path),
        Err(e) => errors.push(e.to_string()),
    }
    print!("{}", batchlab::report::render_table(&report));
    if let Some(summary) = &report.merge {
        print!("{}", render_shards(summary));
    }
    for path in &written {
        eprintln!("wrote {}", path.display());
    }
    for e in &errors {
        eprintln!("error: {e}");
    }
    if report.incomplete {
        eprintln!(
            "the merged report is incomplete: {}",
            report.error.as_deref().unwrap_or("a shard is missing or failed")
        );
        ExitCode::from(EXIT_INCOMPLETE)
    } else if !errors.is_empty() {
        ExitCode::from(EXIT_ERROR)
    } else if !report.passed() {
        eprint!("{}", batchlab::report::render_failures(&report.expectations));
        ExitCode::from(EXIT_EXPECTATIONS)
    } else {
        if !report.expectations.is_empty() {
            eprintln!("all {} expectations met", report.expectations.len());
        }
        ExitCode::SUCCESS
    }
}
