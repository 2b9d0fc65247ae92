//! Minimal SVG charts for results pages: horizontal bars with labels.

/// One bar: a label, a value and an optional whisker range (low, high).
pub struct Bar {
    pub label: String,
    pub value: f64,
    pub range: Option<(f64, f64)>,
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A horizontal bar chart titled `title`, values in `unit`.
pub fn bars(title: &str, unit: &str, legend: &str, bars: &[Bar]) -> String {
    let (label_w, plot_w, row_h, top) = (430.0, 360.0, 26.0, 40.0);
    let max = bars
        .iter()
        .map(|b| b.range.map_or(b.value, |r| r.1.max(b.value)))
        .fold(0.0_f64, f64::max)
        .max(f64::MIN_POSITIVE);
    let width = label_w + plot_w + 90.0;
    let height = top + row_h * bars.len() as f64 + 30.0;
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"10\" y=\"22\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
        esc(title)
    );
    for (i, b) in bars.iter().enumerate() {
        let y = top + row_h * i as f64;
        let w = plot_w * b.value / max;
        s += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n\
             <rect x=\"{label_w}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"#4c78a8\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\">{:.2} {}</text>\n",
            label_w - 8.0,
            y + 16.0,
            esc(&b.label),
            y + 4.0,
            row_h - 8.0,
            label_w + w.max(0.0) + 6.0 + b.range.map_or(0.0, |r| plot_w * (r.1 - b.value).max(0.0) / max),
            y + 16.0,
            b.value,
            esc(unit)
        );
        if let Some((lo, hi)) = b.range {
            let (x0, x1) = (label_w + plot_w * lo / max, label_w + plot_w * hi / max);
            s += &format!(
                "<line x1=\"{x0:.1}\" x2=\"{x1:.1}\" y1=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>\n",
                y + row_h / 2.0 - 2.0,
                y + row_h / 2.0 - 2.0
            );
        }
    }
    s += &format!(
        "<text x=\"{label_w}\" y=\"{:.1}\" fill=\"#555\">{}</text>\n</svg>\n",
        height - 8.0,
        esc(legend)
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_scales_to_the_largest_value_and_escapes_labels() {
        let svg = bars(
            "t",
            "µs",
            "legend",
            &[
                Bar {
                    label: "a<b".into(),
                    value: 10.0,
                    range: Some((5.0, 20.0)),
                },
                Bar {
                    label: "c".into(),
                    value: 5.0,
                    range: None,
                },
            ],
        );
        assert!(svg.starts_with("<svg"));
        assert!(svg.contains("a&lt;b"));
        assert!(
            svg.contains("width=\"180.0\""),
            "10 of max 20 is half of 360 px"
        );
        assert!(svg.contains("width=\"90.0\""));
        assert!(svg.trim_end().ends_with("</svg>"));
    }
}
