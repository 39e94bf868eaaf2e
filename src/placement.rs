//! Where a process finds its place in a cluster when its command line does not say: the
//! environment a scheduler or launcher gives every process it starts. The same
//! `gradflow train job.toml` then runs under each of them:
//!
//! | source | index, count | peers' addresses |
//! |---|---|---|
//! | Slurm (`srun`) | `SLURM_PROCID`, `SLURM_NTASKS` | the step's node list and tasks per node (block distribution), port `GRADFLOW_PORT` (default 2101) + the task's place on its node |
//! | Open MPI (`mpirun`) | `OMPI_COMM_WORLD_RANK`, `OMPI_COMM_WORLD_SIZE` | `--hosts`/`--hostfile`, or `localhost:2101+i` when every rank is on one machine (`OMPI_COMM_WORLD_LOCAL_SIZE`) |
//! | MPICH, Intel MPI (PMI) | `PMI_RANK`, `PMI_SIZE` | `--hosts`/`--hostfile`, or `localhost:2101+i` |
//! | torchrun-style | `RANK`, `WORLD_SIZE` | `--hosts`/`--hostfile`, or `localhost:2101+i` when `LOCAL_WORLD_SIZE` is the world |
//! | Kubernetes Indexed Job | `JOB_COMPLETION_INDEX`, `GRADFLOW_PROCESSES` | `GRADFLOW_HOST_PATTERN` with `{index}` (e.g. `train-{index}.train:2101`, a headless Service's names) |
//! | Kubernetes StatefulSet | the ordinal ending `HOSTNAME` (`train-3`), `GRADFLOW_PROCESSES` | `GRADFLOW_HOST_PATTERN`, as above |
//! | a hostfile or `--hosts` alone | the one entry whose host is this machine's ([`own_entry`]), the number of entries (or `-n`) | the entries |
//!
//! The first source whose variables are set is used, and named; a command line's `-p`/`-n`
//! win over every one. Rank-only sources (MPI, PMI, torchrun) carry no peer addresses: across
//! machines they take `--hosts` or `--hostfile`, and without them a run that is not on one
//! machine is an error naming the variables. A variable that is set but malformed, an index
//! without a count (or the reverse) and an index beyond the count are errors naming the
//! variable and its value.
//!
//! The run identity ([`run_identity`]) comes from the same schedulers: the job and its
//! restart count, so a process left over from an earlier attempt cannot join a new one.

/// The first port of the addresses Slurm's variables imply, unless `GRADFLOW_PORT` says
/// another (as for `localhost:2101+i`).
pub const BASE_PORT: u16 = 2101;

/// A process's place, as an environment gave it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Place {
    /// The source and the variables read, for the line that says where the place came from.
    pub source: String,
    /// This process's index.
    pub process: usize,
    /// The number of processes.
    pub processes: usize,
    /// Every process's `host:port`, when the source tells them; `None`: from `--hosts`,
    /// `--hostfile` or the local default.
    pub hosts: Option<Vec<String>>,
    /// Whether the source says every process runs on this machine (the local default
    /// addresses then serve).
    pub one_machine: bool,
}

