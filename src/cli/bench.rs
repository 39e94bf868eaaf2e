//! `gradflow bench SUITE.toml`: runs every cell of a suite as a real cluster (one process per
//! `W`, through the same launcher as `gradflow cluster`), then writes `results.csv` and
//! `summary.md` into the output directory. Each cell keeps its job file, metrics CSV and log
//! under `cells/`. A cell that fails is reported and the suite goes on.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::Instant;

use indicatif::{ProgressBar, ProgressStyle};

use crate::bench::fit::fit_markdown;
use crate::bench::plot::plots;
use crate::bench::report::{
    read_metrics, result_rows, summarize, summary_markdown, CellRun, ResultRow,
};
use crate::bench::{matches, Cell, Suite};

use super::cluster::{catch_interrupts, interrupted, launch, Launch};
use super::netns::Network;

/// Arguments of `gradflow bench`.
#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// The suite file (TOML): a base job and axes.
    pub suite: PathBuf,
    /// Output directory (default: out/bench/SUITE).
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Run only the cells whose id matches (`*` matches anything; without `*`, a substring),
    /// e.g. `--only '*/W4/*topk*'`. Ids: link/W<processes>/model/exchange/compressor/r<repeat>.
    #[arg(long)]
    pub only: Option<String>,
    /// List the cells and check their jobs; run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Write the report (results.csv, summary.md, plots) again from the cells already in the
    /// output directory, without running them.
    #[arg(long, conflicts_with = "dry_run")]
    pub report_only: bool,
    /// Seconds each process waits for the others to connect.
    #[arg(long, default_value_t = 60)]
    pub startup_timeout: u64,
}

/// Runs a suite.
pub fn run(a: BenchArgs) -> Result<(), String> {
    let suite = Suite::load(&a.suite)?;
    let cells: Vec<Cell> = suite
        .cells()
        .into_iter()
        .filter(|c| a.only.as_deref().is_none_or(|p| matches(p, &c.id)))
        .collect();
    if cells.is_empty() {
        return Err(format!(
            "{}: no cell matches {:?}",
            a.suite.display(),
            a.only.as_deref().unwrap_or("")
        ));
    }
    for c in &cells {
        c.job_text(&suite.job, &[])?;
    }
    let left_out = suite.left_out();
    if a.dry_run {
        println!("{} cells of suite `{}`:", cells.len(), suite.name);
        for c in &cells {
            println!("  {}", c.id);
        }
        for l in &left_out {
            println!("left out: {l}");
        }
        return Ok(());
    }
    let out = a
        .out
        .clone()
        .unwrap_or_else(|| Path::new("out/bench").join(&suite.name));
    let cells_dir = out.join("cells");
    std::fs::create_dir_all(&cells_dir).map_err(|e| format!("{}: {e}", cells_dir.display()))?;
    // What the report says about the run (machine, links): kept for --report-only.
    let notes_file = out.join("notes.txt");
    if a.report_only {
        let notes: Vec<String> = std::fs::read_to_string(&notes_file)
            .map_err(|e| format!("{}: {e} (run the suite first)", notes_file.display()))?
            .lines()
            .map(str::to_string)
            .collect();
        let mut runs = Vec::new();
        for cell in &cells {
            let metrics = cells_dir.join(cell.slug()).join("metrics.csv");
            if metrics.exists() {
                runs.push(CellRun {
                    cell: cell.clone(),
                    rows: read_metrics(&metrics)?,
                    wall_seconds: 0.0,
                });
            }
        }
        return report(&suite, &out, &runs, &notes);
    }

    // Ctrl-C stops the running cell, then the suite, and tears the network down.
    catch_interrupts();
    let mut notes = vec![machine()];
    notes.extend(left_out.iter().map(|l| format!("left out: {l}")));
    let bar = progress(cells.len());
    let mut runs = Vec::new();
    let mut failures = Vec::new();
    // Cells are grouped by link (links are the outermost axis): each link's network is set up
    // once, used by its cells, and torn down before the next (also on failure and Ctrl-C).
    let mut i = 0;
    while i < cells.len() {
        let link = cells[i].link.clone();
        let end = i + cells[i..].iter().take_while(|c| c.link == link).count();
        let max_processes = cells[i..end].iter().map(|c| c.processes).max().unwrap_or(1);
        let net = Network::for_link(&link, max_processes)?;
        notes.push(format!("link `{}`: {}", link.name, net.describe()));
        for cell in &cells[i..end] {
            bar.set_message(cell.id.clone());
            match run_cell(&suite, cell, &cells_dir, &net, a.startup_timeout) {
                Ok(run) => runs.push(run),
                Err(e) => {
                    bar.println(format!("cell {} failed: {e}", cell.id));
                    failures.push(format!("cell `{}` failed: {e}", cell.id));
                }
            }
            bar.inc(1);
            if interrupted() {
                break;
            }
        }
        drop(net);
        if interrupted() {
            bar.abandon();
            return Err("interrupted; the emulated network is removed".into());
        }
        i = end;
    }
    bar.finish_and_clear();
    notes.extend(failures.iter().cloned());
    std::fs::write(&notes_file, notes.join("\n") + "\n")
        .map_err(|e| format!("{}: {e}", notes_file.display()))?;
    report(&suite, &out, &runs, &notes)?;
    if failures.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} of {} cells failed",
            failures.len(),
            cells.len()
        ))
    }
}

