//! docs/ARCHITECTURE.md's crate diagram and trusted-computing-base tables
//! say what the tree is: each is a block between `<!-- sizes.sh: NAME -->`
//! and `<!-- sizes.sh: end -->`, checked here against the workspace.
//!
//! - `crates`, the diagram: under each folder's heading (`crates/trusted/`),
//!   one line per workspace member, `name [deps]`, where `deps` are the
//!   workspace crates it links (normal dependencies, by folder name); what
//!   follows on that line, and on the more indented lines under it, is
//!   free text saying what the crate holds. Every member is there, under
//!   its folder, with exactly its dependencies.
//! - `tcb`: for each binary of [`BINARIES`], the splitnet crates in its
//!   normal dependency tree (`cargo tree -e normal`), their lines of Rust
//!   (every `.rs` file under their `src/`, unit tests included), their
//!   `unsafe` blocks, functions and impls (a line whose code, before any
//!   `//`, holds `unsafe {`, `unsafe fn ` or `unsafe impl`), and the
//!   packages in the tree, splitnet's own included (name and version, each
//!   once); then the third-party packages by name.
//! - `tcb-crates`: the same lines and `unsafe` per crate, with the binaries
//!   linking it.
//!
//! README's `## Layout` table, likewise, has a row for every workspace
//! member and none for a crate that is not one.
//!
//! Counts must match exactly. Lines are written rounded to the hundred and
//! pass within 3% of the measured count (at least 100), so that everyday
//! edits do not fail the test but a drift like 24,900 against 37,479 does.
//!
//! `scripts/sizes.sh` prints the blocks as measured now; `scripts/sizes.sh
//! --write` rewrites them in the doc (the diagram keeps each crate's text).

mod common_docs;

use common_docs::{repo, rust_files};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

/// The binaries whose trusted computing base the doc measures.
const BINARIES: &[&str] = &["splitnet-hv", "splitnet-domain"];

const DOC: &str = "docs/ARCHITECTURE.md";

/// A workspace member.
struct Member {
    /// Its package name, `splitnet-sys`.
    package: String,
    /// Its folder, `crates/trusted/sys`.
    dir: String,
    /// The folder names of the workspace crates it links (normal deps).
    deps: BTreeSet<String>,
    /// The binaries it builds.
    bins: Vec<String>,
}

impl Member {
    fn name(&self) -> &str {
        self.dir.rsplit('/').next().unwrap()
    }
    fn folder(&self) -> &str {
        self.dir.rsplit_once('/').unwrap().0
    }
}

fn cargo(args: &[&str]) -> String {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .current_dir(repo())
        .args(args)
        .output()
        .expect("running cargo");
    assert!(
        out.status.success(),
        "cargo {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The workspace members, in the order the workspace `Cargo.toml` lists them.
fn members() -> Vec<Member> {
    let meta: Value = serde_json::from_str(&cargo(&[
        "metadata",
        "--offline",
        "--format-version",
        "1",
        "--no-deps",
    ]))
    .unwrap();
    let root = repo();
    let rel = |p: &str| {
        let p = Path::new(p).parent().unwrap();
        p.strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned()
    };
    let pkgs = meta["packages"].as_array().unwrap();
    let dir_of: BTreeMap<&str, String> = pkgs
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap(),
                rel(p["manifest_path"].as_str().unwrap()),
            )
        })
        .collect();
    let mut out: Vec<Member> = pkgs
        .iter()
        .map(|p| Member {
            package: p["name"].as_str().unwrap().to_string(),
            dir: rel(p["manifest_path"].as_str().unwrap()),
            deps: p["dependencies"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| d["kind"].is_null())
                .filter_map(|d| dir_of.get(d["name"].as_str().unwrap()))
                .map(|d| d.rsplit('/').next().unwrap().to_string())
                .collect(),
            bins: p["targets"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "bin"))
                .map(|t| t["name"].as_str().unwrap().to_string())
                .collect(),
        })
        .collect();
    let listed = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    out.sort_by_key(|m| listed.find(&format!("\"{}\"", m.dir)).unwrap_or(usize::MAX));
    out
}

