//! Authenticated records: every object row's tag, the token's summary of its rows, and the
//! ledger a process checks rows against.
//!
//! - **Tag.** An HMAC-SHA256, under a key derived from the token key, over everything the
//!   module trusts in a row: token, id, version, the private flag, the index columns, every
//!   clear value and the list of sealed values. A row whose tag fails is never used.
//! - **Summary.** Kept in the token row and written in the same transaction as any tagged
//!   row: the number of tagged rows, the sum (mod 2^128) of one secret entry per row (AES of
//!   its tag under a second derived key, so no one without the token key can compute an
//!   entry, nor find a set of old tags with the same sum), and the generation, under the
//!   tag key's MAC. A row put back to an older copy of itself keeps a genuine tag, but its
//!   entry no longer adds up to the summary.
//! - **Ledger.** The tags of the summary's rows as this process last checked them in full
//!   (one index scan, `Backend::tags`): a row read from the store is used only if its tag is
//!   the ledger's for its id. A row another process changed since misses the ledger once;
//!   the ledger is then read again and must add up to the summary again. A scan that does
//!   not add up means a row was removed, replaced by an older copy, or had its tag stripped:
//!   the ledger is broken and the token's tagged rows are not used until it adds up.
//!
//! A whole token put back to an earlier state (summary and rows together) is a restore from
//! a backup, which nothing inside the store can tell from an attack: docs/security.md.

use super::crypt::Key;
use crate::store::backend::{tag_head, ObjectRow, TagHead, TagScan};
use aes::cipher::{BlockCipherEncrypt, KeyInit};
use cryptoki_sys::*;
use hmac::Mac;

type Hmac = hmac::Hmac<sha2::Sha256>;

const SUMMARY_VERSION: u8 = 1;
pub(super) const TAG_LEN: usize = 32;

/// The keys derived from one token key: the tag key and the summary-entry key.
pub(super) struct RecordKeys {
    tag: Key,
    entry: aes::Aes256,
}

/// A key for one `purpose`, derived from the token key.
pub(super) fn derive(token_key: &Key, purpose: &[u8]) -> Key {
    let mut m = <Hmac as KeyInit>::new_from_slice(&token_key[..]).expect("any key length");
    m.update(b"ferrohsm derived key: ");
    m.update(purpose);
    let mut k = Key::default();
    k.copy_from_slice(&m.finalize().into_bytes());
    k
}

impl RecordKeys {
    pub(super) fn new(token_key: &Key) -> Self {
        let entry = derive(token_key, b"summary entry");
        RecordKeys {
            tag: derive(token_key, b"record tag"),
            entry: aes::Aes256::new_from_slice(&entry[..]).expect("32-byte key"),
        }
    }

    fn mac(&self) -> Hmac {
        <Hmac as KeyInit>::new_from_slice(&self.tag[..]).expect("any key length")
    }

    /// The tag of `row` in token `slot` (its `tag` field is not part of it).
    pub(super) fn tag(&self, slot: CK_SLOT_ID, row: &ObjectRow) -> Vec<u8> {
        self.row_mac(slot, row).finalize().into_bytes().to_vec()
    }

    fn row_mac(&self, slot: CK_SLOT_ID, row: &ObjectRow) -> Hmac {
        let mut m = self.mac();
        let bytes = |m: &mut Hmac, b: &[u8]| {
            m.update(&(b.len() as u64).to_be_bytes());
            m.update(b);
        };
        let optional = |m: &mut Hmac, b: Option<&[u8]>| match b {
            None => m.update(&[0]),
            Some(b) => {
                m.update(&[1]);
                bytes(m, b);
            }
        };
        m.update(b"ferrohsm record v1");
        m.update(&slot.to_be_bytes());
        m.update(&row.id.to_be_bytes());
        m.update(&row.version.to_be_bytes());
        m.update(&[row.private as u8]);
        optional(&mut m, row.class.map(u64::to_be_bytes).as_ref().map(|c| &c[..]));
        optional(&mut m, row.key_id.as_deref());
        optional(&mut m, row.label.as_deref());
        bytes(&mut m, &row.clear);
        bytes(&mut m, &row.sealed);
        m
    }

    /// Whether `row`'s tag is its own (constant time).
    pub(super) fn verify(&self, slot: CK_SLOT_ID, row: &ObjectRow) -> bool {
        row.tag
            .as_deref()
            .is_some_and(|t| self.row_mac(slot, row).verify_slice(t).is_ok())
    }

    /// The secret entry of a tagged row in its token's sum: AES of the head of its tag with
    /// its id mixed in.
    fn entry(&self, id: u64, head: &TagHead) -> u128 {
        self.entries(&[(id, *head)]).1
    }

