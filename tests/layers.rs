//! The plan of imports: every module of `src/` belongs to a layer, and code outside tests
//! names only modules of its own layer or below (`docs/architecture.md`), with no circle
//! between modules. A `use crate::…` or `crate::…::` path that climbs fails here with the
//! file and line.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first: a module may name modules of its own layer or of the layers
/// before it.
const LAYERS: &[&[&str]] = &[
    &[
        "atomic", "cpu", "cores", "le", "mem", "named", "snapshot", "sparse", "metrics",
    ],
    &["data"],
    &[
        "model",
        "codec",
        "memory",
        "optim",
        "handshake",
        "placement",
    ],
    &["exchange"],
    &["dataflow"],
    &["job"],
    &["auto"],
    &["runtime"],
    &["bench", "cli"],
    &["lib", "main"],
];

fn layer_of(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.contains(&module))
        .unwrap_or_else(|| panic!("module `{module}` is in no layer of tests/layers.rs"))
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level modules a file's code (not its comments, not its tests) names through
/// `crate::`, with the line of each first use.
fn named_modules(text: &str) -> BTreeMap<String, usize> {
    let mut named = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let code = line.trim_start();
        if code.starts_with("#[cfg(test)]") {
            break;
        }
        if code.starts_with("//") {
            continue;
        }
        let code = code.split("//").next().unwrap_or("");
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            let in_macro = at > 0 && code.as_bytes()[at - 1] == b'$';
            if !name.is_empty() && !in_macro {
                named.entry(name).or_insert(i + 1);
            }
        }
    }
    named
}

#[test]
fn no_import_climbs_and_no_module_circle() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    files.sort();
    let mut climbs = Vec::new();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in &files {
        let rel = file.strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_str()
            .unwrap();
        let module = first.trim_end_matches(".rs").to_owned();
        let layer = layer_of(&module);
        let text = std::fs::read_to_string(file).unwrap();
        for (named, line) in named_modules(&text) {
            if named == module {
                continue;
            }
            if layer_of(&named) > layer {
                climbs.push(format!(
                    "src/{}:{line}: `{module}` names `{named}`, a layer above it",
                    rel.display()
                ));
            }
            edges.entry(module.clone()).or_default().insert(named);
        }
    }
    assert!(
        climbs.is_empty(),
        "imports that climb:\n{}",
        climbs.join("\n")
    );
    // A circle within one layer: a module that reaches itself.
    for start in edges.keys() {
        let mut seen = BTreeSet::new();
        let mut stack: Vec<&String> = edges[start].iter().collect();
        while let Some(m) = stack.pop() {
            assert!(m != start, "a circle of imports passes through `{start}`");
            if seen.insert(m) {
                stack.extend(edges.get(m).into_iter().flatten());
            }
        }
    }
}

#[test]
fn the_checker_sees_a_climb_and_ignores_comments_and_tests() {
    let text = "use crate::sparse::SparseGrad;\n/// [`crate::job::Job`]\nfn f() { crate::dataflow::x(); } // crate::cli\n#[cfg(test)]\nmod tests { use crate::runtime; }\n";
    let named = named_modules(text);
    assert_eq!(
        named.keys().map(String::as_str).collect::<Vec<_>>(),
        ["dataflow", "sparse"]
    );
    assert_eq!(named["dataflow"], 3);
    assert!(layer_of("dataflow") > layer_of("exchange"));
}
