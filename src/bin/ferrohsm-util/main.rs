//! ferrohsm-util: manage ferrohsm tokens and measure what a PKCS#11 module can do.
//! Every command goes through the module's PKCS#11 API, as any application would.

mod bench;
mod copy;
mod migrate;
mod plot;
mod progress;
mod speed;
mod speed_ec;
mod speed_pq;

use ferrohsm::cli::{audit, docs, pki, tokens, usage};

use clap::{CommandFactory, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "ferrohsm-util",
    version,
    about = "Manage ferrohsm tokens and measure signing speed"
)]
struct Cli {
    /// PKCS#11 module to use (default: libferrohsm.so next to this program, then system paths).
    #[arg(long)]
    module: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List slots and their tokens.
    ShowSlots,
    /// Initialise a token (the free slot, a slot number, or an existing token by label).
    InitToken(tokens::InitToken),
    /// List the objects of a token.
    ListObjects(tokens::ListObjects),
    /// Import an RSA or EC key pair from a PKCS#8, PKCS#1 or SEC1 file (PEM or DER).
    Import(tokens::Import),
    /// Delete a token and all its objects.
    DeleteToken(tokens::DeleteToken),
    /// Change the user PIN (or the SO PIN with --so).
    SetPin(tokens::SetPin),
    /// Replace the token key (every object sealed again) without changing a PIN.
    RotateKey(tokens::RotateKey),
    /// Show or set the usage limit of keys (set once, then only lowered).
    UsageLimit(usage::UsageLimit),
    /// Measure RSA and EC signing throughput through the module, openssl-speed style.
    Speed(speed::Speed),
    /// Benchmark any PKCS#11 modules side by side (sign/s, latency, ratio to the first).
    Bench(bench::Bench),
    /// Take over a SoftHSM v2 token: same label, serial, PINs and objects.
    MigrateSofthsm(migrate::Migrate),
    /// Copy every token of one store into an empty one (SQLite and PostgreSQL either way).
    CopyStore(copy::CopyStore),
    /// Make a CA and issue the server and client certificates of the network service.
    Pki(pki::Pki),
    /// The audit trail: make the audit key, show, export, verify and prune records.
    Audit(audit::Audit),
    /// Write this program's man pages and shell completions into DIR (packaging/build-deb).
    #[command(hide = true)]
    GenerateDocs { dir: PathBuf },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::ShowSlots => tokens::show_slots(cli.module.as_deref()),
        Command::InitToken(a) => tokens::init_token(cli.module.as_deref(), a),
        Command::ListObjects(a) => tokens::list_objects(cli.module.as_deref(), a),
        Command::Import(a) => tokens::import(cli.module.as_deref(), a),
        Command::DeleteToken(a) => tokens::delete_token(a),
        Command::SetPin(a) => tokens::set_pin(cli.module.as_deref(), a),
        Command::RotateKey(a) => tokens::rotate_key(a),
        Command::UsageLimit(a) => usage::usage_limit(cli.module.as_deref(), a),
        Command::Speed(a) => speed::run(cli.module.as_deref(), a),
        Command::Bench(a) => bench::run(a),
        Command::MigrateSofthsm(a) => migrate::run(a),
        Command::CopyStore(a) => copy::run(a),
        Command::Pki(a) => pki::run(a),
        Command::Audit(a) => audit::run(a),
        Command::GenerateDocs { dir } => docs::generate(Cli::command(), &dir),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferrohsm-util: {e}");
            ExitCode::FAILURE
        }
    }
}