    /// The count and sum of the entries of `rows`, encrypted many blocks at a time (AES-NI
    /// runs eight in parallel: the sum of a million rows is a login's largest single cost).
    fn entries(&self, rows: &[(u64, TagHead)]) -> (u64, u128) {
        const CHUNK: usize = 256;
        let mut blocks = [aes::Block::default(); CHUNK];
        let mut sum = 0u128;
        for chunk in rows.chunks(CHUNK) {
            let blocks = &mut blocks[..chunk.len()];
            for (b, (id, head)) in blocks.iter_mut().zip(chunk) {
                let mixed = u128::from_be_bytes(*head) ^ u128::from(*id);
                *b = mixed.to_be_bytes().into();
            }
            self.entry.encrypt_blocks(blocks);
            for b in blocks.iter() {
                sum = sum.wrapping_add(u128::from_be_bytes((*b).into()));
            }
        }
        (rows.len() as u64, sum)
    }

    fn summary_mac(&self, slot: CK_SLOT_ID, epoch: u64, s: &Summary) -> Hmac {
        let mut m = self.mac();
        m.update(b"ferrohsm summary v1");
        m.update(&slot.to_be_bytes());
        m.update(&epoch.to_be_bytes());
        m.update(&s.generation.to_be_bytes());
        m.update(&s.count.to_be_bytes());
        m.update(&s.sum.to_be_bytes());
        m
    }
}

/// The token's authenticated count and sum of its tagged rows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Summary {
    /// The generation of the last transaction that changed a tagged row.
    pub generation: u64,
    pub count: u64,
    pub sum: u128,
}

impl Summary {
    pub(super) fn add(&mut self, keys: &RecordKeys, id: u64, tag: &[u8]) {
        self.count = self.count.wrapping_add(1);
        self.sum = self.sum.wrapping_add(keys.entry(id, &tag_head(tag)));
    }

    pub(super) fn remove(&mut self, keys: &RecordKeys, id: u64, tag: &[u8]) {
        self.count = self.count.wrapping_sub(1);
        self.sum = self.sum.wrapping_sub(keys.entry(id, &tag_head(tag)));
    }

    /// The stored form: version ‖ generation ‖ count ‖ sum ‖ MAC, bound to token and epoch.
    pub(super) fn seal(&self, keys: &RecordKeys, slot: CK_SLOT_ID, epoch: u64) -> Vec<u8> {
        let mut out = vec![SUMMARY_VERSION];
        out.extend_from_slice(&self.generation.to_be_bytes());
        out.extend_from_slice(&self.count.to_be_bytes());
        out.extend_from_slice(&self.sum.to_be_bytes());
        out.extend_from_slice(&keys.summary_mac(slot, epoch, self).finalize().into_bytes());
        out
    }

    /// The summary in `stored`, if its MAC is right for this token and epoch.
    pub(super) fn open(keys: &RecordKeys, slot: CK_SLOT_ID, epoch: u64, stored: &[u8]) -> Option<Summary> {
        if stored.len() != 1 + 8 + 8 + 16 + TAG_LEN || stored[0] != SUMMARY_VERSION {
            return None;
        }
        let u64_at = |at: usize| u64::from_be_bytes(stored[at..at + 8].try_into().unwrap());
        let s = Summary {
            generation: u64_at(1),
            count: u64_at(9),
            sum: u128::from_be_bytes(stored[17..33].try_into().unwrap()),
        };
        keys.summary_mac(slot, epoch, &s)
            .verify_slice(&stored[33..])
            .is_ok()
            .then_some(s)
    }
}

/// How a row read from the store stands against the ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Standing {
    /// Its tag is the ledger's for its id.
    Current,
    /// Untagged and unknown to the ledger: a public object written without a login.
    Unauthenticated,
    /// Not what the ledger holds: changed by another process since the ledger was read, or
    /// rolled back or stripped (the next scan tells which).
    Differs,
}

/// The tags this process checked against the token's summary: the first bytes of each (enough:
/// only genuine tags, each from one write, can be there), in id order. A sorted array rather
/// than a hash map: half the memory at a million rows, and built by one sort of the scan.
#[derive(Default)]
pub(super) struct Ledger {
    tags: Vec<(u64, Prefix)>,
    /// The last scan did not add up to the summary.
    pub broken: bool,
    /// The summary's generation at the last scan: a row of this version or older that is
    /// not the ledger's, read after that scan, is not the token's current record.
    pub generation: u64,
}

type Prefix = [u8; 8];

