//! The seeds report as files: `index.html` (self-contained, the charts
//! inline), `README.md` (the same in Markdown, the charts linked) and one
//! SVG per chart.

use super::{counts, rows, Figure, Outcome, Row, Saved, Seed, Status};
use std::fmt::Write as _;

/// The report's files.
pub struct Page {
    pub html: String,
    pub markdown: String,
    /// (file name, SVG).
    pub svgs: Vec<(String, String)>,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Markdown's inline marks (`**bold**`, `` `code` ``) as HTML, the rest
/// escaped, so no literal markdown reaches the page.
fn inline(s: &str) -> String {
    let mut out = String::new();
    let (mut bold, mut code) = (false, false);
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        if !code && rest.starts_with("**") {
            out += if bold { "</b>" } else { "<b>" };
            bold = !bold;
            rest = &rest[2..];
            continue;
        }
        if c == '`' {
            out += if code { "</code>" } else { "<code>" };
            code = !code;
        } else {
            out += &esc(c.encode_utf8(&mut [0; 4]));
        }
        rest = &rest[c.len_utf8()..];
    }
    out += if code { "</code>" } else { "" };
    out += if bold { "</b>" } else { "" };
    out
}

/// A number beside the paper's: counts whole, others to two decimals, and
/// a small value to two significant digits, so none reads as 0.00.
pub fn num(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 0.1 || a == 0.0 {
        format!("{v:.2}")
    } else {
        let digits = (1.0 - a.log10().floor()) as usize;
        format!("{v:.digits$}")
    }
}

/// A measured number with its range over runs, where it has one.
fn measured(m: &super::Measure) -> String {
    if m.max > m.min {
        format!("{} ({}–{})", num(m.median), num(m.min), num(m.max))
    } else {
        num(m.median)
    }
}

/// The chart file of a row's `i`th figure.
fn svg_name(f: &Figure, i: usize) -> String {
    let id: String =
        f.id.to_lowercase()
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
            .collect();
    let n = if i == 0 {
        String::new()
    } else {
        format!("-{}", i + 1)
    };
    format!("{}-{id}{n}.svg", f.seed.short())
}

/// The paper's numbers beside ours, one row per label, paper and ours on
/// the same row.
fn beside(r: &Row) -> Vec<(String, String, String)> {
    let ours: Vec<&super::Measure> = r.figures.iter().flat_map(|f| &f.ours).collect();
    let mut paper: Vec<(&str, f64)> = r.entry.paper.to_vec();
    for (l, v) in r.figures.iter().flat_map(|f| &f.paper) {
        if !paper.iter().any(|p| p.0 == l) {
            paper.push((l, *v));
        }
    }
    let mut labels: Vec<&str> = paper.iter().map(|p| p.0).collect();
    for m in &ours {
        if !labels.contains(&m.label.as_str()) {
            labels.push(&m.label);
        }
    }
    labels
        .into_iter()
        .map(|l| {
            let p = paper.iter().find(|p| p.0 == l);
            let o = ours.iter().find(|m| m.label == l);
            (
                l.to_string(),
                p.map_or("-".into(), |p| num(p.1)),
                o.map_or("-".into(), |m| measured(m)),
            )
        })
        .collect()
}

/// Each key effect's row: the claim, the paper's value, ours, the verdict.
fn effect_cells(o: &Outcome) -> [String; 4] {
    [
        o.claim.clone(),
        o.paper.map_or("the order".into(), num),
        o.ours.map_or("-".into(), num),
        o.holds.name().to_string(),
    ]
}

/// Renders the report of `saved`'s figures and failures.
pub fn render(saved: &Saved) -> Page {
    let rows = rows(&saved.figures, &saved.failures);
    let mut svgs = Vec::new();
    for r in &rows {
        for (i, f) in r.figures.iter().enumerate() {
            if !f.svg.is_empty() {
                svgs.push((svg_name(f, i), f.svg.clone()));
            }
        }
    }
    Page {
        html: html(&rows),
        markdown: markdown(&rows),
        svgs,
    }
}

const INTRO: &str = "Every result figure and table of the five seed documents: the key effects \
its paper draws from it, each with the paper's number, ours and a verdict, and a status computed \
from them by one rule (reproduced: every effect holds in direction beyond the run-to-run spread, \
each magnitude within [2/3, 3/2] of the paper's; partly: the main effect holds in direction only, \
or another effect fails; not reproduced: the main effect is absent or inverted).";

fn markdown(rows: &[Row]) -> String {
    let mut s =
        format!("# splitnet beside its seeds\n\n{INTRO}\n\n| status | entries |\n|---|---:|\n");
    for (st, n) in counts(rows) {
        let _ = writeln!(s, "| {} | {n} |", st.name());
    }
    let _ = writeln!(s, "| **all** | {} |", rows.len());
    for seed in Seed::ALL {
        let _ = write!(
            s,
            "\n## {}\n\n| id | what | status | reason |\n|---|---|---|---|\n",
            seed.title()
        );
        for r in rows.iter().filter(|r| r.entry.seed == seed) {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} |",
                r.entry.id,
                r.entry.title,
                r.status.name(),
                r.reason.replace('|', "\\|")
            );
        }
        for r in rows.iter().filter(|r| r.entry.seed == seed) {
            s += &row_markdown(r);
        }
    }
    s
}

