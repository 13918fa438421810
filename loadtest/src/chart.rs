//! Self-contained SVG chart of one or more reports: latency over time, throughput
//! over time and the latency distribution.
//!
//! Hand-written SVG rather than `plotters`: three line panels are ~200 lines, and
//! plotters' text rendering pulls in a font stack (`ab_glyph`/`font-kit`) that a
//! chart meant for a browser does not need; the browser lays the text out.

use std::fmt::Write as _;

use crate::report::Report;

const WIDTH: f64 = 900.0;
const PANEL_H: f64 = 230.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 20.0;
const TOP: f64 = 30.0;
const GAP: f64 = 60.0;
const COLORS: &[&str] = &[
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b",
];

/// One plotted line.
struct Series {
    label: String,
    color: &'static str,
    dashed: bool,
    points: Vec<(f64, f64)>,
}

/// Renders the chart of `reports` (one color per report) as an SVG document.
pub fn svg(title: &str, reports: &[&Report]) -> String {
    let mut latency = Vec::new();
    let mut throughput = Vec::new();
    let mut distribution = Vec::new();
    for (i, r) in reports.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let name = format!("{} {}", r.target_kind, r.scenario);
        let step = r.timeline.get(1).map(|p| p.t_s).unwrap_or(1.0).max(1e-3);
        latency.push(Series {
            label: format!("{name} p50"),
            color,
            dashed: true,
            points: r
                .timeline
                .iter()
                .filter(|p| p.ops > 0)
                .map(|p| (p.t_s, p.p50_us as f64))
                .collect(),
        });
        latency.push(Series {
            label: format!("{name} p99"),
            color,
            dashed: false,
            points: r
                .timeline
                .iter()
                .filter(|p| p.ops > 0)
                .map(|p| (p.t_s, p.p99_us as f64))
                .collect(),
        });
        throughput.push(Series {
            label: format!("{name} ops/s"),
            color,
            dashed: false,
            points: r
                .timeline
                .iter()
                .map(|p| (p.t_s, p.ops as f64 / step))
                .collect(),
        });
        distribution.push(Series {
            label: name,
            color,
            dashed: false,
            points: r
                .distribution
                .iter()
                .map(|p| (nines(p.percentile), p.latency_us as f64))
                .collect(),
        });
    }
    let height = TOP + 3.0 * (PANEL_H + GAP);
    let mut out = String::new();
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="11">
<rect width="100%" height="100%" fill="white"/>
<text x="{x}" y="18" font-size="14" text-anchor="middle">{t}</text>
"#,
        x = WIDTH / 2.0,
        t = escape(title)
    );
    let mut y = TOP;
    panel(
        &mut out,
        y,
        "latency over time (p50 dashed, p99 solid)",
        "seconds",
        Axis::Log,
        Axis::Linear,
        &latency,
    );
    y += PANEL_H + GAP;
    panel(
        &mut out,
        y,
        "throughput over time",
        "seconds",
        Axis::Linear,
        Axis::Linear,
        &throughput,
    );
    y += PANEL_H + GAP;
    panel(
        &mut out,
        y,
        "latency distribution",
        "percentile",
        Axis::Log,
        Axis::Nines,
        &distribution,
    );
    out.push_str("</svg>\n");
    out
}

/// How an axis maps values.
#[derive(Clone, Copy, PartialEq)]
enum Axis {
    Linear,
    /// Base-10 logarithm (latency in µs).
    Log,
    /// `-log10(1 - p/100)`: 0 = p0, 1 = p90, 2 = p99, 3 = p99.9.
    Nines,
}

fn nines(percentile: f64) -> f64 {
    let rest = (1.0 - percentile / 100.0).max(1e-6);
    -rest.log10()
}