/// What one workspace crate measures.
#[derive(Default)]
struct Size {
    lines: usize,
    unsafes: usize,
}

fn measure(dir: &str) -> Size {
    let kinds = [["unsafe", " {"], ["unsafe", " fn "], ["unsafe", " impl"]].map(|k| k.concat());
    let mut size = Size::default();
    for f in rust_files(&repo().join(dir).join("src")) {
        let text = std::fs::read_to_string(&f).unwrap();
        size.lines += text.lines().count();
        size.unsafes += text
            .lines()
            .filter(|l| {
                let code = l.split("//").next().unwrap_or("");
                kinds.iter().any(|k| code.contains(k.as_str()))
            })
            .count();
    }
    size
}

/// What one binary links.
struct Tcb {
    binary: String,
    package: String,
    /// Its workspace crates, by folder (`crates/trusted/sys`).
    crates: Vec<String>,
    /// Every package in its normal tree, `name version`.
    packages: BTreeSet<String>,
    /// The third-party ones, by name.
    third_party: BTreeSet<String>,
}

fn tcb(binary: &str, members: &[Member]) -> Tcb {
    let owner = members
        .iter()
        .find(|m| m.bins.iter().any(|b| b == binary))
        .unwrap_or_else(|| panic!("no workspace member builds a binary `{binary}`"));
    let tree = cargo(&[
        "tree",
        "--offline",
        "-p",
        &owner.package,
        "-e",
        "normal",
        "--prefix",
        "none",
        "--format",
        "{p}",
    ]);
    let packages: BTreeSet<String> = tree
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some(format!("{} {}", w.next()?, w.next()?))
        })
        .collect();
    let name = |p: &String| p.split(' ').next().unwrap().to_string();
    let ours = |n: &str| members.iter().find(|m| m.package == n);
    Tcb {
        binary: binary.to_string(),
        package: owner.package.clone(),
        crates: members
            .iter()
            .filter(|m| packages.iter().any(|p| name(p) == m.package))
            .map(|m| m.dir.clone())
            .collect(),
        third_party: packages
            .iter()
            .map(name)
            .filter(|n| ours(n).is_none())
            .collect(),
        packages,
    }
}

/// 37479 as `37,479`.
fn thousands(n: usize) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A line count as the doc writes it: to the nearest hundred.
fn rounded(n: usize) -> String {
    thousands((n + 50) / 100 * 100)
}

/// The tolerance rule: a written line count passes within 3% of the
/// measured one, and at least within 100.
fn lines_ok(written: &str, measured: usize) -> bool {
    let Ok(w) = written.replace(',', "").parse::<i64>() else {
        return false;
    };
    (w - measured as i64).unsigned_abs() as usize <= (measured * 3 / 100).max(100)
}

fn backticked(items: impl IntoIterator<Item = impl AsRef<str>>) -> String {
    let v: Vec<String> = items
        .into_iter()
        .map(|s| format!("`{}`", s.as_ref()))
        .collect();
    v.join(", ")
}

/// A cell of a measured table: text that must match, or a line count.
enum Cell {
    Text(String),
    Lines(usize),
}

impl Cell {
    fn render(&self) -> String {
        match self {
            Cell::Text(t) => t.clone(),
            Cell::Lines(n) => rounded(*n),
        }
    }
}

/// A measured table, and lines after it that must match exactly.
struct Table {
    header: &'static [&'static str],
    rows: Vec<Vec<Cell>>,
    after: Vec<String>,
}

impl Table {
    fn render(&self) -> String {
        let mut out = format!("| {} |\n", self.header.join(" | "));
        out += &format!("|{}\n", "---|".repeat(self.header.len()));
        for r in &self.rows {
            let cells: Vec<String> = r.iter().map(Cell::render).collect();
            out += &format!("| {} |\n", cells.join(" | "));
        }
        for a in &self.after {
            out += &format!("\n{}", wrap(a, 0));
        }
        out
    }