/// Writes results.csv, summary.md and the plots of `runs` into `out`, and prints the summary.
fn report(suite: &Suite, out: &Path, runs: &[CellRun], notes: &[String]) -> Result<(), String> {
    let rows: Vec<ResultRow> = runs.iter().flat_map(result_rows).collect();
    let results = out.join("results.csv");
    let mut w =
        csv::Writer::from_path(&results).map_err(|e| format!("{}: {e}", results.display()))?;
    for r in &rows {
        w.serialize(r)
            .map_err(|e| format!("{}: {e}", results.display()))?;
    }
    w.flush()
        .map_err(|e| format!("{}: {e}", results.display()))?;
    let summaries = summarize(suite, runs);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let md = summary_markdown(suite, &summaries, notes) + &fit_markdown(suite, runs, cores);
    let summary = out.join("summary.md");
    std::fs::write(&summary, &md).map_err(|e| format!("{}: {e}", summary.display()))?;
    print!("{md}");
    println!("\nwrote {} and {}", results.display(), summary.display());
    match plots(suite, runs, &summaries, out) {
        Ok(files) => println!(
            "plots: {}",
            files
                .iter()
                .map(|f| f.file_name().unwrap_or_default().to_string_lossy())
                .collect::<Vec<_>>()
                .join(", ")
        ),
        Err(e) => eprintln!("plots: {e}"),
    }
    Ok(())
}

/// Runs one cell as a cluster on `net` and reads its metrics.
fn run_cell(
    suite: &Suite,
    cell: &Cell,
    cells_dir: &Path,
    net: &Network,
    startup_timeout: u64,
) -> Result<CellRun, String> {
    let dir = cells_dir.join(cell.slug());
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let metrics = dir.join("metrics.csv");
    let log = dir.join("log.txt");
    let _ = std::fs::remove_file(&metrics);
    let _ = std::fs::remove_file(&log);
    // Each cell writes its own metrics and model beside its job.
    let path = |name: &str| toml::Value::String(dir.join(name).display().to_string());
    let extra = [
        ("output.metrics".to_string(), path("metrics.csv")),
        ("output.model".to_string(), path("model.txt")),
    ];
    let job = dir.join("job.toml");
    std::fs::write(&job, cell.job_text(&suite.job, &extra)?)
        .map_err(|e| format!("{}: {e}", job.display()))?;
    let wrap = |i: usize| net.wrap(i);
    let started = Instant::now();
    launch(&Launch {
        startup_timeout,
        hosts: net.hosts(cell.processes),
        wrap: Some(&wrap),
        remote: None,
        log: Some(&log),
        ..Launch::local(Some(&job), cell.processes, cell.workers, &[])
    })
    .map_err(|e| {
        let last = std::fs::read_to_string(&log)
            .ok()
            .and_then(|t| t.lines().rfind(|l| l.contains("error")).map(str::to_string))
            .unwrap_or_default();
        format!("{e} {last} (log: {})", log.display())
    })?;
    Ok(CellRun {
        cell: cell.clone(),
        rows: read_metrics(&metrics)?,
        wall_seconds: started.elapsed().as_secs_f64(),
    })
}

/// A progress bar over cells with an ETA (hidden when stderr is not a terminal).
fn progress(n: usize) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(n as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} cells, ETA {eta}  {wide_msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

/// The machine, for the report: CPU model, cores, kernel.
fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .map(|l| l.trim_start_matches([' ', '\t', ':']).to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    format!("machine: {model}, {cores} cores, Linux {kernel}")
}
