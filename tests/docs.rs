//! The documentation's commands stay true: every fenced block of README.md and docs/*.md is
//! either checked here or marked as an example.
//!
//! - A command block (info string `sh`, `bash`, `shell`, `console` or none) is checked line by
//!   line: `ferrohsm-util` subcommands and flags must exist (parsed from the built program's
//!   `--help`), `ferrohsm-softhsm2-util` flags likewise, `cargo` targets (`--bench`, `--test`,
//!   fuzz targets) must exist, scripts run by path must exist and be executable. Any other
//!   program makes the block fail: mark the block as an example (first line `# example`, or an
//!   info string such as `text`) or teach this file to check it.
//! - A command block whose first line is `# runs in tests/docs.rs` is also run, as written, with
//!   bash in a scratch directory where `target/release/libferrohsm.so` is this build's module,
//!   `ferrohsm-util` and `ferrohsm-server` are this build's, and the store is a scratch one (its other programs, such
//!   as pkcs11-tool and openssl, must be installed: `.ci/run` installs them).
//! - A block whose first line is `# example: tests/e2e/NAME.sh` is not run, but every program
//!   it shows must appear in that scenario (or its common.sh) with the same first argument.
//! - A `toml` block must load with the module's configuration loader.
//! - Blocks in any other language (configuration of other programs, output) and `# example`
//!   blocks are skipped, and counted.
//!
//! Across the whole text: every `ferrohsm-util ...` command named inline passes the block
//! checks, every repository path named exists, every relative link (and its
//! `#anchor`) resolves, every `section.key` named in code is a configuration key, and every
//! `FERROHSM_*` name is used somewhere in the code. README.md's first 40 lines hold both
//! set-up commands.

use std::collections::BTreeSet;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

