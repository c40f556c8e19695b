//! AES encryption and decryption modes: ECB, CBC, CBC with PKCS#7 padding, CTR and GCM, single-
//! and multi-part, with PKCS#11's length rules. The block modes and GCM come from RustCrypto's
//! `ecb`, `cbc`, `ctr` and `aes-gcm` crates; this file owns only what PKCS#11 adds: buffering of
//! partial blocks across `C_*Update` calls, the held-back last block of a padded decryption,
//! output lengths known before any state changes (so a short buffer never loses data), and the
//! `CKR_*` codes of bad input.
//!
//! The state between parts is plain data (the CBC chaining block, the CTR position, pending
//! bytes), so each step runs on a copy that is kept only when the caller takes the output:
//! `CKR_BUFFER_TOO_SMALL` leaves the operation exactly where it was.

use crate::error::{fail_because, Error, Result};
use aes::cipher::{BlockModeDecrypt, BlockModeEncrypt, KeyInit, KeyIvInit, StreamCipher, StreamCipherSeek};
use aes_gcm::aead::array::typenum::Unsigned;
use aes_gcm::aead::AeadInOut;
use cryptoki_sys::*;
use zeroize::Zeroizing;

const BLOCK: usize = 16;
/// GCM: the IV length served (the one applications use; others are refused).
pub const GCM_IV_LEN: usize = 12;
/// GCM: the tag lengths SP 800-38D (section 5.2.1.2) allows for general use, in bits. The
/// shorter ones it allows (32 and 64 bits) need limits on message length and on the number of
/// decryptions per key that a token cannot enforce for its callers, so they are refused.
pub const GCM_TAG_BITS: [usize; 5] = [96, 104, 112, 120, 128];

/// A mode and its parameters, as the mechanism gave them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AesMode {
    Ecb,
    Cbc {
        iv: [u8; BLOCK],
    },
    CbcPad {
        iv: [u8; BLOCK],
    },
    /// `counter_bits` of the block (its low end, big-endian) count; 1 to 128.
    Ctr {
        counter_bits: usize,
        block: [u8; BLOCK],
    },
    /// `tag_bits` as the caller gave it (`ulTagBits`); checked by [`AesCrypt::new`].
    Gcm {
        iv: Vec<u8>,
        aad: Vec<u8>,
        tag_bits: usize,
    },
}

impl AesMode {
    pub fn mechanism_type(&self) -> CK_MECHANISM_TYPE {
        match self {
            AesMode::Ecb => CKM_AES_ECB,
            AesMode::Cbc { .. } => CKM_AES_CBC,
            AesMode::CbcPad { .. } => CKM_AES_CBC_PAD,
            AesMode::Ctr { .. } => CKM_AES_CTR,
            AesMode::Gcm { .. } => CKM_AES_GCM,
        }
    }
}

/// `$make` instantiated with the AES type for the key's length.
macro_rules! by_key {
    ($key:expr, $a:ident => $make:expr) => {
        match $key.len() {
            16 => {
                type $a = aes::Aes128;
                $make
            }
            24 => {
                type $a = aes::Aes192;
                $make
            }
            32 => {
                type $a = aes::Aes256;
                $make
            }
            n => return fail_because(CKR_KEY_SIZE_RANGE, format!("an AES key of {n} bytes")),
        }
    };
}

/// Key and IV lengths are checked when the operation starts: construction cannot fail after.
const CHECKED: &str = "key and IV lengths checked";

fn blocks(data: &mut [u8]) -> impl Iterator<Item = &mut aes::Block> {
    data.chunks_exact_mut(BLOCK)
        .map(|b| b.try_into().expect("a whole block"))
}

fn counter_wraps<E>(_: E) -> Error {
    log::info!(
        "CKR_DATA_LEN_RANGE: AES-CTR: the data would wrap the counter (ulCounterBits too small for it)"
    );
    Error(CKR_DATA_LEN_RANGE)
}

