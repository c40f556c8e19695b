//! Man pages and shell completions made from a program's clap definition, so they cannot drift
//! from the options the program accepts. `packaging/build-deb` runs the hidden
//! `ferrohsm-util generate-docs DIR` and `ferrohsm-softhsm2-util --generate-docs DIR`; the
//! files are build products and are not committed.

use clap_complete::Shell;
use std::path::Path;

/// Writes into `dir`: `man/NAME.1` (and `man/NAME-SUB.1` for each visible subcommand), and
/// `bash/NAME`, `zsh/_NAME` and `fish/NAME.fish`, each named as its shell's completion loader
/// looks it up.
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
    for sub in cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set() && s.get_name() != "help")
    {
        // A page per subcommand, named as `man ferrohsm-util-init-token` finds it (git's way).
        let page = format!("{name}-{}", sub.get_name());
        let sub = sub
            .clone()
            .name(page.clone())
            .bin_name(format!("{name} {}", sub.get_name()));
        write(&man.join(format!("{page}.1")), &|o| {
            clap_mangen::Man::new(sub.clone()).render(o)
        })?;
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_and_completions_name_every_option() {
        let cmd = clap::Command::new("tool")
            .about("A tool")
            .arg(clap::Arg::new("module").long("module").help("The module"))
            .subcommand(clap::Command::new("show-slots").about("List slots"))
            .subcommand(clap::Command::new("secret").hide(true));
        let dir = tempfile::tempdir().unwrap();
        generate(cmd, dir.path()).unwrap();
        let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
        let page = read("man/tool.1");
        assert!(page.contains(".TH tool 1"), "{page}");
        assert!(page.contains("module") && page.contains("show\\-slots"), "{page}");
        assert!(read("man/tool-show-slots.1").contains(".TH tool-show-slots 1"));
        assert!(
            !dir.path().join("man/tool-secret.1").exists(),
            "a hidden subcommand has no page"
        );
        assert!(read("bash/tool").contains("--module"));
        assert!(read("zsh/_tool").contains("#compdef tool"));
        assert!(read("fish/tool.fish").contains("-l module"));
    }
}
