//! `splitnet completions` and `splitnet man` as a user runs them (no
//! namespaces needed); what they generate is checked in src/docs.rs.

use std::process::Command;

fn splitnet(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_splitnet"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "splitnet {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn completions_print_a_script_per_shell() {
    let bash = String::from_utf8(splitnet(&["completions", "bash"]).stdout).unwrap();
    assert!(bash.contains("complete -F _splitnet"), "{bash}");
    for shell in ["zsh", "fish", "elvish", "powershell"] {
        assert!(
            !splitnet(&["completions", shell]).stdout.is_empty(),
            "{shell}"
        );
    }
    let bad = Command::new(env!("CARGO_BIN_EXE_splitnet"))
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("possible values"));
}

#[test]
fn man_writes_the_pages() {
    let page = String::from_utf8(splitnet(&["man"]).stdout).unwrap();
    assert!(page.contains(".TH splitnet 1"), "{page}");
    let dir = std::env::temp_dir().join(format!("splitnet-man-cli-{}", std::process::id()));
    let out = splitnet(&["man", "--out", dir.to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("man pages into"));
    for name in [
        "splitnet.1",
        "splitnet-up.1",
        "splitnet-status.1",
        "splitnet-man.1",
    ] {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        assert!(text.starts_with(".ie"), "{name}: {text}");
    }
    assert!(!dir.join("splitnet-hv.1").exists());
    std::fs::remove_dir_all(&dir).unwrap();
}
