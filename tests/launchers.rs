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

/// The repository's deployment file `path`.
fn deploy(path: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(path)
}

/// `deploy/mpi/run.sh` (mpirun with the secret passed on and a hostfile of the ranks'
/// addresses) starts two ranks that train the cluster's model.
#[test]
fn mpirun_starts_processes_that_train_the_clusters_model() {
    let dir = tempfile::tempdir().unwrap();
    let job = job(dir.path());
    let model = dir.path().join("mpi.txt");
    std::fs::write(dir.path().join("hosts.txt"), hosts().replace(',', "\n")).unwrap();
    let bin = Path::new(env!("CARGO_BIN_EXE_gradflow")).parent().unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let with_output = std::fs::read_to_string(&job).unwrap()
        + &format!("[output]\nmodel = {:?}\n", model.display().to_string());
    std::fs::write(&job, with_output).unwrap();
    let out = Command::new("bash")
        .arg(deploy("mpi/run.sh"))
        .args(["job.toml", "2"])
        .current_dir(dir.path())
        .env("PATH", path)
        .env("HOSTS", "hosts.txt")
        .env("OMPI_MCA_rmaps_base_oversubscribe", "1")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "mpirun (Debian's openmpi-bin, which .ci/run installs): {err}"
    );
    for rank in 0..2 {
        let said =
            format!("cluster: process {rank} of 2, from Open MPI (OMPI_COMM_WORLD_RANK={rank}");
        assert!(err.contains(&said), "{err}");
    }
    assert!(
        err.contains("cluster: run `pmix-"),
        "mpirun's job is the run: {err}"
    );
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

/// The environment variables a Kubernetes manifest's container sets with a literal `value`,
/// and its `command`.
fn manifest(text: &str) -> (Vec<String>, Vec<(String, String)>) {
    let unquote = |s: &str| s.trim().trim_matches('"').to_string();
    let command = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("command: ["))
        .map(|c| c.trim_end_matches(']').split(',').map(unquote).collect())
        .expect("a command");
    let lines: Vec<&str> = text.lines().map(str::trim).collect();
    let env = lines
        .windows(2)
        .filter_map(|w| {
            let name = w[0].strip_prefix("- name: ")?;
            let value = w[1].strip_prefix("value: ")?;
            Some((name.to_string(), unquote(value)))
        })
        .collect();
    (command, env)
}

/// `deploy/k8s/gradflow.yaml`: each pod's command, run with the environment the manifest
/// gives it and the index Kubernetes adds (pods' names become loopback addresses, one per
/// pod, 127.0.I.1, on one port as pods behind a headless Service), trains the model
/// `gradflow cluster` trains with as many processes; the Job's completions and
/// GRADFLOW_PROCESSES agree. The same pods as a StatefulSet's (no JOB_COMPLETION_INDEX; the
/// ordinal ends HOSTNAME) train it too.
#[test]
fn the_kubernetes_manifest_starts_a_cluster() {
    let text = std::fs::read_to_string(deploy("k8s/gradflow.yaml")).unwrap();
    let (command, env) = manifest(&text);
    let var = |name: &str| env.iter().find(|(n, _)| n == name).unwrap().1.clone();
    let processes: usize = var("GRADFLOW_PROCESSES").parse().unwrap();
    assert!(
        text.contains(&format!("completions: {processes}")),
        "{text}"
    );
    assert!(
        text.contains(&format!("parallelism: {processes}")),
        "{text}"
    );
    assert!(
        text.contains("name: GRADFLOW_RUN_ID"),
        "the Job's uid is the run: {text}"
    );
    let pattern = var("GRADFLOW_HOST_PATTERN");
    assert_eq!(pattern, "gradflow-{index}.gradflow:2101");

    let dir = tempfile::tempdir().unwrap();
    let job = job(dir.path());
    assert_eq!(command[..3], ["gradflow", "train", "job.toml"]);
    let cluster = dir.path().join("cluster4.txt");
    gradflow_ok([
        "cluster".to_string(),
        job.display().to_string(),
        format!("-n={processes}"),
        format!("--set=output.model={:?}", cluster.display().to_string()),
    ]);
    type Given = fn(usize) -> (&'static str, String);
    let kinds: [(&str, Given); 2] = [
        ("Indexed Job", |i| ("JOB_COMPLETION_INDEX", i.to_string())),
        ("StatefulSet", |i| ("HOSTNAME", format!("gradflow-{i}"))),
    ];
    for (kind, given) in kinds {
        let port = free_ports(1)[0];
        let local = pattern
            .replace("gradflow-{index}.gradflow", "127.0.{index}.1")
            .replace(":2101", &format!(":{port}"));
        let model = dir.path().join("k8s.txt");
        let pods: Vec<_> = (0..processes)
            .map(|index| {
                let mut pod = Command::new(env!("CARGO_BIN_EXE_gradflow"));
                pod.args(&command[1..])
                    .arg(format!(
                        "--set=output.model={:?}",
                        model.display().to_string()
                    ))
                    .current_dir(dir.path())
                    .env("GRADFLOW_CLUSTER_SECRET", "k8s-test")
                    .env("GRADFLOW_RUN_ID", "uid-of-this-job")
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::piped());
                for (name, value) in &env {
                    pod.env(name, value);
                }
                let (name, value) = given(index);
                pod.env(name, value).env("GRADFLOW_HOST_PATTERN", &local);
                pod.spawn().unwrap()
            })
            .collect();
        for (index, pod) in pods.into_iter().enumerate() {
            let out = pod.wait_with_output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{kind} pod {index}: {err}");
            assert!(err.contains(&format!("from a Kubernetes {kind}")), "{err}");
        }
        assert!(
            std::fs::read(&model).unwrap() == std::fs::read(&cluster).unwrap(),
            "{kind}: the models differ"
        );
    }
}

