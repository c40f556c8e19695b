//! Man pages and shell completions made from a program's clap definition, so they cannot drift
//! from the options the program accepts. `packaging/build-deb` runs the hidden
//! `ferrohsm-util generate-docs DIR` and `ferrohsm-softhsm2-util --generate-docs DIR`; the
//! files are build products and are not committed.

use clap_complete::Shell;
use std::path::Path;

/// Writes into `dir`: `man/NAME.1` (and `man/NAME-SUB.1`, `man/NAME-SUB-SUBSUB.1` for each
/// visible subcommand), and `bash/NAME`, `zsh/_NAME` and `fish/NAME.fish`, each named as its
/// shell's completion loader looks it up.
pub fn generate(mut cmd: clap::Command, dir: &Path) -> Result<(), String> {
    let man = dir.join("man");
    std::fs::create_dir_all(&man).map_err(|e| format!("cannot create {}: {e}", man.display()))?;
    cmd.build();
    let name = cmd.get_name().to_string();
    let write = |path: &Path, render: &dyn Fn(&mut Vec<u8>) -> std::io::Result<()>| {
        let mut out = Vec::new();
        render(&mut out)
            .and_then(|()| std::fs::write(path, &out))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    };
    write(&man.join(format!("{name}.1")), &|o| {
        clap_mangen::Man::new(cmd.clone()).render(o)
    })?;
    subcommand_pages(&cmd, &name, &name, &man, &write)?;
    for (shell, file) in [
        (Shell::Bash, format!("bash/{name}")),
        (Shell::Zsh, format!("zsh/_{name}")),
        (Shell::Fish, format!("fish/{name}.fish")),
    ] {
        let path = dir.join(file);
        let sub = path.parent().expect("a directory");
        std::fs::create_dir_all(sub).map_err(|e| format!("cannot create {}: {e}", sub.display()))?;
        write(&path, &|o| {
            clap_complete::generate(shell, &mut cmd.clone(), &name, o);
            Ok(())
        })?;
    }
    Ok(())
}

/// Writes a file with what the renderer gives.
type WriteFile = dyn Fn(&Path, &dyn Fn(&mut Vec<u8>) -> std::io::Result<()>) -> Result<(), String>;

/// A page per visible subcommand of `cmd`, at every depth, named as `man ferrohsm-util-init-token`
/// and `man ferrohsm-util-pki-issue` find them (git's way), which is how the pages refer to
/// each other. `page` and `bin` are `cmd`'s page name and command line.
fn subcommand_pages(
    cmd: &clap::Command,
    page: &str,
    bin: &str,
    man: &Path,
    write: &WriteFile,
) -> Result<(), String> {
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        let sub_page = format!("{page}-{}", sub.get_name());
        let sub_bin = format!("{bin} {}", sub.get_name());
        let named = sub.clone().name(sub_page.clone()).bin_name(sub_bin.clone());
        write(&man.join(format!("{sub_page}.1")), &|o| {
            clap_mangen::Man::new(named.clone()).render(o)
        })?;
        subcommand_pages(sub, &sub_page, &sub_bin, man, write)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_and_completions_name_every_option() {
        let cmd = clap::Command::new("tool")
            .about("A tool")
            .arg(clap::Arg::new("module").long("module").help("The module"))
            .subcommand(clap::Command::new("show-slots").about("List slots"))
            .subcommand(
                clap::Command::new("pki")
                    .about("A CA")
                    .subcommand(clap::Command::new("issue").arg(clap::Arg::new("dir").long("dir"))),
            )
            .subcommand(clap::Command::new("secret").hide(true));
        let dir = tempfile::tempdir().unwrap();
        generate(cmd, dir.path()).unwrap();
        let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
        let page = read("man/tool.1");
        assert!(page.contains(".TH tool 1"), "{page}");
        assert!(page.contains("module") && page.contains("show\\-slots"), "{page}");
        assert!(read("man/tool-show-slots.1").contains(".TH tool-show-slots 1"));
        // A command of commands: a page for each, as its parent's page names it.
        assert!(read("man/tool-pki.1").contains("tool\\-pki\\-issue(1)"));
        let issue = read("man/tool-pki-issue.1");
        assert!(
            issue.contains(".TH tool-pki-issue 1") && issue.contains("dir"),
            "{issue}"
        );
        assert!(
            !dir.path().join("man/tool-secret.1").exists(),
            "a hidden subcommand has no page"
        );
        assert!(read("bash/tool").contains("--module"));
        assert!(read("zsh/_tool").contains("#compdef tool"));
        assert!(read("fish/tool.fish").contains("-l module"));
    }
}