const BUILD_AND_SPEED: &str = "cargo build --release && target/release/ferrohsm-util speed";
const RUN_ALL_TESTS: &str = "bash .ci/run";
const RUN_MARK: &str = "# runs in tests/docs.rs";
const EXAMPLE_MARK: &str = "# example";
/// First path components that name files of this repository.
const REPO_DIRS: &[&str] = &[
    "src/",
    "tests/",
    "benches/",
    "include/",
    "p11-kit/",
    "softhsm-compat/",
    "docs/",
    ".ci/",
    "packaging/",
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every docs/*.md, in a fixed order.
fn doc_files() -> Vec<PathBuf> {
    let mut files = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("docs/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// One fenced code block.
struct Block {
    file: PathBuf,
    /// Line of the opening fence (1-based).
    line: usize,
    info: String,
    body: Vec<String>,
}

impl Block {
    fn place(&self) -> String {
        format!(
            "{}:{}",
            self.file.strip_prefix(root()).unwrap_or(&self.file).display(),
            self.line
        )
    }

    fn first_line(&self) -> &str {
        self.body
            .iter()
            .map(|l| l.trim())
            .find(|l| !l.is_empty())
            .unwrap_or("")
    }

    fn is_command_block(&self) -> bool {
        matches!(self.info.as_str(), "" | "sh" | "bash" | "shell" | "console")
    }
}

/// The fenced blocks of a Markdown text (fences may be indented, as in list items).
fn blocks(file: &Path, text: &str) -> Vec<Block> {
    let mut out = vec![];
    let mut open: Option<(usize, Block)> = None;
    for (i, line) in text.lines().enumerate() {
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim();
        match &mut open {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    open = Some((
                        indent,
                        Block {
                            file: file.to_path_buf(),
                            line: i + 1,
                            info: info.split_whitespace().next().unwrap_or("").to_string(),
                            body: vec![],
                        },
                    ));
                }
            }
            Some((fence_indent, block)) => {
                if trimmed == "```" {
                    let (_, b) = open.take().unwrap();
                    out.push(b);
                } else {
                    let cut = indent.min(*fence_indent);
                    block.body.push(line[cut..].to_string());
                }
            }
        }
    }
    assert!(open.is_none(), "{}: a code block is not closed", file.display());
    out
}

/// Shell words of one command line (quotes removed; no expansion).
fn words(line: &str) -> Vec<String> {
    let mut out = vec![];
    let mut cur = String::new();
    let mut has = false;
    let mut quote: Option<char> = None;
    for c in line.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => cur.push(c),
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                has = true;
            }
            None if c.is_whitespace() => {
                if has || !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                has = false;
            }
            None => cur.push(c),
        }
    }
    if has || !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// `line` without a trailing `# comment` (outside quotes).
fn strip_comment(line: &str) -> &str {
    let mut quote: Option<char> = None;
    let mut prev_space = true;
    for (i, c) in line.char_indices() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '\'' || c == '"' => quote = Some(c),
            None if c == '#' && prev_space => return &line[..i],
            None => {}
        }
        prev_space = c.is_whitespace();
    }
    line
}

/// The commands of a command block: continuation lines joined, comments dropped, split at
/// `&&`, `||`, `;`, `|` and a trailing `&`; leading `VAR=value` words removed. Console blocks
/// keep only `$ ` lines.
fn commands(block: &Block) -> Vec<Vec<String>> {
    let mut lines = vec![];
    let mut pending = String::new();
    for raw in &block.body {
        let mut l = raw.trim().to_string();
        if block.info == "console" {
            match l.strip_prefix("$ ") {
                Some(rest) => l = rest.to_string(),
                None if pending.is_empty() => continue,
                None => {}
            }
        }
        if let Some(head) = l.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(&l);
        lines.push(std::mem::take(&mut pending));
    }
    let mut out = vec![];
    for l in lines {
        let l = strip_comment(&l);
        let mut current: Vec<String> = vec![];
        for w in words(l) {
            if matches!(w.as_str(), "&&" | "||" | ";" | "|" | "&") {
                out.push(std::mem::take(&mut current));
            } else if let Some(head) = w.strip_suffix(';') {
                current.push(head.to_string());
                out.push(std::mem::take(&mut current));
            } else {
                current.push(w);
            }
        }
        out.push(current);
    }
    out.into_iter()
        .map(|c| {
            c.into_iter()
                .skip_while(|w| {
                    w.split_once('=').is_some_and(|(k, _)| {
                        !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                    })
                })
                .collect::<Vec<_>>()
        })
        .filter(|c| !c.is_empty())
        .collect()
}

/// What `--help` shows: subcommands (under "Commands:") and every option spelling.
struct Help {
    commands: BTreeSet<String>,
    options: BTreeSet<String>,
}

fn help(program: &str, args: &[&str]) -> Help {
    let out = Command::new(program)
        .args(args)
        .arg("--help")
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(out.status.success(), "{program} {args:?} --help failed");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut commands = BTreeSet::new();
    let mut options = BTreeSet::new();
    let mut in_commands = false;
    for line in text.lines() {
        if line.starts_with("Commands:") {
            in_commands = true;
            continue;
        }
        if !line.starts_with(' ') {
            in_commands = false;
        }
        if in_commands {
            if let Some(c) = line.split_whitespace().next() {
                commands.insert(c.to_string());
            }
            continue;
        }
        let t = line.trim_start();
        if t.starts_with('-') {
            for w in t.split_whitespace().take_while(|w| w.starts_with('-')) {
                let w = w.trim_end_matches(',');
                options.insert(w.split(['=', '<']).next().unwrap().to_string());
            }
        }
    }
    Help { commands, options }
}

/// Checks `ferrohsm-util` and `ferrohsm-softhsm2-util` command lines against their `--help`.
struct Cli {
    util: Help,
    util_sub: std::collections::BTreeMap<String, Help>,
    softhsm2: Help,
}

impl Cli {
    fn new() -> Cli {
        let util = help(env!("CARGO_BIN_EXE_ferrohsm-util"), &[]);
        let mut util_sub = std::collections::BTreeMap::new();
        for c in util.commands.iter().filter(|c| *c != "help") {
            let h = help(env!("CARGO_BIN_EXE_ferrohsm-util"), &[c]);
            // A command of commands (`pki init-ca`): each of them, as "pki init-ca".
            for sub in h.commands.iter().filter(|s| *s != "help") {
                let hs = help(env!("CARGO_BIN_EXE_ferrohsm-util"), &[c, sub]);
                util_sub.insert(format!("{c} {sub}"), hs);
            }
            util_sub.insert(c.clone(), h);
        }
        let softhsm2 = help(env!("CARGO_BIN_EXE_ferrohsm-softhsm2-util"), &[]);
        Cli {
            util,
            util_sub,
            softhsm2,
        }
    }

    fn option_name(w: &str) -> Option<&str> {
        (w.starts_with('-') && w.len() > 1).then(|| w.split('=').next().unwrap())
    }

    fn check_util(&self, args: &[String]) -> Result<(), String> {
        let mut i = 0;
        while i < args.len() && args[i].starts_with('-') {
            let o = Self::option_name(&args[i]).unwrap();
            if !self.util.options.contains(o) {
                return Err(format!("ferrohsm-util has no option {o}"));
            }
            if o == "--module" && !args[i].contains('=') {
                i += 1;
            }
            i += 1;
        }
        let Some(sub) = args.get(i) else {
            return Ok(());
        };
        let mut help = self
            .util_sub
            .get(sub)
            .ok_or_else(|| format!("ferrohsm-util has no subcommand {sub}"))?;
        let mut sub = sub.clone();
        // A command of commands (`pki init-ca`): the options are the inner command's.
        if let Some(inner) = args
            .get(i + 1)
            .filter(|w| !help.commands.is_empty() && !w.starts_with('-'))
        {
            if !help.commands.contains(inner) || inner == "help" {
                return Err(format!("ferrohsm-util {sub} has no command {inner}"));
            }
            sub = format!("{sub} {inner}");
            help = &self.util_sub[&sub];
            i += 1;
        }
        for w in &args[i + 1..] {
            if let Some(o) = Self::option_name(w) {
                if !help.options.contains(o) {
                    return Err(format!("ferrohsm-util {sub} has no option {o}"));
                }
            }
        }
        Ok(())
    }

    fn check_softhsm2(&self, args: &[String]) -> Result<(), String> {
        for w in args {
            if let Some(o) = Self::option_name(w) {
                if !self.softhsm2.options.contains(o) {
                    return Err(format!("ferrohsm-softhsm2-util has no option {o}"));
                }
            }
        }
        Ok(())
    }
}

fn repo_file(path: &str) -> Result<PathBuf, String> {
    let p = root().join(path);
    if p.exists() {
        Ok(p)
    } else {
        Err(format!("{path} does not exist in the repository"))
    }
}

fn executable(path: &str) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let p = repo_file(path)?;
    if p.metadata().unwrap().permissions().mode() & 0o111 == 0 {
        return Err(format!("{path} is not executable"));
    }
    Ok(())
}

/// The value following `flag` in `args`.
fn flag_value<'a>(args: &'a [String], flag: &str) -> Option<&'a str> {
    args.iter()
        .position(|w| w == flag)
        .and_then(|i| args.get(i + 1))
        .map(|s| s.as_str())
}

/// Checks one command of a command block; `run` says the block is run as well.
fn check_command(cli: &Cli, cmd: &[String], run: bool) -> Result<(), String> {
    let program = cmd[0].as_str();
    let args = &cmd[1..];
    let base = program.rsplit('/').next().unwrap();
    match base {
        "ferrohsm-util" => {
            if program.contains('/') && program != "target/release/ferrohsm-util" {
                return Err(format!(
                    "{program}: ferrohsm-util is target/release/ferrohsm-util"
                ));
            }
            cli.check_util(args)
        }
        "ferrohsm-softhsm2-util" => cli.check_softhsm2(args),
        "echo" => Ok(()),
        // A block that is run shows whether its other programs work.
        _ if run => Ok(()),
        "bash" => {
            let script = args.first().ok_or("bash without a script")?;
            repo_file(script).map(|_| ())
        }
        "cargo" => {
            let sub = args.first().map(|s| s.as_str()).unwrap_or("");
            match sub {
                "build" => Ok(()),
                // A tool the documentation has you install is one CI installs the same way.
                "install" => {
                    let krate = args.last().map(|s| s.as_str()).unwrap_or("");
                    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
                    if ci.contains(&format!("cargo install --locked {krate}")) {
                        Ok(())
                    } else {
                        Err(format!("cargo install {krate}: .ci/run does not install it"))
                    }
                }
                "bench" => {
                    let name = flag_value(args, "--bench").ok_or("cargo bench without --bench")?;
                    repo_file(&format!("benches/{name}.rs")).map(|_| ())
                }
                "nextest" => {
                    if let Some(t) = flag_value(args, "--test") {
                        repo_file(&format!("tests/{t}.rs"))?;
                    }
                    Ok(())
                }
                "fuzz" => {
                    let dir = flag_value(args, "--fuzz-dir").ok_or("cargo fuzz without --fuzz-dir")?;
                    let mut target = None;
                    let mut i = 2;
                    while i < args.len() && args[i] != "--" {
                        match args[i].as_str() {
                            "--fuzz-dir" | "--sanitizer" => i += 1,
                            w if w.starts_with('-') => {}
                            w => {
                                target = Some(w);
                                break;
                            }
                        }
                        i += 1;
                    }
                    let target = target.ok_or("cargo fuzz run without a target")?;
                    repo_file(&format!("{dir}/fuzz_targets/{target}.rs")).map(|_| ())
                }
                other => Err(format!("cargo {other}: not checked by tests/docs.rs")),
            }
        }
        _ if REPO_DIRS.iter().any(|d| program.starts_with(d)) => executable(program),
        _ => Err(format!(
            "{program}: not checked by tests/docs.rs; mark the block as an example \
             (first line \"# example\", or an info string such as text) or check it here"
        )),
    }
}

/// Runs a `# runs in tests/docs.rs` block with bash in a scratch directory.
fn run_block(block: &Block) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let release = dir.path().join("target/release");
    std::fs::create_dir_all(&release).unwrap();
    // The module beside the test programs' directory, as tests/common finds it.
    let exe = std::env::current_exe().unwrap();
    let module = exe.parent().unwrap().parent().unwrap().join("libferrohsm.so");
    assert!(
        module.exists(),
        "{} is missing: build the crate first",
        module.display()
    );
    std::os::unix::fs::symlink(&module, release.join("libferrohsm.so")).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_ferrohsm-util"), release.join("ferrohsm-util")).unwrap();
    let conf = dir.path().join("ferrohsm.toml");
    std::fs::write(
        &conf,
        "[store]\npath = \"store\"\n[pin]\nkdf_memory_kib = 64\nkdf_passes = 1\n",
    )
    .unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_ferrohsm-util"), bin.join("ferrohsm-util")).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_ferrohsm-server"), bin.join("ferrohsm-server")).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let script = format!("set -euo pipefail\n{}\n", block.body.join("\n"));
    // Output to files and a process group of its own: a block may leave a server running in
    // the background (the network quick start), which is stopped when the block ends.
    let (out, err) = (dir.path().join("block.out"), dir.path().join("block.err"));
    let mut child = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(dir.path())
        .env("FERROHSM_CONF", &conf)
        .env("PATH", path)
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("bash: {e}"))?;
    let status = child.wait().map_err(|e| format!("bash: {e}"))?;
    // The group is gone when nothing was left running: that is no error.
    let _ = Command::new("kill")
        .arg("--")
        .arg(format!("-{}", child.id()))
        .stderr(std::process::Stdio::null())
        .status();
    if !status.success() {
        return Err(format!(
            "the block failed ({status}):\n{}\n{}",
            std::fs::read_to_string(&out).unwrap_or_default(),
            std::fs::read_to_string(&err).unwrap_or_default()
        ));
    }
    Ok(())
}

/// Checks an `# example: tests/e2e/NAME.sh` block against its scenario.
fn check_e2e_example(block: &Block, script: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(repo_file(script)?).unwrap()
        + &std::fs::read_to_string(root().join("tests/e2e/common.sh")).unwrap();
    for cmd in commands(block) {
        for w in cmd.iter().take(2) {
            if !text.contains(w.as_str()) {
                return Err(format!(
                    "{}: {script} does not run {:?} (no {w:?} in it)",
                    block.place(),
                    cmd.join(" ")
                ));
            }
        }
    }
    Ok(())
}

/// Loads a `toml` block with the module's configuration loader.
fn check_toml(block: &Block) -> Result<(), String> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ferrohsm.toml");
    std::fs::write(&path, block.body.join("\n")).unwrap();
    ferrohsm::config::Config::from_file(&path)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

/// Inline code spans of a Markdown text outside fenced blocks.
fn code_spans(text: &str) -> Vec<String> {
    let mut out = vec![];
    let mut in_fence = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
            continue;
        }
        if in_fence {
            continue;
        }
        let parts: Vec<&str> = line.split('`').collect();
        out.extend(parts.iter().skip(1).step_by(2).map(|s| s.to_string()));
    }
    out
}

/// Repository paths named anywhere in `text`: words that start with one of `REPO_DIRS`.
fn repo_paths(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    for (i, _) in text.char_indices() {
        let boundary = i == 0 || matches!(bytes[i - 1], b' ' | b'\t' | b'\n' | b'`' | b'(' | b'"' | b'[');
        if !boundary || !REPO_DIRS.iter().any(|d| text[i..].starts_with(d)) {
            continue;
        }
        let end = text[i..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || "_./*-".contains(c)))
            .map_or(text.len(), |e| i + e);
        let p = text[i..end].trim_end_matches(['.', ',', ':']);
        out.insert(p.to_string());
    }
    out
}

fn path_exists(p: &str) -> bool {
    match p.find('*') {
        // A glob: the directory it lists must exist and hold a match.
        Some(star) => {
            let (dir, pattern) = p[..star].rsplit_once('/').unwrap_or(("", &p[..star]));
            let suffix = &p[star + 1..];
            std::fs::read_dir(root().join(dir)).is_ok_and(|entries| {
                entries.flatten().any(|e| {
                    let n = e.file_name().to_string_lossy().to_string();
                    n.starts_with(pattern) && n.ends_with(suffix)
                })
            })
        }
        None => root().join(p).exists(),
    }
}

/// GitHub's anchor for a heading.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut in_fence = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_fence = !in_fence;
        } else if !in_fence && line.starts_with('#') {
            out.insert(slug(line.trim_start_matches('#')));
        }
    }
    out
}

/// Relative link targets `](target)` of a Markdown text.
fn links(text: &str) -> Vec<String> {
    text.match_indices("](")
        .filter_map(|(i, _)| {
            let rest = &text[i + 2..];
            rest.find(')').map(|e| rest[..e].to_string())
        })
        .filter(|t| !t.contains("://") && !t.starts_with("mailto:"))
        .collect()
}

/// Whether `text` holds `name` as a whole word, or as the prefix of a `NAME_...` family
/// (`FERROHSM_KERNEL_` names `FERROHSM_KERNEL_PORTABLE` and its siblings).
fn names_word(text: &str, name: &str) -> bool {
    text.match_indices(name).any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + name.len()..].chars().next();
        !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
            && !after.is_some_and(|c| c.is_ascii_alphanumeric() || (c == '_' && !name.ends_with('_')))
    })
}

/// The tree's text files under `dir`, concatenated (for name searches).
fn source_text(dir: &Path, into: &mut String) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            source_text(&p, into);
        } else if let Ok(t) = std::fs::read_to_string(&p) {
            into.push_str(&t);
        }
    }
}

#[test]
fn readme_shows_both_set_up_commands_first() {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let head: Vec<&str> = text.lines().take(40).collect();
    for cmd in [BUILD_AND_SPEED, RUN_ALL_TESTS] {
        assert!(
            head.iter().any(|l| l.trim() == cmd),
            "README.md's first 40 lines must show `{cmd}` on a line of its own"
        );
    }
}

#[test]
fn every_block_is_checked_or_marked_as_an_example() {
    let cli = Cli::new();
    let mut errors = vec![];
    let (mut checked, mut ran, mut configs, mut e2e) = (0, 0, 0, 0);
    let mut skipped = vec![];
    for file in doc_files() {
        let text = std::fs::read_to_string(&file).unwrap();
        for block in blocks(&file, &text) {
            let first = block.first_line().to_string();
            if block.info == "toml" {
                configs += 1;
                if let Err(e) = check_toml(&block) {
                    errors.push(format!(
                        "{}: the configuration loader refuses it: {e}",
                        block.place()
                    ));
                }
                continue;
            }
            if !block.is_command_block() {
                skipped.push(format!("{} ({})", block.place(), block.info));
                continue;
            }
            if first.starts_with(EXAMPLE_MARK) {
                if let Some(script) = first
                    .split_whitespace()
                    .find(|w| w.starts_with("tests/e2e/") && w.ends_with(".sh"))
                {
                    e2e += 1;
                    if let Err(e) = check_e2e_example(&block, script) {
                        errors.push(e);
                    }
                } else {
                    skipped.push(format!("{} (# example)", block.place()));
                }
                continue;
            }
            let run = first == RUN_MARK;
            checked += 1;
            let mut bad = false;
            for cmd in commands(&block) {
                if let Err(e) = check_command(&cli, &cmd, run) {
                    bad = true;
                    errors.push(format!("{}: {}: {e}", block.place(), cmd.join(" ")));
                }
            }
            if run && !bad {
                ran += 1;
                if let Err(e) = run_block(&block) {
                    errors.push(format!("{}: {e}", block.place()));
                }
            }
        }
    }
    println!(
        "docs: {checked} command blocks checked ({ran} of them run), {configs} configuration blocks loaded, \
         {e2e} blocks matched to their e2e scenario, {} blocks skipped as examples:",
        skipped.len()
    );
    for s in &skipped {
        println!("  skipped {s}");
    }
    assert!(
        checked > 0 && ran > 0 && configs > 0,
        "the checks found nothing to check"
    );
    assert!(errors.is_empty(), "documentation errors:\n{}", errors.join("\n"));
}

#[test]
fn named_paths_links_keys_commands_and_variables_exist() {
    let cli = Cli::new();
    let mut sources = String::new();
    for dir in ["src", "tests", "include", "softhsm-compat", "benches", ".ci"] {
        source_text(&root().join(dir), &mut sources);
    }
    let mut errors = vec![];
    for file in doc_files() {
        let name = file.strip_prefix(root()).unwrap().display().to_string();
        let text = std::fs::read_to_string(&file).unwrap();
        for p in repo_paths(&text) {
            if !path_exists(&p) {
                errors.push(format!("{name}: names {p}, which does not exist"));
            }
        }
        for link in links(&text) {
            let (target, anchor) = link.split_once('#').unwrap_or((&link, ""));
            let target_path = if target.is_empty() {
                file.clone()
            } else {
                file.parent().unwrap().join(target)
            };
            if !target_path.exists() {
                errors.push(format!("{name}: link {link} does not resolve"));
                continue;
            }
            if !anchor.is_empty() {
                let t = std::fs::read_to_string(&target_path).unwrap_or_default();
                if !anchors(&t).contains(anchor) {
                    errors.push(format!("{name}: link {link}: no heading #{anchor}"));
                }
            }
        }
        for span in code_spans(&text) {
            // A command named inline (`ferrohsm-util speed --kernel all`): as in a block, but a
            // placeholder (`ferrohsm-util <command> --help`) stands for every subcommand.
            let w = words(&span);
            if w.first()
                .is_some_and(|p| p.ends_with("ferrohsm-util") || p == "ferrohsm-softhsm2-util")
                && !w.iter().any(|x| x.starts_with('<'))
            {
                if let Err(e) = check_command(&cli, &w, false) {
                    errors.push(format!("{name}: `{span}`: {e}"));
                }
            }
            // `section.key` of the configuration file: known to the loader.
            if let Some((section, key)) = span.split_once('.') {
                if ["store", "pin", "log", "engine", "remote"].contains(&section)
                    && !key.is_empty()
                    && key.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                {
                    let dir = tempfile::tempdir().unwrap();
                    let path = dir.path().join("ferrohsm.toml");
                    std::fs::write(&path, format!("[{section}]\n{key} = \"?\"\n")).unwrap();
                    if let Err(e) = ferrohsm::config::Config::from_file(&path) {
                        if e.to_string().contains("unknown field") {
                            errors.push(format!("{name}: `{span}` is not a configuration key"));
                        }
                    }
                }
            }
        }
        let mut rest = text.as_str();
        while let Some(i) = rest.find("FERROHSM_") {
            let end = rest[i..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(rest.len(), |e| i + e);
            let var = rest[i..end].trim_end_matches('_');
            if !names_word(&sources, var) {
                errors.push(format!("{name}: names {var}, which no source file uses"));
            }
            rest = &rest[end..];
        }
    }
    assert!(errors.is_empty(), "documentation errors:\n{}", errors.join("\n"));
}
