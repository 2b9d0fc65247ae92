//! Charts for results pages, drawn with `plotters` into SVG: lines against
//! a swept variable, grouped bars of ratios, stacked bars of cycles by
//! class, and plain horizontal bars.
//!
//! Every label is laid out before drawing: the canvas and its margins are
//! sized from the longest text, estimated as characters × font size ×
//! [`CHAR_EM`], so no label is cut off whatever the data.

use plotters::coord::types::RangedCoordf64;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

/// Text size in pixels as plotters takes it (it writes `size / 1.24` as the
/// SVG font size).
const TEXT: f64 = 15.0;
/// The title's size, as [`TEXT`].
const TITLE: f64 = 19.0;
/// A generous average glyph width of a sans-serif font, in ems; wide
/// capitals and digits stay under it.
pub const CHAR_EM: f64 = 0.62;
const MARGIN: u32 = 14;
const PALETTE: [RGBColor; 14] = [
    RGBColor(0x4c, 0x78, 0xa8),
    RGBColor(0xf5, 0x85, 0x18),
    RGBColor(0x54, 0xa2, 0x4b),
    RGBColor(0xe4, 0x57, 0x56),
    RGBColor(0x72, 0xb7, 0xb2),
    RGBColor(0xb2, 0x79, 0xa2),
    RGBColor(0xee, 0xca, 0x3b),
    RGBColor(0x9d, 0x75, 0x5d),
    RGBColor(0xba, 0xb0, 0xac),
    RGBColor(0x43, 0x3e, 0x85),
    RGBColor(0x17, 0xbe, 0xcf),
    RGBColor(0xbc, 0xbd, 0x22),
    RGBColor(0xff, 0x9d, 0xa6),
    RGBColor(0x6b, 0x6e, 0xcf),
];

/// The width `s` takes at plotters size `size`, by the estimate above.
pub fn text_width(s: &str, size: f64) -> f64 {
    s.chars().count() as f64 * size / 1.24 * CHAR_EM
}

fn colour(i: usize) -> RGBColor {
    PALETTE[i % PALETTE.len()]
}

/// A number as a tick or value label: no more digits than it needs, and
/// a small value to two significant digits, so none reads as 0.00.
pub fn num(v: f64) -> String {
    let a = v.abs();
    if a >= 100.0 || (a - a.round()).abs() < 1e-9 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 0.1 {
        format!("{v:.2}")
    } else {
        let digits = (1.0 - a.log10().floor()) as usize;
        format!("{v:.digits$}")
    }
}

fn widest<'a>(texts: impl IntoIterator<Item = &'a str>, size: f64) -> f64 {
    texts
        .into_iter()
        .map(|t| text_width(t, size))
        .fold(0.0, f64::max)
}

/// One line of a [`Sweep`]: (x, y) points in x order.
#[derive(Debug, Clone)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

/// Lines against a swept variable (send size, buffer size, NICs), one per
/// series, with a legend beside the plot.
#[derive(Debug, Clone)]
pub struct Sweep {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    /// Powers of two on the x axis (sizes in bytes).
    pub log2_x: bool,
    /// Whole numbers only on the x axis (counts such as NICs).
    pub integer_x: bool,
    /// Powers of ten on the y axis, for lines orders of magnitude apart.
    pub log10_y: bool,
    pub series: Vec<Series>,
    /// The paper's lines, drawn dashed in black beside ours.
    pub paper: Vec<Series>,
}

/// Bars of one value per (series, group), the series side by side in each
/// group: configurations and peers per direction or case.
#[derive(Debug, Clone)]
pub struct Grouped {
    pub title: String,
    pub y_label: String,
    pub groups: Vec<String>,
    pub series: Vec<String>,
    /// `values[series][group]`; `None` leaves a gap.
    pub values: Vec<Vec<Option<f64>>>,
    /// The paper's value for (series, group), drawn as a black marker.
    pub paper: Vec<(usize, usize, f64)>,
    /// A dashed reference line (1.0 for ratios to native).
    pub reference: Option<f64>,
}