/// The prefix of an id this process destroyed (kept, not removed: removing from the middle of
/// a million entries moves them all). A genuine tag starts with it once in 2^64.
const DESTROYED: Prefix = [0; 8];

fn prefix(tag: &[u8]) -> Prefix {
    let mut p = Prefix::default();
    let n = tag.len().min(p.len());
    p[..n].copy_from_slice(&tag[..n]);
    p
}

impl Ledger {
    fn get(&self, id: u64) -> Option<&Prefix> {
        self.tags
            .binary_search_by_key(&id, |e| e.0)
            .ok()
            .map(|i| &self.tags[i].1)
    }

    /// Where `row` stands (its tag already verified when it has one).
    pub(super) fn standing(&self, row: &ObjectRow) -> Standing {
        match (&row.tag, self.get(row.id)) {
            _ if self.broken => Standing::Differs,
            (Some(t), Some(p)) if *p != DESTROYED && prefix(t) == *p => Standing::Current,
            (None, None) => Standing::Unauthenticated,
            _ => Standing::Differs,
        }
    }

    /// Records this process's own committed write. New objects have the highest ids yet
    /// (ids are never reused), so they are appended.
    pub(super) fn wrote(&mut self, id: u64, tag: Option<&[u8]>) {
        let p = tag.map_or(DESTROYED, prefix);
        match self.tags.binary_search_by_key(&id, |e| e.0) {
            Ok(i) => self.tags[i].1 = p,
            Err(i) => self.tags.insert(i, (id, p)),
        }
    }

    /// Rebuilds the ledger from `scan`; whether it adds up to the token's summary (also
    /// recorded as `broken`). `None` for the summary means its MAC failed or it is missing.
    pub(super) fn rebuild(&mut self, keys: &RecordKeys, summary: Option<Summary>, scan: &TagScan) -> bool {
        let (count, sum) = keys.entries(&scan.tags);
        let adds_up = summary.is_some_and(|s| s.count == count && s.sum == sum);
        let mut tags: Vec<(u64, Prefix)> = scan.tags.iter().map(|(id, t)| (*id, prefix(t))).collect();
        tags.sort_unstable_by_key(|e| e.0);
        self.tags = tags;
        self.broken = !adds_up;
        self.generation = summary.map_or(0, |s| s.generation);
        adds_up
    }

    pub(super) fn len(&self) -> usize {
        self.tags.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> RecordKeys {
        RecordKeys::new(&Key::new([7; 32]))
    }

    fn row(id: u64) -> ObjectRow {
        ObjectRow {
            id,
            private: true,
            class: Some(3),
            key_id: Some(vec![1]),
            label: Some(b"l".to_vec()),
            clear: vec![1, 2, 3],
            sealed: vec![4, 5],
            version: 9,
            tag: None,
        }
    }

    /// Each field the tag covers, changed alone, changes the tag.
    #[test]
    fn the_tag_covers_every_field() {
        let k = keys();
        let base = row(5);
        let t = k.tag(0, &base);
        let variants: Vec<(&str, ObjectRow)> = vec![
            (
                "id",
                ObjectRow {
                    id: 6,
                    ..base.clone()
                },
            ),
            (
                "version",
                ObjectRow {
                    version: 8,
                    ..base.clone()
                },
            ),
            (
                "private",
                ObjectRow {
                    private: false,
                    ..base.clone()
                },
            ),
            (
                "class",
                ObjectRow {
                    class: Some(4),
                    ..base.clone()
                },
            ),
            (
                "no class",
                ObjectRow {
                    class: None,
                    ..base.clone()
                },
            ),
            (
                "key_id",
                ObjectRow {
                    key_id: Some(vec![2]),
                    ..base.clone()
                },
            ),
            (
                "no key_id",
                ObjectRow {
                    key_id: None,
                    ..base.clone()
                },
            ),
            (
                "label",
                ObjectRow {
                    label: Some(b"m".to_vec()),
                    ..base.clone()
                },
            ),
            (
                "clear",
                ObjectRow {
                    clear: vec![1, 2],
                    ..base.clone()
                },
            ),
            (
                "sealed",
                ObjectRow {
                    sealed: vec![4, 5, 6],
                    ..base.clone()
                },
            ),
            // Bytes moved from one field to the next.
            (
                "clear into sealed",
                ObjectRow {
                    clear: vec![1, 2],
                    sealed: vec![3, 4, 5],
                    ..base.clone()
                },
            ),
        ];
        for (what, v) in variants {
            assert_ne!(k.tag(0, &v), t, "{what}");
        }
        assert_ne!(k.tag(1, &base), t, "slot");
        let tagged = ObjectRow { tag: Some(t), ..base };
        assert!(k.verify(0, &tagged));
        assert!(
            !RecordKeys::new(&Key::new([8; 32])).verify(0, &tagged),
            "another token key"
        );
    }

    #[test]
    fn a_summary_opens_only_for_its_token_epoch_and_bytes() {
        let k = keys();
        let mut s = Summary::default();
        s.add(&k, 1, &[1; 32]);
        s.generation = 4;
        let sealed = s.seal(&k, 2, 3);
        assert_eq!(Summary::open(&k, 2, 3, &sealed), Some(s));
        assert_eq!(Summary::open(&k, 1, 3, &sealed), None);
        assert_eq!(Summary::open(&k, 2, 4, &sealed), None);
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 1;
            assert_eq!(Summary::open(&k, 2, 3, &bad), None, "byte {i}");
        }
    }

