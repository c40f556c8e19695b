//! `ferrohsm-util pki`: a small CA for the network service's mutual TLS, for a quick start
//! or a closed deployment. `init-ca` makes the CA in a directory; `issue` makes a server's or
//! a client's key and certificate there, signed by it; `quickstart` makes both, and the two
//! configurations, for a server and one client. Every key is ECDSA P-256 and is made
//! on this host; nothing is sent anywhere. (names.rs checks names, certs.rs makes the
//! certificates, files.rs writes them.)

mod certs;
mod files;
mod names;
mod quickstart;

use clap::{ArgGroup, Args, Subcommand};
use std::path::{Path, PathBuf};

type Result<T> = std::result::Result<T, String>;

#[derive(Args)]
pub struct Pki {
    #[command(subcommand)]
    command: PkiCommand,
}

#[derive(Subcommand)]
enum PkiCommand {
    /// Make a CA in DIR: its key (ca.key, mode 0600) and self-signed certificate (ca.pem).
    InitCa(InitCa),
    /// Issue a server or client key and certificate (NAME.key, NAME.pem), signed by DIR's CA.
    Issue(Issue),
    /// Make, in DIR, a CA, a server's and a client's certificates, the server's configuration
    /// (server.toml) giving the client one token, and the client's module configuration.
    Quickstart(quickstart::Quickstart),
}

#[derive(Args)]
struct InitCa {
    /// Directory to hold the CA (made with mode 0700 if missing).
    #[arg(long)]
    dir: PathBuf,
    /// The CA's common name.
    #[arg(long, default_value = "ferrohsm CA")]
    name: String,
    /// Days the CA is valid.
    #[arg(long, default_value_t = certs::CA_DAYS, value_parser = clap::value_parser!(u32).range(1..=36500))]
    days: u32,
    /// Replace an existing ca.pem and ca.key (certificates it issued stop verifying).
    #[arg(long)]
    force: bool,
}

#[derive(Args)]
#[command(group(ArgGroup::new("kind").required(true).args(["server", "client"])))]
struct Issue {
    /// Directory of the CA (ca.pem, ca.key); the new files go there too.
    #[arg(long)]
    dir: PathBuf,
    /// A server certificate for this DNS name or IP address (its first name; serverAuth).
    #[arg(long, value_name = "NAME")]
    server: Option<String>,
    /// More names of the server, DNS names or IP addresses (repeat, or separate with commas).
    #[arg(
        long,
        value_name = "DNS-OR-IP",
        conflicts_with = "client",
        value_delimiter = ','
    )]
    san: Vec<String>,
    /// A client certificate for this identity (its common name and DNS name; clientAuth).
    #[arg(long, value_name = "IDENTITY")]
    client: Option<String>,
    /// Days the certificate is valid (at most until the CA expires).
    #[arg(long, default_value_t = certs::LEAF_DAYS, value_parser = clap::value_parser!(u32).range(1..=36500))]
    days: u32,
    /// Replace existing NAME.pem and NAME.key.
    #[arg(long)]
    force: bool,
}

pub fn run(a: Pki) -> Result<()> {
    match a.command {
        PkiCommand::InitCa(a) => init_ca(a),
        PkiCommand::Issue(a) => issue(a),
        PkiCommand::Quickstart(a) => quickstart::run(a),
    }
}

fn init_ca(a: InitCa) -> Result<()> {
    let (cert, key) = files::pair(&a.dir, "ca");
    files::check_free(&[&cert, &key], a.force)?;
    let ca = certs::make_ca(&a.name, a.days)?;
    files::make_dir(&a.dir)?;
    write_pair(&cert, &key, &ca, a.force)?;
    println!(
        "CA \"{}\" made, valid until {}: {} (give it to servers and clients) and {} (keep it secret)",
        a.name,
        ca.not_after.date(),
        cert.display(),
        key.display()
    );
    Ok(())
}

fn issue(a: Issue) -> Result<()> {
    let (stem, leaf) = match (&a.server, &a.client) {
        (Some(server), None) => {
            let mut list: Vec<names::Name> = vec![];
            for s in std::iter::once(server).chain(&a.san) {
                let n = names::Name::parse(s)?;
                if !list.contains(&n) {
                    list.push(n);
                }
            }
            (server.as_str(), certs::Leaf::Server(list))
        }
        (None, Some(client)) => (client.as_str(), certs::Leaf::Client(names::identity(client)?)),
        _ => unreachable!("clap requires exactly one of --server and --client"),
    };
    let (cert, key) = files::pair(&a.dir, names::file_stem(stem)?);
    files::check_free(&[&cert, &key], a.force)?;
    let ca = certs::load_ca(&a.dir)?;
    let made = certs::issue(&ca, &leaf, a.days)?;
    write_pair(&cert, &key, &made, a.force)?;
    let what = match &leaf {
        certs::Leaf::Server(names) => format!(
            "server certificate for {}",
            names.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", ")
        ),
        certs::Leaf::Client(id) => format!("client certificate for identity {id}"),
    };
    println!(
        "{what}, valid until {}: {} and {} (keep it secret)",
        made.not_after.date(),
        cert.display(),
        key.display()
    );
    Ok(())
}

/// The key first: a certificate is never left without its key.
fn write_pair(cert: &Path, key: &Path, made: &certs::Made, force: bool) -> Result<()> {
    files::write(key, made.key_pem.as_bytes(), files::KEY_MODE, force)?;
    files::write(cert, made.cert_pem.as_bytes(), files::CERT_MODE, force)
}
