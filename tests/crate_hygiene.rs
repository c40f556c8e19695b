//! The crate's dependencies, as a reviewer would check them: the module depends on none of the
//! command-line crates (they belong to the `cli` feature, which the programs require), and every
//! dependency a manifest lists is used by its code (the way cargo-machete finds unused ones:
//! the crate's name has to appear in the source).

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

/// What only the two programs use.
const CLI_CRATES: &[&str] = &[
    "clap",
    "clap_mangen",
    "clap_complete",
    "indicatif",
    "rpassword",
    "secrecy",
    "libloading",
    "cryptoki",
    "tempfile",
    "plotters",
    "rcgen",
    "x509-parser",
    "time",
];

/// The direct normal dependencies of package `ferrohsm` with `features` (cargo tree, from the
/// lock file, offline).
fn direct_dependencies(features: &[&str]) -> BTreeSet<String> {
    let o = Command::new(env!("CARGO"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["tree", "--offline", "--locked", "-p", "ferrohsm", "-e", "normal"])
        .args(["--depth", "1", "--prefix", "none"])
        .args(features)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .skip(1) // the package itself
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

#[test]
fn the_module_depends_on_no_command_line_crate() {
    let module = direct_dependencies(&["--no-default-features"]);
    let programs = direct_dependencies(&[]);
    for c in CLI_CRATES {
        assert!(
            !module.contains(*c),
            "the module (no default features) depends on {c}"
        );
        // The list is true: the programs do use each of them.
        assert!(
            programs.contains(*c),
            "{c} is not a dependency of the programs (any more?)"
        );
    }
}

/// Every `.rs` file under `dir`, concatenated.
fn sources(dir: &Path, out: &mut String) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            sources(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push_str(&std::fs::read_to_string(&p).unwrap());
        }
    }
}

/// The dependencies `table` of `manifest` that no source under `dirs` names. A dependency
/// counts as used when its crate name (a dash as an underscore, or dropped) appears
/// followed by `::`, or after `use ` or `extern crate `.
fn unused(manifest: &Path, table: &str, dirs: &[&str]) -> Vec<String> {
    let root = manifest.parent().unwrap();
    let m: toml::Table = toml::from_str(&std::fs::read_to_string(manifest).unwrap()).unwrap();
    let mut code = String::new();
    for d in dirs {
        if root.join(d).exists() {
            sources(&root.join(d), &mut code);
        }
    }
    let Some(deps) = m.get(table).and_then(|t| t.as_table()) else {
        return vec![];
    };
    deps.keys()
        .filter(|name| {
            // md-5's library is md5: a dash becomes an underscore or disappears.
            [name.replace('-', "_"), name.replace('-', "")].iter().all(|c| {
                ![format!("{c}::"), format!("use {c}"), format!("extern crate {c}")]
                    .iter()
                    .any(|p| code.contains(p.as_str()))
            })
        })
        .cloned()
        .collect()
}

#[test]
fn every_dependency_is_used() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cases: &[(&str, &str, &[&str])] = &[
        ("Cargo.toml", "dependencies", &["src"]),
        ("Cargo.toml", "dev-dependencies", &["tests", "benches", "src"]),
        ("softhsm-compat/Cargo.toml", "dependencies", &["src"]),
    ];
    for (manifest, table, dirs) in cases {
        let u = unused(&root.join(manifest), table, dirs);
        assert!(
            u.is_empty(),
            "{manifest} [{table}] lists crates nothing uses: {u:?}"
        );
    }
    // The check finds what it looks for: a dependency named in no source is reported.
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("src")).unwrap();
    std::fs::write(dir.path().join("src/lib.rs"), "use sha2::Digest;\n").unwrap();
    let manifest = dir.path().join("Cargo.toml");
    std::fs::write(&manifest, "[dependencies]\nsha2 = \"0.11\"\npbkdf2 = \"0.13\"\n").unwrap();
    assert_eq!(unused(&manifest, "dependencies", &["src"]), ["pbkdf2"]);
}
