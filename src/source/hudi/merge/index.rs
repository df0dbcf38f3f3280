//! The log phase's merge index: one 12-byte slot per key of a file group's log (where its text
//! is, the winning record, flags), in a hash table keyed by the key text without storing it.

use std::hash::BuildHasher;

use arrow_array::{Array, StringArray};
use hashbrown::hash_table::Entry;

use crate::source::SourceError;

/// A log record: (decoded batch, row).
pub(super) type Pos = (u32, u32);

/// Log-phase merge state of a key (see [`SliceMerge::run`]), 12 bytes: the merge index holds
/// one per key of the log, so a 1.6M-row file group with 190k log records holds 3 MiB of them
/// (a `HashMap<&str, _>` of 33-byte slots held 8.6 MiB).
#[derive(Clone, Copy)]
pub(super) struct Slot {
    /// Where the key's text is: a log record ([`KeyTexts::pos`]), or with [`DELETED_KEY`] set,
    /// the n-th key of the delete blocks.
    pub(super) key: u32,
    /// The winning log record, or [`HARD_DELETED`].
    pub(super) cur: u32,
    pub(super) flags: u8,
}

pub(super) const DELETED_KEY: u32 = 1 << 31;
pub(super) const HARD_DELETED: u32 = u32::MAX;
/// The winner is a soft delete: it keeps its ordering value for later comparisons.
pub(super) const SOFT: u8 = 1;
/// A hard delete happened: rows before it (the base row too) take no part.
pub(super) const RESET: u8 = 2;
/// The base row outranked the log winner.
pub(super) const BASE_WON: u8 = 4;

/// Where the text of a [`Slot::key`] is.
pub(super) struct KeyTexts<'k> {
    keys: &'k [StringArray],
    deleted_keys: Vec<&'k str>,
    /// Global number of each batch's first record.
    starts: Vec<u32>,
}

impl<'k> KeyTexts<'k> {
    pub(super) fn pos(&self, id: u32) -> Pos {
        let b = self.starts.partition_point(|&s| s <= id) - 1;
        (b as u32, id - self.starts[b])
    }

    pub(super) fn text(&self, key: u32) -> &'k str {
        if key & DELETED_KEY != 0 {
            self.deleted_keys[(key & !DELETED_KEY) as usize]
        } else {
            let (b, r) = self.pos(key);
            self.keys[b as usize].value(r as usize)
        }
    }
}

/// The merge index of a slice's log records: a hash table of [`Slot`]s whose key text stays in
/// the decoded merge columns (compared on lookup, never copied).
pub(super) struct LogIndex<'k> {
    pub(super) texts: KeyTexts<'k>,
    pub(super) table: hashbrown::HashTable<Slot>,
    hasher: std::hash::RandomState,
}

impl<'k> LogIndex<'k> {
    pub(super) fn new(keys: &'k [StringArray], deleted_keys: Vec<&'k str>) -> Result<Self, SourceError> {
        let mut starts = Vec::with_capacity(keys.len());
        let mut n = 0u64;
        for k in keys {
            starts.push(n as u32);
            n += k.len() as u64;
        }
        if n + deleted_keys.len() as u64 >= DELETED_KEY as u64 {
            return Err(SourceError::Unsupported {
                message: format!("a file slice with {n} log records (at most 2^31 are merged)"),
            });
        }
        let table = hashbrown::HashTable::with_capacity(n as usize + deleted_keys.len());
        Ok(Self {
            texts: KeyTexts {
                keys,
                deleted_keys,
                starts,
            },
            table,
            hasher: std::hash::RandomState::new(),
        })
    }

    pub(super) fn id(&self, (b, r): Pos) -> u32 {
        self.texts.starts[b as usize] + r
    }

    /// The key's slot, found or vacant, from one hash and one probe; with the key texts, to
    /// compare ordering values while the slot is held.
    pub(super) fn entry(&mut self, k: &str) -> (Entry<'_, Slot>, &KeyTexts<'k>) {
        let h = self.hasher.hash_one(k);
        let (texts, hasher) = (&self.texts, &self.hasher);
        (
            self.table
                .entry(h, |s| texts.text(s.key) == k, |s| hasher.hash_one(texts.text(s.key))),
            texts,
        )
    }

    /// The key's slot, if the log has the key (the index is not changed).
    pub(super) fn find_mut(&mut self, k: &str) -> (Option<&mut Slot>, &KeyTexts<'k>) {
        let h = self.hasher.hash_one(k);
        let texts = &self.texts;
        (self.table.find_mut(h, |s| texts.text(s.key) == k), texts)
    }
}
