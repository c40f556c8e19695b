//! `ferrohsm-util audit`: the SO's audit key (`init`), signed checkpoints, reading the trail
//! (`show`, `export` as JSON Lines), checking an exported log offline (`verify`), and
//! retention (`prune`). Not PKCS#11 operations: they act on the configured store directly, as
//! rotate-key does; `verify` needs no store at all.

use super::module::Result;
use super::pin;
use super::tokens::{stored_token, TokenChoice};
use crate::store::audit::{checkpoint, time, verify, Entry};
use crate::store::{Sealed, TokenRecord};
use clap::{Args, Subcommand};
use secrecy::ExposeSecret;
use std::io::{BufRead, Write};
use std::path::PathBuf;

#[derive(Args)]
pub struct Audit {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Make the token's audit key (SO PIN) and write its public half to a file, once.
    Init {
        #[command(flatten)]
        which: TokenChoice,
        /// Where the public key goes (PEM); give it to whoever verifies exported logs.
        #[arg(long = "public-key")]
        public_key: PathBuf,
        /// Replace an existing audit key (after a re-initialisation).
        #[arg(long)]
        replace: bool,
        /// The SO PIN (else $FERROHSM_SO_PIN, else a prompt).
        #[arg(long)]
        pin: Option<String>,
    },
    /// Append a checkpoint signed by the audit key now (user PIN, or SO PIN with --so).
    Checkpoint {
        #[command(flatten)]
        which: TokenChoice,
        #[arg(long)]
        so: bool,
        /// The PIN (else $FERROHSM_PIN or $FERROHSM_SO_PIN, else a prompt).
        #[arg(long)]
        pin: Option<String>,
    },
    /// Print records, one line each, oldest first.
    Show {
        #[command(flatten)]
        which: TokenChoice,
        #[command(flatten)]
        filter: Filter,
    },
    /// Write every record of the token as JSON Lines (stdout, or --output), for a SIEM and
    /// for `audit verify`.
    Export {
        #[command(flatten)]
        which: TokenChoice,
        #[arg(long, short)]
        output: Option<PathBuf>,
    },
    /// Check an exported log against the audit key's public half; reports the first break.
    Verify {
        #[arg(long = "public-key")]
        public_key: PathBuf,
        /// The exported log (else stdin).
        log: Option<PathBuf>,
    },
    /// Remove records older than DATE, cut at a signed checkpoint so the rest still verifies
    /// (SO PIN).
    Prune {
        #[command(flatten)]
        which: TokenChoice,
        /// A date (2026-12-01) or a time as records write it (2026-12-01T12:00:00.000Z).
        #[arg(long)]
        before: String,
        #[arg(long)]
        pin: Option<String>,
    },
}

/// Which records `show` prints.
#[derive(Args)]
struct Filter {
    /// Only this event (login, destroy_object, ...).
    #[arg(long)]
    event: Option<String>,
    /// Only records of this object: its handle, or its label.
    #[arg(long)]
    key: Option<String>,
    /// From this time on (a date, or a time as records write it).
    #[arg(long)]
    since: Option<String>,
    /// Before this time.
    #[arg(long)]
    until: Option<String>,
}

impl Filter {
    fn check(&self) -> Result<()> {
        for t in [&self.since, &self.until].into_iter().flatten() {
            if !time::valid_bound(t) {
                return Err(format!(
                    "{t:?} is not a time: give a date (2026-12-01) or a UTC time (2026-12-01T12:00:00Z)"
                ));
            }
        }
        Ok(())
    }

    fn keeps(&self, e: &Entry) -> bool {
        let r = &e.record;
        let key = self.key.as_deref().is_none_or(|k| {
            k.parse::<u64>().is_ok_and(|id| r.object == Some(id))
                || r.label_hash.as_deref() == Some(crate::store::audit::label_hash(k.as_bytes()).as_str())
        });
        key && self.event.as_deref().is_none_or(|ev| r.event == ev)
            && self.since.as_deref().is_none_or(|t| r.time.as_str() >= t)
            && self.until.as_deref().is_none_or(|t| r.time.as_str() < t)
    }
}

fn open(which: &TokenChoice) -> Result<(Sealed, TokenRecord)> {
    let config = crate::config::Config::load().map_err(|e| e.to_string())?;
    if config.store.backend == "memory" {
        return Err(
            "audit works on the sqlite and postgres stores; the configured store is in memory".into(),
        );
    }
    let store = crate::store::open_sealed(&config)?;
    let token = stored_token(
        &store,
        which.slot,
        which.token.as_deref(),
        which.serial.as_deref(),
    )?;
    Ok((store, token))
}

fn entries(store: &Sealed, slot: u64) -> Result<Vec<Entry>> {
    store
        .audit_log(slot, 0)
        .map_err(|e| format!("cannot read the audit trail: {e}"))?
        .iter()
        .map(|b| {
            serde_json::from_slice(b).map_err(|e| {
                format!("an audit record in the store is not readable ({e}): run `audit export` and `audit verify` to locate it")
            })
        })
        .collect()
}