/// GCM over the whole message: ciphertext ‖ tag (`tag_len` bytes, the leading bytes of the
/// full tag), or the plaintext if the tag matches.
fn gcm(
    key: &[u8],
    iv: &[u8],
    aad: &[u8],
    tag_len: usize,
    data: &[u8],
    encrypt: bool,
) -> Result<Zeroizing<Vec<u8>>> {
    fn run<C: AeadInOut + KeyInit>(
        key: &[u8],
        iv: &[u8],
        aad: &[u8],
        data: &[u8],
        encrypt: bool,
    ) -> Result<Zeroizing<Vec<u8>>> {
        let c = C::new_from_slice(key).expect("key length checked");
        let nonce = iv.try_into().expect("IV length checked");
        if encrypt {
            let mut out = Zeroizing::new(data.to_vec());
            let tag = c
                .encrypt_inout_detached(nonce, aad, out.as_mut_slice().into())
                .or_else(|_| fail_because(CKR_DATA_LEN_RANGE, "AES-GCM: the message is too long"))?;
            out.extend_from_slice(&tag);
            return Ok(out);
        }
        let Some(split) = data.len().checked_sub(C::TagSize::USIZE) else {
            return fail_because(CKR_ENCRYPTED_DATA_LEN_RANGE, "AES-GCM: shorter than its tag");
        };
        let mut out = Zeroizing::new(data[..split].to_vec());
        let tag = data[split..].try_into().expect("tag length");
        match c.decrypt_inout_detached(nonce, aad, out.as_mut_slice().into(), tag) {
            Ok(()) => Ok(out),
            Err(_) => fail_because(
                CKR_ENCRYPTED_DATA_INVALID,
                "AES-GCM: the tag does not match (wrong key, IV, AAD, or altered data)",
            ),
        }
    }
    use aes_gcm::aead::consts::{U12, U13, U14, U15, U16};
    // The tag size is a type parameter of `aes-gcm`: one instance per allowed length.
    by_key!(key, A => match tag_len {
        12 => run::<aes_gcm::AesGcm<A, U12, U12>>(key, iv, aad, data, encrypt),
        13 => run::<aes_gcm::AesGcm<A, U12, U13>>(key, iv, aad, data, encrypt),
        14 => run::<aes_gcm::AesGcm<A, U12, U14>>(key, iv, aad, data, encrypt),
        15 => run::<aes_gcm::AesGcm<A, U12, U15>>(key, iv, aad, data, encrypt),
        _ => run::<aes_gcm::AesGcm<A, U12, U16>>(key, iv, aad, data, encrypt),
    })
}

/// One AES encryption or decryption operation.
#[derive(Clone)]
pub struct AesCrypt {
    mode: AesMode,
    key: Zeroizing<Vec<u8>>,
    encrypt: bool,
    /// CBC: the chaining block (the IV, then the last ciphertext block).
    chain: [u8; BLOCK],
    /// CTR: bytes of keystream used so far.
    position: u64,
    /// Bytes not yet processed: a partial block, the held-back last block of a padded
    /// decryption, or the whole message of GCM.
    pending: Zeroizing<Vec<u8>>,
    multipart: bool,
}

impl AesCrypt {
    /// Checks the key length and the mode's parameters.
    pub fn new(mode: AesMode, key: &[u8], encrypt: bool) -> Result<AesCrypt> {
        if ![16, 24, 32].contains(&key.len()) {
            return fail_because(CKR_KEY_SIZE_RANGE, format!("an AES key of {} bytes", key.len()));
        }
        match &mode {
            // PKCS#11: 0 < ulCounterBits <= 128, CKR_MECHANISM_PARAM_INVALID outside.
            AesMode::Ctr { counter_bits, .. } if !(1..=128).contains(counter_bits) => {
                return fail_because(
                    CKR_MECHANISM_PARAM_INVALID,
                    format!("AES-CTR: ulCounterBits {counter_bits}; 1 to 128 are allowed"),
                )
            }
            AesMode::Gcm { iv, .. } if iv.len() != GCM_IV_LEN => {
                return fail_because(
                    CKR_MECHANISM_PARAM_INVALID,
                    format!("AES-GCM: a {}-byte IV; 12 bytes are supported", iv.len()),
                )
            }
            AesMode::Gcm { tag_bits, .. } if !GCM_TAG_BITS.contains(tag_bits) => {
                return fail_because(
                    CKR_MECHANISM_PARAM_INVALID,
                    format!(
                        "AES-GCM: a {tag_bits}-bit tag (ulTagBits); SP 800-38D allows 96, 104, \
                         112, 120 and 128 bits for general use (32 and 64 only under limits a \
                         token cannot enforce)"
                    ),
                )
            }
            _ => {}
        }
        let chain = match &mode {
            AesMode::Cbc { iv } | AesMode::CbcPad { iv } => *iv,
            _ => [0; BLOCK],
        };
        Ok(AesCrypt {
            mode,
            key: Zeroizing::new(key.to_vec()),
            encrypt,
            chain,
            position: 0,
            pending: Zeroizing::new(Vec::new()),
            multipart: false,
        })
    }

    pub fn is_multipart(&self) -> bool {
        self.multipart
    }

    /// GCM: the tag's length in bytes (0 for the other modes).
    fn tag_len(&self) -> usize {
        match self.mode {
            AesMode::Gcm { tag_bits, .. } => tag_bits / 8,
            _ => 0,
        }
    }

