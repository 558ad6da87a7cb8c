//! `--plot FILE.svg`: the temp allocator's share of each step's time against
//! the context length (positions in the KV cache), one line per allocator.

use std::error::Error;
use std::path::Path;

use plotters::prelude::*;

use crate::runtime::Run;

const COLORS: [RGBColor; 6] = [BLUE, RED, GREEN, MAGENTA, BLACK, CYAN];

/// Every step of every run: the prefill chunks, then the decode tokens.
pub fn write_svg(path: &Path, runs: &[&Run]) -> Result<(), Box<dyn Error>> {
    let points = |run: &Run| -> Vec<(f64, f64)> {
        run.steps
            .iter()
            .map(|s| (s.kv_len as f64, 100.0 * s.alloc_ns / (s.ms * 1e6)))
            .collect()
    };
    let x_max = runs
        .iter()
        .flat_map(|r| r.steps.last())
        .map(|s| s.kv_len as f64)
        .fold(1.0, f64::max);
    let y_max = runs
        .iter()
        .flat_map(|run| points(run))
        .map(|(_, y)| y)
        .fold(0.0, f64::max)
        .max(1e-3);

    let root = SVGBackend::new(path, (960, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "time inside the temp allocator, share of each step",
            ("sans-serif", 22),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(0.0..x_max, 0.0..y_max * 1.05)?;
    chart
        .configure_mesh()
        .x_desc("context length (positions in the KV cache after the step)")
        .y_desc("% of the step's time")
        .draw()?;
    for (run, &color) in runs.iter().zip(COLORS.iter().cycle()) {
        chart
            .draw_series(LineSeries::new(points(run), color))?
            .label(run.name)
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    root.present()?;
    Ok(())
}
