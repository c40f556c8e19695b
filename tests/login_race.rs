//! Logins that race: right PINs are never refused, whatever the concurrency, and the lockout
//! still answers at most `max_failures` wrong PINs. A table of races (threads per process,
//! processes, hosts on one PostgreSQL store, right and wrong PINs) with the count of each
//! return code expected. The failure limit is lower than the number of processes racing, so
//! attempts in flight hold the whole budget and later ones must wait for a decision.
//!
//! Every racer is a child process (this test binary again) that opens its sessions, says
//! READY, and starts when the parent writes a line to its standard input once every child is
//! ready: the start does not depend on how fast the machine starts processes.

mod common;

use common::pg::Pg;
use common::race::read_until;
use common::*;
use cryptoki::error::RvError;
use cryptoki::session::UserType;
use cryptoki::types::AuthPin;
use std::io::{BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Barrier;

/// Lower than the number of processes of most rows: the budget is taken by attempts in flight.
const MAX_FAILURES: u32 = 3;
/// Set in racer processes: `op:pin:threads`.
const RACER_ENV: &str = "FERROHSM_RACER";
const LABEL: &str = "race";

/// What each racing thread does.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    /// `C_Login(CKU_USER)`.
    User,
    /// `C_Login(CKU_SO)`.
    So,
    /// `C_SetPIN` of the user PIN without a login, old PIN = new PIN (so every racer's old
    /// PIN stays right however they interleave).
    SetPin,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::User => "user",
            Op::So => "so",
            Op::SetPin => "setpin",
        }
    }

    fn parse(s: &str) -> Op {
        match s {
            "user" => Op::User,
            "so" => Op::So,
            _ => Op::SetPin,
        }
    }

    fn right_pin(self) -> &'static str {
        if self == Op::So {
            SO_PIN
        } else {
            USER_PIN
        }
    }
}

/// Return codes counted over every thread of every process.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Counts {
    ok: u32,
    already: u32,
    incorrect: u32,
    locked: u32,
    other: u32,
}

impl Counts {
    fn add(&mut self, o: Counts) {
        self.ok += o.ok;
        self.already += o.already;
        self.incorrect += o.incorrect;
        self.locked += o.locked;
        self.other += o.other;
    }

    fn line(&self) -> String {
        format!(
            "ok={} already={} incorrect={} locked={} other={}",
            self.ok, self.already, self.incorrect, self.locked, self.other
        )
    }

    fn parse(line: &str) -> Counts {
        let f = |name: &str| -> u32 {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{name}=")))
                .unwrap_or_else(|| panic!("no {name} in {line:?}"))
                .parse()
                .unwrap()
        };
        Counts {
            ok: f("ok"),
            already: f("already"),
            incorrect: f("incorrect"),
            locked: f("locked"),
            other: f("other"),
        }
    }
}