/// Stacked bars: one bar per label, one segment per class.
#[derive(Debug, Clone)]
pub struct Stacked {
    pub title: String,
    pub y_label: String,
    pub bars: Vec<String>,
    pub classes: Vec<String>,
    /// `values[bar][class]`.
    pub values: Vec<Vec<f64>>,
    /// The paper's total for a bar, drawn as a black marker across it.
    pub paper: Vec<(usize, f64)>,
}

/// One horizontal bar: a label, a value and an optional whisker range.
#[derive(Debug, Clone)]
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub range: Option<(f64, f64)>,
}

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;
type Drawn = Result<(), Box<dyn std::error::Error>>;

/// Draws on a `w`×`h` canvas; a drawing error becomes an SVG that says so.
fn render(w: f64, h: f64, draw: impl FnOnce(&Area) -> Drawn) -> String {
    let (w, h) = (w.ceil() as u32, h.ceil() as u32);
    let mut out = String::new();
    let res = {
        let root = SVGBackend::with_string(&mut out, (w, h)).into_drawing_area();
        root.fill(&WHITE)
            .map_err(Into::into)
            .and_then(|()| draw(&root))
            .and_then(|()| root.present().map_err(Into::into))
    };
    match res {
        Ok(()) => out,
        Err(e) => format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"60\" \
             viewBox=\"0 0 {w} 60\"><text x=\"10\" y=\"30\" font-size=\"12\">chart failed: {}</text></svg>",
            e.to_string().replace('&', "&amp;").replace('<', "&lt;")
        ),
    }
}

/// A bar's value label: small, centred above the point it labels.
fn value_style() -> TextStyle<'static> {
    style(TEXT * 0.7).pos(Pos::new(HPos::Center, VPos::Bottom))
}

fn style(size: f64) -> TextStyle<'static> {
    ("sans-serif", size).into_font().color(&BLACK)
}

/// The legend, top-left at (x, y): a swatch and a name per entry.
fn legend(root: &Area, x: i32, y: i32, entries: &[(String, RGBColor)]) -> Drawn {
    let row = (TEXT * 1.4) as i32;
    for (i, (name, c)) in entries.iter().enumerate() {
        let y = y + row * i as i32;
        root.draw(&Rectangle::new([(x, y + 3), (x + 14, y + 15)], c.filled()))?;
        let pos = Pos::new(HPos::Left, VPos::Center);
        root.draw(&Text::new(
            name.clone(),
            (x + 20, y + 9),
            style(TEXT).pos(pos),
        ))?;
    }
    Ok(())
}

/// The legend's width and height for `names`.
fn legend_size<'a>(names: impl IntoIterator<Item = &'a str>) -> (f64, f64) {
    let names: Vec<&str> = names.into_iter().collect();
    (
        widest(names.iter().copied(), TEXT) + 20.0 + 2.0 * MARGIN as f64,
        TEXT * 1.4 * names.len() as f64,
    )
}

/// The y axis's label area: tick labels of up to `max`, and the rotated
/// axis description.
fn y_area(max: f64) -> f64 {
    widest([num(max).as_str(), num(max / 3.0).as_str()], TEXT) + TEXT * 2.2 + 12.0
}

/// The chart's top end: a little above the largest value.
fn top(max: f64) -> f64 {
    if max > 0.0 && max.is_finite() {
        max * 1.08
    } else {
        1.0
    }
}

