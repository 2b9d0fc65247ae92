//! The seeds report without running a benchmark (no namespaces): `splitnet
//! bench seeds --from` on the committed runs, and a report of fixed figures
//! that headless chromium shows with every chart whole and no label cut off.

use bench::plot::{self, Bar, Grouped, Series, Stacked, Sweep};
use bench::seeds::{Failure, Figure, Kind, Saved, Seed};
use std::path::{Path, PathBuf};
use std::process::Command;

fn long(s: &str) -> String {
    format!("{s}, a label long enough that fixed margins would have cut it off")
}

/// One figure of each chart form, with long labels everywhere.
fn fixture() -> Saved {
    let lines = plot::lines(&Sweep {
        title: long("Throughput against send size"),
        x_label: "send size (bytes)".into(),
        y_label: "Mbit/s".into(),
        log2_x: true,
        integer_x: false,
        log10_y: false,
        paper: vec![Series {
            name: long("paper"),
            points: vec![(4096.0, 64.0)],
        }],
        series: ["native", "unoptimized", "optimized"]
            .iter()
            .enumerate()
            .map(|(i, n)| Series {
                name: long(n),
                points: (9..=16)
                    .map(|p| (f64::from(1u32 << p), 30.0 * i as f64 + f64::from(p)))
                    .collect(),
            })
            .collect(),
    });
    let grouped = plot::grouped(&Grouped {
        title: "Guest-* configurations, TX".into(),
        y_label: "ratio to native".into(),
        groups: vec!["TX".into(), long("RX")],
        series: vec!["Guest-none".into(), long("Guest-high-ioc-sp")],
        values: vec![vec![Some(0.2), Some(0.3)], vec![Some(0.85), None]],
        paper: vec![(1, 0, 0.88)],
        reference: Some(1.0),
    });
    let stacked = plot::stacked(&Stacked {
        title: "Cycles per frame by domain".into(),
        y_label: "cycles per frame".into(),
        bars: vec!["native".into(), long("Orig")],
        classes: vec!["driver".into(), long("guest")],
        values: vec![vec![2900.0, 0.0], vec![5268.0, 5515.0]],
        paper: vec![(1, 13165.0)],
    });
    let bars = plot::hbars(
        &long("scp into the guest"),
        "KB/s",
        &long("medians"),
        &[Bar {
            label: long("event-driven"),
            value: 4000.0,
            range: Some((3500.0, 4200.0)),
        }],
    );
    let fig = |seed, id, kind, svg| {
        let mut f = Figure::new(
            seed,
            id,
            kind,
            "| a | b |\n|---|---|\n| 1 | 2 |\n".into(),
            svg,
        );
        f.ours.push(bench::seeds::Measure::point("ours only", 1.5));
        f
    };
    Saved {
        figures: vec![
            fig(Seed::Sugerman, "Figure 6", Kind::Lines, lines),
            fig(Seed::Menon2006, "Figure 5", Kind::Grouped, grouped),
            fig(Seed::Ram, "Figure 2.4", Kind::Stacked, stacked),
            fig(Seed::ZhangDong, "Table 9", Kind::Bars, bars),
        ],
        failures: vec![Failure {
            suite: "menon2005".into(),
            error: "not run in this test".into(),
        }],
    }
}

/// Marks every SVG text whose box leaves its SVG's box, into `#clip-check`.
const CHECK: &str = r#"<script>
(function () {
  const out = [];
  let texts = 0;
  document.querySelectorAll('svg').forEach(function (svg, i) {
    const s = svg.getBoundingClientRect();
    svg.querySelectorAll('text').forEach(function (t) {
      texts++;
      const b = t.getBoundingClientRect();
      if (b.width === 0 || b.left < s.left - 0.5 || b.right > s.right + 0.5 ||
          b.top < s.top - 0.5 || b.bottom > s.bottom + 0.5) {
        out.push('clipped svg ' + i + ': ' + t.textContent.trim());
      }
    });
  });
  const pre = document.createElement('pre');
  pre.id = 'clip-check';
  pre.textContent = 'svgs ' + document.querySelectorAll('svg').length + ' texts ' + texts +
    '\n' + out.join('\n');
  document.body.appendChild(pre);
})();
</script>"#;