    /// Compares the doc's block with the measured table, one message per
    /// wrong cell, missing or extra row, or wrong line.
    fn check(&self, name: &str, doc: &str) -> Vec<String> {
        let cells = |l: &str| -> Vec<String> {
            l.trim()
                .trim_matches('|')
                .split('|')
                .map(|c| c.trim().to_string())
                .collect()
        };
        let doc_rows: Vec<Vec<String>> = doc
            .lines()
            .filter(|l| l.starts_with('|') && !l.starts_with("|---"))
            .map(cells)
            .collect();
        let mut bad = Vec::new();
        if doc_rows.first().map(|h| h.join(" | ")) != Some(self.header.join(" | ")) {
            bad.push(format!(
                "{name}: the header should be | {} |",
                self.header.join(" | ")
            ));
        }
        for want in &self.rows {
            let key = want[0].render();
            let Some(got) = doc_rows.iter().skip(1).find(|r| r[0] == key) else {
                bad.push(format!("{name}: no row {key}"));
                continue;
            };
            for (i, w) in want.iter().enumerate().skip(1) {
                let g = got.get(i).map_or("", String::as_str);
                let ok = match w {
                    Cell::Text(t) => g == t,
                    Cell::Lines(n) => lines_ok(g, *n),
                };
                if !ok {
                    let col = self.header[i];
                    let w = match w {
                        Cell::Lines(n) => format!("{} (written {})", thousands(*n), w.render()),
                        Cell::Text(t) => t.clone(),
                    };
                    bad.push(format!(
                        "{name}, row {key}, {col}: the doc says {g}, measured {w}"
                    ));
                }
            }
        }
        for r in doc_rows.iter().skip(1) {
            if !self.rows.iter().any(|w| w[0].render() == r[0]) {
                bad.push(format!("{name}: row {} measures nothing", r[0]));
            }
        }
        let words = |t: &str| t.split_whitespace().collect::<Vec<_>>().join(" ");
        for a in self
            .after
            .iter()
            .filter(|a| !words(doc).contains(&words(a)))
        {
            bad.push(format!("{name}: the line should read: {a}"));
        }
        bad
    }
}

/// The measured tables: the `tcb` block (one row per binary) and the
/// `tcb-crates` block (one row per crate they link).
fn tables(members: &[Member]) -> (Table, Table) {
    let tcbs: Vec<Tcb> = BINARIES.iter().map(|b| tcb(b, members)).collect();
    let sizes: BTreeMap<String, Size> = tcbs
        .iter()
        .flat_map(|t| t.crates.clone())
        .map(|d| {
            let s = measure(&d);
            (d, s)
        })
        .collect();
    let name = |d: &String| d.rsplit('/').next().unwrap().to_string();
    let text = Cell::Text;
    let mut top = Table {
        header: &[
            "binary (package)",
            "splitnet crates",
            "lines of Rust",
            "`unsafe`",
            "packages",
        ],
        rows: Vec::new(),
        after: Vec::new(),
    };
    for t in &tcbs {
        let unsafes: usize = t.crates.iter().map(|d| sizes[d].unsafes).sum();
        let holders = t.crates.iter().filter(|d| sizes[*d].unsafes > 0).map(name);
        top.rows.push(vec![
            text(format!("`{}` (`{}`)", t.binary, t.package)),
            text(t.crates.len().to_string()),
            Cell::Lines(t.crates.iter().map(|d| sizes[d].lines).sum()),
            text(match backticked(holders) {
                h if h.is_empty() => unsafes.to_string(),
                h => format!("{unsafes} (in {h})"),
            }),
            text(t.packages.len().to_string()),
        ]);
        let third: Vec<&str> = t.third_party.iter().map(String::as_str).collect();
        top.after.push(format!(
            "Third-party packages in `{}`: {}.",
            t.binary,
            third.join(", ")
        ));
    }
    let mut per = Table {
        header: &["crate", "lines of Rust", "`unsafe`", "linked by"],
        rows: Vec::new(),
        after: Vec::new(),
    };
    for m in members.iter().filter(|m| sizes.contains_key(&m.dir)) {
        let s = &sizes[&m.dir];
        let by = tcbs
            .iter()
            .filter(|t| t.crates.contains(&m.dir))
            .map(|t| &t.binary);
        per.rows.push(vec![
            text(format!("`{}`", m.dir)),
            Cell::Lines(s.lines),
            text(s.unsafes.to_string()),
            text(backticked(by)),
        ]);
    }
    (top, per)
}

