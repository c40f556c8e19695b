//! The audit chain's tables in PostgreSQL (`store::audit`), as SQLite keeps them
//! (`backend::sqlite::audit`). Writers hold the store's advisory lock, so the head a
//! transaction reads is the one its record follows.

use super::conn::Conn;
use crate::store::backend::{AuditKey, AuditRow};
use cryptoki_sys::CK_SLOT_ID;
use postgres::{GenericClient, Row};

/// The migration step of the audit tables; `IF NOT EXISTS` so that it can take any place in
/// the list of migrations.
pub(super) const SCHEMA_AUDIT: &str = "
CREATE TABLE IF NOT EXISTS audit (
    slot_id BIGINT NOT NULL,
    seq BIGINT NOT NULL,
    body BYTEA NOT NULL,
    hash BYTEA NOT NULL,
    PRIMARY KEY (slot_id, seq)
);
CREATE TABLE IF NOT EXISTS audit_keys (
    slot_id BIGINT PRIMARY KEY,
    public BYTEA NOT NULL,
    sealed BYTEA NOT NULL
);
";

fn row(r: &Row) -> AuditRow {
    AuditRow {
        seq: r.get::<_, i64>(0) as u64,
        body: r.get(1),
        hash: r.get(2),
    }
}

pub(super) fn rows(c: &mut Conn, slot: CK_SLOT_ID, after: u64) -> Result<Vec<AuditRow>, postgres::Error> {
    let st = c.statement("SELECT seq, body, hash FROM audit WHERE slot_id = $1 AND seq > $2 ORDER BY seq")?;
    Ok(c.client
        .query(&st, &[&(slot as i64), &(after as i64)])?
        .iter()
        .map(row)
        .collect())
}

pub(super) fn head(
    c: &mut impl GenericClient,
    slot: CK_SLOT_ID,
) -> Result<Option<AuditRow>, postgres::Error> {
    Ok(c.query_opt(
        "SELECT seq, body, hash FROM audit WHERE slot_id = $1 ORDER BY seq DESC LIMIT 1",
        &[&(slot as i64)],
    )?
    .as_ref()
    .map(row))
}

pub(super) fn append(
    c: &mut impl GenericClient,
    slot: CK_SLOT_ID,
    r: &AuditRow,
) -> Result<u64, postgres::Error> {
    c.execute(
        "INSERT INTO audit (slot_id, seq, body, hash) VALUES ($1, $2, $3, $4)",
        &[&(slot as i64), &(r.seq as i64), &r.body, &r.hash],
    )
}

pub(super) fn prune(c: &mut impl GenericClient, slot: CK_SLOT_ID, seq: u64) -> Result<u64, postgres::Error> {
    if seq == u64::MAX {
        c.execute("DELETE FROM audit_keys WHERE slot_id = $1", &[&(slot as i64)])?;
        return c.execute("DELETE FROM audit WHERE slot_id = $1", &[&(slot as i64)]);
    }
    c.execute(
        "DELETE FROM audit WHERE slot_id = $1 AND seq < $2",
        &[&(slot as i64), &(seq as i64)],
    )
}

pub(super) fn key(c: &mut impl GenericClient, slot: CK_SLOT_ID) -> Result<Option<AuditKey>, postgres::Error> {
    Ok(c.query_opt(
        "SELECT public, sealed FROM audit_keys WHERE slot_id = $1",
        &[&(slot as i64)],
    )?
    .map(|r| (r.get(0), r.get(1))))
}

pub(super) fn put_key(
    c: &mut impl GenericClient,
    slot: CK_SLOT_ID,
    public: &[u8],
    sealed: &[u8],
) -> Result<u64, postgres::Error> {
    c.execute(
        "INSERT INTO audit_keys (slot_id, public, sealed) VALUES ($1, $2, $3) \
         ON CONFLICT (slot_id) DO UPDATE SET public = EXCLUDED.public, sealed = EXCLUDED.sealed",
        &[&(slot as i64), &public, &sealed],
    )
}
