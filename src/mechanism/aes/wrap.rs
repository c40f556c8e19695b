//! AES key wrapping (RFC 3394 and RFC 5649) and the AES key check value.

use aes::cipher::{BlockCipherEncrypt, KeyInit};
use aes_kw::{KwAes128, KwAes192, KwAes256, KwpAes128, KwpAes192, KwpAes256};

/// `CKA_CHECK_VALUE` of an AES key: the first 3 bytes of AES-ECB(key, 0^128).
pub fn check_value(key: &[u8]) -> Vec<u8> {
    let mut block = aes::Block::default();
    match key.len() {
        16 => aes::Aes128::new_from_slice(key)
            .map(|c| c.encrypt_block(&mut block))
            .ok(),
        24 => aes::Aes192::new_from_slice(key)
            .map(|c| c.encrypt_block(&mut block))
            .ok(),
        32 => aes::Aes256::new_from_slice(key)
            .map(|c| c.encrypt_block(&mut block))
            .ok(),
        _ => None,
    };
    block[..3].to_vec()
}

macro_rules! by_key_len {
    ($kek:expr, $buf:expr, $data:expr, $t128:ty, $t192:ty, $t256:ty, $op:ident) => {
        match $kek.len() {
            16 => <$t128>::new_from_slice($kek)
                .ok()
                .and_then(|k| k.$op($data, $buf).ok().map(|r| r.to_vec())),
            24 => <$t192>::new_from_slice($kek)
                .ok()
                .and_then(|k| k.$op($data, $buf).ok().map(|r| r.to_vec())),
            32 => <$t256>::new_from_slice($kek)
                .ok()
                .and_then(|k| k.$op($data, $buf).ok().map(|r| r.to_vec())),
            _ => None,
        }
    };
}

/// Wraps `key` under `kek`; `pad` selects RFC 5649 (any length) over RFC 3394 (multiples of 8).
pub fn wrap(kek: &[u8], key: &[u8], pad: bool) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; key.len() + 16];
    if pad {
        by_key_len!(kek, &mut buf, key, KwpAes128, KwpAes192, KwpAes256, wrap_key)
    } else {
        if !key.len().is_multiple_of(8) || key.len() < 16 {
            return None;
        }
        by_key_len!(kek, &mut buf, key, KwAes128, KwAes192, KwAes256, wrap_key)
    }
}

pub fn unwrap(kek: &[u8], wrapped: &[u8], pad: bool) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; wrapped.len()];
    if pad {
        by_key_len!(kek, &mut buf, wrapped, KwpAes128, KwpAes192, KwpAes256, unwrap_key)
    } else {
        by_key_len!(kek, &mut buf, wrapped, KwAes128, KwAes192, KwAes256, unwrap_key)
    }
}
