//! Speed-ups on paper, from the cost model of a round (`src/exchange/cost.rs`): for W = 8 … 256
//! processes of one worker and links of 1, 10 and 100 Gbit, the predicted round of
//! `sharded`/none and of the fastest candidate `auto` ranks first (its margin for a lossy codec
//! applied), for two shapes of data, with this machine's CPU measured for every part.
//!
//!   cargo bench --bench scaling_model [-- OUT_DIR]      (default bench/results/scaling_model)
//!
//! Writes `table.md` and `speedup.svg` (and `.png`) there. What is measured: a worker's gradient, adding and
//! the optimizer's step per key, and every candidate codec with its memory on gradients of the
//! shape's own rows, whole and split into W owners' pieces (`auto::calibrate`); the union
//! of W workers' gradients, the sum's size, by drawing W batches. What is assumed:
//! - each worker's batch is fixed at [`BATCH_ROWS`] rows (weak scaling: more processes, a
//!   larger global batch), so the sum's keys grow with W and a worker's message does not shrink;
//! - a hop (a message and timely's progress between two machines) costs [`HOP_MS`];
//! - a process sends at [`GOODPUT`] of the link's rate, to all others at once;
//! - every process has its own cores (none shared, unlike on the development VM).

use std::io::Write;
use std::path::{Path, PathBuf};

use gradflow::auto::calibrate::{measure_alone, Candidate};
use gradflow::codec::CodecSpec;
use gradflow::exchange::cost::{choose_among, keeps_the_loss, modelled, predict, LinkCost};
use gradflow::exchange::ExchangeKind;
use gradflow::job::Job;
use plotters::prelude::*;

/// Rows in a worker's batch: the exchange benchmark's at 4 processes (1% batches of 160,000
/// training rows, split four ways).
const BATCH_ROWS: usize = 400;
/// A hop between two machines, ms.
const HOP_MS: f64 = 0.1;
/// The fraction of a link's rate a process's payload gets (TCP and timely headers).
const GOODPUT: f64 = 0.9;
const PROCESSES: [usize; 6] = [8, 16, 32, 64, 128, 256];
const GBITS: [f64; 3] = [1.0, 10.0, 100.0];

/// A shape of data: its name and the job that generates it.
const SHAPES: [(&str, &str); 2] = [
    (
        "CTR table, 105k features",
        "[data.synth]\nkind = \"fields\"\nrows = 200000\nseed = 1\n",
    ),
    (
        "10^7 features",
        "[data.synth]\nkind = \"ctr\"\nrows = 110000\ndim = 10000000\nnnz = 40\nseed = 1\n",
    ),
];

struct Row {
    shape: &'static str,
    processes: usize,
    gbit: f64,
    baseline_ms: f64,
    chosen: String,
    chosen_ms: f64,
}

fn main() -> Result<(), String> {
    let out = std::env::args()
        .skip(1)
        .find(|a| !a.starts_with('-'))
        .map_or_else(
            || PathBuf::from("bench/results/scaling_model"),
            PathBuf::from,
        );
    let codecs: Vec<Candidate> = keeps_the_loss("linear")
        .iter()
        .map(|&n| {
            let spec = CodecSpec::with_defaults(n).expect("a codec");
            let job = Job::parse(
                &format!("[train]\ncompressor = {{ name = \"{n}\" }}"),
                Path::new("job.toml"),
                &[],
            )
            .expect("a job");
            (n.to_string(), spec, job.memory())
        })
        .collect();
    let mut rows = Vec::new();
    for (shape, data) in SHAPES {
        let text = format!(
            "{data}[model]\nloss = \"logistic\"\nlambda = 1e-6\n[optimizer]\nkind = \"adam\"\n\
             lr = 0.01\n[train]\nbatch_fraction = 0.01\nseed = 42\n"
        );
        let job = Job::parse(&text, Path::new("job.toml"), &[]).map_err(|e| e.to_string())?;
        let codecs = codecs.clone();
        let downlinks = gradflow::auto::downlinks();
        let measured = timely::execute_directly(move |worker| -> Result<Vec<Row>, String> {
            let (data, dim, _, _) = job.load_on(worker)?;
            let mut plan = job.plan(dim, 1);
            plan.rounds_per_epoch = (data.train.rows() / BATCH_ROWS).max(1) as u64;
            let mut rows = Vec::new();
            for processes in PROCESSES {
                eprintln!("{shape}: measuring {processes} processes' round");
                let cal = measure_alone(&data, &plan, processes, &codecs, &downlinks)?;
                let variants = gradflow::auto::variants(&cal.downlinks);
                let r = &cal.round;
                eprintln!(
                    "  gradient {:.3} ms ({:.0} pairs), sum of {processes}: {:.0} keys, add {:.1} \
                     ns, update {:.1} ns a key",
                    r.gradient_ms, r.pairs, r.union_keys, r.add_ns, r.update_ns
                );
                let none = cal.codecs.iter().find(|c| c.name == "none").expect("none");
                for gbit in GBITS {
                    let mut round = cal.round.clone();
                    round.link = LinkCost {
                        bytes_per_s: gbit * 1e9 / 8.0 * GOODPUT,
                        hop_ms: HOP_MS,
                    };
                    let both = modelled();
                    let (ranked, i) = choose_among(&round, &both, &cal.codecs, &variants);
                    rows.push(Row {
                        shape,
                        processes,
                        gbit,
                        baseline_ms: predict(&round, ExchangeKind::Sharded, none)
                            .expect("modelled")
                            .round_ms,
                        chosen: named(&ranked[i]),
                        chosen_ms: ranked[i].prediction.round_ms,
                    });
                }
            }
            Ok(rows)
        })?;
        rows.extend(measured);
    }
    std::fs::create_dir_all(&out).map_err(|e| format!("{}: {e}", out.display()))?;
    let table = markdown(&rows);
    print!("{table}");
    let path = out.join("table.md");
    std::fs::File::create(&path)
        .and_then(|mut f| f.write_all(table.as_bytes()))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let svg = out.join("speedup.svg");
    plot(&rows, &svg)?;
    println!(
        "\nwrote {} and {} (and .png)",
        path.display(),
        svg.display()
    );
    Ok(())
}

