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
//!
//! The first source whose variables are set is used, and named; a command line's `-p`/`-n`
//! win over every one. Rank-only sources (MPI, PMI, torchrun) carry no peer addresses: across
//! machines they take `--hosts` or `--hostfile`, and without them a run that is not on one
//! machine is an error naming the variables. A variable that is set but malformed, an index
//! without a count (or the reverse) and an index beyond the count are errors naming the
//! variable and its value.

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
    if let Some((process, processes)) = pair(var, "JOB_COMPLETION_INDEX", "GRADFLOW_PROCESSES")? {
        let pattern = var("GRADFLOW_HOST_PATTERN").ok_or(
            "JOB_COMPLETION_INDEX is set (a Kubernetes Indexed Job) but GRADFLOW_HOST_PATTERN is \
             not: set it to the pods' addresses, e.g. train-{index}.train:2101",
        )?;
        if !pattern.contains("{index}") {
            return Err(format!(
                "GRADFLOW_HOST_PATTERN={pattern}: has no {{index}} to put each process's index in"
            ));
        }
        let hosts = (0..processes)
            .map(|i| pattern.replace("{index}", &i.to_string()))
            .collect();
        return Ok(Some(Place {
            source: format!(
                "a Kubernetes Indexed Job (JOB_COMPLETION_INDEX={process}, \
                 GRADFLOW_PROCESSES={processes}, GRADFLOW_HOST_PATTERN={pattern})"
            ),
            process,
            processes,
            hosts: Some(hosts),
            one_machine: false,
        }));
    }
    Ok(None)
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
