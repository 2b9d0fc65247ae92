//! The docs cite the tree as it is: every repository path a doc names in
//! backticks or a link exists, and every symbol it names beside a path is
//! defined in that file.
//!
//! What counts as a citation (fenced code blocks are skipped; a table row,
//! heading, list item or paragraph is one unit):
//! - a path: a backticked span without spaces whose first segment is an
//!   entry of the repository root (`crates/trusted/hv/src/grant.rs`,
//!   `docs/RESULTS.md`), or that ends in `.rs` or `/` (`proto.rs`,
//!   `hv/src/memory.rs`, `netback/`), `{a,b}` expanded; and a relative
//!   link `[text](path)`, from the doc's folder, whose `#anchor`, if any,
//!   names a heading of the doc it points to. A short path is looked up
//!   beside the unit's previous path (its folder, then its crate's `src/`
//!   and root), or anywhere in the tree when the unit has none before it.
//! - a symbol beside a path: `` `path` (`a`, `b`) ``, `` (`path`, `a`) ``,
//!   `` `a`, `b` in `path` `` and `` `a` (`path`) ``. Each must be defined (fn, type,
//!   field, variant, module, re-export) in that file, or under that folder.
//! - a qualified symbol anywhere, `` `Type::item` `` or `` `crate::mod::item` ``
//!   (`a::b`/`c` continues `a::`): when its first segment is a workspace
//!   crate, module or type, some file of that crate, module or type defines
//!   its last segment. Anything else (`std::`, `Ordering::SeqCst`) is not
//!   splitnet's and is skipped.
//!
//! A failure prints `doc:line: citation: what is wrong`, nothing else.

mod common_docs;

use common_docs::{repo, Defs};
use std::path::Path;

const DOCS: &[&str] = &[
    "README.md",
    "docs/ARCHITECTURE.md",
    "docs/SEED_MAP.md",
    "docs/RESULTS.md",
    "docs/FUZZING.md",
];

/// One backticked span or link target of a unit, with the text before it
/// (since the previous span) and whether it is a link.
#[derive(Debug)]
struct Span {
    before: String,
    text: String,
    link: bool,
}

/// A unit of a doc: its first line and its spans, plus the text after the
/// last span.
struct Unit {
    line: usize,
    spans: Vec<Span>,
    tail: String,
}

/// Splits a doc into units, skipping fenced code blocks.
fn units(doc: &str) -> Vec<Unit> {
    let mut out = Vec::new();
    let mut cur: Option<(usize, String)> = None;
    let mut fence = false;
    let flush = |cur: &mut Option<(usize, String)>, out: &mut Vec<Unit>| {
        if let Some((line, text)) = cur.take() {
            out.push(spans(line, &text));
        }
    };
    for (i, line) in doc.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with("```") {
            flush(&mut cur, &mut out);
            fence = !fence;
            continue;
        }
        if fence {
            continue;
        }
        let starts = t.is_empty()
            || t.starts_with('#')
            || t.starts_with('|')
            || t.starts_with("- ")
            || t.starts_with("* ")
            || t.split_once(". ")
                .is_some_and(|(n, _)| n.parse::<u32>().is_ok());
        if starts {
            flush(&mut cur, &mut out);
        }
        if t.is_empty() {
            continue;
        }
        match &mut cur {
            Some((_, text)) => {
                text.push(' ');
                text.push_str(t);
            }
            None => cur = Some((i + 1, t.to_string())),
        }
        if t.starts_with('#') || t.starts_with('|') {
            flush(&mut cur, &mut out);
        }
    }
    flush(&mut cur, &mut out);
    out
}

/// The backticked spans and link targets of one unit's text.
fn spans(line: usize, text: &str) -> Unit {
    let mut spans = Vec::new();
    let mut before = String::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if c == '`' {
            let ticks = rest.len() - rest.trim_start_matches('`').len();
            let fence = &rest[..ticks];
            let body = &rest[ticks..];
            if let Some(end) = body.find(fence) {
                spans.push(Span {
                    before: std::mem::take(&mut before),
                    text: body[..end].trim().to_string(),
                    link: false,
                });
                rest = &body[end + ticks..];
                continue;
            }
        }
        if let Some(after) = rest.strip_prefix("](") {
            if let Some(end) = after.find(')') {
                before.push_str("](");
                spans.push(Span {
                    before: std::mem::take(&mut before),
                    text: after[..end].to_string(),
                    link: true,
                });
                rest = &after[end + 1..];
                continue;
            }
        }
        before.push(c);
        rest = &rest[c.len_utf8()..];
    }
    Unit {
        line,
        spans,
        tail: before,
    }
}