/// Lines against the swept variable, one per series.
pub fn lines(s: &Sweep) -> String {
    let pts = || {
        s.series
            .iter()
            .chain(&s.paper)
            .flat_map(|l| l.points.iter().copied())
    };
    let fx = |x: f64| if s.log2_x { x.max(1e-9).log2() } else { x };
    let (x0, x1) = pts().fold((f64::MAX, f64::MIN), |(a, b), (x, _)| {
        (a.min(fx(x)), b.max(fx(x)))
    });
    let (x0, x1) = if x0 < x1 { (x0, x1) } else { (0.0, 1.0) };
    let (fy, y0, ymax) = y_scale(s, pts().map(|p| p.1));
    let mut names: Vec<&str> = s.series.iter().map(|l| l.name.as_str()).collect();
    if !s.paper.is_empty() {
        names.push("paper (dashed)");
    }
    let (lw, lh) = legend_size(names.iter().copied());
    let ya = y_area(if s.log10_y { 10f64.powf(ymax) } else { ymax });
    let plot_w = 520.0_f64.max(text_width(&s.x_label, TEXT) + 20.0);
    let chart_w =
        (ya + plot_w + 2.0 * MARGIN as f64 + 20.0).max(text_width(&s.title, TITLE) + 70.0);
    let h = (TITLE * 2.0 + 320.0 + TEXT * 3.5).max(lh + TITLE * 3.0);
    let fmt_x = |v: &f64| {
        if s.log2_x {
            num(2f64.powf(*v).round())
        } else if s.integer_x && (v - v.round()).abs() > 1e-9 {
            String::new()
        } else {
            num(*v)
        }
    };
    let x_ticks = if s.integer_x {
        (x1 - x0).round() as usize + 1
    } else {
        10
    };
    render(chart_w + lw, h, |root| {
        let (left, _) = root.split_horizontally(chart_w as u32);
        let mut chart = ChartBuilder::on(&left)
            .caption(&s.title, style(TITLE))
            .margin(MARGIN)
            .margin_right(MARGIN + 20)
            .x_label_area_size((TEXT * 3.5) as u32)
            .y_label_area_size(ya as u32)
            .build_cartesian_2d(x0..x1, y0..ymax)?;
        let fmt_y = |v: &f64| num(if s.log10_y { 10f64.powf(*v) } else { *v });
        let mut mesh = chart.configure_mesh();
        mesh.light_line_style(TRANSPARENT)
            .x_desc(s.x_label.as_str())
            .y_desc(s.y_label.as_str())
            .label_style(style(TEXT))
            .axis_desc_style(style(TEXT))
            .x_labels(x_ticks)
            .x_label_formatter(&fmt_x)
            .y_label_formatter(&fmt_y);
        if s.log10_y {
            // One label per power of ten.
            mesh.y_labels((ymax - y0) as usize + 1);
        }
        mesh.draw()?;
        let entries = draw_sweep(&mut chart, s, |(x, y)| (fx(x), fy(y)))?;
        legend(
            root,
            chart_w as i32 + MARGIN as i32,
            (TITLE * 2.0) as i32,
            &entries,
        )
    })
}

/// Each series' bars with its values above them, and the paper's markers.
fn draw_groups(chart: &mut HChart<'_, '_>, g: &Grouped, ymax: f64) -> Drawn {
    let n = g.series.len().max(1);
    let bw = 0.8 / n as f64;
    let x = |s: usize, grp: usize| grp as f64 + 0.1 + bw * s as f64;
    for (s, row) in g.values.iter().enumerate() {
        let c = colour(s);
        let bars = row.iter().enumerate().filter_map(|(grp, v)| {
            v.map(|v| Rectangle::new([(x(s, grp), 0.0), (x(s, grp) + bw * 0.92, v)], c.filled()))
        });
        chart.draw_series(bars)?;
        // Each bar's value above it, so a bar too short to see still
        // says what it is.
        let labels = row.iter().enumerate().filter_map(|(grp, v)| {
            let v = (*v)?;
            let at = (x(s, grp) + bw * 0.46, v + ymax * 0.01);
            Some(Text::new(num(v), at, value_style()))
        });
        chart.draw_series(labels)?;
    }
    let marks = g.paper.iter().map(|&(s, grp, v)| {
        let (a, b) = (x(s, grp) - bw * 0.05, x(s, grp) + bw * 0.97);
        PathElement::new(vec![(a, v), (b, v)], BLACK.stroke_width(3))
    });
    chart.draw_series(marks)?;
    Ok(())
}

/// The y axis of a sweep: how a value maps onto it, and its range. On a
/// log axis the range runs over whole powers of ten around the positive
/// values (a value of 0 sits on the axis's floor).
fn y_scale(s: &Sweep, ys: impl Iterator<Item = f64>) -> (impl Fn(f64) -> f64, f64, f64) {
    let ys: Vec<f64> = ys.collect();
    let log = s.log10_y;
    if !log {
        let ymax = top(ys.iter().copied().fold(0.0, f64::max));
        return (Box::new(|y| y) as Box<dyn Fn(f64) -> f64>, 0.0, ymax);
    }
    let pos = ys.iter().copied().filter(|y| *y > 0.0);
    let (lo, hi) = pos.fold((f64::MAX, f64::MIN), |(a, b), y| (a.min(y), b.max(y)));
    let (lo, hi) = if lo <= hi { (lo, hi) } else { (1.0, 10.0) };
    let (y0, y1) = (
        lo.log10().floor(),
        hi.log10().ceil().max(lo.log10().floor() + 1.0),
    );
    (
        Box::new(move |y: f64| y.max(10f64.powf(y0)).log10()),
        y0,
        y1,
    )
}

