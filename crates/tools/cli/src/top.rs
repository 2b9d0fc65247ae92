//! `splitnet top`: draws the view of the status document ([`view`]) as
//! plain-text frames or, on a terminal, with ratatui.

mod view;

use anyhow::{bail, Context, Result};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table as TableWidget};
use std::io::IsTerminal;
use std::path::Path;
use std::time::{Duration, Instant};
use view::{view, Sample, Table, View};

/// What `splitnet top` was asked for.
pub struct TopArgs {
    /// Seconds between frames.
    pub delay: f64,
    /// Plain-text frames on stdout instead of the interactive view.
    pub batch: bool,
    /// Stop after this many frames.
    pub iterations: Option<u64>,
}

/// `splitnet top`.
pub fn run(rd: &Path, args: &TopArgs) -> Result<()> {
    if !(args.delay >= 0.1 && args.delay <= 3600.0) {
        bail!("--delay must be between 0.1 and 3600 seconds");
    }
    if args.iterations == Some(0) {
        return Ok(());
    }
    let delay = Duration::from_secs_f64(args.delay);
    if args.batch {
        return batch(rd, delay, args.iterations);
    }
    if !std::io::stdout().is_terminal() {
        bail!("stdout is not a terminal: use `splitnet top --batch` for plain-text frames");
    }
    // Reach hv before taking over the terminal, so the error reads plainly.
    let first = Sample::take(rd)?;
    interactive(rd, delay, args.iterations, first)
}

fn batch(rd: &Path, delay: Duration, iterations: Option<u64>) -> Result<()> {
    use std::io::Write;
    let mut prev: Option<Sample> = None;
    let mut n = 0;
    loop {
        let started = Instant::now();
        let cur = Sample::take(rd)?;
        let v = view(prev.as_ref(), &cur, false);
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "{}{}\n\n{}\n\n{}",
            if n > 0 { "\n" } else { "" },
            v.header,
            v.domains.text(),
            v.links.text()
        )?;
        out.flush()?;
        n += 1;
        if iterations.is_some_and(|i| n >= i) {
            return Ok(());
        }
        prev = Some(cur);
        std::thread::sleep(delay.saturating_sub(started.elapsed()));
    }
}

/// Puts the terminal back however the view ends (error or panic included:
/// `ratatui::init` also hooks panics).
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

fn interactive(rd: &Path, delay: Duration, iterations: Option<u64>, first: Sample) -> Result<()> {
    let _restore = Restore;
    let mut term = ratatui::try_init().context("setting up the terminal")?;
    let mut prev: Option<Sample> = None;
    let mut cur = first;
    let mut n = 0;
    loop {
        let v = view(prev.as_ref(), &cur, true);
        term.draw(|f| draw(f, &v))?;
        n += 1;
        if iterations.is_some_and(|i| n >= i) {
            return Ok(());
        }
        let next = cur.at + delay;
        // Keys until the next sample is due; a resize redraws at once.
        loop {
            let left = next.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if !event::poll(left)? {
                continue;
            }
            match event::read()? {
                Event::Key(k) if k.kind != KeyEventKind::Release => {
                    let ctrl_c =
                        k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL);
                    if matches!(k.code, KeyCode::Char('q' | 'Q') | KeyCode::Esc) || ctrl_c {
                        return Ok(());
                    }
                }
                Event::Resize(..) => {
                    term.draw(|f| draw(f, &v))?;
                }
                _ => {}
            }
        }
        let s = Sample::take(rd)?;
        prev = Some(std::mem::replace(&mut cur, s));
    }
}

fn draw(f: &mut ratatui::Frame<'_>, v: &View) {
    let [head, doms, links, foot] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(v.domains.rows.len() as u16 + 3),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(f.area());
    f.render_widget(Paragraph::new(v.header.as_str()), head);
    f.render_widget(widget(&v.domains, " domains "), doms);
    f.render_widget(
        widget(
            &v.links,
            " vifs and ports (TX: guest → network, port → wire) ",
        ),
        links,
    );
    f.render_widget(
        Paragraph::new(Line::from("q or Esc: quit"))
            .style(Style::new().add_modifier(Modifier::DIM)),
        foot,
    );
}

fn widget<'a>(t: &'a Table, title: &'a str) -> TableWidget<'a> {
    let w = t.widths();
    let last = w.len().saturating_sub(1);
    let widths: Vec<Constraint> = w
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            if i == last {
                Constraint::Min(n as u16)
            } else {
                Constraint::Length(n as u16)
            }
        })
        .collect();
    let rows = t
        .rows
        .iter()
        .map(|r| Row::new(r.iter().map(String::as_str)));
    TableWidget::new(rows, widths)
        .header(Row::new(t.head.clone()).style(Style::new().add_modifier(Modifier::BOLD)))
        .block(Block::bordered().title(title))
}
