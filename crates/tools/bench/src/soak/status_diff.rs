//! What the soak reads from the host and hv to set the end against the
//! start: the `splitnet-*` namespaces, and every counter in `status
//! --json`, by path.

use super::Lab;
use anyhow::Result;
use serde_json::Value;
use std::collections::BTreeMap;

/// The `splitnet-*` network namespaces that exist.
pub fn namespaces() -> Result<Vec<String>> {
    let prefix = toolstack::host::prefix();
    let mut v: Vec<String> = std::fs::read_dir("/run/netns")?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    v.sort();
    Ok(v)
}

/// `splitnet status --json`.
pub fn status_json(lab: &Lab) -> Result<Value> {
    let text = crate::splitnet(&lab.exe, &lab.run_dir, &["status", "--json"])?;
    Ok(serde_json::from_str(&text)?)
}

/// Every number of `v` by path, array elements by their `name` (a vif
/// by its guest and handle).
fn flatten(v: &Value, path: String, out: &mut BTreeMap<String, f64>) {
    match v {
        Value::Number(n) => {
            if let Some(x) = n.as_f64() {
                out.insert(path, x);
            }
        }
        Value::Object(m) => {
            for (k, x) in m {
                flatten(x, format!("{path}.{k}"), out);
            }
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                let key = match (&x["name"], &x["guest"]) {
                    (Value::String(n), _) => n.clone(),
                    (_, Value::String(g)) => format!("{g}/{}", x["handle"]),
                    _ => i.to_string(),
                };
                flatten(x, format!("{path}[{key}]"), out);
            }
        }
        _ => {}
    }
}

/// Identities, not counters: ids, process ids and moments.
fn identity(path: &str) -> bool {
    let last = path.rsplit('.').next().unwrap_or(path);
    matches!(
        last,
        "id" | "pid" | "hv_pid" | "backend" | "guest" | "domid"
    ) || last.ends_with("_id")
        || last.contains("uptime")
        || last.contains("since")
}

/// Every counter that moved between two `status --json`.
pub fn moved(a: &Value, b: &Value) -> Vec<(String, f64, f64)> {
    let (mut x, mut y) = (BTreeMap::new(), BTreeMap::new());
    flatten(a, String::new(), &mut x);
    flatten(b, String::new(), &mut y);
    y.iter()
        .filter(|(k, _)| !identity(k))
        .filter_map(|(k, &after)| {
            let before = x.get(k).copied().unwrap_or(0.0);
            (before != after).then(|| (k.trim_start_matches('.').to_string(), before, after))
        })
        .collect()
}
