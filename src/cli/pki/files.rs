//! The files `ferrohsm-util pki` writes: PEM certificates (0644) and private keys (0600), each
//! written whole to a temporary file in the same directory and then renamed into place, so a
//! crash leaves the old file or the new one, never half a key, and a key is never readable by
//! others, not even for a moment. Existing files are kept unless the user said `--force`.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};

pub const KEY_MODE: u32 = 0o600;
pub const CERT_MODE: u32 = 0o644;

/// `DIR/STEM.pem` and `DIR/STEM.key`.
pub fn pair(dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
    (dir.join(format!("{stem}.pem")), dir.join(format!("{stem}.key")))
}

/// Makes `dir` (mode 0700: it will hold keys) if it is missing.
pub fn make_dir(dir: &Path) -> Result<(), String> {
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

/// Refuses, before any key is made, when one of `paths` exists and `force` is not given.
pub fn check_free(paths: &[&Path], force: bool) -> Result<(), String> {
    if force {
        return Ok(());
    }
    match paths.iter().find(|p| p.exists()) {
        Some(p) => Err(format!(
            "{} already exists; nothing was written (give --force to replace it, or another --dir)",
            p.display()
        )),
        None => Ok(()),
    }
}

/// Writes `contents` to `path` with `mode`: replaces an existing file only with `force`.
pub fn write(path: &Path, contents: &[u8], mode: u32, force: bool) -> Result<(), String> {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let fail = |e: std::io::Error| format!("cannot write {}: {e}", path.display());
    // tempfile creates the file with mode 0600 before anything is written to it.
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(fail)?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(fail)?;
    tmp.write_all(contents).map_err(fail)?;
    tmp.as_file().sync_all().map_err(fail)?;
    if force {
        tmp.persist(path).map_err(|e| fail(e.error))?;
    } else {
        // A link, not a rename: fails if the name was taken since check_free.
        tmp.persist_noclobber(path).map_err(|e| {
            if e.error.kind() == std::io::ErrorKind::AlreadyExists {
                format!(
                    "{} already exists (made while this ran?); give --force to replace it",
                    path.display()
                )
            } else {
                fail(e.error)
            }
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn modes_and_refusal() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("a.key");
        write(&key, b"one", KEY_MODE, false).unwrap();
        assert_eq!(std::fs::metadata(&key).unwrap().mode() & 0o777, 0o600);
        let e = write(&key, b"two", KEY_MODE, false).unwrap_err();
        assert!(e.contains("--force"), "{e}");
        assert!(check_free(&[&key], false).unwrap_err().contains("--force"));
        assert_eq!(std::fs::read(&key).unwrap(), b"one");
        write(&key, b"two", CERT_MODE, true).unwrap();
        assert_eq!(std::fs::read(&key).unwrap(), b"two");
        assert_eq!(std::fs::metadata(&key).unwrap().mode() & 0o777, 0o644);
        // No temporary file is left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
