//! `--plot FILE.svg`: time per token against position, one line per allocator.

use std::error::Error;
use std::path::Path;

use plotters::prelude::*;

use crate::runtime::Run;

const COLORS: [RGBColor; 4] = [BLUE, RED, GREEN, MAGENTA];

/// Draws the decode steps of every run. The prefill step (the whole prompt at
/// once) is left out: it is tens of times slower and would flatten the rest.
pub fn write_svg(path: &Path, runs: &[Run], prompt_len: usize) -> Result<(), Box<dyn Error>> {
    let decode = |run: &Run| {
        let positions = (prompt_len + 1..).map(|p| p as f64);
        positions
            .zip(run.step_ms.iter().skip(1).copied())
            .collect::<Vec<_>>()
    };
    let last = runs.iter().map(|r| r.step_ms.len()).max().unwrap_or(0);
    let y_max = runs
        .iter()
        .flat_map(|r| r.step_ms.iter().skip(1))
        .copied()
        .fold(0.0, f64::max);

    let root = SVGBackend::new(path, (960, 540)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption("decode time per token", ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(56)
        .build_cartesian_2d(
            prompt_len as f64..(prompt_len + last) as f64,
            0.0..y_max * 1.05,
        )?;
    chart
        .configure_mesh()
        .x_desc("position (tokens in the KV cache)")
        .y_desc("ms per token")
        .draw()?;
    for (run, &color) in runs.iter().zip(COLORS.iter().cycle()) {
        chart
            .draw_series(LineSeries::new(decode(run), color))?
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
