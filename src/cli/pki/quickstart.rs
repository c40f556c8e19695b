//! `ferrohsm-util pki quickstart`: everything a server and one client need to talk, in one
//! directory: the CA, the server's certificate (for `localhost`, the loopback addresses and
//! the host the client dials), the client's certificate, the server's configuration giving
//! that client one token, and the client module's configuration pointing at the server. The
//! files are those `init-ca` and `issue` make and docs/operations.md describes; this only
//! saves the typing, so that one machine runs server and client in four commands.

use super::{certs, files, names, write_pair, Result};
use clap::Args;
use std::path::{Path, PathBuf};

#[derive(Args)]
pub(super) struct Quickstart {
    /// Directory for every file (made with mode 0700 if missing).
    #[arg(long)]
    dir: PathBuf,
    /// The token (label or serial number) the client is given.
    #[arg(long)]
    token: String,
    /// The client's identity.
    #[arg(long, value_name = "IDENTITY", default_value = "signer-01")]
    client: String,
    /// Where the server listens.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:7443")]
    listen: String,
    /// The host name or address the client dials (named in the server's certificate too);
    /// the listening address by default, `localhost` when that is a wildcard.
    #[arg(long, value_name = "NAME")]
    server: Option<String>,
    /// Replace files left by an earlier run (its certificates stop working).
    #[arg(long)]
    force: bool,
}

/// The host and port of `ADDR:PORT` (`[v6]:port` too).
fn split_listen(listen: &str) -> Result<(&str, u16)> {
    let bad =
        || format!("--listen {listen:?}: give an address and port, such as 127.0.0.1:7443 or [::1]:7443");
    let (host, port) = listen.rsplit_once(':').ok_or_else(bad)?;
    let port = port.parse::<u16>().map_err(|_| bad())?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return Err(bad());
    }
    Ok((host, port))
}

/// A string as a TOML basic string.
fn quoted(s: &str) -> String {
    let mut out = String::from('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub(super) fn run(a: Quickstart) -> Result<()> {
    let (host, port) = split_listen(&a.listen)?;
    let wildcard = matches!(host, "0.0.0.0" | "::");
    let dial = a.server.clone().unwrap_or_else(|| {
        if wildcard {
            "localhost".into()
        } else {
            host.to_string()
        }
    });
    let identity = names::identity(&a.client)?;
    // The server's names: localhost and loopback (a client on this host), the host it listens
    // on and the one the client dials.
    let mut server_names: Vec<names::Name> = vec![];
    for s in ["localhost", "127.0.0.1", "::1", host, dial.as_str()] {
        if s == host && wildcard {
            continue;
        }
        let n = names::Name::parse(s)?;
        if !server_names.contains(&n) {
            server_names.push(n);
        }
    }
    let dir = &a.dir;
    let (ca_cert, ca_key) = files::pair(dir, "ca");
    let (server_cert, server_key) = files::pair(dir, "server");
    let client_stem = names::file_stem(&identity)?;
    if client_stem == "server" {
        return Err("the client identity \"server\" would name the server's own files (server.pem, server.key, server.toml); choose another".into());
    }
    let (client_cert, client_key) = files::pair(dir, client_stem);
    let server_conf = dir.join("server.toml");
    let client_conf = dir.join(format!("{client_stem}.toml"));
    let all: Vec<&Path> = vec![
        &ca_cert,
        &ca_key,
        &server_cert,
        &server_key,
        &client_cert,
        &client_key,
        &server_conf,
        &client_conf,
    ];
    files::check_free(&all, a.force)?;

    let ca = certs::make_ca("ferrohsm quickstart CA", certs::CA_DAYS)?;
    files::make_dir(dir)?;
    write_pair(&ca_cert, &ca_key, &ca, a.force)?;
    let loaded = certs::load_ca(dir)?;
    let server = certs::issue(
        &loaded,
        &certs::Leaf::Server(server_names.clone()),
        certs::LEAF_DAYS,
    )?;
    write_pair(&server_cert, &server_key, &server, a.force)?;
    let client = certs::issue(&loaded, &certs::Leaf::Client(identity.clone()), certs::LEAF_DAYS)?;
    write_pair(&client_cert, &client_key, &client, a.force)?;

    // Paths are relative to the file that names them, in both files.
    let name = |p: &Path| quoted(&p.file_name().expect("a file").to_string_lossy());
    let server_text = format!(
        "# ferrohsm-server's configuration, made by ferrohsm-util pki quickstart.\n\
         # The tokens are those of the module configuration in FERROHSM_CONF (or the system's),\n\
         # as for ferrohsm-util; set module_config to name another.\n\
         listen = {}\nca = {}\ncert = {}\nkey = {}\n\n\
         [[client]]\nidentity = {}\ntokens = [{}]\nso = false\n",
        quoted(&a.listen),
        name(&ca_cert),
        name(&server_cert),
        name(&server_key),
        quoted(&identity),
        quoted(&a.token),
    );
    let dial_addr = if dial.contains(':') {
        format!("[{dial}]:{port}")
    } else {
        format!("{dial}:{port}")
    };
    let client_text = format!(
        "# The module's configuration for the client {identity}, made by ferrohsm-util pki\n\
         # quickstart: FERROHSM_CONF={} makes every application use the server's token.\n\
         [remote]\nservers = [{}]\nca = {}\ncert = {}\nkey = {}\n",
        client_conf.display(),
        quoted(&dial_addr),
        name(&ca_cert),
        name(&client_cert),
        name(&client_key),
    );
    files::write(&server_conf, server_text.as_bytes(), files::CERT_MODE, a.force)?;
    files::write(&client_conf, client_text.as_bytes(), files::CERT_MODE, a.force)?;
    println!(
        "made in {}: a CA, the server's certificate for {}, the client {identity}'s, and two configurations.\n\
         start the server:   ferrohsm-server --config {}\n\
         use it as a client: FERROHSM_CONF={} <any PKCS#11 application or ferrohsm-util command>",
        dir.display(),
        server_names.iter().map(|n| n.to_string()).collect::<Vec<_>>().join(", "),
        server_conf.display(),
        client_conf.display(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_addresses_split_into_host_and_port() {
        assert_eq!(split_listen("127.0.0.1:7443").unwrap(), ("127.0.0.1", 7443));
        assert_eq!(split_listen("[::1]:7443").unwrap(), ("::1", 7443));
        assert_eq!(split_listen("hsm.example.net:1").unwrap(), ("hsm.example.net", 1));
        for bad in ["7443", ":7443", "127.0.0.1:", "127.0.0.1:99999", "[::1]"] {
            assert!(split_listen(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn toml_strings_are_quoted() {
        assert_eq!(quoted(r#"a"b\c"#), r#""a\"b\\c""#);
        let parsed: toml::Value = toml::from_str(&format!("x = {}", quoted("t\"\\\n"))).unwrap();
        assert_eq!(parsed["x"].as_str(), Some("t\"\\\n"));
    }
}