/// A sweep's lines, ours then the paper's; the legend's entries.
fn draw_sweep(
    chart: &mut HChart<'_, '_>,
    s: &Sweep,
    at: impl Fn((f64, f64)) -> (f64, f64),
) -> Result<Vec<(String, RGBColor)>, Box<dyn std::error::Error>> {
    let at = |l: &Series| -> Vec<(f64, f64)> { l.points.iter().map(|&p| at(p)).collect() };
    for (i, l) in s.series.iter().enumerate() {
        draw_line(chart, at(l), i)?;
    }
    for l in &s.paper {
        let p = at(l);
        chart.draw_series(DashedLineSeries::new(
            p.clone(),
            8,
            5,
            BLACK.stroke_width(2),
        ))?;
        chart.draw_series(
            p.into_iter()
                .map(|q| Circle::new(q, 4, BLACK.stroke_width(1))),
        )?;
    }
    let mut entries: Vec<(String, RGBColor)> = s
        .series
        .iter()
        .enumerate()
        .map(|(i, l)| (l.name.clone(), colour(i)))
        .collect();
    if !s.paper.is_empty() {
        entries.push(("paper (dashed)".into(), BLACK));
    }
    Ok(entries)
}

/// Series `i`'s line and markers: its colour, and a marker shape (and, for
/// every other series, a dash) of its own, so lines that run on top of one
/// another stay apart.
fn draw_line(chart: &mut HChart<'_, '_>, p: Vec<(f64, f64)>, i: usize) -> Drawn {
    let c = colour(i);
    if i % 2 == 1 {
        chart.draw_series(DashedLineSeries::new(p.clone(), 10, 4, c.stroke_width(2)))?;
    } else {
        chart.draw_series(LineSeries::new(p.clone(), c.stroke_width(2)))?;
    }
    match i % 4 {
        0 => chart.draw_series(p.into_iter().map(|q| Circle::new(q, 4, c.filled())))?,
        1 => chart.draw_series(p.into_iter().map(|q| TriangleMarker::new(q, 6, c.filled())))?,
        2 => chart.draw_series(p.into_iter().map(|q| Cross::new(q, 5, c.stroke_width(2))))?,
        _ => chart.draw_series(
            p.into_iter()
                .map(|q| Rectangle::new([(q.0, q.1), (q.0, q.1)], c.stroke_width(7))),
        )?,
    };
    Ok(())
}

/// Width of one category slot (a group, a stacked bar) under its label.
fn slot(label_w: f64, inner: f64) -> f64 {
    (label_w + 16.0).max(inner)
}

/// Draws category labels under the x axis at slot centres.
fn category_labels<X, Y>(
    root: &Area,
    chart: &ChartContext<SVGBackend, Cartesian2d<X, Y>>,
    labels: &[String],
    y: Y::ValueType,
) -> Drawn
where
    X: plotters::coord::ranged1d::Ranged<ValueType = f64>,
    Y: plotters::coord::ranged1d::Ranged,
    Y::ValueType: Clone,
{
    for (i, l) in labels.iter().enumerate() {
        let (px, py) = chart.backend_coord(&(i as f64 + 0.5, y.clone()));
        let pos = Pos::new(HPos::Center, VPos::Top);
        root.draw(&Text::new(l.clone(), (px, py + 6), style(TEXT).pos(pos)))?;
    }
    Ok(())
}