fn chromium() -> Option<PathBuf> {
    ["chromium", "chromium-browser"].iter().find_map(|c| {
        let ok = Command::new(c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        ok.then(|| PathBuf::from(c))
    })
}

/// Runs headless chromium on `page` with `args`; its stdout.
fn headless(exe: &Path, profile: &Path, args: &[String], page: &Path) -> String {
    let out = Command::new(exe)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("running chromium");
    assert!(
        out.status.success(),
        "chromium {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `bench seeds --from` reads the reports the suites saved (here the
/// committed runs under docs/results) and renders all 58 entries.
#[test]
fn seeds_from_saved_reports_writes_the_whole_report() {
    let dir = std::env::temp_dir().join(format!("splitnet-seeds-from-{}", std::process::id()));
    let results = concat!(env!("CARGO_MANIFEST_DIR"), "/../../../docs/results");
    let run = Command::new(env!("CARGO_BIN_EXE_splitnet"))
        .args([
            "--run-dir",
            dir.join("run").to_str().unwrap(),
            "bench",
            "seeds",
            "--from",
            results,
            "--out",
        ])
        .arg(dir.join("out"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let count = |s: &str| -> usize {
        let line = stdout
            .lines()
            .find(|l| l.trim_start().starts_with(&format!("{s}:")))
            .unwrap();
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    let all: usize = [
        "reproduced",
        "partly",
        "not reproduced",
        "not measurable here",
        "out of scope",
        "missing",
    ]
    .map(count)
    .iter()
    .sum();
    assert_eq!(all, 58, "{stdout}");
    assert!(
        count("reproduced") + count("partly") + count("not reproduced") > 0,
        "the committed runs are judged: {stdout}"
    );
    let md = std::fs::read_to_string(dir.join("out/README.md")).unwrap();
    assert!(!md.contains("failed"), "every committed report reads: {md}");
    assert!(dir.join("out/sugerman2001-figure-6.svg").is_file());
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../..");
    let committed = std::fs::read_to_string(root.join("docs/results/seeds/README.md")).unwrap();
    assert!(
        committed == md,
        "docs/results/seeds/README.md is not what the rubric computes from the committed runs \
         (a status typed by hand, or a run or rule changed without regenerating): run \
         `splitnet bench seeds --from docs/results --out docs/results/seeds`"
    );
    let results = std::fs::read_to_string(root.join("docs/RESULTS.md")).unwrap();
    for st in [
        "reproduced",
        "partly",
        "not reproduced",
        "not measurable here",
        "out of scope",
        "missing",
    ] {
        let row = format!("| {st} | {} |", count(st));
        assert!(
            results.contains(&row),
            "docs/RESULTS.md's status table should say `{row}`, as the report does"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_report_renders_every_chart_with_no_label_cut_off() {
    let dir = std::env::temp_dir().join(format!("splitnet-seeds-report-{}", std::process::id()));
    let out = dir.join("out");
    bench::seeds::write(&out, &fixture()).unwrap();
    let html = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert_eq!(html.matches("<svg").count(), 4);
    let md = std::fs::read_to_string(out.join("README.md")).unwrap();
    assert!(
        md.contains("`splitnet bench menon2005` failed: not run in this test"),
        "{md}"
    );
    let out_of_scope = bench::seeds::catalog()
        .iter()
        .filter(|e| {
            matches!(
                e.scope,
                bench::seeds::Scope::OutOfScope(_) | bench::seeds::Scope::OutOfScopeMeasured(..)
            )
        })
        .count();
    assert!(
        md.contains(&format!("| out of scope | {out_of_scope} |")),
        "{md}"
    );
    for svg in [
        "sugerman2001-figure-6.svg",
        "menon2006-figure-5.svg",
        "ram-figure-2-4.svg",
        "zhang-dong-table-9.svg",
    ] {
        assert!(out.join(svg).is_file(), "{svg}");
        assert!(md.contains(&format!("]({svg})")), "README links {svg}");
    }

    let Some(exe) = chromium() else {
        assert!(
            std::env::var_os("SPLITNET_CI").is_none(),
            "chromium is missing; scripts/setup.sh installs it"
        );
        eprintln!("SKIPPED the browser half: no chromium (scripts/setup.sh installs it)");
        return;
    };
    let checked = out.join("check.html");
    std::fs::write(
        &checked,
        html.replace("</body>", &format!("{CHECK}</body>")),
    )
    .unwrap();
    let profile = dir.join("chromium");
    let dom = headless(
        &exe,
        &profile,
        &["--dump-dom".into(), "--virtual-time-budget=5000".into()],
        &checked,
    );
    let check = dom
        .split("<pre id=\"clip-check\">")
        .nth(1)
        .and_then(|s| s.split("</pre>").next())
        .unwrap_or_else(|| panic!("no #clip-check in the DOM:\n{dom}"));
    let mut lines = check.lines();
    let head = lines.next().unwrap();
    assert!(head.starts_with("svgs 4 texts "), "{head}");
    let texts: usize = head.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(texts > 40, "every chart has its labels: {head}");
    let clipped: Vec<&str> = lines.filter(|l| !l.is_empty()).collect();
    assert!(
        clipped.is_empty(),
        "labels cut off:\n{}",
        clipped.join("\n")
    );

    let shot = |page: &Path, name: &str| {
        let png = dir.join(name);
        let args = [
            format!("--screenshot={}", png.display()),
            "--window-size=1300,2400".into(),
        ];
        headless(&exe, &profile, &args, page);
        let bytes = std::fs::read(&png).unwrap_or_else(|e| panic!("{}: {e}", png.display()));
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{name} is a PNG");
        bytes.len()
    };
    let blank_page = dir.join("blank.html");
    std::fs::write(&blank_page, "<!DOCTYPE html><html><body></body></html>").unwrap();
    let (report, blank) = (
        shot(&out.join("index.html"), "report.png"),
        shot(&blank_page, "blank.png"),
    );
    assert!(
        report > 10 * blank,
        "the screenshot is not blank: {report} bytes against a blank page's {blank}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
