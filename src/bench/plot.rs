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
use super::{Cell, Suite};
use crate::metrics::StageTimes;

/// A line: its label and points.
type Series = (String, Vec<(f64, f64)>);

/// One chart's content.
struct Chart {
    title: String,
    /// Lines under the title: what the chart compares with, what it leaves out.
    notes: Vec<String>,
    x: String,
    y: String,
    series: Vec<Series>,
    log_x: bool,
    /// A dashed horizontal line at this value, with its label (a speed-up of 1: the baseline).
    reference: Option<(f64, String)>,
}

impl Chart {
    fn new(title: String, x: &str, y: &str, series: Vec<Series>, log_x: bool) -> Chart {
        Chart {
            title,
            notes: Vec::new(),
            x: x.into(),
            y: y.into(),
            series,
            log_x,
            reference: None,
        }
    }
}

/// Colours a reader tells apart (Tableau 10: one yellowish, no two alike); past ten series the
/// markers tell them apart too.
const COLORS: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (23, 190, 207),
];

/// Series `i`'s colour.
fn color(i: usize) -> RGBColor {
    let (r, g, b) = COLORS[i % COLORS.len()];
    RGBColor(r, g, b)
}

/// Draws series `i`'s marker at `at` (pixels of `area`): circles for the first ten colours,
/// then triangles, squares, crosses.
fn draw_marker<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    i: usize,
    at: (i32, i32),
) -> Result<(), String> {
    let style = color(i).filled();
    let drawn = match i / COLORS.len() % 4 {
        0 => area.draw(&Circle::new(at, 3, style)),
        1 => area.draw(&TriangleMarker::new(at, 4, style)),
        2 => area.draw(&Rectangle::new(
            [(at.0 - 3, at.1 - 3), (at.0 + 3, at.1 + 3)],
            style,
        )),
        _ => area.draw(&Cross::new(at, 3, style.stroke_width(2))),
    };
    drawn.map_err(|e| e.to_string())
}

/// Draws row `i`'s swatch of a key at a point of the key's area.
type Swatch<'a, DB> = &'a dyn Fn(usize, (i32, i32), &DrawingArea<DB, Shift>) -> Result<(), String>;

/// The width of a chart's key beside it (labels never cover points or get cut).
const KEY_WIDTH: u32 = 300;

/// The height of the title and each note line.
const LINE: i32 = 18;

/// Draws `title` and `notes` at the top of `root` and returns the area below them.
fn heading<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    notes: &[String],
) -> Result<DrawingArea<DB, Shift>, String>
where
    DB::ErrorType: 'static,
{
    let height = LINE * (notes.len() as i32 + 1) + 12;
    let (top, rest) = root.split_vertically(height);
    let text = |size| ("sans-serif", size).into_font().color(&BLACK);
    top.draw(&Text::new(title.to_string(), (12, 6), text(17)))
        .map_err(|e| e.to_string())?;
    for (i, note) in notes.iter().enumerate() {
        let at = (12, 8 + LINE * (i as i32 + 1));
        top.draw(&Text::new(note.clone(), at, text(12)))
            .map_err(|e| e.to_string())?;
    }
    Ok(rest)
}