/// Grouped bars of one value per (series, group), with the paper's values
/// as markers and a reference line.
pub fn grouped(g: &Grouped) -> String {
    let n = g.series.len().max(1);
    let vals = g.values.iter().flatten().flatten().copied();
    let paper = g.paper.iter().map(|p| p.2);
    let ymax = top(vals.chain(paper).chain(g.reference).fold(0.0, f64::max));
    let mut names: Vec<&str> = g.series.iter().map(String::as_str).collect();
    if !g.paper.is_empty() {
        names.push("paper");
    }
    let (lw, lh) = legend_size(names.iter().copied());
    let ya = y_area(ymax);
    let sw = slot(
        widest(g.groups.iter().map(String::as_str), TEXT),
        n as f64 * 26.0 + 20.0,
    );
    let plot_w = sw * g.groups.len().max(1) as f64;
    let chart_w = (ya + plot_w + 2.0 * MARGIN as f64).max(text_width(&g.title, TITLE) + 70.0);
    let h = (TITLE * 2.0 + 300.0 + TEXT * 2.5).max(lh + TITLE * 3.0);
    render(chart_w + lw, h, |root| {
        let (left, _) = root.split_horizontally(chart_w as u32);
        let mut chart = ChartBuilder::on(&left)
            .caption(&g.title, style(TITLE))
            .margin(MARGIN)
            .x_label_area_size((TEXT * 2.5) as u32)
            .y_label_area_size(ya as u32)
            .build_cartesian_2d(0.0..g.groups.len().max(1) as f64, 0.0..ymax)?;
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(g.y_label.as_str())
            .label_style(style(TEXT))
            .axis_desc_style(style(TEXT))
            .y_label_formatter(&|v| num(*v))
            .draw()?;
        draw_groups(&mut chart, g, ymax)?;
        if let Some(r) = g.reference {
            let end = g.groups.len().max(1) as f64;
            chart.draw_series(DashedLineSeries::new(
                vec![(0.0, r), (end, r)],
                6,
                4,
                BLACK.into(),
            ))?;
        }
        category_labels(root, &chart, &g.groups, 0.0)?;
        let mut entries: Vec<(String, RGBColor)> = g
            .series
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), colour(i)))
            .collect();
        if !g.paper.is_empty() {
            entries.push(("paper".into(), BLACK));
        }
        legend(
            root,
            chart_w as i32 + MARGIN as i32,
            (TITLE * 2.0) as i32,
            &entries,
        )
    })
}

/// Stacked bars: each bar's classes on top of one another.
pub fn stacked(st: &Stacked) -> String {
    let totals = st.values.iter().map(|b| b.iter().sum::<f64>());
    let ymax = top(totals
        .chain(st.paper.iter().map(|p| p.1))
        .fold(0.0, f64::max));
    let mut names: Vec<&str> = st.classes.iter().map(String::as_str).collect();
    if !st.paper.is_empty() {
        names.push("paper (total)");
    }
    let (lw, lh) = legend_size(names.iter().copied());
    let ya = y_area(ymax);
    let sw = slot(widest(st.bars.iter().map(String::as_str), TEXT), 60.0);
    let plot_w = sw * st.bars.len().max(1) as f64;
    let chart_w = (ya + plot_w + 2.0 * MARGIN as f64).max(text_width(&st.title, TITLE) + 70.0);
    let h = (TITLE * 2.0 + 320.0 + TEXT * 2.5).max(lh + TITLE * 3.0);
    render(chart_w + lw, h, |root| {
        let (left, _) = root.split_horizontally(chart_w as u32);
        let mut chart = ChartBuilder::on(&left)
            .caption(&st.title, style(TITLE))
            .margin(MARGIN)
            .x_label_area_size((TEXT * 2.5) as u32)
            .y_label_area_size(ya as u32)
            .build_cartesian_2d(0.0..st.bars.len().max(1) as f64, 0.0..ymax)?;
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .disable_x_mesh()
            .x_labels(0)
            .y_desc(st.y_label.as_str())
            .label_style(style(TEXT))
            .axis_desc_style(style(TEXT))
            .y_label_formatter(&|v| num(*v))
            .draw()?;
        for (b, classes) in st.values.iter().enumerate() {
            let mut base = 0.0;
            let x = b as f64;
            let segs = classes.iter().enumerate().map(|(c, &v)| {
                let r = Rectangle::new([(x + 0.2, base), (x + 0.8, base + v)], colour(c).filled());
                base += v;
                r
            });
            chart.draw_series(segs.collect::<Vec<_>>())?;
        }
        let marks = st.paper.iter().map(|&(b, v)| {
            let x = b as f64;
            PathElement::new(vec![(x + 0.15, v), (x + 0.85, v)], BLACK.stroke_width(3))
        });
        chart.draw_series(marks)?;
        category_labels(root, &chart, &st.bars, 0.0)?;
        let mut entries: Vec<(String, RGBColor)> = st
            .classes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), colour(i)))
            .collect();
        if !st.paper.is_empty() {
            entries.push(("paper (total)".into(), BLACK));
        }
        legend(
            root,
            chart_w as i32 + MARGIN as i32,
            (TITLE * 2.0) as i32,
            &entries,
        )
    })
}

