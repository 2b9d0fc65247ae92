//! Shell completions and man pages, generated from the command's own clap
//! definition, so every subcommand and flag appears in them as it is added.

use anyhow::{Context, Result};
use clap::CommandFactory;
use clap_complete::Shell;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The completion script for `shell`.
pub fn completions(shell: Shell) -> Vec<u8> {
    let mut cmd = without_hidden(&crate::Cli::command());
    let name = cmd.get_name().to_string();
    let mut out = Vec::new();
    clap_complete::generate(shell, &mut cmd, name, &mut out);
    out
}

/// Writes `bytes` to stdout; a reader that went away early (`| head`) is
/// not an error.
pub fn print(bytes: &[u8]) -> Result<()> {
    match std::io::stdout().lock().write_all(bytes) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(e).context("writing to stdout"),
        _ => Ok(()),
    }
}

/// `cmd` without its hidden subcommands (clap_complete would offer them):
/// clap cannot remove a subcommand, so this copies what completions use.
fn without_hidden(cmd: &clap::Command) -> clap::Command {
    fn any_hidden(cmd: &clap::Command) -> bool {
        cmd.get_subcommands()
            .any(|s| s.is_hide_set() || any_hidden(s))
    }
    if !any_hidden(cmd) {
        return cmd.clone();
    }
    let subs = cmd.get_subcommands().filter(|s| !s.is_hide_set());
    let mut out = clap::Command::new(cmd.get_name().to_string())
        .args(cmd.get_arguments().cloned())
        .groups(cmd.get_groups().cloned())
        .visible_aliases(cmd.get_visible_aliases().map(str::to_string))
        .subcommands(subs.map(without_hidden));
    if let Some(v) = cmd.get_version() {
        out = out.version(v.to_string());
    }
    if let Some(a) = cmd.get_about() {
        out = out.about(a.clone());
    }
    if let Some(a) = cmd.get_long_about() {
        out = out.long_about(a.clone());
    }
    out
}

/// The command as the man pages describe it: built (so subcommands know
/// their full names, `splitnet-up`), without clap's `help` subcommand.
fn for_man(cmd: clap::Command) -> clap::Command {
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// The visible subcommands, depth first: the ones with a man page of their own.
fn visible(cmd: &clap::Command) -> Vec<clap::Command> {
    let mut all = Vec::new();
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        all.push(sub.clone());
        all.extend(visible(sub));
    }
    all
}

/// A page's header: the command and its version as the source, and the date
/// of generation (or of SOURCE_DATE_EPOCH, for reproducible builds).
fn man(page: clap::Command) -> clap_mangen::Man {
    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        });
    clap_mangen::Man::new(page)
        .source(concat!("splitnet ", env!("CARGO_PKG_VERSION")))
        .date(iso_date(secs / 86_400))
}