/// Writes `rows` (a swatch drawn by `swatch` and a label each) down `key`, as many as fit;
/// the rest are counted in a last line.
fn draw_key<DB: DrawingBackend>(
    key: &DrawingArea<DB, Shift>,
    rows: &[String],
    swatch: Swatch<DB>,
) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let height = key.dim_in_pixel().1 as i32;
    let fit = ((height - 30) / 16).max(1) as usize;
    let shown = if rows.len() > fit {
        fit - 1
    } else {
        rows.len()
    };
    let font = ("sans-serif", 11).into_font().color(&BLACK);
    // Labels longer than the key is wide are cut at about 46 characters.
    let cut = |l: &str| match l.char_indices().nth(46) {
        Some((i, _)) => format!("{}…", &l[..i]),
        None => l.to_string(),
    };
    for (i, label) in rows.iter().take(shown).enumerate() {
        let y = 20 + 16 * i as i32;
        swatch(i, (14, y), key)?;
        key.draw(&Text::new(cut(label), (30, y - 6), font.clone()))
            .map_err(|e| e.to_string())?;
    }
    if shown < rows.len() {
        let y = 20 + 16 * shown as i32;
        let more = format!("and {} more (see results.csv)", rows.len() - shown);
        key.draw(&Text::new(more, (30, y - 6), font))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
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
    let label = |r: &CellRun| cell_label(suite, &r.cell, suite.processes.len() > 1);
    // With several models, each model's curves get their own charts (each its own target).
    let models: Vec<Option<&str>> = match suite.models.len() {
        1 => vec![None],
        _ => suite
            .models
            .iter()
            .map(|m| Some(m.label.as_str()))
            .collect(),
    };
    for (link, model) in suite
        .links
        .iter()
        .flat_map(|l| models.iter().map(move |m| (l, *m)))
    {
        // Curves of the first repeat (repeats differ in timing only).
        let of_link: Vec<&(&CellRun, Vec<ResultRow>)> = results
            .iter()
            .filter(|(r, _)| r.cell.link.name == link.name && r.cell.repeat == 0)
            .filter(|(r, _)| model.is_none_or(|m| r.cell.model == m))
            .collect();
        if of_link.is_empty() {
            continue;
        }
        let (of, suffix) = match model {
            Some(m) => (format!(", model {m}"), format!("-{m}")),
            None => (String::new(), String::new()),
        };
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
        // The target loss, when the link's cells share one (one baseline group).
        let mut targets: Vec<u64> = summaries
            .iter()
            .filter(|s| s.cell.link.name == link.name && s.cell.repeat == 0)
            .filter(|s| model.is_none_or(|m| s.cell.model == m))
            .filter_map(|s| s.target_loss.map(f64::to_bits))
            .collect();
        targets.sort_unstable();
        targets.dedup();
        let target = match targets[..] {
            [t] => Some((
                f64::from_bits(t),
                format!("target: {:.4}", f64::from_bits(t)),
            )),
            _ => None,
        };
        let mut by_time = Chart::new(
            format!("test loss against wall time, link {}{of}", link.name),
            "seconds",
            "test loss",
            curve(|r| r.seconds),
            false,
        );
        by_time.reference = target;
        charts.push((format!("loss-vs-time-{}{suffix}", link.name), by_time));
        charts.push((
            format!("loss-vs-bytes-{}{suffix}", link.name),
            Chart::new(
                format!(
                    "test loss against bytes sent per process, link {}{of}",
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
    if suite.processes.len() > 1 {
        files.extend(draw_both(
            dir,
            "bytes-vs-processes",
            &bytes_chart(&results),
        )?);
    }
    if let Some(chart) = speedup_chart(suite, summaries) {
        files.extend(draw_both(dir, "speedup-vs-bandwidth", &chart)?);
    }
    Ok(files)
}

/// Bytes per process per round against W, per (link, exchange, compressor).
fn bytes_chart(results: &[(&CellRun, Vec<ResultRow>)]) -> Chart {
    let mut lines: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for (r, rows) in results {
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
    Chart::new(
        "bytes per process per round against processes".to_string(),
        "processes (W)",
        "kB per process per round",
        lines.into_iter().collect(),
        true,
    )
}

/// Speed-up in time to the target against link rate, per (processes, exchange, compressor),
/// over the links with a rate; `None` unless there are two rates. The notes state the baseline
/// and the target, and list the series that never reached the target (they have no point).
fn speedup_chart(suite: &Suite, summaries: &[Summary]) -> Option<Chart> {
    let rated: Vec<(f64, &Summary)> = summaries
        .iter()
        .filter_map(|s| {
            let bits = s.cell.link.rate_bits()?.ok()?;
            Some((bits as f64 / 1e6, s))
        })
        .collect();
    let rates = rated.iter().map(|(b, _)| b.to_bits());
    if rates.collect::<std::collections::BTreeSet<_>>().len() < 2 {
        return None;
    }
    // The median over repeats at each rate.
    let mut at: BTreeMap<(String, u64), Vec<f64>> = BTreeMap::new();
    let mut at_any = std::collections::BTreeSet::new();
    for (mbit, s) in &rated {
        let key = cell_label(suite, &s.cell, true);
        if let Some(x) = s.speedup {
            at.entry((key.clone(), mbit.to_bits())).or_default().push(x);
        }
        at_any.insert(key);
    }
    let mut lines: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for ((key, mbit), xs) in at {
        let point = (f64::from_bits(mbit), median(xs).unwrap_or(0.0));
        lines.entry(key).or_default().push(point);
    }
    for points in lines.values_mut() {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    let never: Vec<String> = at_any
        .into_iter()
        .filter(|k| !lines.contains_key(k))
        .collect();
    let mut chart = Chart::new(
        "speed-up in time to the target loss against link rate".to_string(),
        "link rate, Mbit/s",
        "speed-up (baseline's time / this one's)",
        lines.into_iter().collect(),
        true,
    );
    chart.notes.push(format!(
        "baseline: {} + {} on the same link; target: a test loss within {}% of the \
         baseline's {} one; median over repeats",
        suite.baseline.0,
        suite.baseline.1,
        suite.target * 100.0,
        suite.target_of.word()
    ));
    if !never.is_empty() {
        chart
            .notes
            .push(format!("never reached the target: {}", never.join("; ")));
    }
    chart.reference = Some((1.0, "1x: as fast as the baseline".into()));
    Some(chart)
}

/// A cell's name in a chart's key: its exchange and compressor, after its process count (when
/// `processes`) and its model (when the suite has several): what tells its line from the others.
fn cell_label(suite: &Suite, c: &Cell, processes: bool) -> String {
    let mut l = format!("{} {}", c.exchange, c.compressor);
    if processes {
        l = format!("W{} {l}", c.processes);
    }
    if suite.models.len() > 1 {
        l = format!("{} {l}", c.model);
    }
    l
}

/// A log axis's tick label: 1, 2 and 5 times a power of ten are written, the ticks between
/// them left blank (plotters labels every tick, and near the top of a decade they overlap).
fn log_tick(x: f64) -> String {
    if x <= 0.0 {
        return String::new();
    }
    let decade = 10f64.powf(x.log10().floor());
    let m = x / decade;
    match [1.0, 2.0, 5.0, 10.0]
        .iter()
        .find(|&&t| (m - t).abs() < 0.01 * t)
    {
        Some(t) => format!("{}", t * decade),
        None => String::new(),
    }
}

/// Draws a chart as `name.svg` and `name.png`.
fn draw_both(dir: &Path, name: &str, chart: &Chart) -> Result<Vec<PathBuf>, String> {
    let size = (760 + KEY_WIDTH, 480);
    let svg = dir.join(format!("{name}.svg"));
    draw(SVGBackend::new(&svg, size).into_drawing_area(), chart)
        .map_err(|e| format!("{}: {e}", svg.display()))?;
    let png = dir.join(format!("{name}.png"));
    draw(BitMapBackend::new(&png, size).into_drawing_area(), chart)
        .map_err(|e| format!("{}: {e}", png.display()))?;
    Ok(vec![svg, png])
}

fn draw<DB: DrawingBackend>(root: DrawingArea<DB, Shift>, c: &Chart) -> Result<(), String>
where
    DB::ErrorType: 'static,
{
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| e.to_string();
    root.fill(&WHITE).map_err(err)?;
    let body = heading(&root, &c.title, &c.notes)?;
    let width = body.dim_in_pixel().0;
    let (plot, key) = body.split_horizontally(width.saturating_sub(KEY_WIDTH));
    let pts = c.series.iter().flat_map(|(_, p)| p.iter());
    let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
    for &(x, y) in pts {
        (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
    }
    if x0 > x1 {
        (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
    }
    if let Some((r, _)) = c.reference {
        (y0, y1) = (y0.min(r), y1.max(r));
    }
    let pad = |lo: f64, hi: f64| {
        let d = (hi - lo).abs().max(hi.abs() * 1e-3).max(1e-9) * 0.05;
        (lo - d, hi + d)
    };
    let (y0, y1) = pad(y0, y1);
    let mut builder = ChartBuilder::on(&plot);
    builder
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60);
    macro_rules! body {
        ($chart:expr, $x0:expr, $x1:expr) => {{
            let mut chart = $chart;
            let mut mesh = chart.configure_mesh();
            mesh.x_desc(c.x.as_str()).y_desc(c.y.as_str());
            let ticks = |x: &f64| log_tick(*x);
            if c.log_x {
                mesh.x_label_formatter(&ticks);
            }
            mesh.draw().map_err(err)?;
            if let Some((r, _)) = &c.reference {
                let dashes = DashedLineSeries::new([($x0, *r), ($x1, *r)], 6, 4, BLACK.into());
                chart.draw_series(dashes).map_err(err)?;
            }
            for (i, (_, points)) in c.series.iter().enumerate() {
                let style = color(i).stroke_width(2);
                chart
                    .draw_series(LineSeries::new(points.iter().copied(), style))
                    .map_err(err)?;
                // Markers in the backend's pixels, on the whole drawing.
                for p in points {
                    draw_marker(&root, i, chart.backend_coord(p))?;
                }
            }
        }};
    }
    if c.log_x && x0 > 0.0 {
        let (x0, x1) = (x0 * 0.8, x1 * 1.25);
        let chart = builder
            .build_cartesian_2d((x0..x1).log_scale(), y0..y1)
            .map_err(err)?;
        body!(chart, x0, x1);
    } else {
        let (x0, x1) = pad(x0, x1);
        let chart = builder.build_cartesian_2d(x0..x1, y0..y1).map_err(err)?;
        body!(chart, x0, x1);
    }
    let mut rows: Vec<String> = c.series.iter().map(|(l, _)| l.clone()).collect();
    let series = rows.len();
    rows.extend(c.reference.iter().map(|(_, label)| label.clone()));
    draw_key(&key, &rows, &|i, (x, y), area| {
        if i == series {
            let dashes = [(x - 10, y), (x - 4, y), (x + 2, y), (x + 8, y)];
            for d in dashes.chunks(2) {
                area.draw(&PathElement::new(d.to_vec(), BLACK))
                    .map_err(|e| e.to_string())?;
            }
            return Ok(());
        }
        let line = PathElement::new([(x - 10, y), (x + 10, y)], color(i).stroke_width(2));
        area.draw(&line).map_err(|e| e.to_string())?;
        draw_marker(area, i, (x, y))
    })?;
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
    // At least 40 pixels a bar, and the key beside them.
    let size = ((40 * cells.len() as u32 + 120).max(760) + KEY_WIDTH, 480);
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
    let title = format!("ms per round by stage, link {link}");
    let notes = ["the bars are numbered as the cells in the key".to_string()];
    let body = heading(&root, &title, &notes)?;
    let width = body.dim_in_pixel().0;
    let (plot, key) = body.split_horizontally(width.saturating_sub(KEY_WIDTH));
    let top = cells
        .iter()
        .map(|(_, t)| t.iter().sum::<f64>())
        .fold(0.0, f64::max)
        .max(1e-6)
        * 1.05;
    let n = cells.len();
    let mut chart = ChartBuilder::on(&plot)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(-0.5..n as f64 - 0.5, 0.0..top)
        .map_err(err)?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n.max(1))
        .x_label_formatter(&|x| {
            // Bars stand at whole numbers, numbered from 1; ticks between them stay blank.
            let i = x.round();
            match (x - i).abs() > 1e-6 || i < 0.0 || i as usize >= n {
                true => String::new(),
                false => format!("{}", i as usize + 1),
            }
        })
        .x_desc("cell")
        .y_desc("ms per round (mean over workers)")
        .draw()
        .map_err(err)?;
    for s in 0..StageTimes::NAMES.len() {
        chart
            .draw_series(cells.iter().enumerate().map(|(i, (_, t))| {
                let below: f64 = t[..s].iter().sum();
                Rectangle::new(
                    [(i as f64 - 0.35, below), (i as f64 + 0.35, below + t[s])],
                    color(s).filled(),
                )
            }))
            .map_err(err)?;
    }
    let stages = StageTimes::NAMES.len();
    let mut rows: Vec<String> = StageTimes::NAMES.iter().map(|s| s.to_string()).collect();
    rows.extend(
        cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{}  {}", i + 1, c.0)),
    );
    draw_key(&key, &rows, &|i, (x, y), area| {
        if i >= stages {
            return Ok(());
        }
        let swatch = Rectangle::new([(x - 6, y - 5), (x + 6, y + 5)], color(i).filled());
        area.draw(&swatch).map_err(|e| e.to_string())
    })?;
    root.present().map_err(err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `x` of every SVG text element whose text contains `needle`.
    fn text_x(svg: &str, needle: &str) -> Vec<f64> {
        svg.split("<text")
            .filter(|t| {
                t.split_once('>')
                    .is_some_and(|(_, rest)| rest.contains(needle))
            })
            .filter_map(|t| {
                let x = t.split("x=\"").nth(1)?.split('"').next()?;
                x.parse().ok()
            })
            .collect()
    }

    /// Twelve series with long labels, a note and a reference line: every label is in the
    /// key beside the plot (none over it, none cut short of its parameters), the notes are
    /// under the title, and the twelve colours-and-markers differ.
    #[test]
    fn the_key_stands_beside_the_plot_and_names_every_series() {
        if !font() {
            eprintln!("no TrueType font: the plot test is skipped (.ci/run installs one)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let label = |i: usize| format!("W4 sharded topk:ratio=0.0{i},keys=raw");
        let series: Vec<Series> = (0..12)
            .map(|i| (label(i), vec![(100.0, 0.5 + i as f64 * 0.1), (1000.0, 1.5)]))
            .collect();
        let mut chart = Chart::new("speed-up".into(), "link rate", "speed-up", series, true);
        chart.notes.push("baseline: sharded + none".into());
        chart.reference = Some((1.0, "1x: as fast as the baseline".into()));
        let files = draw_both(dir.path(), "c", &chart).unwrap();
        assert_eq!(files.len(), 2);
        let svg = std::fs::read_to_string(dir.path().join("c.svg")).unwrap();
        let plot_width = 760.0;
        for i in 0..12 {
            let xs = text_x(&svg, &label(i));
            assert_eq!(xs.len(), 1, "{}", label(i));
            assert!(xs[0] > plot_width, "{}: x {}", label(i), xs[0]);
        }
        let xs = text_x(&svg, "1x: as fast as the baseline");
        assert!(xs.len() == 1 && xs[0] > plot_width, "{xs:?}");
        assert_eq!(text_x(&svg, "baseline: sharded + none"), [12.0]);
        let styles: std::collections::HashSet<(usize, usize)> = (0..12)
            .map(|i| (i % COLORS.len(), i / COLORS.len()))
            .collect();
        assert_eq!(styles.len(), 12);
        assert!(COLORS
            .iter()
            .all(|c| COLORS.iter().filter(|d| *d == c).count() == 1));
    }

    /// A cell's summary with only its speed-up: what the speed-up chart reads.
    /// The suite of `text` and a summary of each of its cells with the speed-up `speedup` gives.
    fn suite_with_speedups(
        text: &str,
        speedup: impl Fn(&Cell) -> Option<f64>,
    ) -> (crate::bench::Suite, Vec<Summary>, tempfile::TempDir) {
        let (suite, dir) = crate::bench::tests::suite(text).unwrap();
        let summaries = suite
            .cells()
            .into_iter()
            .map(|cell| {
                let x = speedup(&cell);
                with_speedup(cell, x)
            })
            .collect();
        (suite, summaries, dir)
    }

    fn with_speedup(cell: Cell, speedup: Option<f64>) -> Summary {
        Summary {
            speedup,
            cell,
            seconds_per_epoch: 1.0,
            up_bytes: 0.0,
            down_bytes: 0.0,
            eval_bytes: 0.0,
            final_loss: None,
            final_accuracy: None,
            final_auc: None,
            min_loss: None,
            target_loss: None,
            time_to_target: None,
            choice_seconds: 0.0,
            free_link_bound: None,
        }
    }

    /// Each model of a suite gets its own speed-up line per configuration (two models' 2x and
    /// 4x are not pooled into one median of 3x), labelled with the model; a log axis labels
    /// 1, 2 and 5 times a power of ten and leaves the ticks between blank.
    #[test]
    fn the_speedup_chart_keeps_models_apart_and_its_log_axis_readable() {
        let (suite, summaries, _dir) = suite_with_speedups(
            r#"
job = "base.toml"
processes = [4]
links = [{ name = "slow", rate = "100mbit" }, { name = "fast", rate = "1gbit" }]
[[model]]
label = "small"
[[model]]
label = "large"
factors = 8
kind = "fm"
"#,
            |cell| Some(if cell.model == "large" { 4.0 } else { 2.0 }),
        );
        let chart = speedup_chart(&suite, &summaries).unwrap();
        let lines: Vec<(&str, f64)> = chart
            .series
            .iter()
            .map(|(name, points)| (name.as_str(), points[0].1))
            .collect();
        assert_eq!(
            lines,
            [("large W4 job job", 4.0), ("small W4 job job", 2.0)]
        );
        let ticks: Vec<String> = [100.0, 200.0, 300.0, 500.0, 800.0, 1000.0, 0.05]
            .into_iter()
            .map(log_tick)
            .collect();
        assert_eq!(ticks, ["100", "200", "", "500", "", "1000", "0.05"]);
    }

    /// The speed-up chart names its baseline and target, draws one line per configuration
    /// that reached the target, and lists the configurations that never did.
    #[test]
    fn the_speedup_chart_states_its_baseline_and_lists_what_never_reached_the_target() {
        let (suite, summaries, _dir) = suite_with_speedups(
            r#"
job = "base.toml"
processes = [4]
exchange = ["sharded", "allgather"]
links = [{ name = "slow", rate = "100mbit" }, { name = "fast", rate = "1gbit" }]
target = 0.01
[[compressor]]
name = "none"
[[compressor]]
name = "topk"
ratio = 0.01
"#,
            |cell| {
                // allgather + topk never reaches the target; the others do, faster on the
                // slow link.
                let never = cell.exchange == "allgather" && cell.compressor.starts_with("topk");
                let slow = cell.link.name == "slow";
                (!never).then_some(if slow { 2.0 } else { 1.1 })
            },
        );
        let chart = speedup_chart(&suite, &summaries).unwrap();
        let names: Vec<&str> = chart.series.iter().map(|s| s.0.as_str()).collect();
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(
            names.iter().all(|n| !n.contains("allgather topk")),
            "{names:?}"
        );
        for (_, points) in &chart.series {
            assert_eq!(points, &[(100.0, 2.0), (1000.0, 1.1)]);
        }
        assert!(
            chart.notes[0].starts_with(
                "baseline: sharded + none on the same link; target: a \
                                        test loss within 1% of the baseline's final one"
            ),
            "{:?}",
            chart.notes
        );
        assert_eq!(
            chart.notes[1],
            "never reached the target: W4 allgather topk,ratio=0.01"
        );
        assert_eq!(chart.reference.as_ref().map(|r| r.0), Some(1.0));
        // One link rate: no chart.
        let one: Vec<Summary> = summaries
            .into_iter()
            .filter(|s| s.cell.link.name == "slow")
            .collect();
        assert!(speedup_chart(&suite, &one).is_none());
    }
}