fn panel(
    out: &mut String,
    top: f64,
    title: &str,
    xlabel: &str,
    yaxis: Axis,
    xaxis: Axis,
    series: &[Series],
) {
    let (x0, x1) = (LEFT, WIDTH - RIGHT);
    let (y0, y1) = (top + 20.0, top + PANEL_H);
    let all = || series.iter().flat_map(|s| s.points.iter());
    let ymap = |v: f64| {
        if yaxis == Axis::Log {
            v.max(1.0).log10()
        } else {
            v
        }
    };
    let (mut xmin, mut xmax) = (f64::MAX, f64::MIN);
    let (mut ymin, mut ymax) = (f64::MAX, f64::MIN);
    for &(x, y) in all() {
        xmin = xmin.min(x);
        xmax = xmax.max(x);
        ymin = ymin.min(ymap(y));
        ymax = ymax.max(ymap(y));
    }
    if xmin > xmax {
        (xmin, xmax, ymin, ymax) = (0.0, 1.0, 0.0, 1.0);
    }
    if yaxis == Axis::Log {
        ymin = ymin.floor();
        ymax = ymax.ceil().max(ymin + 1.0);
    } else {
        ymin = 0.0;
        ymax = if ymax <= 0.0 { 1.0 } else { ymax * 1.1 };
    }
    if xaxis == Axis::Nines {
        xmin = 0.0;
        xmax = xmax.ceil().max(1.0);
    }
    if xmax <= xmin {
        xmax = xmin + 1.0;
    }
    let sx = |x: f64| x0 + (x - xmin) / (xmax - xmin) * (x1 - x0);
    let sy = |y: f64| y1 - (ymap(y) - ymin) / (ymax - ymin) * (y1 - y0);
    let _ = writeln!(
        out,
        r#"<text x="{x0}" y="{}" font-size="12" font-weight="bold">{}</text>"#,
        top + 12.0,
        escape(title)
    );
    let _ = writeln!(
        out,
        r##"<rect x="{x0}" y="{y0}" width="{}" height="{}" fill="none" stroke="#888"/>"##,
        x1 - x0,
        y1 - y0
    );
    // Y grid and labels.
    let yticks: Vec<f64> = if yaxis == Axis::Log {
        (ymin as i64..=ymax as i64)
            .map(|d| 10f64.powi(d as i32))
            .collect()
    } else {
        (0..=4)
            .map(|i| ymin + (ymax - ymin) * i as f64 / 4.0)
            .collect()
    };
    for v in yticks {
        let y = sy(v);
        let label = if yaxis == Axis::Log {
            micros(v)
        } else {
            format!("{v:.0}")
        };
        let _ = writeln!(
            out,
            r##"<line x1="{x0}" x2="{x1}" y1="{y:.1}" y2="{y:.1}" stroke="#eee"/><text x="{}" y="{:.1}" text-anchor="end">{label}</text>"##,
            x0 - 4.0,
            y + 4.0
        );
    }
    // X labels.
    let xticks: Vec<(f64, String)> = if xaxis == Axis::Nines {
        (0..=xmax as i64)
            .map(|n| {
                let p = 100.0 * (1.0 - 10f64.powi(-(n as i32)));
                (
                    n as f64,
                    if n == 0 {
                        "p0".to_owned()
                    } else {
                        format!("p{}", trim(p))
                    },
                )
            })
            .collect()
    } else {
        (0..=5)
            .map(|i| {
                let v = xmin + (xmax - xmin) * i as f64 / 5.0;
                (v, format!("{v:.1}"))
            })
            .collect()
    };
    for (v, label) in xticks {
        let x = sx(v);
        let _ = writeln!(
            out,
            r##"<line x1="{x:.1}" x2="{x:.1}" y1="{y0}" y2="{y1}" stroke="#eee"/><text x="{x:.1}" y="{}" text-anchor="middle">{label}</text>"##,
            y1 + 14.0
        );
    }
    let _ = writeln!(
        out,
        r#"<text x="{}" y="{}" text-anchor="middle">{xlabel}</text>"#,
        (x0 + x1) / 2.0,
        y1 + 30.0
    );
    // Lines and legend.
    for (i, s) in series.iter().enumerate() {
        if !s.points.is_empty() {
            let path: Vec<String> = s
                .points
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", sx(x), sy(y)))
                .collect();
            let dash = if s.dashed {
                r#" stroke-dasharray="5,3""#
            } else {
                ""
            };
            let _ = writeln!(
                out,
                r#"<polyline fill="none" stroke="{}" stroke-width="1.5"{dash} points="{}"/>"#,
                s.color,
                path.join(" ")
            );
        }
        let ly = y0 + 12.0 + 14.0 * i as f64;
        let dash = if s.dashed {
            r#" stroke-dasharray="5,3""#
        } else {
            ""
        };
        let _ = writeln!(
            out,
            r#"<line x1="{}" x2="{}" y1="{:.1}" y2="{:.1}" stroke="{}" stroke-width="2"{dash}/><text x="{}" y="{:.1}">{}</text>"#,
            x1 - 200.0,
            x1 - 180.0,
            ly - 4.0,
            ly - 4.0,
            s.color,
            x1 - 175.0,
            ly,
            escape(&s.label)
        );
    }
}

fn trim(p: f64) -> String {
    let s = format!("{p:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

fn micros(v: f64) -> String {
    if v >= 1e6 {
        format!("{}s", trim(v / 1e6))
    } else if v >= 1e3 {
        format!("{}ms", trim(v / 1e3))
    } else {
        format!("{}µs", trim(v))
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recorder::Recorder;
    use std::collections::BTreeMap;
    use std::time::{Duration, Instant};

    fn report(kind: &str) -> Report {
        let start = Instant::now();
        let mut r = Recorder::new(start, Duration::from_millis(100));
        for i in 1..50u64 {
            r.ok(
                start + Duration::from_millis(i * 10),
                Duration::from_micros(100 + i * 30),
            );
        }
        Report {
            scenario: "lock-cycle".into(),
            target_kind: kind.into(),
            target: "http://x".into(),
            mode: "closed".into(),
            clients: 1,
            rate_per_s: None,
            duration_s: 0.5,
            operations: r.operations(),
            errors: 0,
            errors_by_code: BTreeMap::new(),
            throughput_per_s: 98.0,
            latency_us: r.latency(),
            operation: "x".into(),
            server_cpu_cores: None,
            client_cpu_cores: None,
            server_fsyncs: None,
            extra: BTreeMap::new(),
            timeline: r.timeline(),
            distribution: r.distribution(),
            intervals: r.interval_histograms(),
        }
    }

    #[test]
    fn renders_a_self_contained_svg_with_every_series() {
        let (a, b) = (report("baton"), report("etcd<&>"));
        let s = svg("a & b", &[&a, &b]);
        assert!(s.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
        assert!(s.trim_end().ends_with("</svg>"));
        assert_eq!(s.matches("<polyline").count(), 8);
        assert!(s.contains("etcd&lt;&amp;&gt; lock-cycle p99"));
        assert!(!s.contains("NaN") && !s.contains("inf"));
        assert!(!s.contains("href"), "no external resources");
    }

    #[test]
    fn an_empty_report_still_renders() {
        let mut r = report("baton");
        r.timeline.clear();
        r.distribution.clear();
        let s = svg("empty", &[&r]);
        assert!(s.contains("</svg>") && !s.contains("NaN"));
    }

    #[test]
    fn nines_axis() {
        assert!((nines(99.0) - 2.0).abs() < 1e-9);
        assert_eq!(micros(1000.0), "1ms");
        assert_eq!(micros(10.0), "10µs");
    }
}