/// The text between `<!-- sizes.sh: NAME -->` and `<!-- sizes.sh: end -->`,
/// with its byte range in the doc.
fn block<'a>(doc: &'a str, name: &str) -> Option<(std::ops::Range<usize>, &'a str)> {
    let open = format!("<!-- sizes.sh: {name} -->\n");
    let start = doc.find(&open)? + open.len();
    let end = start + doc[start..].find("<!-- sizes.sh: end -->")?;
    Some((start..end, &doc[start..end]))
}

/// The diagram as the doc has it: each folder's heading text, and its
/// crates' lines, name to (deps, free text).
#[derive(Default)]
struct Diagram {
    headings: BTreeMap<String, String>,
    crates: BTreeMap<String, BTreeMap<String, (BTreeSet<String>, String)>>,
}

fn parse_diagram(text: &str) -> Result<Diagram, String> {
    let mut out = Diagram::default();
    // The folder and crate the last lines were about.
    let mut at: Option<(String, Option<String>)> = None;
    for line in text.lines() {
        if line.starts_with("crates/") {
            let (f, label) = line.split_once(' ').unwrap_or((line, ""));
            let f = f.trim_end_matches('/').to_string();
            out.headings.insert(f.clone(), label.trim().to_string());
            at = Some((f, None));
            continue;
        }
        let Some(rest) = line.strip_prefix("  ") else {
            continue;
        };
        let Some((f, last)) = &mut at else {
            return Err(format!("`{line}` comes before any folder"));
        };
        let crates = out.crates.entry(f.clone()).or_default();
        if rest.starts_with(' ') {
            // The crate's description goes on.
            let what = last
                .as_ref()
                .and_then(|c| crates.get_mut(c))
                .ok_or(format!("`{line}` comes before any crate"))?;
            what.1 = format!("{} {}", what.1, rest.trim()).trim().to_string();
            continue;
        }
        let (name, after) = rest.split_once(' ').unwrap_or((rest, ""));
        let (deps, what) = after
            .trim_start()
            .strip_prefix('[')
            .and_then(|a| a.split_once(']'))
            .ok_or(format!("`{line}`: no `[deps]` after the crate's name"))?;
        let deps = deps.split_whitespace().map(String::from).collect();
        let entry = (deps, what.trim().to_string());
        if crates.insert(name.to_string(), entry).is_some() {
            return Err(format!("`{name}` is in the diagram twice"));
        }
        *last = Some(name.to_string());
    }
    Ok(out)
}

/// The diagram as the workspace is, each heading's and crate's text taken
/// from `old`; in a folder, a crate comes before those it links.
fn diagram(members: &[Member], old: &Diagram) -> String {
    let mut out = String::from("```text\n");
    let mut folders: Vec<&str> = members.iter().map(|m| m.folder()).collect();
    folders.dedup();
    let width = members.iter().map(|m| m.name().len()).max().unwrap_or(0);
    let deps = |m: &Member| format!("[{}]", m.deps.iter().cloned().collect::<Vec<_>>().join(" "));
    for f in folders {
        let label = old.headings.get(f).map_or("", String::as_str);
        out += format!("{f}/  {label}").trim_end();
        out.push('\n');
        let mut left: Vec<&Member> = members.iter().filter(|m| m.folder() == f).collect();
        left.sort_by_key(|m| m.name().to_string());
        while !left.is_empty() {
            let i = (0..left.len())
                .find(|&i| !left.iter().any(|o| o.deps.contains(left[i].name())))
                .unwrap_or(0);
            let m = left.remove(i);
            let what = old
                .crates
                .get(f)
                .and_then(|c| c.get(m.name()))
                .map_or("", |(_, w)| w.as_str());
            out += &format!("  {:width$} {}\n", m.name(), deps(m));
            out += &wrap(what, width + 3);
        }
    }
    out + "```\n"
}