/// One entry's section: status and reason, each key effect judged, the
/// numbers beside the paper's, then each figure's chart and table.
fn row_markdown(r: &Row) -> String {
    let e = r.entry;
    let mut s = format!(
        "\n### {} {}: {}\n\n**{}**: {}\n\n",
        e.seed.short(),
        e.id,
        e.title,
        r.status.name(),
        r.reason
    );
    let mut machines: Vec<&str> = r.figures.iter().map(|f| f.machine.as_str()).collect();
    machines.dedup();
    for m in machines.into_iter().filter(|m| !m.is_empty()) {
        let _ = write!(s, "Machine: {m}.\n\n");
    }
    if !r.outcomes.is_empty() {
        s += "| key effect | paper | ours | verdict |\n|---|---:|---:|---|\n";
        for o in &r.outcomes {
            let _ = writeln!(s, "| {} |", effect_cells(o).join(" | "));
        }
        s += "\n";
    }
    let b = beside(r);
    if !b.is_empty() {
        s += "| number | paper | ours |\n|---|---:|---:|\n";
        for (l, p, o) in b {
            let _ = writeln!(s, "| {l} | {p} | {o} |");
        }
        s += "\n";
    }
    for (i, f) in r.figures.iter().enumerate() {
        if !f.svg.is_empty() {
            let _ = write!(s, "![{} {}]({})\n\n", e.seed.short(), f.id, svg_name(f, i));
        }
        s += &f.table;
        s += "\n";
    }
    s
}

/// Markdown of the kind suites write (headings, paragraphs, pipe tables)
/// as HTML.
fn md_to_html(md: &str) -> String {
    let mut out = String::new();
    let mut table: Vec<Vec<String>> = Vec::new();
    let mut items: Vec<&str> = Vec::new();
    let end_list = |items: &mut Vec<&str>, out: &mut String| {
        if items.is_empty() {
            return;
        }
        *out += "<ul>\n";
        for i in items.drain(..) {
            let _ = writeln!(out, "<li>{}</li>", inline(i));
        }
        *out += "</ul>\n";
    };
    let flush = |table: &mut Vec<Vec<String>>, out: &mut String| {
        if table.is_empty() {
            return;
        }
        *out += "<table>\n";
        for (i, row) in table.iter().enumerate() {
            let tag = if i == 0 { "th" } else { "td" };
            *out += "<tr>";
            for c in row {
                let _ = write!(out, "<{tag}>{}</{tag}>", inline(c));
            }
            *out += "</tr>\n";
        }
        *out += "</table>\n";
        table.clear();
    };
    for line in md.lines() {
        let t = line.trim();
        if let Some(item) = t.strip_prefix("- ") {
            flush(&mut table, &mut out);
            items.push(item);
            continue;
        }
        end_list(&mut items, &mut out);
        if t.starts_with('|') {
            let cells: Vec<String> = t
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect();
            let rule = cells
                .iter()
                .all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':')));
            if !rule {
                table.push(cells);
            }
            continue;
        }
        flush(&mut table, &mut out);
        if let Some(h) = t.strip_prefix('#') {
            let _ = writeln!(out, "<h4>{}</h4>", inline(h.trim_start_matches('#').trim()));
        } else if !t.is_empty() {
            let _ = writeln!(out, "<p>{}</p>", inline(t));
        }
    }
    flush(&mut table, &mut out);
    end_list(&mut items, &mut out);
    out
}

const STYLE: &str = "body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}\
table{border-collapse:collapse;margin:0.5em 0}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}\
.reproduced{background:#d9f2d9}.partly{background:#fff3c4}.not-reproduced{background:#f4c7a8}.not-measurable-here{background:#e4e4f4}\
.out-of-scope{background:#eee}.missing{background:#f8d7d7}figure{margin:1em 0;overflow-x:auto}";

fn class(s: Status) -> String {
    s.name().replace(' ', "-")
}

fn html(rows: &[Row]) -> String {
    let mut s = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>splitnet beside its seeds</title><style>{STYLE}</style></head><body>\n\
         <h1>splitnet beside its seeds</h1>\n<p>{}</p>\n<table id=\"summary\">\
         <tr><th>status</th><th>entries</th></tr>\n",
        esc(INTRO)
    );
    for (st, n) in counts(rows) {
        let _ = writeln!(
            s,
            "<tr class=\"{}\"><td>{}</td><td>{n}</td></tr>",
            class(st),
            st.name()
        );
    }
    let _ = writeln!(
        s,
        "<tr><td><b>all</b></td><td>{}</td></tr></table>",
        rows.len()
    );
    for seed in Seed::ALL {
        let _ = write!(
            s,
            "<h2>{}</h2>\n<table><tr><th>id</th><th>what</th><th>status</th><th>reason</th></tr>\n",
            esc(seed.title())
        );
        for r in rows.iter().filter(|r| r.entry.seed == seed) {
            let _ = writeln!(
                s,
                "<tr class=\"{}\"><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
                class(r.status),
                esc(r.entry.id),
                esc(r.entry.title),
                r.status.name(),
                inline(&r.reason)
            );
        }
        s += "</table>\n";
        for r in rows.iter().filter(|r| r.entry.seed == seed) {
            s += &row_html(r);
        }
    }
    s + "</body></html>\n"
}

