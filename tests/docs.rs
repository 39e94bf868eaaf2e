//! The documentation stays true to the code: in the README, the changelog and `docs/`, every
//! relative link resolves (files, and headings or `<a id>` anchors in Markdown files), every
//! `gradflow` command of a fenced `sh` block parses with the command line's own parser, and
//! every TOML block parses: a whole job as a job (fields, types and validation), a part of one
//! laid over the quickstart job (every field name and type), a suite or a Cargo manifest as
//! TOML.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};

use clap::Parser;
use gradflow::cli::Cli;
use gradflow::job::Job;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The README, the changelog and every Markdown file of `docs/`.
fn documents() -> Vec<PathBuf> {
    let mut docs: Vec<PathBuf> = fs::read_dir(root().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    docs.splice(
        0..0,
        [root().join("README.md"), root().join("CHANGELOG.md")],
    );
    docs
}

/// A fenced block: its language, its first line's number and its text.
struct Block {
    lang: String,
    line: usize,
    text: String,
}

/// The text outside fenced blocks (fences blanked, so line numbers hold) and the blocks.
fn split(text: &str) -> (String, Vec<Block>) {
    let (mut prose, mut blocks) = (String::new(), Vec::new());
    let mut open: Option<Block> = None;
    for (i, line) in text.lines().enumerate() {
        if let Some(fence) = line.trim_start().strip_prefix("```") {
            match open.take() {
                Some(b) => blocks.push(b),
                None => {
                    open = Some(Block {
                        lang: fence.trim().to_owned(),
                        line: i + 2,
                        text: String::new(),
                    })
                }
            }
            prose.push('\n');
        } else if let Some(b) = &mut open {
            b.text.push_str(line);
            b.text.push('\n');
            prose.push('\n');
        } else {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    (prose, blocks)
}

/// GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, spaces to `-`.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(path: &Path) -> HashSet<String> {
    let (prose, _) = split(&fs::read_to_string(path).unwrap());
    let mut set = HashSet::new();
    for line in prose.lines() {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if hashes > 0 && line[hashes..].starts_with(' ') {
            set.insert(slug(&line[hashes + 1..]));
        }
        let mut rest = line;
        while let Some(at) = rest.find("<a id=\"") {
            rest = &rest[at + 7..];
            if let Some(end) = rest.find('"') {
                set.insert(rest[..end].to_owned());
            }
        }
    }
    set
}

/// Every `[text](target)` of the prose, with its line.
fn links(prose: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (i, line) in prose.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            rest = &rest[at + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            let target = &rest[..end];
            if !target.is_empty() && !target.contains(char::is_whitespace) {
                out.push((i + 1, target.to_owned()));
            }
        }
    }
    out
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    for doc in documents() {
        let (prose, _) = split(&fs::read_to_string(&doc).unwrap());
        let dir = doc.parent().unwrap();
        for (line, target) in links(&prose) {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if path.is_empty() {
                doc.clone()
            } else {
                dir.join(path)
            };
            let at = format!("{}:{line}: {target}", doc.display());
            if !file.exists() {
                broken.push(format!("{at} (no such file)"));
            } else if !anchor.is_empty()
                && file.extension().is_some_and(|e| e == "md")
                && !anchors(&file).contains(anchor)
            {
                broken.push(format!("{at} (no such heading)"));
            }
        }
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// Splits a shell command line into words: single and double quotes, a backslash before a
/// character, and a comment from an unquoted `#` that starts a word.
fn words(line: &str) -> Vec<String> {
    let (mut out, mut word, mut in_word) = (Vec::new(), String::new(), false);
    let mut chars = line.chars();
    let mut quote: Option<char> = None;
    while let Some(c) = chars.next() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => word.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, '\\') => {
                word.extend(chars.next());
                in_word = true;
            }
            (None, '#') if !in_word => break,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(word);
    }
    out
}

/// The arguments of a `gradflow` command line (`gradflow ...`, `sudo gradflow ...`,
/// `taskset -c N gradflow ...`, `cargo run --release [-q] [--example E] -- ...`), or `None`.
fn gradflow_args(words: &[String]) -> Option<Vec<String>> {
    let mut w: Vec<&str> = words.iter().map(String::as_str).collect();
    // A redirection ends the command's own words.
    if let Some(at) = w
        .iter()
        .position(|a| a.starts_with(['>', '<']) || a.starts_with("2>"))
    {
        w.truncate(at);
    }
    if w.first() == Some(&"sudo") {
        w.remove(0);
    }
    if w.first() == Some(&"taskset") && w.len() > 3 {
        w.drain(..3);
    }
    let args: Vec<&str> = match w.as_slice() {
        ["gradflow", rest @ ..] => rest.to_vec(),
        ["cargo", "run", rest @ ..] => {
            let dash = rest.iter().position(|&a| a == "--")?;
            rest[dash + 1..].to_vec()
        }
        _ => return None,
    };
    let mut all = vec!["gradflow".to_owned()];
    all.extend(args.iter().map(|a| a.to_string()));
    Some(all)
}

#[test]
fn every_gradflow_command_in_the_docs_parses() {
    let (mut failures, mut parsed) = (Vec::new(), 0);
    for doc in documents() {
        let (_, blocks) = split(&fs::read_to_string(&doc).unwrap());
        for block in blocks.iter().filter(|b| b.lang == "sh") {
            let joined = block.text.replace("\\\n", " ");
            for (i, line) in joined.lines().enumerate() {
                // Commands after `&&`, `;`, `|` or `&` are commands too.
                let commands = line.split("&&").flat_map(|c| c.split([';', '|', '&']));
                for command in commands {
                    let Some(args) = gradflow_args(&words(command)) else {
                        continue;
                    };
                    parsed += 1;
                    if let Err(e) = Cli::try_parse_from(&args) {
                        let first = e.to_string().lines().next().unwrap_or("").to_owned();
                        failures.push(format!(
                            "{}:{}: {}: {first}",
                            doc.display(),
                            block.line + i,
                            command.trim()
                        ));
                    }
                }
            }
        }
    }
    assert!(
        parsed >= 10,
        "only {parsed} commands found: is the search broken?"
    );
    assert!(
        failures.is_empty(),
        "commands that do not parse:\n{}",
        failures.join("\n")
    );
}

/// `over` laid over `base`, table by table; a `label` table is a whole label rule, so it
/// replaces the base's.
fn overlay(base: &mut toml::Table, over: toml::Table) {
    for (key, value) in over {
        match (base.get_mut(&key), value) {
            (Some(toml::Value::Table(b)), toml::Value::Table(o)) if key != "label" => overlay(b, o),
            (_, value) => {
                base.insert(key, value);
            }
        }
    }
}

#[test]
fn every_toml_block_parses_and_jobs_load() {
    let quickstart = root().join("jobs/quickstart.toml");
    let base: toml::Table = toml::from_str(&fs::read_to_string(&quickstart).unwrap()).unwrap();
    let mut failures = Vec::new();
    for doc in documents() {
        let (_, blocks) = split(&fs::read_to_string(&doc).unwrap());
        for block in blocks.iter().filter(|b| b.lang == "toml") {
            let at = format!("{}:{}", doc.display(), block.line);
            let table: toml::Table = match toml::from_str(&block.text) {
                Ok(t) => t,
                Err(e) => {
                    failures.push(format!("{at}: not TOML: {e}"));
                    continue;
                }
            };
            // A benchmark suite names its base job; its fields are the suite loader's. A
            // manifest's dependencies are Cargo's.
            if table.contains_key("job") || table.contains_key("dependencies") {
                continue;
            }
            let whole = ["data", "model", "optimizer", "train"]
                .iter()
                .all(|s| table.contains_key(*s));
            let result = if whole {
                Job::parse(&block.text, Path::new(&at), &[]).map(|_| ())
            } else {
                let mut job = base.clone();
                overlay(&mut job, table);
                let text = toml::to_string(&job).unwrap();
                Job::parse(&text, Path::new(&at), &[]).map(|_| ())
            };
            if let Err(e) = result {
                failures.push(format!("{at}: {e}"));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "TOML blocks that do not load:\n{}",
        failures.join("\n\n")
    );
}

#[test]
fn the_shell_word_splitter_handles_quotes_and_comments() {
    assert_eq!(
        words(r#"gradflow train a.toml --set 'train.compressor={name="none"}' -w 2  # two"#),
        [
            "gradflow",
            "train",
            "a.toml",
            "--set",
            r#"train.compressor={name="none"}"#,
            "-w",
            "2"
        ]
    );
    assert_eq!(words("a \"b c\" d\\ e"), ["a", "b c", "d e"]);
    assert_eq!(words("# only a comment"), Vec::<String>::new());
    assert_eq!(
        gradflow_args(&words("cargo run --release -q -- train j.toml")).unwrap(),
        ["gradflow", "train", "j.toml"]
    );
    assert_eq!(gradflow_args(&words("cargo test --release")), None);
}
