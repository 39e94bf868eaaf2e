//! The `gradflow` command: train, cluster, predict, data synth.

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    // Like other Unix tools, end quietly when the reader of our output goes away
    // (`gradflow ... | head`) instead of panicking on the failed write.
    // SAFETY: restoring the default action of a signal before any thread starts.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let args = cli::Cli::parse();
    match cli::run(args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