/// A table of `head` and `rows`, cells escaped.
fn table_html<const N: usize>(head: [&str; N], rows: impl Iterator<Item = [String; N]>) -> String {
    let mut s = String::from("<table><tr>");
    for h in head {
        let _ = write!(s, "<th>{h}</th>");
    }
    s += "</tr>\n";
    for r in rows {
        s += "<tr>";
        for c in r {
            let _ = write!(s, "<td>{}</td>", inline(&c));
        }
        s += "</tr>\n";
    }
    s + "</table>\n"
}

fn row_html(r: &Row) -> String {
    let e = r.entry;
    let mut s = format!(
        "<section><h3>{} {}: {}</h3>\n<p class=\"{}\"><b>{}</b>: {}</p>\n",
        esc(e.seed.short()),
        esc(e.id),
        esc(e.title),
        class(r.status),
        r.status.name(),
        inline(&r.reason)
    );
    if !r.outcomes.is_empty() {
        let head = ["key effect", "paper", "ours", "verdict"];
        s += &table_html(head, r.outcomes.iter().map(effect_cells));
    }
    let b = beside(r);
    if !b.is_empty() {
        s += &table_html(
            ["number", "paper", "ours"],
            b.into_iter().map(<[String; 3]>::from),
        );
    }
    for f in &r.figures {
        if !f.svg.is_empty() {
            let _ = writeln!(s, "<figure>{}</figure>", f.svg);
        }
        s += &md_to_html(&f.table);
    }
    s + "</section>\n"
}

/// Writes `index.html`, `README.md`, the charts and, if any suite failed,
/// `failures.json` into `dir`.
pub fn write(dir: &std::path::Path, saved: &Saved) -> anyhow::Result<()> {
    use anyhow::Context;
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let page = render(saved);
    let put = |name: &str, body: &str| {
        let p = dir.join(name);
        std::fs::write(&p, body).with_context(|| format!("writing {}", p.display()))
    };
    put("index.html", &page.html)?;
    put("README.md", &page.markdown)?;
    for (name, svg) in &page.svgs {
        put(name, svg)?;
    }
    if !saved.failures.is_empty() {
        put(
            "failures.json",
            &serde_json::to_string_pretty(&saved.failures)?,
        )?;
    } else if dir.join("failures.json").exists() {
        std::fs::remove_file(dir.join("failures.json"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{Failure, Kind};
    use super::*;

    #[test]
    fn markdown_lists_become_html_lists() {
        let h = md_to_html("Before:\n- a `x`\n- b\n\nafter");
        assert_eq!(
            h,
            "<p>Before:</p>\n<ul>\n<li>a <code>x</code></li>\n<li>b</li>\n</ul>\n<p>after</p>\n"
        );
        assert!(!md_to_html("| a |\n|---|\n| b |\n- c").contains("<p>-"));
    }

    #[test]
    fn inline_marks_become_html_and_the_rest_is_escaped() {
        assert_eq!(
            inline("**Table 1**: `a<b` & c"),
            "<b>Table 1</b>: <code>a&lt;b</code> &amp; c"
        );
        assert_eq!(inline("`**` stays"), "<code>**</code> stays");
        assert_eq!(num(0.0047), "0.0047");
        assert_eq!(num(0.014), "0.014");
        assert_eq!(num(0.38), "0.38");
        assert_eq!(num(93100.0), "93100");
    }

    #[test]
    fn the_page_lists_every_entry_and_inlines_each_chart() {
        let svg = crate::plot::hbars("t", "", "", &[]);
        let mut f = Figure::new(
            Seed::Ram,
            "Figure 2.4",
            Kind::Bars,
            "| a | b |\n|---|---|\n| 1 | <2> |\n".into(),
            svg,
        );
        f.ours
            .push(crate::seeds::Measure::point("total ÷ native", 4.88));
        let saved = Saved {
            figures: vec![f],
            failures: vec![Failure {
                suite: "hvm".into(),
                error: "boom".into(),
            }],
        };
        let page = render(&saved);
        assert_eq!(page.svgs.len(), 1);
        assert_eq!(page.svgs[0].0, "ram-figure-2-4.svg");
        assert_eq!(page.html.matches("<svg").count(), 1);
        assert!(page.html.contains("<td>&lt;2&gt;</td>"));
        assert!(page.html.contains("<code>splitnet bench hvm</code>"));
        assert!(!page.html.contains('`'), "no literal markdown in the page");
        assert!(
            page.markdown.contains("| total ÷ native | 4.50 | 4.88 |"),
            "{}",
            page.markdown
        );
        assert!(page.markdown.contains("`splitnet bench hvm` failed: boom"));
        for e in crate::seeds::catalog() {
            assert!(page.markdown.contains(e.title), "{}", e.id);
        }
    }
}