/// `a/{b,c}.rs` as `a/b.rs` and `a/c.rs`.
fn expand(path: &str) -> Vec<String> {
    match (path.find('{'), path.find('}')) {
        (Some(open), Some(close)) if open < close => path[open + 1..close]
            .split(',')
            .flat_map(|alt| expand(&format!("{}{alt}{}", &path[..open], &path[close + 1..])))
            .collect(),
        _ => vec![path.to_string()],
    }
}

/// Where a path citation starts.
#[derive(Clone, Copy, PartialEq, Debug)]
enum From {
    /// At the repository root: `crates/trusted/hv/src/grant.rs`.
    Root,
    /// At the doc's folder: a link.
    Doc,
    /// Beside the unit's previous rooted path, or at a crate's folder, or
    /// anywhere: `proto.rs`, `netback/rx.rs`, `sys/src/huge.rs`.
    Short,
}

/// A path citation.
struct Cite {
    text: String,
    from: From,
}

/// Whether a span is a path citation.
fn as_path(span: &Span, roots: &[String]) -> Option<Cite> {
    let t = span.text.as_str();
    if span.link {
        let t = t.split('#').next().unwrap_or("");
        let external = t.is_empty() || t.contains("://") || t.starts_with("mailto:");
        return (!external).then(|| Cite {
            text: t.to_string(),
            from: From::Doc,
        });
    }
    let ok = |c: char| c.is_ascii_alphanumeric() || "/._-{},".contains(c);
    // `DIR/profiles/`: a placeholder, not a path of the tree.
    let placeholder = t
        .split('/')
        .any(|seg| !seg.is_empty() && seg.chars().all(|c| c.is_ascii_uppercase()));
    if t.is_empty() || !t.chars().all(ok) || t.starts_with(['/', '-']) || placeholder {
        return None;
    }
    let first = t.split('/').next().unwrap_or("");
    if t.contains('/') && roots.iter().any(|r| r == first) || roots.iter().any(|r| r == t) {
        return Some(Cite {
            text: t.to_string(),
            from: From::Root,
        });
    }
    let short = t.ends_with(".rs") || t.ends_with('/') && t.len() > 1;
    short.then(|| Cite {
        text: t.to_string(),
        from: From::Short,
    })
}

/// The crate folder (`crates/<group>/<name>`) holding a repository path.
fn crate_of(path: &str) -> Option<String> {
    let parts: Vec<&str> = path.split('/').collect();
    (parts.len() >= 3 && parts[0] == "crates").then(|| parts[..3].join("/"))
}

/// Where a short path may be, beside the unit's previous path.
fn beside(ctx: &str, short: &str) -> Vec<String> {
    let root = repo();
    let dir = if root.join(ctx).is_dir() {
        ctx.to_string()
    } else {
        Path::new(ctx)
            .parent()
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let mut c = vec![format!("{dir}/{short}")];
    if let Some(k) = crate_of(ctx) {
        c.push(format!("{k}/src/{short}"));
        c.push(format!("{k}/{short}"));
    }
    c
}

/// The files of the tree (no `target/`, no `.git/`), relative to its root.
fn tree_files() -> Vec<String> {
    let root = repo();
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy();
            if name == "target" || name == ".git" {
                continue;
            }
            if p.is_dir() {
                stack.push(p.clone());
            }
            let rel = p
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            out.push(if p.is_dir() { format!("{rel}/") } else { rel });
        }
    }
    out
}

/// The checker's view of the tree.
struct Tree {
    roots: Vec<String>,
    files: Vec<String>,
    /// The crates' folders, `crates/<group>/<name>`.
    crates: Vec<String>,
    defs: Defs,
}

impl Tree {
    fn exists(&self, rel: &str) -> bool {
        !rel.is_empty() && repo().join(rel.trim_end_matches('/')).exists()
    }

    /// Files anywhere whose path ends with `short` at a folder boundary.
    fn anywhere(&self, short: &str) -> Vec<String> {
        let short = short.trim_start_matches("./");
        self.files
            .iter()
            .filter(|f| *f == short || f.ends_with(&format!("/{short}")))
            .cloned()
            .collect()
    }