/// The place `var` (an environment: `std::env::var` in a process) gives, if any source's
/// variables are set.
pub fn from_environment(var: &dyn Fn(&str) -> Option<String>) -> Result<Option<Place>, String> {
    if let Some((process, processes)) = pair(var, "SLURM_PROCID", "SLURM_NTASKS")? {
        return slurm(var, process, processes).map(Some);
    }
    let ranked = [
        (
            "Open MPI",
            "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE",
            "OMPI_COMM_WORLD_LOCAL_SIZE",
        ),
        ("PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"),
        ("torchrun", "RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"),
    ];
    for (name, rank, size, local_size) in ranked {
        if let Some((process, processes)) = pair(var, rank, size)? {
            let local = number(var, local_size)?;
            return Ok(Some(Place {
                source: format!("{name} ({rank}={process}, {size}={processes})"),
                process,
                processes,
                hosts: None,
                one_machine: local == Some(processes),
            }));
        }
    }
    if var("JOB_COMPLETION_INDEX").is_some() {
        let (process, processes) =
            pair(var, "JOB_COMPLETION_INDEX", "GRADFLOW_PROCESSES")?.expect("the index is set");
        let source = format!("a Kubernetes Indexed Job (JOB_COMPLETION_INDEX={process}");
        return pods(var, source, process, processes).map(Some);
    }
    if let Some(processes) = number(var, "GRADFLOW_PROCESSES")? {
        let host = var("HOSTNAME").unwrap_or_default();
        let ordinal = host
            .rsplit_once('-')
            .and_then(|(_, n)| n.parse::<usize>().ok());
        let Some(process) = ordinal else {
            return Err(format!(
                "GRADFLOW_PROCESSES={processes} is set, but neither JOB_COMPLETION_INDEX (a \
                 Kubernetes Indexed Job) nor a HOSTNAME ending in -N (a StatefulSet pod's \
                 ordinal; HOSTNAME is `{}`)",
                crate::data::clip(&host)
            ));
        };
        if process >= processes {
            return Err(format!(
                "HOSTNAME={host}: ordinal {process} is not below GRADFLOW_PROCESSES={processes} \
                 (the StatefulSet's replicas)"
            ));
        }
        let source = format!("a Kubernetes StatefulSet (HOSTNAME={host}");
        return pods(var, source, process, processes).map(Some);
    }
    Ok(None)
}

/// A Kubernetes pod's place: its peers' addresses from `GRADFLOW_HOST_PATTERN`.
fn pods(
    var: &dyn Fn(&str) -> Option<String>,
    source: String,
    process: usize,
    processes: usize,
) -> Result<Place, String> {
    if processes == 0 {
        return Err("GRADFLOW_PROCESSES=0: a cluster has at least one process".into());
    }
    let pattern = var("GRADFLOW_HOST_PATTERN").ok_or(format!(
        "{source}) but GRADFLOW_HOST_PATTERN is not set: set it to the pods' addresses, e.g. \
         train-{{index}}.train:2101"
    ))?;
    if !pattern.contains("{index}") {
        return Err(format!(
            "GRADFLOW_HOST_PATTERN={pattern}: has no {{index}} to put each process's index in"
        ));
    }
    let hosts = (0..processes)
        .map(|i| pattern.replace("{index}", &i.to_string()))
        .collect();
    Ok(Place {
        source: format!(
            "{source}, GRADFLOW_PROCESSES={processes}, GRADFLOW_HOST_PATTERN={pattern})"
        ),
        process,
        processes,
        hosts: Some(hosts),
        one_machine: false,
    })
}

/// The run identity a scheduler gives every process of one attempt of a job, and the
/// variables it came from: Slurm's job, step and restart count; torchrun's run id and
/// restart count; a PMIx namespace (Open MPI's `mpirun`, one per launch). `None` elsewhere
/// (`gradflow cluster` and `launch` pass `--run-id`; a Kubernetes manifest maps the Job's uid
/// to `GRADFLOW_RUN_ID`).
pub fn run_identity(var: &dyn Fn(&str) -> Option<String>) -> Option<(String, &'static str)> {
    let or_zero = |name: &str| var(name).unwrap_or_else(|| "0".into());
    if let Some(job) = var("SLURM_JOB_ID") {
        let step = var("SLURM_STEP_ID").unwrap_or_default();
        let restart = or_zero("SLURM_RESTART_COUNT");
        return Some((
            format!("slurm-{job}.{step}.r{restart}"),
            "SLURM_JOB_ID, SLURM_STEP_ID, SLURM_RESTART_COUNT",
        ));
    }
    if let Some(run) = var("TORCHELASTIC_RUN_ID") {
        let restart = or_zero("TORCHELASTIC_RESTART_COUNT");
        return Some((
            format!("torchrun-{run}.r{restart}"),
            "TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT",
        ));
    }
    var("PMIX_NAMESPACE").map(|ns| (format!("pmix-{ns}"), "PMIX_NAMESPACE"))
}