/// Horizontal bars, one per row, each labelled on the left and with its
/// value (in `unit`) at its end; `note` goes under the axis.
pub fn hbars(title: &str, unit: &str, note: &str, bars: &[Bar]) -> String {
    let max = hbars_max(bars);
    let value_w = widest(
        bars.iter()
            .map(|b| format!("{} {unit}", num(b.value)))
            .collect::<Vec<_>>()
            .iter()
            .map(String::as_str),
        TEXT,
    );
    let label_w = widest(bars.iter().map(|b| b.label.as_str()), TEXT) + 16.0;
    let plot_w = 420.0;
    // The x range reaches past the largest bar far enough for its value label.
    let xmax = max * plot_w / (plot_w - value_w - 12.0).max(plot_w / 3.0);
    let row = TEXT * 1.6;
    let plot_h = row * bars.len().max(1) as f64;
    let xa = TEXT * 2.2 + if note.is_empty() { 0.0 } else { TEXT * 1.5 };
    let w = (label_w + plot_w + 2.0 * MARGIN as f64 + 20.0)
        .max(text_width(title, TITLE) + 70.0)
        .max(label_w + text_width(note, TEXT) + 2.0 * MARGIN as f64);
    let h = TITLE * 2.0 + plot_h + xa + MARGIN as f64;
    let n = bars.len().max(1) as f64;
    render(w, h, |root| {
        let mut chart = ChartBuilder::on(root)
            .caption(title, style(TITLE))
            .margin(MARGIN)
            .margin_right(MARGIN + 20)
            .x_label_area_size(xa as u32)
            .y_label_area_size(label_w as u32)
            .build_cartesian_2d(0.0..xmax, 0.0..n)?;
        chart
            .configure_mesh()
            .light_line_style(TRANSPARENT)
            .disable_y_mesh()
            .y_labels(0)
            .x_labels(5)
            .label_style(style(TEXT))
            .x_label_formatter(&|v| num(*v))
            .draw()?;
        for (i, b) in bars.iter().enumerate() {
            hbar(root, &mut chart, n - i as f64, b, unit)?;
        }
        if !note.is_empty() {
            hbars_note(root, &chart, note)?;
        }
        Ok(())
    })
}

/// The x extent `hbars` must show: the largest value or range end, or 1
/// when there is none (or it is not a positive number), so the range is
/// never empty.
fn hbars_max(bars: &[Bar]) -> f64 {
    let max = bars
        .iter()
        .map(|b| b.range.map_or(b.value, |r| r.1.max(b.value)))
        .fold(0.0_f64, f64::max);
    if max > 0.0 && max.is_finite() {
        max
    } else {
        1.0
    }
}

/// The chart `hbars` draws in: values across, rows down.
type HChart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// One row of `hbars`, whose top edge is at `y`: the bar, its range as a
/// line across it, its value past whichever ends last and its label left
/// of the axis.
fn hbar(root: &Area, chart: &mut HChart, y: f64, b: &Bar, unit: &str) -> Drawn {
    let (top, bot) = (y - 0.15, y - 0.85);
    chart.draw_series([Rectangle::new(
        [(0.0, bot), (b.value.max(0.0), top)],
        colour(0).filled(),
    )])?;
    let mut end = b.value.max(0.0);
    if let Some((lo, hi)) = b.range {
        let mid = y - 0.5;
        chart.draw_series([PathElement::new(
            vec![(lo, mid), (hi, mid)],
            BLACK.stroke_width(1),
        )])?;
        end = end.max(hi);
    }
    let (px, py) = chart.backend_coord(&(end, y - 0.5));
    let pos = Pos::new(HPos::Left, VPos::Center);
    root.draw(&Text::new(
        format!("{} {unit}", num(b.value)),
        (px + 6, py),
        style(TEXT).pos(pos),
    ))?;
    let (lx, ly) = chart.backend_coord(&(0.0, y - 0.5));
    let pos = Pos::new(HPos::Right, VPos::Center);
    root.draw(&Text::new(
        b.label.clone(),
        (lx - 8, ly),
        style(TEXT).pos(pos),
    ))?;
    Ok(())
}

