//! Processes started by the launchers people already use find their place in the cluster
//! from the environment those give them (`src/placement.rs`): real `mpirun` (Debian's
//! `openmpi-bin`, which `.ci/run` installs) starts the same `gradflow train` twice and the
//! two train the model `gradflow cluster` trains; Slurm's variables, as `srun` sets them,
//! place a real pair of processes.

use std::path::Path;
use std::process::Command;

mod common;

use common::{free_ports, gradflow_ok, FIELDS_JOB};

/// The quickstart-sized job of the generated fields table, written into `dir`.
fn job(dir: &Path) -> std::path::PathBuf {
    let job = FIELDS_JOB
        .replace("rows = 20000", "rows = 6000")
        .replace("epochs = 3", "epochs = 2");
    let path = dir.join("job.toml");
    std::fs::write(&path, job).unwrap();
    path
}

/// The model `gradflow cluster -n 2` trains on `job`.
fn cluster_model(dir: &Path, job: &Path) -> String {
    let model = dir.join("cluster.txt");
    gradflow_ok([
        "cluster".to_string(),
        job.display().to_string(),
        "-n=2".into(),
        format!("--set=output.model={:?}", model.display().to_string()),
    ]);
    std::fs::read_to_string(model).unwrap()
}

/// Loopback addresses for two processes.
fn hosts() -> String {
    let ports = free_ports(2);
    format!("127.0.0.1:{},127.0.0.1:{}", ports[0], ports[1])
}

#[test]
fn mpirun_starts_processes_that_train_the_clusters_model() {
    let dir = tempfile::tempdir().unwrap();
    let job = job(dir.path());
    let model = dir.path().join("mpi.txt");
    let out = Command::new("mpirun")
        .args(["--allow-run-as-root", "--oversubscribe", "-n", "2"])
        .args(["-x", "GRADFLOW_CLUSTER_SECRET=mpi-test"])
        .arg(env!("CARGO_BIN_EXE_gradflow"))
        .arg("train")
        .arg(&job)
        .arg(format!("--hosts={}", hosts()))
        .arg(format!(
            "--set=output.model={:?}",
            model.display().to_string()
        ))
        .output()
        .expect("mpirun (Debian's openmpi-bin) must be installed: .ci/run installs it");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for rank in 0..2 {
        let said =
            format!("cluster: process {rank} of 2, from Open MPI (OMPI_COMM_WORLD_RANK={rank}");
        assert!(err.contains(&said), "{err}");
    }
    assert!(
        std::fs::read_to_string(&model).unwrap() == cluster_model(dir.path(), &job),
        "the models differ"
    );
}

/// A free loopback port `p` whose next, `p + 1`, is free too.
fn two_ports() -> u16 {
    use std::net::TcpListener;
    for _ in 0..100 {
        let first = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = first.local_addr().unwrap().port();
        if p < u16::MAX && TcpListener::bind(("127.0.0.1", p + 1)).is_ok() {
            return p;
        }
    }
    panic!("no two free ports in a row");
}

/// Two processes started with the variables `srun -N 1 -n 2` gives its tasks (the step's
/// node list and tasks per node; here the node is this machine's loopback address) find each
/// other at the addresses the variables imply and train the cluster's model.
#[test]
fn slurm_variables_place_real_processes() {
    let dir = tempfile::tempdir().unwrap();
    let job = job(dir.path());
    let model = dir.path().join("slurm.txt");
    let port = two_ports();
    let start = |rank: usize| {
        Command::new(env!("CARGO_BIN_EXE_gradflow"))
            .arg("train")
            .arg(&job)
            .arg(format!(
                "--set=output.model={:?}",
                model.display().to_string()
            ))
            .env("GRADFLOW_CLUSTER_SECRET", "slurm-test")
            .env("SLURM_PROCID", rank.to_string())
            .env("SLURM_NTASKS", "2")
            .env("SLURM_JOB_NODELIST", "127.0.0.1")
            .env("SLURM_STEP_NODELIST", "127.0.0.1")
            .env("SLURM_STEP_TASKS_PER_NODE", "2")
            .env("SLURM_TASKS_PER_NODE", "2")
            .env("GRADFLOW_PORT", port.to_string())
            .output()
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| start(0));
        let b = s.spawn(|| start(1));
        (a.join().unwrap().unwrap(), b.join().unwrap().unwrap())
    });
    for (rank, out) in [a, b].iter().enumerate() {
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "task {rank}: {err}");
        let said = format!("cluster: process {rank} of 2, from Slurm (SLURM_PROCID={rank}");
        assert!(err.contains(&said), "{err}");
    }
    assert!(
        std::fs::read_to_string(&model).unwrap() == cluster_model(dir.path(), &job),
        "the models differ"
    );
}
