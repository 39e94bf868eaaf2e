//! The report's plots, drawn with `plotters` as SVG and PNG: per link, test loss against wall
//! time and against cumulative bytes, and the stage times per cell; across the suite, bytes per
//! process per round against W and the speed-up against bandwidth.
//!
//! Text needs a TrueType font (plotters measures it, for SVG too): the first of a few common
//! paths (DejaVu Sans, Liberation Sans; Debian's `fonts-dejavu-core`) is loaded at run time;
//! without one there are no plots, and the command says so.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use plotters::coord::Shift;
use plotters::prelude::*;

use super::report::{median, result_rows, CellRun, ResultRow, Summary};
use super::Suite;
use crate::metrics::StageTimes;

/// A line: its label and points.
type Series = (String, Vec<(f64, f64)>);

/// One chart's content.
struct Chart {
    title: String,
    x: String,
    y: String,
    series: Vec<Series>,
    log_x: bool,
}

impl Chart {
    fn new(title: String, x: &str, y: &str, series: Vec<Series>, log_x: bool) -> Chart {
        Chart {
            title,
            x: x.into(),
            y: y.into(),
            series,
            log_x,
        }
    }
}

/// Fonts tried for PNG text.
const FONTS: [&str; 3] = [
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
];

/// Registers a font for text once (plotters draws no text without one); false when none is
/// found.
pub fn font() -> bool {
    static FONT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *FONT.get_or_init(|| {
        FONTS.iter().any(|p| match std::fs::read(p) {
            Ok(bytes) => plotters::style::register_font(
                "sans-serif",
                FontStyle::Normal,
                Box::leak(bytes.into_boxed_slice()),
            )
            .is_ok(),
            Err(_) => false,
        })
    })
}