/// The note under `hbars`' axis, in grey.
fn hbars_note(root: &Area, chart: &HChart, note: &str) -> Drawn {
    let (px, py) = chart.backend_coord(&(0.0, 0.0));
    let pos = Pos::new(HPos::Left, VPos::Top);
    root.draw(&Text::new(
        note.to_string(),
        (px, py + (TEXT * 1.8) as i32),
        style(TEXT).pos(pos).color(&RGBColor(0x55, 0x55, 0x55)),
    ))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each `<text>` of `svg`: its estimated box (x0, y0, x1, y1).
    fn text_boxes(svg: &str) -> Vec<(String, f64, f64, f64, f64)> {
        let attr = |tag: &str, name: &str| -> Option<String> {
            let k = format!(" {name}=\"");
            let i = tag.find(&k)? + k.len();
            Some(tag[i..].split('"').next()?.to_string())
        };
        let mut out = Vec::new();
        for part in svg.split("<text").skip(1) {
            let (tag, rest) = part.split_once('>').unwrap();
            let body = rest.split("</text>").next().unwrap();
            let text = body
                .trim()
                .replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&amp;", "&");
            let f = |n: &str| attr(tag, n).and_then(|v| v.parse::<f64>().ok()).unwrap();
            let (x, y, size) = (f("x"), f("y"), f("font-size"));
            let w = text_width(&text, size * 1.24);
            let x0 = match attr(tag, "text-anchor").as_deref() {
                Some("end") => x - w,
                Some("middle") => x - w / 2.0,
                _ => x,
            };
            let rotated = attr(tag, "transform").is_some_and(|t| t.starts_with("rotate(270"));
            let b = if rotated {
                (x - size, y - w / 2.0, x + size, y + w / 2.0)
            } else {
                (x0, y - size, x0 + w, y + size)
            };
            out.push((text, b.0, b.1, b.2, b.3));
        }
        out
    }

    fn has_text(svg: &str, t: &str) -> bool {
        text_boxes(svg).iter().any(|b| b.0 == t)
    }

    fn canvas(svg: &str) -> (f64, f64) {
        let head = svg.split('>').next().unwrap();
        let get = |n: &str| {
            let k = format!(" {n}=\"");
            head[head.find(&k).unwrap() + k.len()..]
                .split('"')
                .next()
                .unwrap()
                .parse()
                .unwrap()
        };
        (get("width"), get("height"))
    }

    /// Every text of `svg` lies within its canvas by the width estimate.
    fn assert_fits(svg: &str) {
        let (w, h) = canvas(svg);
        let boxes = text_boxes(svg);
        assert!(!boxes.is_empty(), "no text in {svg}");
        for (t, x0, y0, x1, y1) in boxes {
            assert!(
                x0 >= 0.0 && x1 <= w && y0 >= 0.0 && y1 <= h,
                "{t:?} at ({x0},{y0})-({x1},{y1}) outside {w}×{h}"
            );
        }
    }

    fn long(s: &str) -> String {
        format!("{s} with a label long enough to have been clipped by the old fixed margins")
    }

    #[test]
    fn lines_fit_their_labels_and_draw_one_path_per_series() {
        let svg = lines(&Sweep {
            title: long("Throughput against send size"),
            x_label: "send size (bytes)".into(),
            y_label: "throughput (Mb/s)".into(),
            log2_x: true,
            series: (0..3)
                .map(|i| Series {
                    name: long(&format!("series {i}")),
                    points: vec![(512.0, 10.0 * i as f64), (4096.0, 50.0), (65536.0, 93.5)],
                })
                .collect(),
            integer_x: false,
            log10_y: false,
            paper: vec![Series {
                name: "paper".into(),
                points: vec![(4096.0, 64.0)],
            }],
        });
        assert_fits(&svg);
        assert!(svg.matches("<polyline").count() >= 3, "{svg}");
        assert!(
            has_text(&svg, "paper (dashed)"),
            "the legend names the paper's lines"
        );
        assert!(
            has_text(&svg, "65536"),
            "powers of two label the axis: {svg}"
        );
    }

    #[test]
    fn grouped_bars_fit_their_labels_and_mark_the_paper() {
        let svg = grouped(&Grouped {
            title: "Ratio to native".into(),
            y_label: "ratio to native".into(),
            groups: vec!["TX".into(), long("RX")],
            series: vec!["splitnet".into(), long("Xen 2.0 <paper>")],
            values: vec![vec![Some(0.9), None], vec![Some(0.2), Some(0.4)]],
            paper: vec![(1, 0, 0.2), (1, 1, 0.33)],
            reference: Some(1.0),
        });
        assert_fits(&svg);
        assert!(svg.contains("&lt;paper&gt;"), "labels are escaped");
        assert!(has_text(&svg, "paper"), "the legend names the markers");
    }

    #[test]
    fn stacked_bars_fit_their_labels() {
        let svg = stacked(&Stacked {
            title: "Cycles per packet".into(),
            y_label: "cycles per packet".into(),
            bars: vec![long("Xen driver domain"), "native".into()],
            classes: vec!["netback".into(), long("inter-domain copy")],
            values: vec![vec![1000.0, 3840.0], vec![2927.0, 0.0]],
            paper: vec![(0, 13165.0)],
        });
        assert_fits(&svg);
        assert!(has_text(&svg, "paper (total)"));
    }

    #[test]
    fn horizontal_bars_fit_their_labels_and_scale_to_the_largest() {
        let bars = [
            Bar {
                label: long("a<b"),
                value: 10.0,
                range: Some((5.0, 20.0)),
            },
            Bar {
                label: "c".into(),
                value: 123456.0,
                range: None,
            },
        ];
        let svg = hbars(&long("title"), "µs", &long("note"), &bars);
        assert_fits(&svg);
        assert!(svg.contains("a&lt;b"));
        assert!(has_text(&svg, "123456 µs"));
    }

    #[test]
    fn counts_on_the_x_axis_are_whole_and_small_values_keep_two_digits() {
        let svg = lines(&Sweep {
            title: "NICs".into(),
            x_label: "NICs".into(),
            y_label: "Gbit/s".into(),
            log2_x: false,
            integer_x: true,
            log10_y: false,
            series: vec![Series {
                name: "Linux".into(),
                points: vec![(1.0, 0.9), (2.0, 1.8), (3.0, 2.4)],
            }],
            paper: vec![],
        });
        assert!(has_text(&svg, "3") && !has_text(&svg, "1.20") && !has_text(&svg, "2.20"));
        assert_eq!(num(0.0047), "0.0047");
        assert_eq!(num(0.018), "0.018");
        assert_eq!(num(0.3), "0.30");
    }

    #[test]
    fn a_log_axis_labels_each_power_of_ten_and_keeps_small_lines_apart() {
        let svg = lines(&Sweep {
            title: "Unshaped".into(),
            x_label: "send size".into(),
            y_label: "Mbit/s".into(),
            log2_x: true,
            integer_x: false,
            log10_y: true,
            series: vec![
                Series {
                    name: "native".into(),
                    points: vec![(512.0, 300.0), (65536.0, 9900.0)],
                },
                Series {
                    name: "hosted".into(),
                    points: vec![(512.0, 42.0), (65536.0, 0.0)],
                },
            ],
            paper: vec![],
        });
        for l in ["10", "100", "1000", "10000"] {
            assert!(has_text(&svg, l), "no {l} on the axis");
        }
        assert!(!has_text(&svg, "5000"));
        assert_fits(&svg);
    }

    #[test]
    fn an_empty_chart_still_renders() {
        assert_fits(&hbars("t", "", "", &[]));
        let empty = Sweep {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            log2_x: false,
            integer_x: true,
            log10_y: false,
            series: vec![],
            paper: vec![],
        };
        assert!(lines(&empty).contains("</svg>"));
    }
}