/// YYYY-MM-DD of a day counted from 1970-01-01 (the proleptic Gregorian
/// calendar, by 400-year eras of 146,097 days).
fn iso_date(days: u64) -> String {
    let days = days + 719_468; // from 0000-03-01
    let era = days / 146_097;
    let doe = days % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153; // months from March
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = era * 400 + yoe + u64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

/// The main page, `splitnet.1`.
pub fn man_page() -> Result<Vec<u8>> {
    let mut out = Vec::new();
    man(for_man(crate::Cli::command()))
        .render(&mut out)
        .context("rendering the man page")?;
    Ok(out)
}

/// Writes `splitnet.1` and one page per visible subcommand (`splitnet-up.1`,
/// ...) into `dir`, creating it; returns the files written.
pub fn man_pages(dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let cmd = for_man(crate::Cli::command());
    let mut pages = vec![cmd.clone()];
    pages.extend(visible(&cmd));
    pages
        .into_iter()
        .map(|page| {
            let man = man(page);
            let path = dir.join(man.get_filename());
            let mut text = Vec::new();
            man.render(&mut text)
                .with_context(|| format!("rendering {}", path.display()))?;
            std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
            Ok(path)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::{Command, Stdio};

    fn cli() -> clap::Command {
        crate::Cli::command()
    }

    fn script(shell: Shell) -> String {
        String::from_utf8(completions(shell)).unwrap()
    }

    /// Runs `prog args` with `input` on stdin; None when `prog` is not installed.
    fn run_with_input(prog: &str, args: &[&str], input: &str) -> Option<std::process::Output> {
        let mut child = match Command::new(prog)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
            Err(e) => panic!("running {prog}: {e}"),
        };
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        Some(child.wait_with_output().unwrap())
    }

    fn visible_names() -> Vec<String> {
        let names: Vec<String> = cli()
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .map(|s| s.get_name().to_string())
            .collect();
        assert!(names.iter().any(|n| n == "up") && names.iter().any(|n| n == "man"));
        names
    }

    #[test]
    fn bash_completion_names_every_visible_subcommand_and_parses() {
        let text = script(Shell::Bash);
        for name in visible_names() {
            assert!(text.contains(&name), "bash completion lacks {name}");
        }
        assert!(
            !text.contains("forwarder"),
            "bash offers a hidden subcommand"
        );
        let out = run_with_input("bash", &["-n"], &text).expect("bash is installed");
        assert!(
            out.status.success(),
            "bash -n rejects the completion script: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    #[test]
    fn other_shells_get_a_script() {
        for (shell, checker) in [
            (Shell::Zsh, Some("zsh")),
            (Shell::Fish, Some("fish")),
            (Shell::Elvish, None),
            (Shell::PowerShell, None),
        ] {
            let text = script(shell);
            assert!(text.contains("network-attach"), "{shell} script: {text}");
            // The hidden forwarder's flag: hidden subcommands are left out.
            assert!(
                !text.contains("--tap") && !text.contains("-l tap"),
                "{shell} offers a hidden subcommand"
            );
            // Syntax-check where the shell happens to be installed.
            if let Some(out) = checker.and_then(|c| run_with_input(c, &["-n"], &text)) {
                assert!(
                    out.status.success(),
                    "{shell} -n rejects its script: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }

    /// Renders a page with groff as `man` does; panics on any warning.
    fn render(page: &Path) -> String {
        let text = std::fs::read_to_string(page).unwrap();
        let out = run_with_input("groff", &["-man", "-Tutf8", "-ww"], &text)
            .expect("groff is needed to check the man pages (scripts/setup.sh installs man-db)");
        let errors = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success() && errors.trim().is_empty(),
            "groff on {}: {errors}",
            page.display()
        );
        if let Some(lint) = run_with_input("mandoc", &["-T", "lint", "-W", "error"], &text) {
            assert!(
                lint.status.success(),
                "mandoc -T lint on {}: {}",
                page.display(),
                String::from_utf8_lossy(&lint.stdout)
            );
        }
        // groff's terminal output overstrikes bold and underlined text.
        let shown = String::from_utf8_lossy(&out.stdout).replace(['\u{2010}', '\u{2212}'], "-");
        let mut plain = String::new();
        let mut chars = shown.chars().peekable();
        while let Some(c) = chars.next() {
            if chars.peek() == Some(&'\u{8}') {
                chars.next();
                continue;
            }
            plain.push(c);
        }
        plain
    }

    #[test]
    fn dates() {
        assert_eq!(iso_date(0), "1970-01-01");
        assert_eq!(iso_date(59), "1970-03-01");
        assert_eq!(iso_date(11_016), "2000-02-29");
        assert_eq!(iso_date(20_000), "2024-10-04");
    }

    /// The page of `sub` (under `parent`) and of each visible subcommand
    /// of it, each checked to show every visible flag; their paths.
    fn pages_show_their_flags(dir: &Path, parent: &str, sub: &clap::Command) -> Vec<PathBuf> {
        let name = format!("{parent}-{}", sub.get_name());
        let page = dir.join(format!("{name}.1"));
        let shown = render(&page);
        for arg in sub.get_arguments().filter(|a| !a.is_hide_set()) {
            let flag = match (arg.get_long(), arg.get_short()) {
                (Some(long), _) => format!("--{long}"),
                (None, Some(short)) => format!("-{short}"),
                (None, None) => match arg.get_value_names() {
                    Some([name, ..]) => name.to_string(),
                    _ => arg.get_id().to_string().to_uppercase(),
                },
            };
            assert!(
                shown.contains(&flag),
                "{} lacks {flag}:\n{shown}",
                page.display()
            );
        }
        let mut pages = vec![page];
        for nested in sub.get_subcommands().filter(|s| !s.is_hide_set()) {
            pages.extend(pages_show_their_flags(dir, &name, nested));
        }
        pages
    }

    #[test]
    fn man_pages_render_and_show_every_flag() {
        let dir = std::env::temp_dir().join(format!("splitnet-man-{}", std::process::id()));
        let written = man_pages(&dir).unwrap();
        let main = render(&dir.join("splitnet.1"));
        assert!(main.contains("--run-dir"), "{main}");
        let mut expected = vec![dir.join("splitnet.1")];
        for sub in cli().get_subcommands().filter(|s| !s.is_hide_set()) {
            assert!(
                main.contains(sub.get_name()),
                "splitnet.1 lacks {}",
                sub.get_name()
            );
            expected.extend(pages_show_their_flags(&dir, "splitnet", sub));
        }
        for hidden in ["hv", "domain", "forwarder", "help"] {
            assert!(!dir.join(format!("splitnet-{hidden}.1")).exists());
        }
        expected.sort();
        let mut written = written;
        written.sort();
        assert_eq!(written, expected);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
