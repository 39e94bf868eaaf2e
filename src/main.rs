//! The `gradflow` command: train, cluster, bench, predict, data, codec (see [`gradflow::cli`]).

fn main() -> std::process::ExitCode {
    gradflow::cli::main()
}