    /// `sys/src/huge.rs` as `crates/trusted/sys/src/huge.rs`: a short path
    /// whose first segment is a crate's folder.
    fn crate_rooted(&self, short: &str) -> Option<String> {
        let (first, rest) = short.split_once('/')?;
        let k = self
            .crates
            .iter()
            .find(|k| k.rsplit('/').next() == Some(first))?;
        Some(format!("{k}/{rest}"))
    }

    /// Resolves one path citation to the repository paths it may mean, or
    /// says why it means none. `ctx` is the unit's previous rooted path.
    fn resolve(&self, doc: &str, cite: &Cite, ctx: Option<&str>) -> Result<Vec<String>, String> {
        let mut found = Vec::new();
        for p in expand(&cite.text) {
            let hits = match cite.from {
                From::Root => vec![p.clone()],
                From::Doc => {
                    let dir = Path::new(doc).parent().unwrap_or(Path::new(""));
                    vec![normalize(&dir.join(&p))]
                }
                From::Short => {
                    let mut c = ctx.map(|c| beside(c, &p)).unwrap_or_default();
                    c.extend(self.crate_rooted(&p));
                    if ctx.is_none() {
                        c.extend(self.anywhere(&p));
                    }
                    c
                }
            };
            let hits: Vec<String> = hits.into_iter().filter(|h| self.exists(h)).collect();
            if hits.is_empty() {
                let elsewhere = self.anywhere(&p);
                let mut why = match ctx.filter(|_| cite.from == From::Short) {
                    Some(c) => format!("`{p}` is not beside `{c}`"),
                    None => format!("`{p}` does not exist"),
                };
                if !elsewhere.is_empty() {
                    why += &format!(" (there is {})", elsewhere.join(", "));
                }
                return Err(why);
            }
            found.extend(hits);
        }
        Ok(found)
    }
}

/// A heading's anchor as GitHub makes it: lower case, spaces as `-`,
/// punctuation but `-` and `_` dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// Why a link's `#anchor` names no heading of the Markdown file it points
/// to, if it does not.
fn anchor(files: &[String], anchor: &str) -> Option<String> {
    let doc = files.iter().find(|f| f.ends_with(".md"))?;
    let text = std::fs::read_to_string(repo().join(doc)).ok()?;
    let found = text
        .lines()
        .filter_map(|l| l.strip_prefix('#'))
        .any(|h| slug(h.trim_start_matches('#')) == anchor);
    (!found).then(|| format!("{doc} has no heading `#{anchor}`"))
}

/// `a/b/../c` as `a/c`.
fn normalize(p: &Path) -> String {
    let mut out: Vec<String> = Vec::new();
    for c in p.components() {
        match c.as_os_str().to_string_lossy().as_ref() {
            ".." => {
                out.pop();
            }
            "." => {}
            s => out.push(s.to_string()),
        }
    }
    out.join("/")
}

/// A span that names a Rust item: its segments, `()`, `!` or ` { .. }`
/// after it dropped.
fn as_symbol(text: &str) -> Option<Vec<String>> {
    let head = text
        .split(['(', ' ', '<', '!'])
        .next()
        .unwrap_or("")
        .trim_end_matches("::");
    let rest = &text[head.len()..];
    let tail_ok = rest.is_empty()
        || rest.starts_with("()")
        || rest.starts_with(" {")
        || rest.starts_with('(') && rest.ends_with(')');
    let ident = |s: &str| {
        s.chars()
            .next()
            .is_some_and(|c| c.is_alphabetic() || c == '_')
            && s.chars().all(|c| c.is_alphanumeric() || c == '_')
    };
    let segs: Vec<String> = head.split("::").map(String::from).collect();
    (tail_ok && segs.iter().all(|s| ident(s))).then_some(segs)
}