    fn padded(&self) -> bool {
        matches!(self.mode, AesMode::CbcPad { .. })
    }

    fn length_error(&self, n: usize) -> Error {
        log::info!(
            "0x{:x}: {n} bytes is not a length this mode {} (whole 16-byte blocks{})",
            self.mode.mechanism_type(),
            if self.encrypt { "encrypts" } else { "decrypts" },
            if matches!(self.mode, AesMode::Gcm { .. }) {
                ", or a GCM tag"
            } else {
                ""
            }
        );
        Error(if self.encrypt {
            CKR_DATA_LEN_RANGE
        } else {
            CKR_ENCRYPTED_DATA_LEN_RANGE
        })
    }

    /// The output of a single-part operation on `n` bytes: exact, but for a padded decryption
    /// (an upper bound: the padding is known only after decrypting).
    pub fn single_len(&self, n: usize) -> Result<usize> {
        let whole = n.is_multiple_of(BLOCK);
        Ok(match (&self.mode, self.encrypt) {
            (AesMode::Ctr { .. }, _) => n,
            (AesMode::Gcm { .. }, true) => n + self.tag_len(),
            (AesMode::Gcm { .. }, false) => n
                .checked_sub(self.tag_len())
                .ok_or_else(|| self.length_error(n))?,
            (AesMode::CbcPad { .. }, true) => n / BLOCK * BLOCK + BLOCK,
            (AesMode::CbcPad { .. }, false) if whole && n > 0 => n,
            (AesMode::Ecb | AesMode::Cbc { .. }, _) if whole => n,
            _ => return Err(self.length_error(n)),
        })
    }

    /// `C_Encrypt`/`C_Decrypt`: the whole operation, without changing this one's state.
    pub fn single(&self, data: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
        self.single_len(data.len())?;
        if let AesMode::Gcm { iv, aad, .. } = &self.mode {
            return gcm(&self.key, iv, aad, self.tag_len(), data, self.encrypt);
        }
        let mut next = self.clone();
        let mut out = next.update(data)?;
        out.extend_from_slice(&next.finish()?);
        Ok(out)
    }

    /// The output of a `C_*Update` with `n` more bytes (exact).
    pub fn update_len(&self, n: usize) -> usize {
        let t = self.pending.len() + n;
        match (&self.mode, self.encrypt) {
            (AesMode::Ctr { .. }, _) => n,
            (AesMode::Gcm { .. }, _) => 0,
            // A padded decryption keeps its last block back: it may be all padding.
            (AesMode::CbcPad { .. }, false) if t > 0 => (t - 1) / BLOCK * BLOCK,
            _ => t / BLOCK * BLOCK,
        }
    }

    /// The next part, on a copy: the output, and the operation as it is after the part.
    pub fn try_update(&self, data: &[u8]) -> Result<(Zeroizing<Vec<u8>>, AesCrypt)> {
        let mut next = self.clone();
        let out = next.update(data)?;
        next.multipart = true;
        Ok((out, next))
    }

    fn update(&mut self, data: &[u8]) -> Result<Zeroizing<Vec<u8>>> {
        let out_len = self.update_len(data.len());
        if matches!(self.mode, AesMode::Gcm { .. }) {
            self.pending.extend_from_slice(data);
            return Ok(Zeroizing::new(Vec::new()));
        }
        let mut all = Zeroizing::new(Vec::with_capacity(self.pending.len() + data.len()));
        all.extend_from_slice(&self.pending);
        all.extend_from_slice(data);
        let mut out = Zeroizing::new(all[..out_len].to_vec());
        self.process(&mut out)?;
        self.pending = Zeroizing::new(all[out_len..].to_vec());
        Ok(out)
    }

    /// The output of `C_*Final` (exact, but for a padded decryption: an upper bound).
    pub fn final_len(&self) -> usize {
        match (&self.mode, self.encrypt) {
            (AesMode::Gcm { .. }, true) => self.pending.len() + self.tag_len(),
            (AesMode::Gcm { .. }, false) => self.pending.len().saturating_sub(self.tag_len()),
            (AesMode::CbcPad { .. }, true) => BLOCK,
            (AesMode::CbcPad { .. }, false) => BLOCK - 1,
            _ => 0,
        }
    }

    /// The last part, on a copy (the operation is kept when its output does not fit).
    pub fn try_finish(&self) -> Result<Zeroizing<Vec<u8>>> {
        self.clone().finish()
    }