    /// The ledger adds up to the summary only for the rows the summary counted, with their
    /// tags of the time: an older tag, a missing row or an extra one breaks it.
    #[test]
    fn a_scan_adds_up_only_to_the_rows_summarised() {
        let k = keys();
        let rows: Vec<(u64, Vec<u8>)> = (1..=5).map(|i| (i, vec![i as u8; 32])).collect();
        let mut s = Summary::default();
        for (id, t) in &rows {
            s.add(&k, *id, t);
        }
        let scan = |tags: Vec<(u64, Vec<u8>)>| TagScan {
            summary: None,
            tags: tags.iter().map(|(id, t)| (*id, tag_head(t))).collect(),
        };
        let mut l = Ledger::default();
        assert!(l.rebuild(&k, Some(s), &scan(rows.clone())));
        let mut older = rows.clone();
        older[2].1 = vec![99; 32];
        let mut moved = rows.clone();
        moved.swap(0, 1);
        moved[0].0 = 1;
        moved[1].0 = 2;
        for (what, tags) in [
            ("older tag", older),
            ("missing row", rows[1..].to_vec()),
            ("extra row", [rows.clone(), vec![(6, vec![6; 32])]].concat()),
            ("tags swapped between ids", moved),
        ] {
            assert!(!l.rebuild(&k, Some(s), &scan(tags)), "{what}");
            assert!(l.broken);
        }
        assert!(!l.rebuild(&k, None, &scan(rows)), "no summary");
    }

    /// A scan of more rows than one batch of blocks adds up to the summary made row by row.
    #[test]
    fn the_batched_sum_is_the_sum_of_the_entries() {
        let k = keys();
        let tags: Vec<(u64, TagHead)> = (0..1000u64).map(|i| (i * 3, [(i % 251) as u8; 16])).collect();
        let mut s = Summary::default();
        for (id, t) in &tags {
            s.add(&k, *id, t);
        }
        let mut l = Ledger::default();
        let mut shuffled = tags.clone();
        shuffled.reverse();
        assert!(l.rebuild(
            &k,
            Some(s),
            &TagScan {
                summary: None,
                tags: shuffled
            }
        ));
        assert_eq!(l.len(), 1000);
    }

    /// A process's own writes keep its ledger current: a changed row's new tag stands, its
    /// old one differs; a destroyed row put back, tagged or not, differs.
    #[test]
    fn own_writes_keep_the_ledger() {
        let tagged = |id: u64, t: u8| ObjectRow {
            tag: Some(vec![t; 32]),
            ..row(id)
        };
        let untagged = |id: u64| ObjectRow { tag: None, ..row(id) };
        let mut l = Ledger::default();
        for id in [5, 1, 9] {
            l.wrote(id, Some(&[id as u8; 32]));
        }
        assert_eq!(l.standing(&tagged(1, 1)), Standing::Current);
        assert_eq!(l.standing(&tagged(9, 9)), Standing::Current);
        l.wrote(5, Some(&[50; 32]));
        assert_eq!(l.standing(&tagged(5, 50)), Standing::Current);
        assert_eq!(l.standing(&tagged(5, 5)), Standing::Differs, "the older tag");
        l.wrote(1, None);
        assert_eq!(
            l.standing(&tagged(1, 1)),
            Standing::Differs,
            "destroyed, put back"
        );
        assert_eq!(
            l.standing(&untagged(1)),
            Standing::Differs,
            "destroyed, put back untagged"
        );
        assert_eq!(
            l.standing(&untagged(7)),
            Standing::Unauthenticated,
            "never tagged"
        );
        assert_eq!(
            l.standing(&tagged(7, 7)),
            Standing::Differs,
            "tagged since the scan"
        );
        l.broken = true;
        assert_eq!(l.standing(&tagged(9, 9)), Standing::Differs, "a broken ledger");
    }
}
