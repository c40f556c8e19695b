//! `softhsm2.conf`: found and parsed as SoftHSM 2.6 does.

use crate::Error;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SoftHsmConf {
    pub path: Option<PathBuf>,
    pub tokendir: PathBuf,
    pub backend: String,
    pub log_level: String,
    /// Keys SoftHSM does not know: it warns about and ignores them.
    pub unknown: Vec<String>,
}

const KNOWN: &[&str] = &[
    "directories.tokendir",
    "objectstore.backend",
    "objectstore.umask",
    "log.level",
    "log.file",
    "slots.removable",
    "slots.mechanisms",
    "library.reset_on_fork",
];

impl SoftHsmConf {
    /// `SOFTHSM2_CONF`, else `~/.config/softhsm2/softhsm2.conf`, else the system file.
    pub fn locate() -> Option<PathBuf> {
        if let Some(p) = std::env::var_os("SOFTHSM2_CONF") {
            return Some(PathBuf::from(p));
        }
        if let Some(home) = std::env::var_os("HOME") {
            let p = Path::new(&home).join(".config/softhsm2/softhsm2.conf");
            if p.exists() {
                return Some(p);
            }
        }
        ["/etc/softhsm/softhsm2.conf", "/etc/softhsm2.conf"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.exists())
    }

    pub fn load(path: &Path) -> Result<SoftHsmConf, Error> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::Io(format!(
                "cannot read SoftHSM configuration {}: {e}",
                path.display()
            ))
        })?;
        let mut c = Self::parse(&text)?;
        c.path = Some(path.to_path_buf());
        Ok(c)
    }

    /// The grammar: `name = value`, `#` starts a comment anywhere, the value ends at a second
    /// `=`, both sides trimmed, keys case-sensitive, the last duplicate wins.
    pub fn parse(text: &str) -> Result<SoftHsmConf, Error> {
        let mut c = SoftHsmConf {
            path: None,
            tokendir: PathBuf::from("/var/lib/softhsm/tokens/"),
            backend: "file".into(),
            log_level: "INFO".into(),
            unknown: vec![],
        };
        for line in text.lines() {
            let line = line.split('#').next().unwrap_or("");
            let mut parts = line.split('=');
            let (Some(name), Some(value)) = (parts.next(), parts.next()) else {
                continue;
            };
            let (name, value) = (name.trim(), value.trim());
            if name.is_empty() {
                continue;
            }
            match name {
                "directories.tokendir" => c.tokendir = PathBuf::from(value),
                "objectstore.backend" => c.backend = value.to_string(),
                "log.level" => c.log_level = value.to_string(),
                n if KNOWN.contains(&n) => {}
                n => c.unknown.push(n.to_string()),
            }
        }
        if !matches!(c.backend.as_str(), "file" | "db") {
            return Err(Error::Conf(format!(
                "objectstore.backend must be file or db, not {:?}",
                c.backend
            )));
        }
        Ok(c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grammar() {
        let c = SoftHsmConf::parse(
            "# comment\n directories.tokendir = /x/tokens # trailing\nobjectstore.backend=file\nlog.level = DEBUG=extra\nfoo.bar = 1\ndirectories.tokendir = /y\n",
        )
        .unwrap();
        assert_eq!(c.tokendir, PathBuf::from("/y"));
        assert_eq!(c.log_level, "DEBUG");
        assert_eq!(c.unknown, vec!["foo.bar".to_string()]);
        assert!(SoftHsmConf::parse("objectstore.backend = ldap\n").is_err());
    }
}
