//! What the docs tests share: the repository root and an index of where
//! each Rust name is defined.
#![allow(dead_code)]

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};

/// The repository root.
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../..")
        .canonicalize()
        .unwrap()
}

/// Every `.rs` file under `dir` (absolute), sorted.
pub fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            if p.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// One Rust file: what it defines, and the names that qualify its items
/// (its module path, the types it defines or implements, inline modules).
struct File {
    rel: String,
    krate: String,
    defs: BTreeSet<String>,
    names: BTreeSet<String>,
}

/// Where each Rust name of the workspace is defined.
pub struct Defs {
    files: Vec<File>,
    /// Crate folder name (`sys`, `hv`, `cli`) to its path (`crates/trusted/sys`).
    crates: HashMap<String, String>,
}

const DEF_KW: &[&str] = &[
    "fn",
    "struct",
    "enum",
    "trait",
    "type",
    "const",
    "static",
    "mod",
    "union",
    "macro_rules",
];

fn idents(line: &str) -> Vec<&str> {
    line.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|t| {
            t.chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '_')
        })
        .collect()
}

/// A field (`name: T`) or enum variant (`Name,`, `Name(..)`, `Name {`,
/// `Name = 1`) declared at the start of `line`.
fn member(line: &str) -> Option<&str> {
    let mut t = line.trim_start();
    for vis in ["pub(crate) ", "pub(super) ", "pub "] {
        t = t.strip_prefix(vis).unwrap_or(t);
    }
    let name = idents(t).into_iter().next().filter(|n| t.starts_with(n))?;
    let rest = &t[name.len()..];
    let field = rest.starts_with(':') && !rest.starts_with("::");
    let upper = name.starts_with(|c: char| c.is_uppercase());
    let variant =
        upper && (rest.is_empty() || [",", "(", " {", " ="].iter().any(|p| rest.starts_with(p)));
    (field || variant).then_some(name)
}

fn scan(rel: String, krate: String, text: &str) -> File {
    let mut defs = BTreeSet::new();
    let mut names = BTreeSet::new();
    let p = Path::new(&rel);
    let under_src = rel.split("/src/").nth(1).unwrap_or("");
    for part in Path::new(under_src).with_extension("").iter() {
        let s = part.to_string_lossy();
        if !["mod", "lib", "main"].contains(&s.as_ref()) {
            names.insert(s.into_owned());
        }
    }
    let _ = p;
    let mut reexport = false;
    for raw in text.lines() {
        let line = raw.split("//").next().unwrap_or("");
        let t = line.trim_start();
        if t.starts_with("pub use ") || t.starts_with("pub(crate) use ") {
            reexport = true;
        }
        let toks = idents(line);
        if reexport {
            defs.extend(toks.iter().map(|s| s.to_string()));
            reexport = !line.contains(';');
            continue;
        }
        for w in toks.windows(2) {
            if DEF_KW.contains(&w[0]) {
                defs.insert(w[1].to_string());
                if ["struct", "enum", "trait", "type", "union", "mod"].contains(&w[0]) {
                    names.insert(w[1].to_string());
                }
            }
        }
        if toks.first() == Some(&"impl") || t.starts_with("impl<") {
            let head = line.split('{').next().unwrap_or("");
            names.extend(idents(head).iter().map(|s| s.to_string()));
        }
        if let Some(m) = member(line) {
            defs.insert(m.to_string());
        }
    }
    File {
        rel,
        krate,
        defs,
        names,
    }
}

impl Defs {
    /// Indexes every Rust file under `crates/` and `fuzz/`.
    pub fn load() -> Defs {
        let root = repo();
        let mut files = Vec::new();
        let mut crates = HashMap::new();
        for top in ["crates", "fuzz"] {
            for f in rust_files(&root.join(top)) {
                let rel = f
                    .strip_prefix(&root)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned();
                let parts: Vec<&str> = rel.split('/').collect();
                let krate = if parts[0] == "crates" {
                    crates.insert(parts[2].to_string(), parts[..3].join("/"));
                    parts[..3].join("/")
                } else {
                    "fuzz".to_string()
                };
                let text = std::fs::read_to_string(&f).unwrap();
                files.push(scan(rel, krate, &text));
            }
        }
        Defs { files, crates }
    }

    /// Whether `name` is a crate's folder name (`sys`, `hv`).
    pub fn is_crate(&self, name: &str) -> bool {
        self.crates.contains_key(name)
    }

    /// The crates' folders, `crates/<group>/<name>`.
    pub fn crate_dirs(&self) -> Vec<String> {
        let mut v: Vec<String> = self.crates.values().cloned().collect();
        v.sort();
        v
    }

    /// Whether `name` is defined in one of `paths` (files, or folders
    /// holding them); true when none of them is Rust.
    pub fn defined_in(&self, name: &str, paths: &[String]) -> bool {
        let inside = |f: &File| {
            paths
                .iter()
                .any(|p| f.rel == *p || f.rel.starts_with(&format!("{}/", p.trim_end_matches('/'))))
        };
        let mut any = false;
        for f in self.files.iter().filter(|f| inside(f)) {
            any = true;
            if f.defs.contains(name) {
                return true;
            }
        }
        !any
    }

    /// Checks a qualified symbol (`Type::item`, `crate::module::item`):
    /// some file of its crate, module or type defines the last segment.
    /// A symbol whose first segment names nothing of the workspace is
    /// someone else's and passes unchecked (`Ok(false)`).
    pub fn qualified(&self, segs: &[String]) -> Result<bool, String> {
        let (name, quals) = segs.split_last().unwrap();
        if ["Self", "self", "crate", "super", "std", "core", "alloc"].contains(&quals[0].as_str()) {
            return Ok(false);
        }
        let krate = self.crates.get(&quals[0]);
        let inner = if krate.is_some() { &quals[1..] } else { quals };
        let in_crate = |f: &&File| krate.is_none_or(|k| &f.krate == k);
        let named = |f: &&File| inner.last().is_none_or(|q| f.names.contains(q));
        if krate.is_none() && !self.files.iter().any(|f| f.names.contains(&quals[0])) {
            return Ok(false);
        }
        let scope: Vec<&File> = self.files.iter().filter(in_crate).filter(named).collect();
        if scope.iter().any(|f| f.defs.contains(name)) {
            return Ok(true);
        }
        let q = quals.join("::");
        Err(if scope.is_empty() {
            format!("no file defines or implements `{q}`")
        } else {
            let mut where_: Vec<&str> = scope.iter().map(|f| f.rel.as_str()).collect();
            where_.truncate(4);
            format!("`{name}` is not defined for `{q}` ({})", where_.join(", "))
        })
    }
}
