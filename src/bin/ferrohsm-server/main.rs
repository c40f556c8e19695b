//! ferrohsm-server: the token served over the network on mutual TLS 1.3, so that keys stay on
//! one host and signer hosts only ask it to sign. A thin room over `token/`: it accepts
//! connections, knows who each client is and what it may see, and hands each request to a
//! `token::Library` of the connection's own. The protocol is `ferrohsm::remote::proto`.
//!
//! Usage: `ferrohsm-server --config /etc/ferrohsm/server.toml` (docs/operations.md, "Serve
//! the token over the network").

mod config;
mod conn;
mod dispatch;
mod identity;
mod limits;
mod metrics;

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let path = match (args.next().as_deref(), args.next(), args.next()) {
        (Some("--config" | "-c"), Some(p), None) => p,
        _ => {
            eprintln!("usage: ferrohsm-server --config FILE   (the file is described in docs/operations.md)");
            return ExitCode::from(2);
        }
    };
    match config::Server::load(std::path::Path::new(&path)).and_then(conn::run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("ferrohsm-server: {e}");
            eprintln!("ferrohsm-server: {e}");
            ExitCode::FAILURE
        }
    }
}
