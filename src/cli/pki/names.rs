//! The names `ferrohsm-util pki` puts in certificates: a server's DNS names and IP addresses,
//! a client's identity, and the file names they become. Checked here, before any key is made,
//! so a name a TLS peer would refuse never reaches a certificate.

use rustls_pki_types::{DnsName, ServerName};
use std::net::IpAddr;

/// One subject alternative name of a server certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Name {
    Dns(String),
    Ip(IpAddr),
}

impl Name {
    /// A DNS name (`localhost`, `hsm.example.net`) or an IPv4/IPv6 address.
    pub fn parse(s: &str) -> Result<Name, String> {
        if let Ok(ip) = s.parse::<IpAddr>() {
            return Ok(Name::Ip(ip));
        }
        dns_name(s).map(Name::Dns).map_err(|why| {
            format!("{s:?} is neither an IP address nor a DNS name ({why}); give a host name such as hsm.example.net, or an address such as 127.0.0.1")
        })
    }

    /// As rustls matches it against the name a client connects to.
    pub fn server_name(&self) -> ServerName<'static> {
        match self {
            Name::Dns(d) => ServerName::try_from(d.clone()).expect("checked by Name::parse"),
            Name::Ip(ip) => ServerName::IpAddress((*ip).into()),
        }
    }
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Name::Dns(d) => f.write_str(d),
            Name::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// A DNS name as TLS takes it: letters, digits, hyphens and dots, no wildcard, lowercase
/// (names are compared without case; one spelling keeps identities and file names one).
fn dns_name(s: &str) -> Result<String, &'static str> {
    if s.contains('*') {
        return Err("wildcards are not issued");
    }
    if s.chars().any(|c| c.is_ascii_uppercase()) {
        return Err("use lowercase");
    }
    if s.ends_with('.') {
        return Err("no trailing dot");
    }
    // An all-numeric name would read as an address to people and to some parsers.
    if s.split('.').all(|l| l.chars().all(|c| c.is_ascii_digit())) {
        return Err("not a host name");
    }
    DnsName::try_from(s)
        .map(|_| s.to_string())
        .map_err(|_| "letters, digits, '-' and '.' only, labels of 1 to 63 characters")
}

/// A client's identity: a DNS-style name, put in the certificate as its common name and as
/// its one DNS subject alternative name (what the server maps; see docs/operations.md).
pub fn identity(s: &str) -> Result<String, String> {
    dns_name(s).map_err(|why| {
        format!("client identity {s:?}: {why}; an identity is a name such as signer-01 or knot.example.net")
    })
}

/// Refuses names that would make the files of another certificate: `ca` is the CA's own.
pub fn file_stem(s: &str) -> Result<&str, String> {
    if s == "ca" {
        return Err("\"ca\" names the CA's own files (ca.pem, ca.key); choose another name".into());
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_addresses() {
        assert_eq!(Name::parse("localhost"), Ok(Name::Dns("localhost".into())));
        assert_eq!(
            Name::parse("hsm-1.example.net"),
            Ok(Name::Dns("hsm-1.example.net".into()))
        );
        assert_eq!(
            Name::parse("127.0.0.1"),
            Ok(Name::Ip("127.0.0.1".parse().unwrap()))
        );
        assert_eq!(Name::parse("::1"), Ok(Name::Ip("::1".parse().unwrap())));
        for bad in [
            "*.example.net",
            "Host",
            "a b",
            "a/b",
            "",
            "-a",
            "x.",
            "1.2.3",
            "a..b",
        ] {
            assert!(Name::parse(bad).is_err(), "{bad:?} was taken");
        }
    }

    #[test]
    fn identities() {
        assert_eq!(identity("signer-01").unwrap(), "signer-01");
        for bad in ["Signer", "../ca", "a@b", "", "192.0.2.1"] {
            let e = identity(bad).unwrap_err();
            assert!(e.contains("identity"), "{e}");
        }
        assert!(file_stem("ca").is_err());
        assert_eq!(file_stem("signer"), Ok("signer"));
    }
}