/// Draws every plot of the suite into `dir`; returns the files written.
pub fn plots(
    suite: &Suite,
    runs: &[CellRun],
    summaries: &[Summary],
    dir: &Path,
) -> Result<Vec<PathBuf>, String> {
    if !font() {
        return Err(format!(
            "no TrueType font to draw text with (looked for {}; Debian: apt install \
             fonts-dejavu-core)",
            FONTS.join(", ")
        ));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut charts: Vec<(String, Chart)> = Vec::new();
    let results: Vec<(&CellRun, Vec<ResultRow>)> =
        runs.iter().map(|r| (r, result_rows(r))).collect();
    let label = |r: &CellRun| {
        let c = &r.cell;
        let mut l = format!("{} {}", c.exchange, c.compressor);
        if suite.processes.len() > 1 {
            l = format!("W{} {l}", c.processes);
        }
        if suite.models.len() > 1 {
            l = format!("{} {l}", c.model);
        }
        l
    };
    for link in &suite.links {
        // Curves of the first repeat (repeats differ in timing only).
        let of_link: Vec<&(&CellRun, Vec<ResultRow>)> = results
            .iter()
            .filter(|(r, _)| r.cell.link.name == link.name && r.cell.repeat == 0)
            .collect();
        if of_link.is_empty() {
            continue;
        }
        let curve = |f: fn(&ResultRow) -> f64| -> Vec<Series> {
            of_link
                .iter()
                .map(|(r, rows)| {
                    let pts = rows
                        .iter()
                        .filter_map(|row| row.test_loss.map(|l| (f(row), l)))
                        .collect();
                    (label(r), pts)
                })
                .collect()
        };
        charts.push((
            format!("loss-vs-time-{}", link.name),
            Chart::new(
                format!("test loss against wall time, link {}", link.name),
                "seconds",
                "test loss",
                curve(|r| r.seconds),
                false,
            ),
        ));
        charts.push((
            format!("loss-vs-bytes-{}", link.name),
            Chart::new(
                format!(
                    "test loss against bytes sent per process, link {}",
                    link.name
                ),
                "MB per process (both directions)",
                "test loss",
                curve(|r| (r.up_bytes_per_process + r.down_bytes_per_process) / 1e6),
                false,
            ),
        ));
    }
    let mut files = Vec::new();
    for (name, chart) in &charts {
        files.extend(draw_both(dir, name, chart)?);
    }
    for link in &suite.links {
        // Per cell, each stage's mean time per round, the median over repeats.
        let mut per_cell: Vec<(String, Vec<[f64; 6]>)> = Vec::new();
        for (r, rows) in results
            .iter()
            .filter(|(r, _)| r.cell.link.name == link.name)
        {
            let Some(last) = rows.last() else { continue };
            let rounds = last.rounds.max(1) as f64;
            let times = last.times().values().map(|t| t / rounds);
            let l = label(r);
            match per_cell.iter_mut().find(|(k, _)| *k == l) {
                Some((_, v)) => v.push(times),
                None => per_cell.push((l, vec![times])),
            }
        }
        let cells: Vec<(String, [f64; 6])> = per_cell
            .into_iter()
            .map(|(l, runs)| {
                let stage = |s: usize| median(runs.iter().map(|t| t[s]).collect()).unwrap_or(0.0);
                (l, std::array::from_fn(stage))
            })
            .collect();
        if !cells.is_empty() {
            let name = format!("stages-{}", link.name);
            files.extend(draw_stages(dir, &name, &link.name, &cells)?);
        }
    }
    // Bytes per process per round against W, per (link, exchange, compressor).
    if suite.processes.len() > 1 {
        let mut lines: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for (r, rows) in &results {
            if let Some(last) = rows.last() {
                let c = &r.cell;
                let key = format!("{} {} {}", c.link.name, c.exchange, c.compressor);
                let bytes = (last.up_bytes_per_process + last.down_bytes_per_process)
                    / last.rounds.max(1) as f64;
                lines
                    .entry(key)
                    .or_default()
                    .push((c.processes as f64, bytes / 1e3));
            }
        }
        let chart = Chart::new(
            "bytes per process per round against processes".to_string(),
            "processes (W)",
            "kB per process per round",
            lines.into_iter().collect(),
            true,
        );
        files.extend(draw_both(dir, "bytes-vs-processes", &chart)?);
    }
    // Speed-up against bandwidth, per (exchange, compressor), over the shaped links.
    let rated: Vec<(f64, &Summary)> = summaries
        .iter()
        .filter_map(|s| {
            let bits = s.cell.link.rate_bits()?.ok()?;
            Some((bits as f64 / 1e6, s))
        })
        .collect();
    if rated
        .iter()
        .map(|(b, _)| b.to_bits())
        .collect::<std::collections::BTreeSet<_>>()
        .len()
        > 1
    {
        // The median over repeats at each rate.
        let mut at: BTreeMap<(String, u64), Vec<f64>> = BTreeMap::new();
        for (mbit, s) in &rated {
            if let Some(x) = s.speedup {
                let key = format!(
                    "W{} {} {}",
                    s.cell.processes, s.cell.exchange, s.cell.compressor
                );
                at.entry((key, mbit.to_bits())).or_default().push(x);
            }
        }
        let mut lines: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
        for ((key, mbit), xs) in at {
            let point = (f64::from_bits(mbit), median(xs).unwrap_or(0.0));
            lines.entry(key).or_default().push(point);
        }
        for points in lines.values_mut() {
            points.sort_by(|a, b| a.0.total_cmp(&b.0));
        }
        let chart = Chart::new(
            "speed-up to the target loss against link rate".to_string(),
            "link rate, Mbit/s",
            "speed-up vs baseline",
            lines.into_iter().collect(),
            true,
        );
        files.extend(draw_both(dir, "speedup-vs-bandwidth", &chart)?);
    }
    Ok(files)
}

/// Draws a chart as `name.svg` and `name.png`.
fn draw_both(dir: &Path, name: &str, chart: &Chart) -> Result<Vec<PathBuf>, String> {
    let svg = dir.join(format!("{name}.svg"));
    draw(SVGBackend::new(&svg, (760, 460)).into_drawing_area(), chart)
        .map_err(|e| format!("{}: {e}", svg.display()))?;
    let png = dir.join(format!("{name}.png"));
    draw(
        BitMapBackend::new(&png, (760, 460)).into_drawing_area(),
        chart,
    )
    .map_err(|e| format!("{}: {e}", png.display()))?;
    Ok(vec![svg, png])
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, c: &Chart) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let pts = c.series.iter().flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    let pad = |lo: f64, hi: f64| {
        let d = (hi - lo).abs().max(hi.abs() * 1e-3).max(1e-9) * 0.05;
        (lo - d, hi + d)
    };
    let (y0, y1) = pad(y0, y1);
    let mut builder = ChartBuilder::on(&root);
    builder
        .caption(&c.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60);
    let palette = |i: usize| Palette99::pick(i).to_rgba();
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .x_desc(c.x.as_str())
                .y_desc(c.y.as_str())
                .draw()
                .map_err(err)?;
            for (i, (name, points)) in c.series.iter().enumerate() {
                let color = palette(i);
                chart
                    .draw_series(LineSeries::new(
                        points.iter().copied(),
                        color.stroke_width(2),
                    ))
                    .map_err(err)?
                    .label(name.as_str())
                    .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], color));
                chart
                    .draw_series(points.iter().map(|&p| Circle::new(p, 2, color.filled())))
                    .map_err(err)?;
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .position(SeriesLabelPosition::UpperRight)
                .label_font(("sans-serif", 11))
                .draw()
                .map_err(err)?;
        }};
    }
    if c.log_x && x0 > 0.0 {
        let chart = builder
            .build_cartesian_2d((x0 * 0.8..x1 * 1.25).log_scale(), y0..y1)
            .map_err(err)?;
        body!(chart);
    } else {
        let (x0, x1) = pad(x0, x1);
        let chart = builder.build_cartesian_2d(x0..x1, y0..y1).map_err(err)?;
        body!(chart);
    }
    root.present().map_err(err)?;
    Ok(())
}