/// A real single-node Slurm (Debian's `slurm-wlm` and `munge`, which `.ci/run` installs),
/// started by `deploy/slurm/local.sh` on free ports (as root): `srun -n 2 gradflow train`
/// trains the cluster's model, each task placed by the variables srun gives it.
#[test]
fn srun_starts_processes_that_train_the_clusters_model() {
    /// Stops the Slurm daemons, however the test ends.
    struct Stop(std::path::PathBuf);
    impl Drop for Stop {
        fn drop(&mut self) {
            let script = deploy("slurm/local.sh");
            let _ = Command::new("bash")
                .arg(script)
                .arg("stop")
                .arg(&self.0)
                .status();
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let slurm = dir.path().join("slurm");
    let ports = free_ports(2);
    let _stop = Stop(slurm.clone());
    let started = Command::new("bash")
        .arg(deploy("slurm/local.sh"))
        .arg("start")
        .arg(&slurm)
        .args([ports[0].to_string(), ports[1].to_string()])
        .output()
        .unwrap();
    assert!(
        started.status.success(),
        "a single-node Slurm (Debian's slurm-wlm and munge, which .ci/run installs): {}",
        String::from_utf8_lossy(&started.stderr)
    );
    let job = job(dir.path());
    let model = dir.path().join("srun.txt");
    let out = Command::new("srun")
        .args(["-n", "2", "--distribution=block"])
        .arg(env!("CARGO_BIN_EXE_gradflow"))
        .arg("train")
        .arg(&job)
        .arg(format!(
            "--set=output.model={:?}",
            model.display().to_string()
        ))
        .env("SLURM_CONF", slurm.join("slurm.conf"))
        .env("GRADFLOW_PORT", two_ports().to_string())
        .env("GRADFLOW_CLUSTER_SECRET", "srun-test")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for rank in 0..2 {
        let said = format!("cluster: process {rank} of 2, from Slurm (SLURM_PROCID={rank}");
        assert!(err.contains(&said), "{err}");
    }
    assert!(
        err.contains("cluster: run `slurm-"),
        "Slurm's job step is the run: {err}"
    );
    assert!(
        std::fs::read_to_string(&model).unwrap() == cluster_model(dir.path(), &job),
        "the models differ"
    );
}

/// An sshd (Debian's `openssh-server`, which `.ci/run` installs) on a loopback port with a
/// host key and a client key made for it; killed when dropped.
struct Sshd {
    child: std::process::Child,
    /// The ssh command that reaches it.
    ssh: String,
}

impl Sshd {
    fn start(dir: &Path) -> Sshd {
        for key in ["host", "client"] {
            let made = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", ""])
                .arg("-f")
                .arg(dir.join(key))
                .status()
                .expect("ssh-keygen (Debian's openssh-client)");
            assert!(made.success());
        }
        std::fs::copy(dir.join("client.pub"), dir.join("authorized_keys")).unwrap();
        std::fs::create_dir_all("/run/sshd").unwrap();
        let port = free_ports(1)[0];
        let config = format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {host}\nAuthorizedKeysFile {keys}\n\
             PermitRootLogin prohibit-password\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\nPidFile none\n",
            host = dir.join("host").display(),
            keys = dir.join("authorized_keys").display(),
        );
        std::fs::write(dir.join("sshd_config"), config).unwrap();
        let child = Command::new("/usr/sbin/sshd")
            .arg("-D")
            .arg("-f")
            .arg(dir.join("sshd_config"))
            .arg("-E")
            .arg(dir.join("sshd.log"))
            .spawn()
            .expect("sshd (Debian's openssh-server, which .ci/run installs)");
        let ssh = format!(
            "ssh -p {port} -i {} -o BatchMode=yes -o StrictHostKeyChecking=no \
             -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
            dir.join("client").display()
        );
        // Ready when a command runs through it.
        let started = std::time::Instant::now();
        loop {
            let words: Vec<&str> = ssh.split_whitespace().collect();
            let ok = Command::new(words[0])
                .args(&words[1..])
                .args(["127.0.0.1", "true"])
                .stderr(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                break;
            }
            assert!(started.elapsed().as_secs() < 20, "sshd did not start");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        Sshd { child, ssh }
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `gradflow launch` starts two processes over ssh (a real sshd on loopback): they train
/// the cluster's model, their output comes back prefixed with index and host; a job file
/// a host cannot read is an error naming the host and the path, before anything starts.
#[test]
fn launch_over_ssh_trains_the_clusters_model() {
    let dir = tempfile::tempdir().unwrap();
    let sshd = Sshd::start(dir.path());
    let job = job(dir.path());
    let model = dir.path().join("ssh.txt");
    let out = Command::new(env!("CARGO_BIN_EXE_gradflow"))
        .current_dir(dir.path())
        .args([
            "launch",
            "job.toml",
            "--hosts",
            "127.0.0.1:2",
            "--ssh",
            &sshd.ssh,
        ])
        .arg(format!("--port={}", two_ports()))
        .arg(format!(
            "--set=output.model={:?}",
            model.display().to_string()
        ))
        .output()
        .unwrap();
    let (said, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{err}");
    assert!(said.contains("[p0 127.0.0.1] epoch   2"), "{said}");
    assert!(said.contains("[p1 127.0.0.1] process 1 sent"), "{said}");
    assert!(
        std::fs::read_to_string(&model).unwrap() == cluster_model(dir.path(), &job),
        "the models differ"
    );
    let missing = Command::new(env!("CARGO_BIN_EXE_gradflow"))
        .current_dir(dir.path())
        .args([
            "launch",
            "gone.toml",
            "--hosts",
            "127.0.0.1:2",
            "--ssh",
            &sshd.ssh,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&missing.stderr);
    assert!(!missing.status.success());
    assert!(
        err.contains("127.0.0.1: does not have") && err.contains("gone.toml"),
        "{err}"
    );
}

/// Ctrl-C (SIGINT) to `gradflow launch` stops every process it started over ssh, remote ones
/// included, and it exits 130 saying so; a host ssh cannot reach is named before anything
/// starts; a port in use fails the launch naming the process, its host and the port.
#[test]
fn ctrl_c_stops_a_launch_and_a_port_in_use_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let sshd = Sshd::start(dir.path());
    let long = FIELDS_JOB.replace("epochs = 3", "epochs = 100000");
    std::fs::write(dir.path().join("long.toml"), long).unwrap();
    let launch = |port: u16| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_gradflow"));
        c.current_dir(dir.path())
            .args(["launch", "long.toml", "--hosts", "127.0.0.1:2"])
            .args(["--ssh", &sshd.ssh, &format!("--port={port}")])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        c
    };
    let mut launcher = launch(two_ports()).spawn().unwrap();
    // Training: process 0 prints its first epoch.
    let stdout = launcher.stdout.take().unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(stdout));
    let started = lines.any(|l| l.is_ok_and(|l| l.starts_with("[p0 127.0.0.1] epoch")));
    assert!(started, "no epoch: {:?}", launcher.wait_with_output());
    std::thread::spawn(move || lines.for_each(drop));
    // SAFETY: kill has no memory-safety preconditions.
    unsafe { libc::kill(launcher.id() as libc::pid_t, libc::SIGINT) };
    let out = common::within(launcher, std::time::Duration::from_secs(20));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(
        err.contains("interrupted: stopped the 2 process(es) still running"),
        "{err}"
    );
    // No process of the job is left, here or behind sshd.
    let job = dir.path().join("long.toml").display().to_string();
    let left = || {
        let cmdlines = std::fs::read_dir("/proc")
            .unwrap()
            .filter_map(|p| std::fs::read(p.ok()?.path().join("cmdline")).ok());
        cmdlines
            .filter(|c| String::from_utf8_lossy(c).contains(&job))
            .count()
    };
    let waited = std::time::Instant::now();
    while left() > 0 {
        assert!(
            waited.elapsed().as_secs() < 10,
            "{} processes of the job left",
            left()
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }

    // A host ssh cannot reach is named before anything starts.
    let out = Command::new(env!("CARGO_BIN_EXE_gradflow"))
        .current_dir(dir.path())
        .args([
            "launch",
            "long.toml",
            "--hosts",
            "127.0.0.1,no-such-host.invalid",
        ])
        .args(["--ssh", &sshd.ssh])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("error: no-such-host.invalid: ssh failed"),
        "{err}"
    );

    let port = two_ports();
    let _held = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let out = launch(port).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.contains("error: process 0 on 127.0.0.1 failed first")
            && last.contains(&format!(
                "cannot listen on 127.0.0.1:{port}: the port is in use"
            )),
        "{err}"
    );
}

/// Two network namespaces joined by a veth pair, at 10.251.S.1 and .2 (S from the test's
/// pid); removed when dropped. Needs root and iproute2 (which `.ci/run` installs).
struct Namespaces {
    names: [String; 2],
    addresses: [String; 2],
}

impl Namespaces {
    fn new() -> Namespaces {
        let id = std::process::id();
        let names = [format!("gfown{id}a"), format!("gfown{id}b")];
        let subnet = format!("10.251.{}", id % 250);
        let addresses = [format!("{subnet}.1"), format!("{subnet}.2")];
        let ns = Namespaces { names, addresses };
        let ip = |args: &[&str]| {
            let out = Command::new("ip")
                .args(args)
                .output()
                .expect("ip (iproute2, which .ci/run installs)");
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "ip {args:?} (as root): {err}");
        };
        let ends = [format!("gfo{id}a"), format!("gfo{id}b")];
        for name in &ns.names {
            ip(&["netns", "add", name]);
        }
        ip(&[
            "link", "add", &ends[0], "type", "veth", "peer", "name", &ends[1],
        ]);
        for ((name, end), address) in ns.names.iter().zip(&ends).zip(&ns.addresses) {
            ip(&["link", "set", end, "netns", name]);
            let address = format!("{address}/24");
            ip(&["-n", name, "addr", "add", &address, "dev", end]);
            ip(&["-n", name, "link", "set", end, "up"]);
            ip(&["-n", name, "link", "set", "lo", "up"]);
        }
        ns
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for name in &self.names {
            let _ = Command::new("ip").args(["netns", "delete", name]).status();
        }
    }
}

/// One hostfile, one command, two machines (network namespaces with their own addresses):
/// each process finds its line by its own address, as LightGBM's machine list does, says
/// so, and the two train the cluster's model. On one machine every loopback line is this
/// machine's, and the index must be given.
#[test]
fn a_process_finds_its_hostfile_line_by_its_own_address() {
    let dir = tempfile::tempdir().unwrap();
    let job = job(dir.path());
    let ns = Namespaces::new();
    let hosts = dir.path().join("hosts.txt");
    let [a, b] = &ns.addresses;
    std::fs::write(&hosts, format!("# the machines\n{a}:2101\n{b}:2101\n")).unwrap();
    let model = dir.path().join("own.txt");
    let machines: Vec<_> = ns
        .names
        .iter()
        .map(|name| {
            Command::new("ip")
                .args(["netns", "exec", name, env!("CARGO_BIN_EXE_gradflow")])
                .arg("train")
                .arg(&job)
                .arg("--hostfile")
                .arg(&hosts)
                .arg(format!(
                    "--set=output.model={:?}",
                    model.display().to_string()
                ))
                .env("GRADFLOW_CLUSTER_SECRET", "own-line")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for (i, machine) in machines.into_iter().enumerate() {
        let out = common::within(machine, std::time::Duration::from_secs(60));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        let said = format!(
            "cluster: process {i} of 2, from {}:{} (`{}:2101`), the address that is this \
             machine's",
            hosts.display(),
            i + 2,
            ns.addresses[i]
        );
        assert!(err.contains(&said), "{said}: {err}");
    }
    assert!(
        std::fs::read_to_string(&model).unwrap() == cluster_model(dir.path(), &job),
        "the models differ"
    );
    std::fs::write(&hosts, "127.0.0.1:2101\n127.0.0.1:2102\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_gradflow"))
        .arg("train")
        .arg(&job)
        .arg("--hostfile")
        .arg(&hosts)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("2 addresses are this machine's") && err.contains("pass --process"),
        "{err}"
    );
}