    fn finish(&mut self) -> Result<Zeroizing<Vec<u8>>> {
        if let AesMode::Gcm { iv, aad, .. } = &self.mode {
            return gcm(&self.key, iv, aad, self.tag_len(), &self.pending, self.encrypt);
        }
        if self.padded() && self.encrypt {
            // `update` left fewer than 16 bytes: PKCS#7 fills the block (a whole one if none).
            let fill = BLOCK - self.pending.len();
            let mut last = std::mem::take(&mut self.pending);
            last.resize(BLOCK, fill as u8);
            self.process(&mut last)?;
            return Ok(last);
        }
        if self.padded() {
            if self.pending.len() != BLOCK {
                return Err(self.length_error(self.pending.len()));
            }
            let mut last = std::mem::take(&mut self.pending);
            self.process(&mut last)?;
            return unpad(last);
        }
        if !self.pending.is_empty() {
            return Err(self.length_error(self.pending.len()));
        }
        Ok(Zeroizing::new(Vec::new()))
    }

    /// Whole blocks (ECB, CBC) or any bytes (CTR) in place, the chaining state advanced.
    fn process(&mut self, data: &mut [u8]) -> Result<()> {
        let key = &self.key[..];
        match (&self.mode, self.encrypt) {
            (AesMode::Ecb, true) => by_key!(key, A => {
                let mut m = ecb::Encryptor::<A>::new_from_slice(key).expect(CHECKED);
                blocks(data).for_each(|b| m.encrypt_block(b));
            }),
            (AesMode::Ecb, false) => by_key!(key, A => {
                let mut m = ecb::Decryptor::<A>::new_from_slice(key).expect(CHECKED);
                blocks(data).for_each(|b| m.decrypt_block(b));
            }),
            (AesMode::Cbc { .. } | AesMode::CbcPad { .. }, true) => {
                by_key!(key, A => {
                    let mut m = cbc::Encryptor::<A>::new_from_slices(key, &self.chain).expect(CHECKED);
                    blocks(data).for_each(|b| m.encrypt_block(b));
                });
                if let Some(last) = data.rchunks_exact(BLOCK).next() {
                    self.chain.copy_from_slice(last);
                }
            }
            (AesMode::Cbc { .. } | AesMode::CbcPad { .. }, false) => {
                // The next chaining block is the last ciphertext block, read before it goes.
                let mut next = self.chain;
                if let Some(last) = data.rchunks_exact(BLOCK).next() {
                    next.copy_from_slice(last);
                }
                by_key!(key, A => {
                    let mut m = cbc::Decryptor::<A>::new_from_slices(key, &self.chain).expect(CHECKED);
                    blocks(data).for_each(|b| m.decrypt_block(b));
                });
                self.chain = next;
            }
            (AesMode::Ctr { counter_bits, block }, _) => {
                let at = self.position;
                // The counter is the block's low `counter_bits` bits: the last block this part
                // uses must not pass their maximum (the `ctr` crate would wrap silently).
                let max = u128::MAX >> (128 - counter_bits);
                let start = u128::from_be_bytes(*block) & max;
                let end = at + data.len() as u64;
                if end > 0
                    && start
                        .checked_add(((end - 1) / BLOCK as u64) as u128)
                        .is_none_or(|last| last > max)
                {
                    return Err(counter_wraps(()));
                }
                macro_rules! run {
                    ($flavor:ident) => {
                        by_key!(key, A => {
                            let mut c = ctr::$flavor::<A>::new_from_slices(key, block).expect(CHECKED);
                            c.try_seek(at).map_err(counter_wraps)?;
                            c.try_apply_keystream(data).map_err(counter_wraps)?;
                        })
                    };
                }
                // The data does not wrap the counter (checked above), so no carry leaves its low
                // `counter_bits` and a 128-bit counter gives the same keystream for any width.
                match counter_bits {
                    32 => run!(Ctr32BE),
                    64 => run!(Ctr64BE),
                    _ => run!(Ctr128BE),
                }
                self.position += data.len() as u64;
            }
            (AesMode::Gcm { .. }, _) => unreachable!("GCM runs whole at the end"),
        }
        Ok(())
    }
}

/// PKCS#7 padding of a decrypted last block removed; checked without branching on the
/// plaintext's bytes (only on the verdict).
fn unpad(mut block: Zeroizing<Vec<u8>>) -> Result<Zeroizing<Vec<u8>>> {
    let n = block[BLOCK - 1];
    let mut bad = (n == 0) as u8 | (n as usize > BLOCK) as u8;
    for (i, &b) in block.iter().enumerate() {
        // Bytes within the padding must equal n.
        let in_pad = ((BLOCK - i) as u8 <= n) as u8;
        bad |= in_pad & (b != n) as u8;
    }
    if bad != 0 {
        return fail_because(
            CKR_ENCRYPTED_DATA_INVALID,
            "AES-CBC-PAD: the padding is wrong (wrong key or IV, or altered data)",
        );
    }
    block.truncate(BLOCK - n as usize);
    Ok(block)
}
