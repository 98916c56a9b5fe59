//! `compare.html`: the comparison as one self-contained page (no script, font, stylesheet or
//! image from anywhere else), next to the console table.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use super::table::p_value;
use super::{Comparison, TestKind, Verdict};
use crate::report::ReportError;
use crate::report::expect::human_number;

/// The page's name in the output directory.
pub const HTML_FILE: &str = "compare.html";

/// `<`, `>`, `&` and quotes escaped for HTML text and attributes.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '&' => out.push_str("&amp;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:2em;color:#222}\
table{border-collapse:collapse;font-size:14px}th,td{padding:3px 8px;border-bottom:1px solid #ddd}\
td.n{text-align:right;font-variant-numeric:tabular-nums}th{text-align:left;background:#f4f4f4}\
.better{color:#1a7f37}.worse{color:#c62828;font-weight:600}.differs{color:#8250df}.noise{color:#555}\
.not{color:#999}.regression{background:#fde2e2}.pass{color:#1a7f37}.fail{color:#c62828}";

/// The whole page.
pub fn render_html(c: &Comparison) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>batchlab compare</title>\
         <style>{STYLE}</style></head><body>\n<h1>batchlab compare</h1>\n<p>A: <code>{}</code><br>B: <code>{}</code></p>\n",
        escape(&c.a),
        escape(&c.b)
    );
    let regressions = c.regressions().count();
    let threshold = format!("{} %", human_number(c.max_regression * 100.0));
    if regressions == 0 {
        let _ = writeln!(out, "<p class=\"pass\">No gated metric is worse by more than {threshold}.</p>");
    } else {
        let _ = writeln!(out, "<p class=\"fail\">{regressions} gated metric(s) worse by more than {threshold}.</p>");
    }
    let _ = writeln!(
        out,
        "<p>Verdicts: Mann–Whitney U on per-request samples, Welch's t on repeats; significance level {}.</p>",
        human_number(c.alpha)
    );
    out.push_str(
        "<table>\n<tr><th>benchmark</th><th>metric</th><th>A</th><th>B</th><th>delta</th><th>delta %</th>\
         <th>test</th><th>p</th><th>verdict</th></tr>\n",
    );
    let num = |v: Option<f64>| v.map_or_else(|| "-".to_string(), human_number);
    for r in &c.rows {
        let (class, title) = match &r.verdict {
            Verdict::Better => ("better", String::new()),
            Verdict::Worse => ("worse", String::new()),
            Verdict::Differs => ("differs", String::new()),
            Verdict::WithinNoise => ("noise", String::new()),
            Verdict::NotJudged(reason) => ("not", reason.clone()),
        };
        let (test, p) = match r.test {
            Some((TestKind::MannWhitney, p)) => ("Mann–Whitney", p_value(p)),
            Some((TestKind::Welch, p)) => ("Welch t", p_value(p)),
            None => ("-", "-".to_string()),
        };
        let mut verdict = r.verdict.label().to_string();
        if r.regression {
            verdict.push_str(" · regression");
        } else if r.gated {
            verdict.push_str(" · gated");
        }
        let _ = writeln!(
            out,
            "<tr{}><td>{}</td><td>{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td>\
             <td class=\"n\">{}</td><td>{test}</td><td class=\"n\">{p}</td><td class=\"{class}\" title=\"{}\">{}</td></tr>",
            if r.regression { " class=\"regression\"" } else { "" },
            escape(&r.benchmark),
            escape(&r.metric),
            num(r.a),
            num(r.b),
            num(r.delta),
            r.relative.map_or_else(|| "-".to_string(), |x| format!("{:+.1} %", x * 100.0)),
            escape(&title),
            escape(&verdict),
        );
    }
    out.push_str("</table>\n");
    for (side, names) in [("A", &c.only_a), ("B", &c.only_b)] {
        for name in names {
            let _ = writeln!(out, "<p>Only in {side}: {}</p>", escape(name));
        }
    }
    out.push_str("</body></html>\n");
    out
}

/// Writes `dir/compare.html` and returns its path. Creates `dir` if needed.
pub fn write_html(c: &Comparison, dir: &Path) -> Result<PathBuf, ReportError> {
    std::fs::create_dir_all(dir).map_err(|source| ReportError::CreateDir { path: dir.to_path_buf(), source })?;
    let path = dir.join(HTML_FILE);
    std::fs::write(&path, render_html(c)).map_err(|source| ReportError::Write { path: path.clone(), source })?;
    Ok(path)
}