/// A candidate in words: exchange + codec, and its round in flight and downlink if any.
fn named(c: &gradflow::exchange::cost::Candidate) -> String {
    let mut s = format!("{} + {}", c.strategy.name(), c.codec);
    if c.staleness > 0 {
        s.push_str(&format!(", staleness {}", c.staleness));
    }
    if let Some(d) = &c.downlink {
        s.push_str(&format!(", downlink {d}"));
    }
    s
}

fn markdown(rows: &[Row]) -> String {
    let mut md = format!(
        "Predicted round, ms, of `sharded`/none and of the fastest configuration, with the \
         speed-up (`cargo bench --bench scaling_model`; a worker's batch {BATCH_ROWS} rows, a \
         hop {HOP_MS} ms, {:.0}% of the link's rate).\n\n",
        GOODPUT * 100.0
    );
    md.push_str("| shape | W | link | sharded/none ms | fastest | its ms | speed-up |\n");
    md.push_str("|---|---|---|---|---|---|---|\n");
    for r in rows {
        md.push_str(&format!(
            "| {} | {} | {} Gbit | {:.2} | {} | {:.2} | {:.2}x |\n",
            r.shape,
            r.processes,
            r.gbit,
            r.baseline_ms,
            r.chosen,
            r.chosen_ms,
            r.baseline_ms / r.chosen_ms
        ));
    }
    md
}

/// Speed-up against W, one line per shape and link, as SVG at `path` and PNG beside it.
fn plot(rows: &[Row], path: &Path) -> Result<(), String> {
    if !gradflow::bench::plot::font() {
        return Err("no font for the plot's text (DejaVu Sans or Liberation Sans)".into());
    }
    let size = (900, 560);
    draw(SVGBackend::new(path, size).into_drawing_area(), rows, path)?;
    let png = path.with_extension("png");
    draw(
        BitMapBackend::new(&png, size).into_drawing_area(),
        rows,
        &png,
    )
}

fn draw<DB: DrawingBackend>(
    root: DrawingArea<DB, plotters::coord::Shift>,
    rows: &[Row],
    path: &Path,
) -> Result<(), String> {
    let err = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let top = rows
        .iter()
        .map(|r| r.baseline_ms / r.chosen_ms)
        .fold(1.0, f64::max);
    let mut chart = ChartBuilder::on(&root)
        .caption(
            "Predicted speed-up of the fastest configuration over sharded/none",
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(50)
        .build_cartesian_2d((8f64..256f64).log_scale(), 0.9f64..top * 1.1)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .x_desc("processes (W)")
        .y_desc("speed-up (1 = sharded/none)")
        .x_label_formatter(&|x| format!("{x:.0}"))
        .light_line_style(WHITE)
        .draw()
        .map_err(|e| err(&e))?;
    let mut series = 0;
    for (shape, _) in SHAPES {
        for gbit in GBITS {
            let color = Palette99::pick(series).to_rgba();
            let style = match shape.starts_with("10^7") {
                true => ShapeStyle::from(color).stroke_width(2),
                false => ShapeStyle::from(color).stroke_width(1),
            };
            let points: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.shape == shape && r.gbit == gbit)
                .map(|r| (r.processes as f64, r.baseline_ms / r.chosen_ms))
                .collect();
            chart
                .draw_series(LineSeries::new(points.clone(), style))
                .map_err(|e| err(&e))?
                .label(format!("{shape}, {gbit} Gbit"))
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 16, y)], style));
            chart
                .draw_series(
                    points
                        .into_iter()
                        .map(|p| Circle::new(p, 3, style.filled())),
                )
                .map_err(|e| err(&e))?;
            series += 1;
        }
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| err(&e))?;
    root.present().map_err(|e| err(&e))
}