/// Checks one unit, appending each wrong citation to `bad`.
/// Returns how many paths and symbols it checked.
fn check_unit(tree: &Tree, doc: &str, unit: &Unit, bad: &mut Vec<String>) -> (usize, usize) {
    let at = |cite: &str, why: String| format!("{doc}:{}: `{cite}`: {why}", unit.line);
    let mut ctx: Option<String> = None;
    // For each span: the files it may mean, if it is a path.
    let mut paths: Vec<Option<Vec<String>>> = Vec::new();
    for s in &unit.spans {
        // `client.rs::GrantTable`: a path, and a symbol defined in it.
        let (path, item) = match s.text.split_once(".rs::").filter(|_| !s.link) {
            Some((file, item)) => (format!("{file}.rs"), item.rsplit("::").next()),
            None => (s.text.clone(), None),
        };
        let span = Span {
            before: String::new(),
            text: path,
            link: s.link,
        };
        let resolved = as_path(&span, &tree.roots).map(|cite| {
            match tree.resolve(doc, &cite, ctx.as_deref()) {
                Ok(files) => {
                    let rooted = cite.from == From::Root || tree.crate_rooted(&cite.text).is_some();
                    if rooted && cite.from != From::Doc {
                        ctx = files.first().cloned();
                    }
                    if let Some(item) = item.filter(|i| !tree.defs.defined_in(i, &files)) {
                        let why = format!("`{item}` is not defined in {}", files.join(", "));
                        bad.push(at(&s.text, why));
                    }
                    if let Some(why) = s.text.split_once('#').and_then(|(_, a)| anchor(&files, a)) {
                        bad.push(at(&s.text, why));
                    }
                    files
                }
                Err(why) => {
                    bad.push(at(&s.text, why));
                    Vec::new()
                }
            }
        });
        paths.push(resolved);
    }
    let mut prev_qual: Vec<String> = Vec::new();
    let mut symbols = 0;
    for (i, s) in unit.spans.iter().enumerate() {
        if paths[i].is_some() || s.link {
            continue;
        }
        let Some(mut segs) = as_symbol(&s.text) else {
            prev_qual.clear();
            continue;
        };
        if segs.len() == 1 && s.before == "/" && !prev_qual.is_empty() {
            segs = [prev_qual.clone(), segs].concat();
        }
        prev_qual = segs[..segs.len() - 1].to_vec();
        if segs.len() > 1 {
            match tree.defs.qualified(&segs) {
                Ok(checked) => symbols += usize::from(checked),
                Err(why) => {
                    bad.push(at(&s.text, why));
                    continue;
                }
            }
        }
        // `prof::Profile` (`paper.rs`): a crate-qualified symbol says where
        // it lives itself; the path beside it is where it is used.
        let crate_qualified = segs.len() > 1 && tree.defs.is_crate(&segs[0]);
        if let Some(files) = beside_path(unit, &paths, i).filter(|_| !crate_qualified) {
            let name = segs.last().unwrap();
            symbols += 1;
            if !files.is_empty() && !tree.defs.defined_in(name, &files) {
                bad.push(at(
                    &s.text,
                    format!("`{name}` is not defined in {}", files.join(", ")),
                ));
            }
        }
    }
    let paths = paths.iter().flatten().filter(|f| !f.is_empty()).count();
    (paths, symbols)
}

/// The files of the path a symbol span stands beside, if it does: inside
/// the parentheses after a path or after it inside its own, before
/// ` in `path``, or right before ` (`path`)`.
fn beside_path(unit: &Unit, paths: &[Option<Vec<String>>], i: usize) -> Option<Vec<String>> {
    let sp = &unit.spans;
    let sep = |b: &str| matches!(b, ", " | "/" | ", and " | " and " | " or ");
    // `path` (`a`, `b`: walk back over list separators to ` (` after a path.
    let mut j = i;
    while j > 0 && sep(&sp[j].before) && paths[j - 1].is_none() {
        j -= 1;
    }
    // Or (`path`, `a`, `b`): a list opened by the path.
    let opened = |j: usize| sep(&sp[j].before) && sp[j - 1].before.ends_with('(');
    if j > 0 && (matches!(sp[j].before.as_str(), " (" | ": ") || opened(j)) {
        if let Some(files) = &paths[j - 1] {
            return Some(files.clone());
        }
    }
    // `a`, `b` in `path`: walk forward over separators to ` in `.
    let mut k = i + 1;
    while k < sp.len() && sep(&sp[k].before) && paths[k].is_none() {
        k += 1;
    }
    if k < sp.len() && sp[k].before == " in " {
        if let Some(files) = &paths[k] {
            return Some(files.clone());
        }
    }
    // `a` (`path`)
    let next_before = sp.get(i + 2).map_or(unit.tail.as_str(), |s| &s.before);
    if i + 1 < sp.len() && sp[i + 1].before == " (" && next_before.starts_with(')') {
        if let Some(files) = &paths[i + 1] {
            return Some(files.clone());
        }
    }
    None
}