/// `text` in lines of at most 76 columns, each indented by `indent`.
fn wrap(text: &str, indent: usize) -> String {
    let mut out = String::new();
    let mut line = String::new();
    for word in text.split_whitespace() {
        if !line.is_empty() && indent + line.len() + 1 + word.len() > 76 {
            out += &format!("{:indent$}{line}\n", "");
            line.clear();
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        out += &format!("{:indent$}{line}\n", "");
    }
    out
}

/// Compares the doc's diagram with the workspace, one message per wrong
/// or missing crate.
fn check_diagram(doc: &Diagram, members: &[Member]) -> Vec<String> {
    let mut bad = Vec::new();
    for m in members {
        match doc.crates.get(m.folder()).and_then(|c| c.get(m.name())) {
            None => bad.push(format!("`{}` is not under `{}/`", m.name(), m.folder())),
            Some((deps, _)) if deps != &m.deps => bad.push(format!(
                "`{}` links [{}], the diagram says [{}]",
                m.name(),
                m.deps.iter().cloned().collect::<Vec<_>>().join(" "),
                deps.iter().cloned().collect::<Vec<_>>().join(" ")
            )),
            Some(_) => {}
        }
    }
    for (folder, crates) in &doc.crates {
        for name in crates.keys() {
            if !members
                .iter()
                .any(|m| m.folder() == folder && m.name() == name)
            {
                bad.push(format!("`{folder}/{name}` is not a workspace member"));
            }
        }
    }
    bad
}

/// The doc's blocks as the tree measures now, by name.
fn blocks_now(doc: &str, members: &[Member]) -> Vec<(&'static str, String)> {
    let old = block(doc, "crates")
        .and_then(|(_, t)| parse_diagram(t).ok())
        .unwrap_or_default();
    let (top, per) = tables(members);
    vec![
        ("crates", diagram(members, &old)),
        ("tcb", top.render()),
        ("tcb-crates", per.render()),
    ]
}

fn print_blocks(blocks: &[(&str, String)]) -> String {
    blocks
        .iter()
        .map(|(name, text)| format!("<!-- sizes.sh: {name} -->\n{text}<!-- sizes.sh: end -->\n"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn architecture_diagram_and_tcb_tables_match_the_tree() {
    let doc = std::fs::read_to_string(repo().join(DOC)).unwrap();
    let members = members();
    let mut bad = Vec::new();
    match block(&doc, "crates").map(|(_, t)| parse_diagram(t)) {
        None => bad.push("no `<!-- sizes.sh: crates -->` block".to_string()),
        Some(Err(e)) => bad.push(format!("crate diagram: {e}")),
        Some(Ok(d)) => bad.extend(
            check_diagram(&d, &members)
                .into_iter()
                .map(|b| format!("crate diagram: {b}")),
        ),
    }
    let (top, per) = tables(&members);
    for (name, table) in [("tcb", &top), ("tcb-crates", &per)] {
        match block(&doc, name) {
            None => bad.push(format!("no `<!-- sizes.sh: {name} -->` block")),
            Some((_, text)) => bad.extend(table.check(name, text)),
        }
    }
    assert!(
        bad.is_empty(),
        "{DOC} is out of date:\n{}\n\n`scripts/sizes.sh --write` rewrites its blocks as:\n\n{}",
        bad.join("\n"),
        print_blocks(&blocks_now(&doc, &members))
    );
}

/// README's layout table has a row for every workspace member, and no
/// row for a crate that is not one.
#[test]
fn readme_layout_lists_every_crate() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let layout = readme
        .split("\n## Layout\n")
        .nth(1)
        .expect("README.md has a `## Layout` section");
    let layout = layout.split("\n## ").next().unwrap();
    let cited: BTreeSet<String> = layout
        .lines()
        .filter(|l| l.starts_with('|'))
        .filter_map(|l| l.trim_matches('|').split('|').next())
        .flat_map(|cell| cell.split('`').skip(1).step_by(2).map(String::from))
        .collect();
    let members = members();
    let mut bad: Vec<String> = members
        .iter()
        .filter(|m| !cited.contains(&m.dir))
        .map(|m| format!("README.md, Layout: no row for `{}`", m.dir))
        .collect();
    for c in cited.iter().filter(|c| c.starts_with("crates/")) {
        if !members.iter().any(|m| &m.dir == c) {
            bad.push(format!(
                "README.md, Layout: `{c}` is not a workspace member"
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

/// `scripts/sizes.sh`: prints the blocks as measured now; with
/// `SPLITNET_DOCS_WRITE=1` rewrites them in the doc.
#[test]
#[ignore = "run by scripts/sizes.sh"]
fn print_architecture_blocks() {
    let path = repo().join(DOC);
    let mut doc = std::fs::read_to_string(&path).unwrap();
    let now = blocks_now(&doc, &members());
    println!("{}", print_blocks(&now));
    if std::env::var("SPLITNET_DOCS_WRITE").is_ok_and(|v| v == "1") {
        for (name, text) in &now {
            let (range, _) = block(&doc, name).unwrap_or_else(|| {
                panic!("{DOC} has no `<!-- sizes.sh: {name} -->` block to rewrite")
            });
            doc.replace_range(range, text);
        }
        std::fs::write(&path, doc).unwrap();
        eprintln!("rewrote the blocks of {DOC}");
    }
}

/// The checks themselves: a stale diagram line, a missing crate and a
/// line count past the tolerance are each named.
#[test]
fn the_checks_name_each_wrong_line_and_cell() {
    let members = members();
    let doc = "crates/trusted/\n  sys [abi]\n      system calls\n  abi [sys]\ncrates/nowhere/\n  ghost []\n";
    let parsed = parse_diagram(doc).unwrap();
    assert_eq!(parsed.crates["crates/trusted"]["sys"].1, "system calls");
    let bad = check_diagram(&parse_diagram(doc).unwrap(), &members);
    assert!(
        bad.contains(&"`abi` links [], the diagram says [sys]".to_string()),
        "{bad:#?}"
    );
    assert!(
        bad.contains(&"`hv` is not under `crates/trusted/`".to_string()),
        "{bad:#?}"
    );
    assert!(
        bad.contains(&"`crates/nowhere/ghost` is not a workspace member".to_string()),
        "{bad:#?}"
    );
    assert!(!bad.iter().any(|b| b.contains("`sys`")), "{bad:#?}");

    let table = Table {
        header: &["crate", "lines of Rust", "`unsafe`"],
        rows: vec![vec![
            Cell::Text("`a`".into()),
            Cell::Lines(37_479),
            Cell::Text("172".into()),
        ]],
        after: vec!["Third-party packages in `x`: libc.".into()],
    };
    assert_eq!(table.check("t", &table.render()), Vec::<String>::new());
    let near = "| crate | lines of Rust | `unsafe` |\n|---|---|---|\n| `a` | 38,000 | 172 |\n\nThird-party packages in `x`: libc.\n";
    assert_eq!(table.check("t", near), Vec::<String>::new());
    let stale = "| crate | lines of Rust | `unsafe` |\n|---|---|---|\n| `a` | 24,900 | 129 |\n| `b` | 1 | 0 |\n";
    assert_eq!(
        table.check("t", stale),
        [
            "t, row `a`, lines of Rust: the doc says 24,900, measured 37,479 (written 37,500)",
            "t, row `a`, `unsafe`: the doc says 129, measured 172",
            "t: row `b` measures nothing",
            "t: the line should read: Third-party packages in `x`: libc.",
        ]
    );
}
