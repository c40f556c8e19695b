//! `ferrohsm-util copy-store`: moves every token of one store into another, SQLite or
//! PostgreSQL either way, as rows: wraps, seals and keyed hashes are copied as they are
//! (they name their slot and object id, which are kept), so every PIN and every key works
//! unchanged and nothing is decrypted on the way. The target must be empty; the copy is one
//! transaction there, checked row by row afterwards.

use ferrohsm::store::backend::{self, Backend, ObjectRow, RowQuery, TokenRow};
use std::path::PathBuf;

type Result<T> = std::result::Result<T, String>;

#[derive(clap::Args)]
pub struct CopyStore {
    /// The store to copy from: a store directory (holding ferrohsm.db) or a
    /// postgresql://user@host:port/database URL.
    #[arg(long)]
    from: String,
    /// The store to copy into, empty: a store directory (created if missing) or a
    /// postgresql:// URL of an existing database.
    #[arg(long)]
    to: String,
    /// Read both stores and tell what would be copied; write nothing.
    #[arg(long)]
    dry_run: bool,
}

fn is_url(s: &str) -> bool {
    s.starts_with("postgresql://") || s.starts_with("postgres://")
}

/// A store named on the command line. A URL takes its TLS settings and password from the
/// configuration's [store] section (`sslmode`, `root_cert`, `password_file`) or PGPASSWORD.
/// `create`: a missing SQLite store may be made (the target).
fn open(at: &str, create: bool) -> Result<Box<dyn Backend>> {
    if is_url(at) {
        let mut config = ferrohsm::config::Config::load().map_err(|e| e.to_string())?;
        config.store.backend = "postgres".into();
        config.store.url = Some(at.to_string());
        // The URL on the command line wins over the environment's.
        std::env::remove_var(ferrohsm::config::STORE_URL_ENV);
        config.check().map_err(|e| format!("{at}: {e}"))?;
        return Ok(Box::new(backend::postgres::PostgresBackend::open(&config)?));
    }
    let dir = PathBuf::from(at);
    if !create && !dir.join(backend::sqlite::DB_NAME).exists() {
        return Err(format!(
            "{at} holds no token store ({} is missing); give the directory that holds it",
            backend::sqlite::DB_NAME
        ));
    }
    Ok(Box::new(backend::sqlite::SqliteBackend::open(&dir)?))
}

/// Every token of `b` with all its objects.
fn read_all(b: &dyn Backend) -> Result<Vec<(TokenRow, Vec<ObjectRow>)>> {
    let at = b.location();
    let tokens = b
        .tokens()
        .map_err(|e| format!("cannot read the tokens of {at}: {e}"))?;
    tokens
        .into_iter()
        .map(|t| {
            let objects = b
                .rows(t.slot_id, &RowQuery::default())
                .map_err(|e| format!("cannot read the objects of {at}: {e}"))?;
            Ok((t, objects))
        })
        .collect()
}

/// The uses counted of every limited key among `rows` (slot, id, uses): a copied key keeps
/// its count, so a copy of the store is no way around a usage limit.
fn read_uses(b: &dyn Backend, rows: &[(TokenRow, Vec<ObjectRow>)]) -> Result<Vec<(u64, u64, u64)>> {
    let mut uses = Vec::new();
    for (t, objects) in rows {
        for o in objects {
            let n = b
                .use_count(t.slot_id, o.id)
                .map_err(|e| format!("cannot read the key uses of {}: {e}", b.location()))?;
            if n > 0 {
                uses.push((t.slot_id, o.id, n));
            }
        }
    }
    Ok(uses)
}

fn label(t: &TokenRow) -> String {
    String::from_utf8_lossy(&t.label).trim_end().to_string()
}

pub fn run(a: CopyStore) -> Result<()> {
    // The stores' own log lines (what failed and what to do) go to stderr.
    ferrohsm::logging::init(None);
    let from = open(&a.from, false)?;
    let rows = read_all(&*from)?;
    let uses = read_uses(&*from, &rows)?;
    let objects: usize = rows.iter().map(|(_, o)| o.len()).sum();
    // A dry run makes no SQLite store where there is none.
    let to = if a.dry_run && !is_url(&a.to) && !PathBuf::from(&a.to).join(backend::sqlite::DB_NAME).exists() {
        None
    } else {
        Some(open(&a.to, true)?)
    };
    let target = to.as_ref().map_or(a.to.clone(), |t| t.location());
    if let Some(to) = &to {
        let there = to
            .tokens()
            .map_err(|e| format!("cannot read the tokens of {target}: {e}"))?;
        if !there.is_empty() {
            return Err(format!(
                "{target} already holds {} token(s); copy-store never overwrites: give an empty store as --to",
                there.len()
            ));
        }
    }
    for (t, o) in &rows {
        println!(
            "token {:?} (slot {}, serial {}): {} object(s)",
            label(t),
            t.slot_id,
            t.serial,
            o.len()
        );
    }
    if a.dry_run {
        println!(
            "dry run: would copy {} token(s) and {objects} object(s) from {} to {target}; nothing was written",
            rows.len(),
            from.location()
        );
        return Ok(());
    }
    let Some(to) = to else {
        return Err("internal error: no target store".into());
    };
    let progress = super::progress::bar(objects, "copy-store");
    backend::transact(&*to, |tx| {
        // Checked again inside the transaction: another process may have written meanwhile.
        if tx.max_slot()?.is_some() {
            return ferrohsm::error::fail_because(
                cryptoki_sys::CKR_FUNCTION_FAILED,
                "the target store is no longer empty",
            );
        }
        for (t, objects) in &rows {
            tx.insert_token(t)?;
            for o in objects {
                tx.import_object(t.slot_id, o)?;
                progress.inc(1);
            }
        }
        for &(slot, id, n) in &uses {
            tx.import_uses(slot, id, n)?;
        }
        Ok(())
    })
    .map_err(|e| format!("cannot write to {target} ({e}); nothing was copied"))?;
    progress.finish_and_clear();
    // Read back: every row as it was (the generations start anew), every count of uses too.
    let copied = read_all(&*to)?;
    let copied_uses = read_uses(&*to, &copied)?;
    let same = copied.len() == rows.len()
        && copied.iter().zip(&rows).all(|((ct, co), (t, o))| {
            TokenRow {
                generation: 0,
                ..ct.clone()
            } == TokenRow {
                generation: 0,
                ..t.clone()
            } && co == o
        })
        && copied_uses == uses;
    if !same {
        return Err(format!(
            "{target} does not read back what was copied into it; do not use it, and report this"
        ));
    }
    println!(
        "copied {} token(s) and {objects} object(s) from {} to {target}; PINs and keys are unchanged",
        rows.len(),
        from.location()
    );
    Ok(())
}
