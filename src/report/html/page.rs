//! The page skeleton every batchlab HTML file shares: one document, one inline stylesheet, no
//! script, no external resource. Sections, tables, cards and chart grids are built here, so
//! report.html and compare.html look alike.

use std::fmt::Write as _;

/// The stylesheet, inline in every page.
const CSS: &str = r#"
:root { --fg: #1f2328; --muted: #59636e; --bg: #ffffff; --panel: #f6f8fa; --border: #d1d9e0;
  --good: #1a7f37; --good-bg: #dafbe1; --bad: #cf222e; --bad-bg: #ffebe9; --accent: #0969da; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--fg); background: var(--bg);
  font: 14px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
header { padding: 20px 32px 14px; background: var(--panel); border-bottom: 1px solid var(--border); }
header h1 { margin: 0 0 4px; font-size: 22px; font-weight: 600; }
header .subtitle { color: var(--muted); }
header .status { margin-top: 8px; }
nav { position: sticky; top: 0; z-index: 1; padding: 8px 32px; background: rgba(255, 255, 255, 0.96);
  border-bottom: 1px solid var(--border); font-size: 13px; }
nav a { margin-right: 18px; color: var(--accent); text-decoration: none; white-space: nowrap; }
nav a:hover { text-decoration: underline; }
main { max-width: 1360px; margin: 0 auto; padding: 4px 32px 48px; }
section { margin-top: 28px; scroll-margin-top: 44px; }
h2 { margin: 0 0 12px; padding-bottom: 6px; font-size: 18px; font-weight: 600; border-bottom: 1px solid var(--border); }
h3 { margin: 22px 0 8px; font-size: 15px; font-weight: 600; }
p { margin: 6px 0 10px; max-width: 80em; }
p.note { color: var(--muted); font-size: 13px; }
.table-wrap { overflow-x: auto; margin: 6px 0 14px; }
table { border-collapse: collapse; font-size: 13px; }
th, td { padding: 4px 12px; border-bottom: 1px solid var(--border); text-align: left; white-space: nowrap; }
th { background: var(--panel); font-weight: 600; }
th.num, td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.num { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 12.5px; }
tbody tr:hover { background: #f3f7fc; }
.badge { display: inline-block; padding: 0 9px; border-radius: 10px; font-size: 12px; font-weight: 600; line-height: 20px; }
.badge.good { color: var(--good); background: var(--good-bg); }
.badge.bad { color: var(--bad); background: var(--bad-bg); }
.badge.neutral { color: var(--muted); background: #eaeef2; }
.cards { display: flex; flex-wrap: wrap; gap: 8px; margin: 8px 0 6px; }
.card { flex: 1 1 auto; min-width: 96px; padding: 6px 12px; background: var(--panel); border: 1px solid var(--border); border-radius: 6px; }
.card .label { color: var(--muted); font-size: 12px; white-space: nowrap; }
.card .value { font-size: 17px; font-weight: 600; font-variant-numeric: tabular-nums; white-space: nowrap; }
.card .value small { color: var(--muted); font-size: 12px; font-weight: 400; }
.charts { display: grid; grid-template-columns: repeat(auto-fill, minmax(520px, 1fr)); gap: 14px; margin: 8px 0 12px; }
.charts figure { margin: 0; padding: 6px; background: #fff; border: 1px solid var(--border); border-radius: 6px; }
svg.chart { display: block; width: 100%; height: auto; }
details { margin: 8px 0; }
summary { cursor: pointer; color: var(--accent); }
pre { padding: 12px; overflow-x: auto; background: var(--panel); border-radius: 6px; font-size: 12px; }
footer { max-width: 1360px; margin: 0 auto; padding: 16px 32px 32px; color: var(--muted); font-size: 12px; }
@media print { nav { display: none; } .charts { grid-template-columns: 1fr 1fr; } }
"#;

/// Escapes `text` for HTML text and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A verdict's colour.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Badge {
    /// Green: pass, better.
    Good,
    /// Red: fail, worse.
    Bad,
    /// Grey: within noise, not judged.
    Neutral,
}

impl Badge {
    /// `<span class="badge good">text</span>`.
    pub fn html(self, text: &str) -> String {
        let class = match self {
            Badge::Good => "good",
            Badge::Bad => "bad",
            Badge::Neutral => "neutral",
        };
        format!("<span class=\"badge {class}\">{}</span>", escape(text))
    }
}

/// A table cell.
#[derive(Clone, Debug, PartialEq)]
pub enum Cell {
    /// Left-aligned text.
    Text(String),
    /// A right-aligned number, already formatted.
    Num(String),
    /// A coloured badge.
    Badge(Badge, String),
}

impl Cell {
    /// Text.
    pub fn text(s: impl Into<String>) -> Self {
        Cell::Text(s.into())
    }

    /// A number, already formatted.
    pub fn num(s: impl Into<String>) -> Self {
        Cell::Num(s.into())
    }
}

/// An HTML table: a header row and rows of cells. A column whose cells are all numbers is
/// right-aligned, header included.
#[derive(Clone, Debug, Default)]
pub struct Table {
    headers: Vec<String>,
    rows: Vec<Vec<Cell>>,
}

impl Table {
    /// A table with these column headers.
    pub fn new(headers: &[&str]) -> Self {
        Table { headers: headers.iter().map(|h| h.to_string()).collect(), rows: Vec::new() }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<Cell>) {
        self.rows.push(cells);
    }

    /// Whether the table has no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The `<table>`, in a horizontally scrolling wrapper.
    pub fn render(&self) -> String {
        let numeric = |col: usize| {
            !self.rows.is_empty() && self.rows.iter().all(|r| matches!(r.get(col), Some(Cell::Num(_)) | None))
        };
        let mut out = String::from("<div class=\"table-wrap\"><table>\n");
        // A key-value table has no header row.
        if self.headers.iter().any(|h| !h.is_empty()) {
            out.push_str("<thead><tr>");
            for (i, h) in self.headers.iter().enumerate() {
                let class = if numeric(i) { " class=\"num\"" } else { "" };
                let _ = write!(out, "<th{class}>{}</th>", escape(h));
            }
            out.push_str("</tr></thead>\n");
        }
        out.push_str("<tbody>\n");
        for row in &self.rows {
            out.push_str("<tr>");
            for cell in row {
                match cell {
                    Cell::Text(t) => {
                        let _ = write!(out, "<td>{}</td>", escape(t));
                    }
                    Cell::Num(n) => {
                        let _ = write!(out, "<td class=\"num\">{}</td>", escape(n));
                    }
                    Cell::Badge(b, t) => {
                        let _ = write!(out, "<td>{}</td>", b.html(t));
                    }
                }
            }
            out.push_str("</tr>\n");
        }
        out.push_str("</tbody></table></div>\n");
        out
    }
}

/// A titled part of the page. Top-level sections get an entry in the navigation bar.
#[derive(Clone, Debug)]
pub struct Section {
    id: String,
    heading: String,
    body: String,
}

impl Section {
    /// A section; `id` is its anchor (letters, digits and `-`; anything else becomes `-`).
    pub fn new(id: &str, heading: &str) -> Self {
        Section { id: anchor(id), heading: heading.to_string(), body: String::new() }
    }

    /// A paragraph (escaped).
    pub fn text(mut self, paragraph: &str) -> Self {
        let _ = writeln!(self.body, "<p>{}</p>", escape(paragraph));
        self
    }

    /// A grey note paragraph (escaped).
    pub fn note(mut self, paragraph: &str) -> Self {
        let _ = writeln!(self.body, "<p class=\"note\">{}</p>", escape(paragraph));
        self
    }

    /// Markup of the caller's own; it must already be escaped.
    pub fn html(mut self, raw: impl AsRef<str>) -> Self {
        self.body.push_str(raw.as_ref());
        self.body.push('\n');
        self
    }

    /// A table.
    pub fn table(self, table: &Table) -> Self {
        self.html(table.render())
    }

    /// Key numbers as cards: `(label, value, unit)`.
    pub fn cards(mut self, cards: &[(&str, String, &str)]) -> Self {
        self.body.push_str("<div class=\"cards\">");
        for (label, value, unit) in cards {
            let unit = if unit.is_empty() { String::new() } else { format!(" <small>{}</small>", escape(unit)) };
            let _ = write!(
                self.body,
                "<div class=\"card\"><div class=\"label\">{}</div><div class=\"value\">{}{unit}</div></div>",
                escape(label),
                escape(value)
            );
        }
        self.body.push_str("</div>\n");
        self
    }

    /// Charts (SVG strings from [`super::chart`]) in a grid, two to a row on a wide screen.
    pub fn charts(mut self, svgs: Vec<String>) -> Self {
        if svgs.is_empty() {
            return self;
        }
        self.body.push_str("<div class=\"charts\">\n");
        for svg in svgs {
            let _ = writeln!(self.body, "<figure>{svg}</figure>");
        }
        self.body.push_str("</div>\n");
        self
    }

    /// A nested section, with an `<h3>` heading.
    pub fn subsection(mut self, sub: Section) -> Self {
        let _ = write!(self.body, "<div id=\"{}\">\n<h3>{}</h3>\n{}</div>\n", sub.id, escape(&sub.heading), sub.body);
        self
    }

    /// Collapsed content: `summary` (escaped) opens `raw` markup.
    pub fn details(self, summary: &str, raw: impl AsRef<str>) -> Self {
        let details = format!("<details><summary>{}</summary>\n{}</details>", escape(summary), raw.as_ref());
        self.html(details)
    }

    /// The `<section>` element.
    pub fn render(&self) -> String {
        format!("<section id=\"{}\">\n<h2>{}</h2>\n{}</section>\n", self.id, escape(&self.heading), self.body)
    }
}

/// An anchor from a name: ASCII letters and digits kept (lowercased), runs of others as `-`.
pub fn anchor(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let out = out.trim_matches('-').to_string();
    if out.is_empty() { "section".into() } else { out }
}

/// A whole HTML document: header, navigation, sections, footer.
#[derive(Clone, Debug)]
pub struct Page {
    title: String,
    subtitle: String,
    status: String,
    sections: Vec<Section>,
    footer: String,
}

impl Page {
    /// A page called `title` (the `<title>` and the `<h1>`).
    pub fn new(title: &str) -> Self {
        Page {
            title: title.to_string(),
            subtitle: String::new(),
            status: String::new(),
            sections: Vec::new(),
            footer: String::new(),
        }
    }

    /// The grey line under the title (escaped).
    pub fn subtitle(mut self, text: &str) -> Self {
        self.subtitle = text.to_string();
        self
    }

    /// Markup under the subtitle, e.g. a [`Badge`]; must already be escaped.
    pub fn status(mut self, raw: String) -> Self {
        self.status = raw;
        self
    }

    /// The footer line (escaped).
    pub fn footer(mut self, text: &str) -> Self {
        self.footer = text.to_string();
        self
    }

    /// Appends a section, with an entry in the navigation bar.
    pub fn section(&mut self, section: Section) {
        self.sections.push(section);
    }

    /// The complete document.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let title = escape(&self.title);
        let _ = write!(
            out,
            "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n\
             <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
             <title>{title}</title>\n<style>{CSS}</style>\n</head>\n<body>\n<header>\n<h1>{title}</h1>\n"
        );
        if !self.subtitle.is_empty() {
            let _ = writeln!(out, "<div class=\"subtitle\">{}</div>", escape(&self.subtitle));
        }
        if !self.status.is_empty() {
            let _ = writeln!(out, "<div class=\"status\">{}</div>", self.status);
        }
        out.push_str("</header>\n<nav>");
        for s in &self.sections {
            let _ = write!(out, "<a href=\"#{}\">{}</a>", s.id, escape(&s.heading));
        }
        out.push_str("</nav>\n<main>\n");
        for s in &self.sections {
            out.push_str(&s.render());
        }
        out.push_str("</main>\n");
        if !self.footer.is_empty() {
            let _ = writeln!(out, "<footer>{}</footer>", escape(&self.footer));
        }
        out.push_str("</body>\n</html>\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_and_anchors() {
        assert_eq!(escape(r#"<a href="x">&'"#), "&lt;a href=&quot;x&quot;&gt;&amp;&#39;");
        for (name, id) in
            [("constant@10.0/s", "constant-10-0-s"), ("Sweep", "sweep"), ("@@", "section"), ("a b", "a-b")]
        {
            assert_eq!(anchor(name), id, "{name}");
        }
    }

    #[test]
    fn a_page_has_navigation_sections_and_aligned_tables() {
        let mut table = Table::new(&["name", "req/s"]);
        table.row(vec![Cell::text("a<b"), Cell::num("1.5")]);
        table.row(vec![Cell::text("c"), Cell::num("2")]);
        let mut page = Page::new("Report & co").subtitle("sim 1.0").status(Badge::Good.html("pass"));
        page.section(Section::new("summary", "Summary").text("two rows").table(&table));
        page.section(
            Section::new("x y", "Charts").charts(vec!["<svg></svg>".into()]).subsection(Section::new("s", "Sub")),
        );
        let html = page.render();
        assert!(html.starts_with("<!DOCTYPE html>\n<html lang=\"en\">"), "{html}");
        assert!(html.contains("<title>Report &amp; co</title>"));
        assert!(html.contains("<nav><a href=\"#summary\">Summary</a><a href=\"#x-y\">Charts</a></nav>"), "{html}");
        assert!(html.contains("<th>name</th><th class=\"num\">req/s</th>"), "{html}");
        assert!(html.contains("<td>a&lt;b</td><td class=\"num\">1.5</td>"), "{html}");
        assert!(html.contains("<span class=\"badge good\">pass</span>"));
        assert!(html.contains("<figure><svg></svg></figure>"));
        assert!(html.contains("<div id=\"s\">\n<h3>Sub</h3>"));
        assert!(html.ends_with("</html>\n"));
    }
}
