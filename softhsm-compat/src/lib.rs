//! SoftHSM v2 compatibility: its configuration file and its token directories (file backend),
//! read without SoftHSM, with private attributes decrypted under the token's PIN.
#![forbid(unsafe_code)]

pub mod conf;
pub mod crypt;
pub mod token;

pub use conf::SoftHsmConf;
pub use token::{Attr, SoftObject, SoftToken, Value};

/// What went wrong, worded for an operator: the file and the problem.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    Io(String),
    Conf(String),
    Corrupt(String),
    /// The object file is empty: SoftHSM is creating it right now.
    InProgress(String),
    WrongPin,
    NoUserPin,
    NotFound(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io(s) | Error::Conf(s) | Error::Corrupt(s) | Error::NotFound(s) => f.write_str(s),
            Error::InProgress(p) => write!(
                f,
                "{p} is empty: SoftHSM is writing it; stop the signer and retry"
            ),
            Error::WrongPin => f.write_str("the PIN does not open this SoftHSM token"),
            Error::NoUserPin => f.write_str("this SoftHSM token has no user PIN; give the SO PIN"),
        }
    }
}