/// The racer side: `threads` sessions opened before the start, one operation each, sessions
/// kept open until every thread is done (so the login stays), then the counts on stdout.
fn racer(spec: &str) {
    let mut parts = spec.splitn(3, ':');
    let op = Op::parse(parts.next().unwrap());
    let pin = parts.next().unwrap().to_string();
    let threads: usize = parts.next().unwrap().parse().unwrap();
    let p = load();
    let slot = p
        .get_slots_with_initialized_token()
        .unwrap()
        .into_iter()
        .find(|s| p.get_token_info(*s).unwrap().label() == LABEL)
        .expect("the token");
    let sessions: Vec<_> = (0..threads).map(|_| p.open_rw_session(slot).unwrap()).collect();
    println!("READY");
    std::io::stdout().flush().unwrap();
    let mut go = String::new();
    std::io::stdin().read_line(&mut go).unwrap();
    let start = Barrier::new(threads);
    let done = Barrier::new(threads);
    let results: Vec<cryptoki::error::Result<()>> = std::thread::scope(|sc| {
        let hs: Vec<_> = sessions
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                let (start, done) = (&start, &done);
                // Wrong PINs differ per thread and process, as a guesser's would.
                let pin = if pin == "wrong" {
                    format!("wrong-{}-{i}", std::process::id())
                } else {
                    pin.clone()
                };
                sc.spawn(move || {
                    start.wait();
                    let r = match op {
                        Op::User => s.login(UserType::User, Some(&AuthPin::new(pin.into()))),
                        Op::So => s.login(UserType::So, Some(&AuthPin::new(pin.into()))),
                        Op::SetPin => s.set_pin(&AuthPin::new(pin.into()), &AuthPin::new(USER_PIN.into())),
                    };
                    // Every session stays open until every thread is done: the login lasts.
                    done.wait();
                    r
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut c = Counts::default();
    for r in results {
        match r.map_err(rv) {
            Ok(()) => c.ok += 1,
            Err(RvError::UserAlreadyLoggedIn) => c.already += 1,
            Err(RvError::PinIncorrect) => c.incorrect += 1,
            Err(RvError::PinLocked) => c.locked += 1,
            Err(e) => {
                eprintln!("unexpected answer: {e}");
                c.other += 1
            }
        }
    }
    println!("TALLY {}", c.line());
}

/// One race: on each of `hosts` hosts, `right_processes` processes of `threads` threads with
/// the right PIN; and `wrong_processes` processes of `wrong_threads` threads with wrong PINs,
/// spread over the hosts. `hosts` > 1 needs PostgreSQL.
struct Row {
    name: &'static str,
    op: Op,
    hosts: usize,
    right_processes: usize,
    threads: usize,
    wrong_processes: usize,
    wrong_threads: usize,
    expect: Counts,
    /// Whether the PIN is locked afterwards.
    locked_after: bool,
}

const fn counts(ok: u32, already: u32, incorrect: u32, locked: u32) -> Counts {
    Counts {
        ok,
        already,
        incorrect,
        locked,
        other: 0,
    }
}

/// A KDF of a few milliseconds, so attempts overlap and hold the budget while in flight.
const KDF: &str = "kdf_memory_kib = 4096\nkdf_passes = 2\n";

fn sqlite_conf(dir: &Path) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let conf = dir.join("ferrohsm.toml");
    std::fs::write(
        &conf,
        format!(
            "[store]\npath = \"store\"\n[pin]\nmax_failures = {MAX_FAILURES}\n{KDF}[log]\nlevel = \"info\"\ntarget = \"{}\"\n",
            dir.join("ferrohsm.log").display()
        ),
    )
    .unwrap();
    conf
}

fn pg_conf(pg: &Pg, dir: &Path, url: &str) -> PathBuf {
    let conf = pg.config(dir, url, MAX_FAILURES, 300);
    let text = std::fs::read_to_string(&conf).unwrap();
    let text = text.replace("kdf_memory_kib = 64\nkdf_passes = 1\n", KDF);
    assert!(text.contains(KDF), "{text}");
    std::fs::write(&conf, text).unwrap();
    conf
}

fn racer_cmd(conf: &Path, spec: &str) -> Command {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args(["--exact", this_test(), "--nocapture", "--test-threads", "1"])
        .env(RACER_ENV, spec)
        .env("FERROHSM_CONF", conf)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    c
}

/// Runs `row` on hosts whose configurations are `confs` (one store) and checks its counts.
fn race(row: &Row, confs: &[PathBuf]) {
    assert_eq!(confs.len(), row.hosts);
    util(
        &confs[0],
        &[
            "init-token",
            "--free",
            "--label",
            LABEL,
            "--so-pin",
            SO_PIN,
            "--pin",
            USER_PIN,
        ],
    );
    let mut specs: Vec<(&Path, String)> = Vec::new();
    for conf in confs {
        for _ in 0..row.right_processes {
            specs.push((
                conf.as_path(),
                format!("{}:{}:{}", row.op.name(), row.op.right_pin(), row.threads),
            ));
        }
    }
    for i in 0..row.wrong_processes {
        specs.push((
            confs[i % confs.len()].as_path(),
            format!("{}:wrong:{}", row.op.name(), row.wrong_threads),
        ));
    }
    let mut children: Vec<_> = specs
        .iter()
        .map(|(conf, spec)| {
            let mut c = racer_cmd(conf, spec).spawn().unwrap();
            let out = BufReader::new(c.stdout.take().unwrap());
            (c, out)
        })
        .collect();
    // Every racer has loaded the module and opened its sessions: start them all.
    for (_, out) in children.iter_mut() {
        read_until(out, "READY");
    }
    for (c, _) in children.iter_mut() {
        c.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    }
    let mut total = Counts::default();
    for (mut c, mut out) in children {
        total.add(Counts::parse(&read_until(&mut out, "TALLY ")));
        assert!(c.wait().unwrap().success(), "{}: a racer failed", row.name);
    }
    eprintln!("{}: {}", row.name, total.line());
    assert_eq!(total, row.expect, "{}", row.name);
    // Afterwards: locked exactly when expected, and otherwise no attempt is left counted
    // when only right PINs raced.
    let info = tokens_info(&confs[0], row.op);
    if row.locked_after {
        assert!(info.contains("locked"), "{}: {info}", row.name);
    } else {
        assert!(!info.contains("locked"), "{}: {info}", row.name);
        if row.wrong_processes == 0 {
            assert!(!info.contains("count-low"), "{}: {info}", row.name);
        }
    }
}

/// The PIN flags of the token as `pinflags` reports them (a racer of its own, no login).
fn tokens_info(conf: &Path, op: Op) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", this_test(), "--nocapture", "--test-threads", "1"])
        .env(
            RACER_ENV,
            format!("flags:{}", if op == Op::So { "so" } else { "user" }),
        )
        .env("FERROHSM_CONF", conf)
        .output()
        .unwrap();
    assert!(out.status.success());
    read_until(&mut BufReader::new(&out.stdout[..]), "FLAGS ")
}

fn flags(who: &str) {
    let p = load();
    let slot = p
        .get_slots_with_initialized_token()
        .unwrap()
        .into_iter()
        .find(|s| p.get_token_info(*s).unwrap().label() == LABEL)
        .unwrap();
    let i = p.get_token_info(slot).unwrap();
    let (low, locked) = if who == "so" {
        (i.so_pin_count_low(), i.so_pin_locked())
    } else {
        (i.user_pin_count_low(), i.user_pin_locked())
    };
    println!(
        "FLAGS {}{}.",
        if low { "count-low " } else { "" },
        if locked { "locked" } else { "" }
    );
}

/// In a child process (this binary started again by a test of the table): plays its part and
/// says so.
fn child_part() -> bool {
    let Ok(spec) = std::env::var(RACER_ENV) else {
        return false;
    };
    match spec.strip_prefix("flags:") {
        Some(who) => flags(who),
        None => racer(&spec),
    }
    true
}

thread_local! {
    /// The test function children run (their entry is `child_part`): the table of their parent.
    static TABLE: std::cell::Cell<&'static str> = const { std::cell::Cell::new("") };
}

fn this_test() -> &'static str {
    TABLE.get()
}

/// Racers of one process: the one that wins the turn evaluates the PIN, the others find it
/// logged in; C_SetPIN evaluates every old PIN, each waiting for a share of the budget.
const SQLITE_ROWS: &[Row] = &[
    Row {
        name: "user PIN, 100 threads of 1 process",
        op: Op::User,
        hosts: 1,
        right_processes: 1,
        threads: 100,
        wrong_processes: 0,
        wrong_threads: 0,
        expect: counts(1, 99, 0, 0),
        locked_after: false,
    },
    Row {
        name: "user PIN, 8 processes x 16 threads",
        op: Op::User,
        hosts: 1,
        right_processes: 8,
        threads: 16,
        wrong_processes: 0,
        wrong_threads: 0,
        expect: counts(8, 120, 0, 0),
        locked_after: false,
    },
    Row {
        name: "user PIN, 8 processes x 16 threads right, 1 process x 2 threads wrong",
        op: Op::User,
        hosts: 1,
        right_processes: 8,
        threads: 16,
        wrong_processes: 1,
        wrong_threads: MAX_FAILURES as usize - 1,
        expect: counts(8, 120, MAX_FAILURES - 1, 0),
        locked_after: false,
    },
    Row {
        name: "user PIN, 4 processes x 8 threads all wrong",
        op: Op::User,
        hosts: 1,
        right_processes: 0,
        threads: 0,
        wrong_processes: 4,
        wrong_threads: 8,
        expect: counts(0, 0, MAX_FAILURES, 32 - MAX_FAILURES),
        locked_after: true,
    },
    Row {
        name: "SO PIN, 100 threads of 1 process",
        op: Op::So,
        hosts: 1,
        right_processes: 1,
        threads: 100,
        wrong_processes: 0,
        wrong_threads: 0,
        expect: counts(1, 99, 0, 0),
        locked_after: false,
    },
    Row {
        name: "SO PIN, 8 processes x 16 threads",
        op: Op::So,
        hosts: 1,
        right_processes: 8,
        threads: 16,
        wrong_processes: 0,
        wrong_threads: 0,
        expect: counts(8, 120, 0, 0),
        locked_after: false,
    },
    Row {
        name: "C_SetPIN old PIN, 32 threads of 1 process",
        op: Op::SetPin,
        hosts: 1,
        right_processes: 1,
        threads: 32,
        wrong_processes: 0,
        wrong_threads: 0,
        expect: counts(32, 0, 0, 0),
        locked_after: false,
    },
    Row {
        name: "C_SetPIN old PIN, 8 processes x 8 threads",
        op: Op::SetPin,
        hosts: 1,
        right_processes: 8,
        threads: 8,
        wrong_processes: 0,
        wrong_threads: 0,
        expect: counts(64, 0, 0, 0),
        locked_after: false,
    },
];

/// Two hosts (configurations of their own) on one database.
const POSTGRES_ROWS: &[Row] = &[
    Row {
        name: "postgres: user PIN, 2 hosts x 4 processes x 16 threads",
        op: Op::User,
        hosts: 2,
        right_processes: 4,
        threads: 16,
        wrong_processes: 0,
        wrong_threads: 0,
        expect: counts(8, 120, 0, 0),
        locked_after: false,
    },
    Row {
        name: "postgres: user PIN, 2 hosts x 3 processes x 16 threads right, 1 process x 2 threads wrong",
        op: Op::User,
        hosts: 2,
        right_processes: 3,
        threads: 16,
        wrong_processes: 1,
        wrong_threads: MAX_FAILURES as usize - 1,
        expect: counts(6, 90, MAX_FAILURES - 1, 0),
        locked_after: false,
    },
    Row {
        name: "postgres: SO PIN, 2 hosts x 4 processes x 16 threads",
        op: Op::So,
        hosts: 2,
        right_processes: 4,
        threads: 16,
        wrong_processes: 0,
        wrong_threads: 0,
        expect: counts(8, 120, 0, 0),
        locked_after: false,
    },
    Row {
        name: "postgres: C_SetPIN old PIN, 2 hosts x 4 processes x 4 threads",
        op: Op::SetPin,
        hosts: 2,
        right_processes: 4,
        threads: 4,
        wrong_processes: 0,
        wrong_threads: 0,
        expect: counts(32, 0, 0, 0),
        locked_after: false,
    },
    Row {
        name: "postgres: user PIN, 2 hosts x 3 processes x 4 threads all wrong",
        op: Op::User,
        hosts: 2,
        right_processes: 0,
        threads: 0,
        wrong_processes: 6,
        wrong_threads: 4,
        expect: counts(0, 0, MAX_FAILURES, 24 - MAX_FAILURES),
        locked_after: true,
    },
];

#[test]
fn racing_logins_on_an_sqlite_store_follow_the_table() {
    if child_part() {
        return;
    }
    TABLE.set("racing_logins_on_an_sqlite_store_follow_the_table");
    for row in SQLITE_ROWS {
        let tmp = tempfile::tempdir().unwrap();
        race(row, &[sqlite_conf(tmp.path())]);
    }
}

#[test]
fn racing_logins_on_two_postgres_hosts_follow_the_table() {
    if child_part() {
        return;
    }
    TABLE.set("racing_logins_on_two_postgres_hosts_follow_the_table");
    let pg = Pg::start();
    for (i, row) in POSTGRES_ROWS.iter().enumerate() {
        let url = pg.database(&format!("race{i}"));
        let tmp = tempfile::tempdir().unwrap();
        let confs: Vec<_> = (0..row.hosts)
            .map(|h| pg_conf(&pg, &tmp.path().join(format!("host{h}")), &url))
            .collect();
        race(row, &confs);
    }
}
