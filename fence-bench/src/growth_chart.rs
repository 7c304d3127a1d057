//! The growth curves as an SVG: one panel per curve (domains held, op ids held, value bytes),
//! p50 latency on top and server CPU per write below, one line per backend, both on a log
//! scale (the backends differ by orders of magnitude; a flat line is the claim).

use std::path::Path;

use plotters::prelude::*;

use crate::growth::{Point, DEFAULT_CACHE, DOMAINS, FENCED, OP_IDS, PLAIN, VALUE};

const COLOURS: [RGBColor; 8] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0x59, 0xa1, 0x4f),
    RGBColor(0xed, 0xc9, 0x48),
    RGBColor(0xb0, 0x7a, 0xa1),
    RGBColor(0x9c, 0x75, 0x5f),
];

/// What a panel row draws.
#[derive(Clone, Copy)]
enum Measure {
    Latency,
    ServerCpu,
}

impl Measure {
    fn of(self, point: &Point) -> Option<f64> {
        match self {
            Measure::Latency => point.p50_us,
            Measure::ServerCpu => point.server_cpu_us,
        }
        .filter(|v| *v > 0.0)
    }

    fn name(self) -> &'static str {
        match self {
            Measure::Latency => "p50 µs per write",
            Measure::ServerCpu => "server CPU µs per write",
        }
    }
}

/// Draws `points` to `svg`.
pub(crate) fn render(points: &[Point], svg: &Path) -> Result<(), String> {
    if !points.iter().any(|p| p.p50_us.is_some()) {
        return Err("no growth point was measured".to_owned());
    }
    draw(points, svg).map_err(|e| format!("could not draw {}: {e}", svg.display()))
}