fn line(e: &Entry) -> String {
    let r = &e.record;
    let mut s = format!("{:>6} {} {:<18} {:<8}", r.seq, r.time, r.event, r.outcome);
    if let Some(o) = r.object {
        s += &format!(" object={o}");
    }
    if let Some(c) = r.class {
        s += &format!(" class=0x{c:x}");
    }
    if let Some(m) = r.mechanism {
        s += &format!(" mechanism=0x{m:x}");
    }
    if !r.attributes.is_empty() {
        let a: Vec<String> = r.attributes.iter().map(|a| format!("0x{a:x}")).collect();
        s += &format!(" attributes={}", a.join(","));
    }
    s += &format!(" pid={} user={:?}", r.pid, r.user);
    if let Some(c) = &r.client {
        s += &format!(" client={c:?}");
    }
    s
}

pub fn run(a: Audit) -> Result<()> {
    match a.command {
        Command::Init {
            which,
            public_key,
            replace,
            pin,
        } => {
            let pin = pin::get(pin, "FERROHSM_SO_PIN", "SO PIN")?;
            let (store, token) = open(&which)?;
            if public_key.exists() && !replace {
                return Err(format!(
                    "{} exists; give another path (the public key is written once, and never over a file)",
                    public_key.display()
                ));
            }
            let key = store
                .audit_init(token.slot_id, pin.expose_secret().as_bytes(), replace)
                .map_err(|e| format!("no audit key was made: {e} (the log above says why)"))?;
            std::fs::write(&public_key, checkpoint::public_pem(&key)).map_err(|e| {
                format!(
                    "the audit key was made but {} cannot be written: {e}",
                    public_key.display()
                )
            })?;
            println!(
                "Audit key of slot {} made; its public half is in {}. Keep a copy where the store's writers cannot change it.",
                token.slot_id,
                public_key.display()
            );
            Ok(())
        }
        Command::Checkpoint { which, so, pin } => {
            let (owner, pin) = pin::of_owner(pin, so)?;
            let (store, token) = open(&which)?;
            store
                .audit_checkpoint(token.slot_id, owner, pin.expose_secret().as_bytes())
                .map_err(|e| format!("no checkpoint was written: {e} (the log above says why)"))
        }
        Command::Show { which, filter } => {
            filter.check()?;
            let (store, token) = open(&which)?;
            let mut out = std::io::stdout().lock();
            for e in entries(&store, token.slot_id)?.iter().filter(|e| filter.keeps(e)) {
                if writeln!(out, "{}", line(e)).is_err() {
                    break;
                }
            }
            Ok(())
        }
        Command::Export { which, output } => {
            let (store, token) = open(&which)?;
            let mut text = Vec::new();
            for b in store
                .audit_log(token.slot_id, 0)
                .map_err(|e| format!("cannot read the audit trail: {e}"))?
            {
                text.extend_from_slice(&b);
                text.push(b'\n');
            }
            match output {
                Some(p) => std::fs::write(&p, text).map_err(|e| format!("cannot write {}: {e}", p.display())),
                None => std::io::stdout()
                    .write_all(&text)
                    .map_err(|e| format!("cannot write the log: {e}")),
            }
        }
        Command::Verify { public_key, log } => {
            let pem = std::fs::read_to_string(&public_key)
                .map_err(|e| format!("cannot read {}: {e}", public_key.display()))?;
            let key = checkpoint::read_public_pem(&pem).ok_or_else(|| {
                format!(
                    "{} is not an Ed25519 public key in PEM (the file `audit init` wrote)",
                    public_key.display()
                )
            })?;
            let lines: Vec<String> = match &log {
                Some(p) => std::fs::read_to_string(p)
                    .map_err(|e| format!("cannot read {}: {e}", p.display()))?
                    .lines()
                    .map(str::to_string)
                    .collect(),
                None => std::io::stdin()
                    .lock()
                    .lines()
                    .collect::<std::io::Result<_>>()
                    .map_err(|e| format!("cannot read the log: {e}"))?,
            };
            let report = verify::verify(lines.iter().map(String::as_str), &key).map_err(|b| b.to_string())?;
            if report.records == 0 {
                return Err("the log holds no record".into());
            }
            println!(
                "ok: records {} to {} ({} records) follow each other unaltered; {} signed checkpoint(s)",
                report.first, report.last, report.records, report.checkpoints
            );
            match report.last_checkpoint {
                Some(c) if c == report.last => println!("the last record is a signed checkpoint"),
                Some(c) => println!(
                    "records {} to {} follow the last checkpoint ({c}): chained, not yet signed; records removed from the end after it would not show",
                    c + 1,
                    report.last
                ),
                None => println!("no checkpoint: the chain holds together but nothing in it is signed (run `audit init`)"),
            }
            Ok(())
        }
        Command::Prune { which, before, pin } => {
            if !time::valid_bound(&before) {
                return Err(format!(
                    "{before:?} is not a time: give a date (2026-12-01) or a UTC time (2026-12-01T12:00:00Z)"
                ));
            }
            let pin = pin::get(pin, "FERROHSM_SO_PIN", "SO PIN")?;
            let (store, token) = open(&which)?;
            let cut = store
                .audit_prune(token.slot_id, pin.expose_secret().as_bytes(), &before)
                .map_err(|e| format!("nothing was pruned: {e} (the log above says why)"))?;
            println!("records before {cut} removed; the trail now starts at the signed checkpoint {cut}");
            Ok(())
        }
    }
}