/// The index of the one entry of `entries` (each one or more `host:port`) whose host
/// `is_local` says is this machine's, as LightGBM's machine list finds a process's line;
/// no such entry, or several (e.g. every entry on loopback), is an error that says to pass
/// `--process`. `place(i)` names entry `i` (a hostfile's line).
pub fn own_entry(
    entries: &[String],
    place: &dyn Fn(usize) -> String,
    is_local: &mut dyn FnMut(&str) -> bool,
) -> Result<usize, String> {
    let host = |a: &str| {
        let h = a.rsplit_once(':').map_or(a, |(h, _)| h);
        h.trim_start_matches('[').trim_end_matches(']').to_string()
    };
    let mine: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].split_whitespace().any(|a| is_local(&host(a))))
        .collect();
    match mine[..] {
        [one] => Ok(one),
        [] => Err(format!(
            "no process index given (--process) and none of the {} addresses is this \
             machine's ({}): pass --process, or list this machine by one of its addresses",
            entries.len(),
            local_names()
        )),
        _ => Err(format!(
            "no process index given (--process) and {} addresses are this machine's ({}): \
             pass --process to say which",
            mine.len(),
            mine.iter()
                .map(|&i| place(i))
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

/// This machine's host name and the addresses of its network interfaces.
fn local_addresses() -> (String, Vec<std::net::IpAddr>) {
    let mut name = [0u8; 256];
    // SAFETY: the buffer is writable for its length; the name is cut at the first NUL.
    let host = match unsafe { libc::gethostname(name.as_mut_ptr().cast(), name.len()) } {
        0 => {
            let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
            String::from_utf8_lossy(&name[..end]).into_owned()
        }
        _ => String::new(),
    };
    let mut ips = Vec::new();
    let mut list: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `list` with a linked list that stays valid until freeifaddrs;
    // each address is read by its family's own type.
    unsafe {
        if libc::getifaddrs(&mut list) == 0 {
            let mut at = list;
            while !at.is_null() {
                let a = (*at).ifa_addr;
                if !a.is_null() {
                    match (*a).sa_family as i32 {
                        libc::AF_INET => {
                            let v4 = &*(a as *const libc::sockaddr_in);
                            let octets = v4.sin_addr.s_addr.to_ne_bytes();
                            ips.push(std::net::IpAddr::from(octets));
                        }
                        libc::AF_INET6 => {
                            let v6 = &*(a as *const libc::sockaddr_in6);
                            ips.push(std::net::IpAddr::from(v6.sin6_addr.s6_addr));
                        }
                        _ => {}
                    }
                }
                at = (*at).ifa_next;
            }
            libc::freeifaddrs(list);
        }
    }
    (host, ips)
}

/// This machine's name and addresses, for a message.
fn local_names() -> String {
    let (host, ips) = local_addresses();
    let ips: Vec<String> = ips.iter().map(|ip| ip.to_string()).collect();
    format!("{host}: {}", ips.join(", "))
}

/// Whether `host` (a name or an address) is this machine: its host name, or a name or
/// address that resolves to one of its interfaces' addresses.
pub fn is_local_host(host: &str) -> bool {
    use std::net::ToSocketAddrs;
    let (name, ips) = local_addresses();
    if host == name {
        return true;
    }
    match (host, 0).to_socket_addrs() {
        Ok(mut resolved) => resolved.any(|a| ips.contains(&a.ip())),
        Err(_) => false,
    }
}

/// A variable's whole number, if it is set.
fn number(var: &dyn Fn(&str) -> Option<String>, name: &str) -> Result<Option<usize>, String> {
    let Some(text) = var(name) else {
        return Ok(None);
    };
    let n = text.trim().parse::<usize>();
    n.map(Some)
        .map_err(|_| format!("{name}={text}: not a whole number"))
}

/// An index and a count, when both are set: one without the other, a count of 0 or an index
/// beyond the count is an error naming them.
fn pair(
    var: &dyn Fn(&str) -> Option<String>,
    index: &str,
    count: &str,
) -> Result<Option<(usize, usize)>, String> {
    match (number(var, index)?, number(var, count)?) {
        (None, None) => Ok(None),
        (Some(i), None) => Err(format!("{index}={i} is set but {count} is not")),
        (None, Some(n)) => Err(format!("{count}={n} is set but {index} is not")),
        (Some(i), Some(n)) if i >= n => Err(format!("{index}={i} is not below {count}={n}")),
        (Some(i), Some(n)) => Ok(Some((i, n))),
    }
}

/// Slurm's place: every task's address from the step's nodes and tasks per node.
fn slurm(
    var: &dyn Fn(&str) -> Option<String>,
    process: usize,
    processes: usize,
) -> Result<Place, String> {
    let first = |names: [&'static str; 2]| {
        let found = names.iter().find_map(|&n| var(n).map(|v| (n, v)));
        found.ok_or(format!("{} is not set (a Slurm task's nodes)", names[0]))
    };
    let (nodes_name, nodes) = first(["SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"])?;
    let (tasks_name, tasks) = first(["SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"])?;
    if let Some(d) = var("SLURM_DISTRIBUTION").filter(|d| !d.starts_with("block")) {
        return Err(format!(
            "SLURM_DISTRIBUTION={d}: tasks are placed on nodes in blocks here; run srun with \
             --distribution=block, or pass --hostfile"
        ));
    }
    let nodes = expand_nodelist(&nodes).map_err(|e| format!("{nodes_name}={nodes}: {e}"))?;
    let counts = tasks_per_node(&tasks).map_err(|e| format!("{tasks_name}={tasks}: {e}"))?;
    if counts.len() != nodes.len() || counts.iter().sum::<usize>() != processes {
        return Err(format!(
            "{tasks_name}={tasks} ({} tasks on {} nodes) does not fit {nodes_name} ({} nodes) \
             and SLURM_NTASKS={processes}",
            counts.iter().sum::<usize>(),
            counts.len(),
            nodes.len()
        ));
    }
    let base = match var("GRADFLOW_PORT") {
        Some(p) => p
            .trim()
            .parse::<u16>()
            .ok()
            .filter(|&p| p > 0)
            .ok_or(format!("GRADFLOW_PORT={p}: not a port (1 to 65535)"))?,
        None => BASE_PORT,
    };
    let most = counts.iter().max().copied().unwrap_or(0);
    if base as usize + most > 65536 {
        return Err(format!(
            "GRADFLOW_PORT={base}: {most} tasks on a node need ports up to {}",
            base as usize + most - 1
        ));
    }
    let mut hosts = Vec::with_capacity(processes);
    for (node, &count) in nodes.iter().zip(&counts) {
        hosts.extend((0..count).map(|local| format!("{node}:{}", base as usize + local)));
    }
    Ok(Place {
        source: format!(
            "Slurm (SLURM_PROCID={process}, SLURM_NTASKS={processes}, {nodes_name}, {tasks_name})"
        ),
        process,
        processes,
        hosts: Some(hosts),
        one_machine: nodes.len() == 1,
    })
}

/// The host names of a Slurm node list: comma-separated names, each with any number of
/// bracketed ranges and numbers (`node[01-03,7]`, `rack[1-2]-n[3-4]`); a range keeps its
/// numbers' width (zero padding).
pub fn expand_nodelist(list: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    let (mut depth, mut start) = (0usize, 0);
    let bytes = list.as_bytes();
    for (i, &b) in bytes.iter().enumerate().chain([(bytes.len(), &b',')]) {
        match b {
            b'[' => depth += 1,
            b']' => depth = depth.checked_sub(1).ok_or("a ']' without its '['")?,
            b',' if depth == 0 => {
                let item = list[start..i].trim();
                if item.is_empty() {
                    return Err("an empty name".into());
                }
                expand_item(item, &mut names)?;
                start = i + 1;
            }
            _ => {}
        }
        if names.len() > 1 << 20 {
            return Err("more than 2^20 nodes".into());
        }
    }
    if depth != 0 {
        return Err("a '[' without its ']'".into());
    }
    Ok(names)
}

/// Appends the names of one node-list item (its bracket groups expanded in order).
fn expand_item(item: &str, out: &mut Vec<String>) -> Result<(), String> {
    let Some(open) = item.find('[') else {
        out.push(item.to_string());
        return Ok(());
    };
    let close = open + item[open..].find(']').ok_or("a '[' without its ']'")?;
    let (prefix, body, rest) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
    let mut tails = Vec::new();
    match rest.is_empty() {
        true => tails.push(String::new()),
        false => expand_item(rest, &mut tails)?,
    }
    for part in body.split(',') {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let parse = |s: &str| {
            let ok = !s.is_empty() && s.len() <= 9 && s.bytes().all(|b| b.is_ascii_digit());
            ok.then(|| s.parse::<u32>().unwrap())
                .ok_or(format!("'{part}' in [{body}] is not a number or a range"))
        };
        let (a, b) = (parse(lo)?, parse(hi)?);
        if a > b || b - a >= 1 << 20 {
            return Err(format!("the range '{part}' in [{body}]"));
        }
        for n in a..=b {
            if out.len() + tails.len() > 1 << 20 {
                return Err("more than 2^20 nodes".into());
            }
            let name = format!("{prefix}{n:0width$}", width = lo.len());
            out.extend(tails.iter().map(|t| format!("{name}{t}")));
        }
    }
    Ok(())
}

/// Slurm's tasks per node (`2(x3),1`: two tasks on each of three nodes, then one).
pub fn tasks_per_node(text: &str) -> Result<Vec<usize>, String> {
    let mut counts = Vec::new();
    for item in text.split(',') {
        let item = item.trim();
        let (count, times) = match item.split_once("(x") {
            Some((c, t)) => (c, t.strip_suffix(')').ok_or(format!("'{item}'"))?),
            None => (item, "1"),
        };
        let count: usize = count.parse().map_err(|_| format!("'{item}'"))?;
        let times: usize = times.parse().map_err(|_| format!("'{item}'"))?;
        if counts.len() + times > 1 << 20 {
            return Err("more than 2^20 nodes".into());
        }
        counts.extend(std::iter::repeat_n(count, times));
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn slurm_node_lists_and_tasks_per_node_expand() {
        let list = expand_nodelist("node[01-03,7],gpu5,rack[1-2]-n[8-9]").unwrap();
        let want = [
            "node01", "node02", "node03", "node7", "gpu5", "rack1-n8", "rack1-n9", "rack2-n8",
            "rack2-n9",
        ];
        assert_eq!(list, want);
        assert_eq!(expand_nodelist("a").unwrap(), ["a"]);
        for bad in ["n[1-", "n]", "n[3-1]", "n[x]", "a,,b", "n[1-99999999]"] {
            assert!(expand_nodelist(bad).is_err(), "{bad}");
        }
        assert_eq!(tasks_per_node("2(x3),1").unwrap(), [2, 2, 2, 1]);
        for bad in ["2(x", "x", "2(x3"] {
            assert!(tasks_per_node(bad).is_err(), "{bad}");
        }
    }

    /// The variables `srun -N 2 -n 3` gives its task 2 (Slurm 22.05): block distribution,
    /// two tasks on the first node, one on the second.
    #[test]
    fn a_slurm_task_finds_every_address() {
        let vars = [
            ("SLURM_PROCID", "2"),
            ("SLURM_NTASKS", "3"),
            ("SLURM_LOCALID", "0"),
            ("SLURM_JOB_NODELIST", "cn[07-08]"),
            ("SLURM_STEP_NODELIST", "cn[07-08]"),
            ("SLURM_TASKS_PER_NODE", "2,1"),
            ("SLURM_STEP_TASKS_PER_NODE", "2,1"),
            ("SLURM_DISTRIBUTION", "block"),
        ];
        let place = from_environment(&env(&vars)).unwrap().unwrap();
        assert_eq!((place.process, place.processes), (2, 3));
        let hosts = place.hosts.unwrap();
        assert_eq!(hosts, ["cn07:2101", "cn07:2102", "cn08:2101"]);
        assert!(place.source.starts_with("Slurm"), "{}", place.source);
        let cyclic = [&vars[..7], &[("SLURM_DISTRIBUTION", "cyclic")]].concat();
        let e = from_environment(&env(&cyclic)).unwrap_err();
        assert!(e.contains("SLURM_DISTRIBUTION=cyclic"), "{e}");
        let short = [&vars[..5], &[("SLURM_STEP_TASKS_PER_NODE", "1,1")]].concat();
        let e = from_environment(&env(&short)).unwrap_err();
        assert!(e.contains("SLURM_STEP_TASKS_PER_NODE=1,1"), "{e}");
    }

    #[test]
    fn rank_sources_give_index_and_count_and_say_whether_on_one_machine() {
        let mpi = [
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
        ];
        let place = from_environment(&env(&mpi)).unwrap().unwrap();
        assert_eq!((place.process, place.processes), (1, 2));
        assert!(place.one_machine && place.hosts.is_none());
        assert!(place.source.contains("OMPI_COMM_WORLD_RANK=1"));
        let torch = [
            ("RANK", "3"),
            ("WORLD_SIZE", "8"),
            ("LOCAL_WORLD_SIZE", "4"),
        ];
        let place = from_environment(&env(&torch)).unwrap().unwrap();
        assert_eq!(
            (place.process, place.processes, place.one_machine),
            (3, 8, false)
        );
        let pmi = [("PMI_RANK", "0"), ("PMI_SIZE", "1")];
        assert_eq!(from_environment(&env(&pmi)).unwrap().unwrap().processes, 1);
        assert_eq!(from_environment(&env(&[])).unwrap(), None);
    }

    #[test]
    fn a_kubernetes_indexed_job_finds_its_peers_by_pattern() {
        let vars = [
            ("JOB_COMPLETION_INDEX", "1"),
            ("GRADFLOW_PROCESSES", "3"),
            ("GRADFLOW_HOST_PATTERN", "train-{index}.train:2101"),
        ];
        let place = from_environment(&env(&vars)).unwrap().unwrap();
        let hosts = place.hosts.unwrap();
        assert_eq!(hosts[2], "train-2.train:2101");
        let e = from_environment(&env(&vars[..2])).unwrap_err();
        assert!(e.contains("GRADFLOW_HOST_PATTERN"), "{e}");
    }

    /// A StatefulSet pod's index is the ordinal ending its host name; a name without one,
    /// or an ordinal beyond the replicas, is an error naming HOSTNAME.
    #[test]
    fn a_kubernetes_statefulset_pod_finds_its_ordinal() {
        let vars = [
            ("HOSTNAME", "train-set-2"),
            ("GRADFLOW_PROCESSES", "3"),
            ("GRADFLOW_HOST_PATTERN", "train-set-{index}.train:2101"),
        ];
        let place = from_environment(&env(&vars)).unwrap().unwrap();
        assert_eq!((place.process, place.processes), (2, 3));
        assert!(place.source.contains("StatefulSet (HOSTNAME=train-set-2"));
        assert_eq!(place.hosts.unwrap()[0], "train-set-0.train:2101");
        for (host, want) in [
            ("laptop", "HOSTNAME ending in -N"),
            ("train-set-3", "ordinal 3 is not below GRADFLOW_PROCESSES=3"),
        ] {
            let e = from_environment(&env(&[("HOSTNAME", host), vars[1], vars[2]])).unwrap_err();
            assert!(e.contains(want), "{host}: {e}");
        }
        // Without GRADFLOW_PROCESSES a host name is no place.
        assert_eq!(from_environment(&env(&vars[..1])).unwrap(), None);
    }

    /// Schedulers' run identities change with every job and restart; none without one.
    #[test]
    fn a_run_identity_comes_from_the_schedulers_job_and_restart() {
        let slurm = [("SLURM_JOB_ID", "812"), ("SLURM_STEP_ID", "0")];
        let (run, from) = run_identity(&env(&slurm)).unwrap();
        assert_eq!(run, "slurm-812.0.r0");
        assert!(from.contains("SLURM_RESTART_COUNT"));
        let restarted = [slurm[0], slurm[1], ("SLURM_RESTART_COUNT", "1")];
        assert_eq!(run_identity(&env(&restarted)).unwrap().0, "slurm-812.0.r1");
        let torch = [
            ("TORCHELASTIC_RUN_ID", "abc"),
            ("TORCHELASTIC_RESTART_COUNT", "2"),
        ];
        assert_eq!(run_identity(&env(&torch)).unwrap().0, "torchrun-abc.r2");
        assert_eq!(
            run_identity(&env(&[("PMIX_NAMESPACE", "4294")])).unwrap().0,
            "pmix-4294"
        );
        assert_eq!(run_identity(&env(&[("RANK", "0")])), None);
    }

    /// A process finds its entry by its own address: the one entry that is this machine's;
    /// none, or several, is an error that says to pass --process and names the entries.
    #[test]
    fn a_process_finds_its_entry_by_its_own_address() {
        let entries: Vec<String> = [
            "10.0.0.1:2101",
            "10.0.0.2:2101 [fd00::2]:2101",
            "10.0.0.3:2101",
        ]
        .map(String::from)
        .to_vec();
        let place = |i: usize| format!("hosts:{}", i + 1);
        let mut local = |h: &str| h == "fd00::2";
        assert_eq!(own_entry(&entries, &place, &mut local), Ok(1));
        let mut none = |_: &str| false;
        let e = own_entry(&entries, &place, &mut none).unwrap_err();
        assert!(
            e.contains("none of the 3 addresses is this machine's"),
            "{e}"
        );
        let mut two = |h: &str| h != "10.0.0.1";
        let e = own_entry(&entries, &place, &mut two).unwrap_err();
        assert!(
            e.contains("2 addresses are this machine's (hosts:2, hosts:3)"),
            "{e}"
        );
        // This machine's loopback address and host name are its own; a documentation
        // address is not.
        assert!(is_local_host("127.0.0.1"));
        assert!(!is_local_host("192.0.2.77"));
    }

    /// A rank without a size (or the reverse), a rank beyond the size and a malformed number
    /// are errors naming the variable.
    #[test]
    fn bad_variables_are_errors_naming_them() {
        for (vars, want) in [
            (vec![("RANK", "1")], "WORLD_SIZE is not"),
            (vec![("WORLD_SIZE", "2")], "RANK is not"),
            (
                vec![("PMI_RANK", "2"), ("PMI_SIZE", "2")],
                "PMI_RANK=2 is not below",
            ),
            (
                vec![("SLURM_PROCID", "x"), ("SLURM_NTASKS", "2")],
                "SLURM_PROCID=x",
            ),
            (
                vec![
                    ("SLURM_PROCID", "0"),
                    ("SLURM_NTASKS", "1"),
                    ("SLURM_TASKS_PER_NODE", "1"),
                ],
                "SLURM_STEP_NODELIST is not set",
            ),
        ] {
            let e = from_environment(&env(&vars)).unwrap_err();
            assert!(e.contains(want), "{vars:?}: {e}");
        }
    }
}