fn draw(points: &[Point], svg: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let root = SVGBackend::new(svg, (1200, 760)).into_drawing_area();
    root.fill(&WHITE)?;
    let root = root.titled(
        "One fenced write's cost as state grows (one writer, log scale; dashed: the plain write; ring: the default cache)",
        ("sans-serif", 18),
    )?;
    let backends = crate::growth::first_seen(points.iter().map(|p| p.backend.as_str()));
    let panels = root.split_evenly((2, 3));
    let layout = [Measure::Latency, Measure::ServerCpu]
        .into_iter()
        .flat_map(|m| [DOMAINS, OP_IDS, VALUE].map(|c| (m, c)));
    for ((measure, curve), area) in layout.zip(panels.iter()) {
        let (labels, placed) = crate::growth::columns(points, curve);
        let values = placed.iter().filter_map(|(_, p)| measure.of(p));
        let (low, high) = values.fold((f64::MAX, f64::MIN), |(l, h), v| (l.min(v), h.max(v)));
        if labels.is_empty() || low > high {
            continue;
        }
        let slots = labels.len();
        let mut chart = ChartBuilder::on(area)
            .caption(curve, ("sans-serif", 14))
            .margin(8)
            .x_label_area_size(24)
            .y_label_area_size(48)
            .build_cartesian_2d(
                -0.3..(slots as f64 - 0.7),
                ((low / 2.0)..(high * 2.0)).log_scale(),
            )?;
        chart
            .configure_mesh()
            .x_labels(slots)
            .x_label_formatter(&|v| {
                let index = v.round();
                match labels.get(index as usize) {
                    Some(label) if (v - index).abs() < 0.01 && index >= 0.0 => label.clone(),
                    _ => String::new(),
                }
            })
            .y_desc(measure.name())
            .label_style(("sans-serif", 10))
            .draw()?;
        for (b, backend) in backends.iter().enumerate() {
            let colour = COLOURS[b % COLOURS.len()];
            let line = |variant: &str| {
                let mut line: Vec<(f64, f64)> = placed
                    .iter()
                    .filter(|(_, p)| p.backend == *backend && p.variant == variant)
                    .filter_map(|(column, p)| Some((*column as f64, measure.of(p)?)))
                    .collect();
                line.sort_by(|a, b| a.0.total_cmp(&b.0));
                line
            };
            let fenced = line(FENCED);
            if !fenced.is_empty() {
                chart
                    .draw_series(LineSeries::new(fenced.clone(), colour.stroke_width(2)))?
                    .label(*backend)
                    .legend(move |(x, y)| {
                        PathElement::new([(x, y), (x + 14, y)], colour.stroke_width(2))
                    });
                chart.draw_series(
                    fenced
                        .into_iter()
                        .map(|p| Circle::new(p, 3, colour.filled())),
                )?;
            }
            let plain = line(PLAIN);
            chart.draw_series(DashedLineSeries::new(plain, 5, 4, colour.stroke_width(1)))?;
            let default_cache = line(DEFAULT_CACHE);
            chart.draw_series(
                default_cache
                    .into_iter()
                    .map(|p| Circle::new(p, 5, colour.stroke_width(2))),
            )?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .label_font(("sans-serif", 9))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(backend: &str, curve: &str, x: u64, us: f64) -> Point {
        Point {
            backend: backend.into(),
            variant: FENCED.into(),
            curve: curve.into(),
            x,
            p50_us: Some(us),
            server_cpu_us: Some(us / 2.0),
            ..Point::default()
        }
    }

    #[test]
    fn every_curve_gets_its_panels_and_every_backend_its_line() -> Result<(), String> {
        let points = vec![
            point("redis", DOMAINS, 1, 300.0),
            point("redis", DOMAINS, 100_000, 310.0),
            point("etcd", DOMAINS, 1, 900.0),
            point("etcd", OP_IDS, 64, 950.0),
            point("etcd", VALUE, 1 << 20, 9000.0),
            Point {
                variant: PLAIN.into(),
                ..point("redis", DOMAINS, 1, 200.0)
            },
            Point {
                variant: PLAIN.into(),
                ..point("redis", DOMAINS, 100_000, 200.0)
            },
            Point {
                variant: DEFAULT_CACHE.into(),
                ..point("etcd", DOMAINS, 1, 1500.0)
            },
        ];
        let dir = std::env::temp_dir().join(format!("fence-bench-growth-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let svg = dir.join("growth.svg");
        render(&points, &svg)?;
        let drawn = std::fs::read_to_string(&svg).map_err(|e| e.to_string())?;
        std::fs::remove_dir_all(&dir).map_err(|e| e.to_string())?;
        for text in [DOMAINS, OP_IDS, VALUE, "100000", "1 MiB", "server CPU"] {
            assert!(drawn.contains(text), "`{text}` missing");
        }
        // Redis's line in both domain panels: its legend entry once per panel it appears in.
        let legends = |name: &str| drawn.lines().filter(|l| l.trim() == name).count();
        assert_eq!(legends("redis"), 2);
        assert_eq!(legends("etcd"), 6);
        // Redis's solid line and legend swatch in each domain panel are 4 strokes in its
        // colour; its plain write adds the dashes. etcd's default cache is one ring per panel.
        let redis = format!(
            "<polyline fill=\"none\" opacity=\"1\" stroke=\"#{:02X}{:02X}{:02X}\"",
            COLOURS[0].0, COLOURS[0].1, COLOURS[0].2
        );
        assert!(drawn.matches(&redis).count() > 4, "no dashes: {drawn}");
        let rings = drawn
            .lines()
            .filter(|l| l.starts_with("<circle") && l.contains("fill=\"none\""))
            .count();
        assert_eq!(rings, 2);
        Ok(())
    }

    #[test]
    fn nothing_measured_is_an_error() {
        let note = Point {
            backend: "s3".into(),
            curve: DOMAINS.into(),
            note: Some("connection refused".into()),
            ..Point::default()
        };
        assert!(render(&[note], Path::new("/nonexistent/growth.svg")).is_err());
    }
}