/// The tree as the checker sees it; `roots` overrides the repository
/// root's entries.
fn load_tree(roots: Option<Vec<String>>) -> Tree {
    let roots = roots.unwrap_or_else(|| {
        std::fs::read_dir(repo())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "target" && n != ".git")
            .collect()
    });
    let defs = Defs::load();
    Tree {
        roots,
        files: tree_files(),
        crates: defs.crate_dirs(),
        defs,
    }
}

#[test]
fn docs_cite_paths_and_symbols_that_exist() {
    let tree = load_tree(None);
    let mut bad = Vec::new();
    let mut cited = 0;
    let mut checked = (0, 0);
    for doc in DOCS {
        let text = std::fs::read_to_string(repo().join(doc)).unwrap();
        for unit in units(&text) {
            cited += unit.spans.len();
            let (p, s) = check_unit(&tree, doc, &unit, &mut bad);
            checked.0 += p;
            checked.1 += s;
        }
    }
    println!(
        "{cited} spans: {} paths and {} symbols checked",
        checked.0, checked.1
    );
    assert!(
        checked.0 > 200 && checked.1 > 80,
        "the docs' citations were not read ({checked:?})"
    );
    assert!(
        bad.is_empty(),
        "{} wrong citations in the docs (doc:line: citation: what is wrong):\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// The checker itself: a right citation passes, each kind of wrong one is
/// caught and named (over the trusted crates, which stay where they are).
#[test]
fn the_checker_names_each_wrong_citation() {
    let tree = load_tree(None);
    let check = |text: &str| {
        let mut bad = Vec::new();
        for unit in units(text) {
            let _ = check_unit(&tree, "x.md", &unit, &mut bad);
        }
        bad
    };
    let right = "`crates/trusted/hv` (`memory.rs`, `grant.rs`)\n\n\
        `GrantTable::end_access` (`hypercall/src/client.rs`)\n\n\
        `crates/trusted/abi/src/ring.rs` (`FrontRing`, `BackRing`)\n\n\
        `HvClient::switch_state`, `read_state` in `crates/trusted/hypercall/src/client.rs`\n\n\
        `sys/src/huge.rs`, `sys::perf::parse_sample`, [a link](docs/RESULTS.md)\n\n\
        [a part](docs/ARCHITECTURE.md#crates-and-trust)\n\n\
        `crates/trusted/hypercall/src/client.rs::GrantTable`";
    assert_eq!(check(right), Vec::<String>::new());
    let wrong = [
        ("`crates/trusted/hv` (`memory.rs`, `proto.rs`)", "`proto.rs` is not beside `crates/trusted/hv` (there is crates/trusted/hypercall/src/proto.rs)"),
        ("`crates/trusted/hypercall/src/{ioreq,hvm}.rs`", "`crates/trusted/hypercall/src/hvm.rs` does not exist"),
        ("`GrantTable::nothing_here` (`hypercall/src/client.rs`)", "`nothing_here` is not defined for `GrantTable`"),
        ("`crates/trusted/abi/src/ring.rs` (`FrontRing`, `Nope`)", "`Nope` is not defined in"),
        ("hv (`crates/trusted/abi/src/ring.rs`, `Nope`)", "`Nope` is not defined in"),
        ("`end_access` (`crates/trusted/abi/src/ring.rs`)", "`end_access` is not defined in crates/trusted/abi/src/ring.rs"),
        ("`nope`, `read_state` in `crates/trusted/hypercall/src/client.rs`", "`nope` is not defined in"),
        ("`hv::jail::enter`", "no file defines or implements `hv::jail`"),
        ("`sys::Nothing`", "`Nothing` is not defined for `sys`"),
        ("[a link](NOPE.md)", "`NOPE.md` does not exist"),
        ("[a link](docs/ARCHITECTURE.md#no-such-part)", "docs/ARCHITECTURE.md has no heading `#no-such-part`"),
        ("`crates/trusted/hypercall/src/client.rs::Nope`", "`Nope` is not defined in"),
    ];
    for (text, why) in wrong {
        let bad = check(text);
        assert!(
            bad.len() == 1 && bad[0].contains(why),
            "{text}: expected one `{why}`, got {bad:#?}"
        );
    }
}
