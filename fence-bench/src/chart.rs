//! The picture: throughput ratios (fenced / unfenced) per case and concurrency, as an SVG
//! drawn with `plotters` from a `report.json`.

use std::path::Path;

use plotters::prelude::*;

use crate::report::Row;

/// Bar colours by concurrency (1, 4, 16, 64, any other such as memory's 2 threads).
const COLOURS: [RGBColor; 5] = [
    RGBColor(0x4e, 0x79, 0xa7),
    RGBColor(0xf2, 0x8e, 0x2b),
    RGBColor(0xe1, 0x57, 0x59),
    RGBColor(0x76, 0xb7, 0xb2),
    RGBColor(0x9c, 0x75, 0x5f),
];

fn colour(concurrency: usize) -> RGBColor {
    let index = match concurrency {
        1 => 0,
        4 => 1,
        16 => 2,
        64 => 3,
        _ => 4,
    };
    COLOURS[index]
}

/// One bar: a compared case at one concurrency.
struct Bar {
    label: String,
    concurrency: usize,
    ratio: f64,
}

fn bars(rows: &[Row]) -> Vec<Bar> {
    // Segments count from the bottom: reversed, the report's first case is the top bar.
    let mut bars: Vec<Bar> = rows
        .iter()
        .filter_map(|r| {
            Some(Bar {
                label: format!("{}: {} · c{}", r.backend, r.case, r.concurrency?),
                concurrency: r.concurrency?,
                ratio: r.throughput_ratio?,
            })
        })
        .collect();
    bars.reverse();
    bars
}

/// Reads `report` (a `report.json`) and draws its throughput ratios to `svg`.
pub(crate) fn render(report: &Path, svg: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(report)
        .map_err(|e| format!("could not read {}: {e}", report.display()))?;
    let rows: Vec<Row> = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not a fence-bench report: {e}", report.display()))?;
    let bars = bars(&rows);
    if bars.is_empty() {
        return Err(format!("{} has no compared case", report.display()));
    }
    draw(&bars, svg).map_err(|e| format!("could not draw {}: {e}", svg.display()))
}

fn draw(bars: &[Bar], svg: &Path) -> Result<(), Box<dyn std::error::Error>> {
    let slots = bars.len();
    let height = 90 + 17 * u32::try_from(slots).unwrap_or(u32::MAX / 32);
    let root = SVGBackend::new(svg, (1100, height)).into_drawing_area();
    root.fill(&WHITE)?;
    let top = bars.iter().map(|b| b.ratio).fold(1.2_f64, f64::max) * 1.05;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Fence: fenced / unfenced throughput (1.0 = no cost; dashed: 0.9)",
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(30)
        .y_label_area_size(560)
        .build_cartesian_2d(0.0..top, (0..slots).into_segmented())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .y_labels(slots)
        .y_label_formatter(&|value| match value {
            SegmentValue::CenterOf(i) => bars.get(*i).map_or_else(String::new, |b| b.label.clone()),
            _ => String::new(),
        })
        .x_desc("throughput ratio")
        .label_style(("sans-serif", 11))
        .draw()?;
    let mut concurrencies: Vec<usize> = bars.iter().map(|b| b.concurrency).collect();
    concurrencies.sort_unstable();
    concurrencies.dedup();
    for concurrency in concurrencies {
        let style = colour(concurrency).filled();
        chart
            .draw_series(
                Histogram::horizontal(&chart).style(style).margin(2).data(
                    bars.iter()
                        .enumerate()
                        .filter(|(_, b)| b.concurrency == concurrency)
                        .map(|(i, b)| (i, b.ratio)),
                ),
            )?
            .label(format!("concurrency {concurrency}"))
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], style));
    }
    for (ratio, dashed) in [(1.0, false), (0.9, true)] {
        let line = [(ratio, SegmentValue::Exact(0)), (ratio, SegmentValue::Last)];
        if dashed {
            chart.draw_series(DashedLineSeries::new(line, 4, 4, BLACK.stroke_width(1)))?;
        } else {
            chart.draw_series(LineSeries::new(line, BLACK.stroke_width(1)))?;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.9))
        .border_style(BLACK)
        .label_font(("sans-serif", 11))
        .draw()?;
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_becomes_one_bar_per_compared_case() -> Result<(), String> {
        let row = |case: &str, concurrency, ratio| Row {
            backend: "redis".into(),
            case: case.into(),
            concurrency: Some(concurrency),
            throughput_ratio: Some(ratio),
            ..Row::default()
        };
        let rows = vec![
            row("write vs SET", 1, 0.88),
            row("write vs SET", 16, 0.62),
            row("map insert", 2, 0.5),
            Row::note("s3", "ETag cache bound", "10000 objects"),
        ];
        let dir = std::env::temp_dir().join(format!("fence-bench-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
        let (report, svg) = (dir.join("report.json"), dir.join("ratios.svg"));
        let json = serde_json::to_string(&rows).map_err(|e| e.to_string())?;
        std::fs::write(&report, json).map_err(|e| e.to_string())?;
        render(&report, &svg)?;
        let drawn = std::fs::read_to_string(&svg).map_err(|e| e.to_string())?;
        std::fs::remove_dir_all(&dir).map_err(|e| e.to_string())?;
        assert!(
            drawn.contains("redis: write vs SET · c16"),
            "labels: {drawn}"
        );
        // Each concurrency present fills its legend swatch and its bar; one absent from the
        // report (4) is neither drawn nor listed; the note is not drawn.
        let fills = |c: RGBColor| {
            drawn
                .matches(&format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2))
                .count()
        };
        assert_eq!(fills(colour(1)), 2, "concurrency 1: legend and one bar");
        assert_eq!(fills(colour(16)), 2, "concurrency 16: legend and one bar");
        assert_eq!(fills(colour(2)), 2, "2 threads: legend and one bar");
        assert_eq!(fills(colour(4)), 0, "concurrency 4: nothing");
        assert!(!drawn.contains("ETag"));
        Ok(())
    }
}