/// Stacked bars of the mean per-round stage times of each cell on one link.
fn draw_stages(
    dir: &Path,
    name: &str,
    link: &str,
    cells: &[(String, [f64; 6])],
) -> Result<Vec<PathBuf>, String> {
    // About 110 pixels a bar, so that the labels under them do not run into each other.
    let size = ((110 * cells.len() as u32 + 120).max(760), 460);
    let svg = dir.join(format!("{name}.svg"));
    draw_stage_bars(SVGBackend::new(&svg, size).into_drawing_area(), link, cells)
        .map_err(|e| format!("{}: {e}", svg.display()))?;
    let png = dir.join(format!("{name}.png"));
    draw_stage_bars(
        BitMapBackend::new(&png, size).into_drawing_area(),
        link,
        cells,
    )
    .map_err(|e| format!("{}: {e}", png.display()))?;
    Ok(vec![svg, png])
}

fn draw_stage_bars<DB: DrawingBackend>(
    root: DrawingArea<DB, Shift>,
    link: &str,
    cells: &[(String, [f64; 6])],
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let top = cells
        .iter()
        .map(|(_, t)| t.iter().sum::<f64>())
        .fold(0.0, f64::max)
        .max(1e-6)
        * 1.4; // room for the legend above the bars
    let n = cells.len();
    let mut chart = ChartBuilder::on(&root)
        .caption(
            format!("ms per round by stage, link {link}"),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .right_y_label_area_size(0)
        .build_cartesian_2d(-0.5..n as f64 - 0.5, 0.0..top)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n.max(1))
        .x_label_formatter(&|x| {
            // Bars stand at whole numbers; ticks between them stay blank.
            let i = x.round();
            if (x - i).abs() > 1e-6 || i < 0.0 {
                return String::new();
            }
            cells
                .get(i as usize)
                .map(|c| short(&c.0))
                .unwrap_or_default()
        })
        .y_desc("ms per round (mean over workers)")
        .draw()
        .map_err(err)?;
    for (s, stage) in StageTimes::NAMES.iter().enumerate() {
        let color = Palette99::pick(s).to_rgba();
        chart
            .draw_series(cells.iter().enumerate().map(|(i, (_, t))| {
                let below: f64 = t[..s].iter().sum();
                Rectangle::new(
                    [(i as f64 - 0.35, below), (i as f64 + 0.35, below + t[s])],
                    color.filled(),
                )
            }))
            .map_err(err)?
            .label(*stage)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .label_font(("sans-serif", 11))
        .draw()
        .map_err(err)?;
    root.present().map_err(err)?;
    Ok(())
}

/// A bar label short enough to sit under its bar.
fn short(label: &str) -> String {
    let s: String = label.chars().take(18).collect();
    if s.len() < label.len() {
        s + "…"
    } else {
        s
    }
}
