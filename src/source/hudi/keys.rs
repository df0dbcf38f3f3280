//! Record keys: the `_hoodie_record_key` column ([`record_keys`]) and sets of keys.
//! [`KeyFilter`]: the keys a change unit reads (see `narrow` and `selection`). A row is selected
//! when its key's row hash (32 bits of its xxh3) is a selected key's: a superset of the keys that
//! is *key-closed* (every row of a key, in every file and log block, is selected or none is), so
//! a unit's two sides restricted to it still hold every version of each selected key and diff
//! exactly as the whole sides do for those keys (a key picked up by a hash collision diffs to no
//! event, as an unchanged key does). That lets a base file be selected from the row hashes the
//! candidate pass kept, in row order, without decoding and probing its key column again
//! (`keep_rows`, within an eighth of `read.memory.budget`; what the second key pass cost:
//! docs/benchmarks.md). [`ArrayKeys`]: an exact set of keys whose
//! text stays in the decoded arrays (the old slice's walk, see `carried`).

use std::collections::HashMap;
use std::sync::Arc;

use arrow::buffer::BooleanBuffer;
use arrow_array::{Array, BooleanArray, RecordBatch, StringArray, StringViewArray};
use arrow_schema::DataType;

use crate::source::SourceError;

pub(super) const RECORD_KEY: &str = "_hoodie_record_key";

/// The `_hoodie_record_key` column as strings (`None`: the batch has none).
pub(super) fn record_keys(batch: &RecordBatch) -> Result<Option<StringArray>, SourceError> {
    let Some(col) = batch.column_by_name(RECORD_KEY) else {
        return Ok(None);
    };
    let col = if col.data_type() == &DataType::Utf8 {
        col.clone()
    } else {
        arrow::compute::cast(col, &DataType::Utf8).map_err(SourceError::arrow("record key as text"))?
    };
    Ok(col.as_any().downcast_ref::<StringArray>().cloned())
}

/// The record keys a unit reads (see the module doc): rows of other keys are not decoded past
/// their key column.
#[derive(Default)]
pub struct KeyFilter {
    /// Each key with its hash, placed by its row hash ([`slot`]) so that a row hash alone finds
    /// whether any key has it.
    keys: hashbrown::HashTable<(u64, Box<str>)>,
    /// A bit per row-hash class, set for every key's ([`RowBits`]): most rows of a file are
    /// turned away by one bit instead of a table probe.
    bits: RowBits,
    /// What the keys take in memory (text, box and slot).
    bytes: usize,
    /// The row hash of every row of some base files in row order, by file name (see the module
    /// doc).
    rows: HashMap<String, Arc<[u32]>>,
}

/// What a selected key costs besides its text: its box (16 bytes) and hash (8) in its table slot.
const KEY_OVERHEAD: usize = 24;

/// The hash of a key's text: xxh3 (SipHash, std's, took a third of a change unit's key checks).
pub(super) fn hash(k: &str) -> u64 {
    twox_hash::XxHash3_64::oneshot(k.as_bytes())
}

/// What selects a row: the low 32 bits of its key's hash. Kept for every row of a base file
/// (4 bytes a row), it picks up ~0.23 rows of other keys per million rows per 1,000 selected
/// keys (~30 of 4M rows at 24k keys).
pub(super) fn row_hash(k: &str) -> u32 {
    hash(k) as u32
}

/// Where a key goes in a [`KeyFilter`]'s table: its row hash spread over 64 bits (the table
/// takes its slot and tag from different bits).
fn slot(row_hash: u32) -> u64 {
    (row_hash as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl KeyFilter {
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Add every key of `other`.
    pub(super) fn extend(&mut self, other: &KeyFilter) {
        other.keys.iter().for_each(|(_, k)| self.insert(k));
    }

    /// What the keys take in memory.
    pub(super) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether rows of `key` are selected: whether its row hash is a selected key's (a
    /// key-closed superset of the keys, see the module doc).
    pub fn contains(&self, key: &str) -> bool {
        self.contains_hash(row_hash(key))
    }

    /// Whether rows whose key has row hash `h` are selected.
    pub(super) fn contains_hash(&self, h: u32) -> bool {
        let s = slot(h);
        self.bits.may_hold(s) && self.keys.find(s, |(kh, _)| *kh as u32 == h).is_some()
    }

    /// Keep the row hashes of every row of base file `file`, in row order (the candidate pass
    /// bounds what they take, see `narrow`).
    pub(super) fn keep_rows(&mut self, file: String, hashes: Vec<u32>) {
        self.rows.insert(file, hashes.into());
    }

    /// The row hashes of the rows of base file `file`, if the candidate pass kept them.
    pub(super) fn rows_of(&self, file: &str) -> Option<&[u32]> {
        self.rows.get(file).map(|h| h.as_ref())
    }

    pub(super) fn insert(&mut self, key: &str) {
        let h = hash(key);
        if let hashbrown::hash_table::Entry::Vacant(v) = self.keys.entry(
            slot(h as u32),
            |(kh, k)| *kh == h && k.as_ref() == key,
            |(kh, _)| slot(*kh as u32),
        ) {
            v.insert((h, key.into()));
            self.bytes += key.len() + KEY_OVERHEAD;
            let slots = || self.keys.iter().map(|(kh, _)| slot(*kh as u32));
            self.bits.add(slot(h as u32), self.keys.len(), slots);
        }
    }

    pub(super) fn remove(&mut self, key: &str) {
        let h = hash(key);
        if let Ok(e) = self
            .keys
            .find_entry(slot(h as u32), |(kh, k)| *kh == h && k.as_ref() == key)
        {
            self.bytes -= key.len() + KEY_OVERHEAD;
            e.remove();
        }
    }

    /// Which rows of a record-key column are selected (a null key never is).
    pub fn mask(&self, keys: &StringArray) -> BooleanArray {
        self.mask_by(keys, |i| keys.value(i))
    }

    /// [`Self::mask`] of a column read as string views (the key pass: no copy of the key text).
    pub(super) fn mask_view(&self, keys: &StringViewArray) -> BooleanArray {
        self.mask_by(keys, |i| keys.value(i))
    }

    fn mask_by<'a>(&self, keys: &dyn Array, value: impl Fn(usize) -> &'a str) -> BooleanArray {
        let selected = match (self.keys.is_empty(), keys.null_count()) {
            (true, _) => BooleanBuffer::new_unset(keys.len()),
            (false, 0) => BooleanBuffer::collect_bool(keys.len(), |i| self.contains(value(i))),
            (false, _) => BooleanBuffer::collect_bool(keys.len(), |i| keys.is_valid(i) && self.contains(value(i))),
        };
        BooleanArray::new(selected, None)
    }

    /// The rows of `batch` whose `_hoodie_record_key` is selected (all of them without that
    /// column: a superset is always safe).
    pub fn restrict(&self, batch: RecordBatch) -> Result<RecordBatch, SourceError> {
        let Some(keys) = record_keys(&batch)? else {
            return Ok(batch);
        };
        let keep = self.mask(&keys);
        if keep.true_count() == batch.num_rows() {
            return Ok(batch);
        }
        arrow::compute::filter_record_batch(&batch, &keep).map_err(SourceError::arrow("selecting changed keys"))
    }
}

/// The row-hash prefilter of a [`KeyFilter`]: one bit per class of slots (the slot's top bits),
/// set for every key's. A clear bit means no key has that row hash; a set one is asked of the
/// table (removed keys leave their bits set: only more rows are asked). The bits grow with the
/// keys (16 a key, ~6 % of them set; rebuilt from the table when the keys double) up to
/// [`RowBits::MAX_BITS`] (512 KiB, a fixed overhead not counted in the keys' bytes, small enough
/// for a core's L2 cache, where the table of that many keys is not); past a key for every four
/// bits (~22 % of them set, 1M keys) they turn too few rows away to pay their look-up, and every
/// row is asked of the table as before. Probing the table for each row of a 2M-row file was ~10 %
/// of a merge-on-read 1 % unit's selected read. Measured (paired, `run --once` ×5): a 64 KiB cap
/// left 30 % of the bits set at 16M 1 % (192k keys; MOR CPU 1.65 → 1.54 s with this cap); a
/// 512 KiB bitmap kept on to a key every two bits made a 16M 10 % unit (1.9M keys) ~3 % slower;
/// at 976k keys (21 % set) this one is neither faster nor slower.
#[derive(Default)]
struct RowBits {
    words: Vec<u64>,
    /// log2 of the bit count (0 while empty).
    shift: u32,
    /// Too many keys for the bits: every row is asked of the table.
    full: bool,
}

impl RowBits {
    const MIN_BITS: u32 = 12;
    const MAX_BITS: u32 = 22;

    fn index(&self, slot: u64) -> usize {
        (slot >> (64 - self.shift)) as usize
    }

    /// Whether a key with this slot may be held (false only where none is).
    fn may_hold(&self, slot: u64) -> bool {
        if self.full {
            return true;
        }
        if self.words.is_empty() {
            return false;
        }
        let i = self.index(slot);
        self.words[i / 64] & (1 << (i % 64)) != 0
    }

    /// Note a key's slot; `keys`: how many the table holds now, `all`: their slots (to rebuild
    /// when the bits grow).
    fn add<I: Iterator<Item = u64>>(&mut self, slot: u64, keys: usize, all: impl FnOnce() -> I) {
        if self.full {
            return;
        }
        if keys * 4 > 1 << Self::MAX_BITS {
            (self.full, self.words) = (true, Vec::new());
            return;
        }
        let want = (keys * 16)
            .next_power_of_two()
            .trailing_zeros()
            .clamp(Self::MIN_BITS, Self::MAX_BITS);
        if want > self.shift {
            self.shift = want;
            self.words = vec![0; (1usize << want) / 64];
            for s in all() {
                self.set(s);
            }
        }
        self.set(slot);
    }

    fn set(&mut self, slot: u64) {
        let i = self.index(slot);
        self.words[i / 64] |= 1 << (i % 64);
    }
}

/// A set of keys whose text stays in the decoded key arrays: 8 bytes a key in the table, no
/// allocation per key (an old slice holds every key of a file group).
#[derive(Default)]
pub(super) struct ArrayKeys {
    arrays: Vec<StringArray>,
    table: hashbrown::HashTable<(u32, u32)>,
}

impl ArrayKeys {
    fn text(&self, (a, i): (u32, u32)) -> &str {
        self.arrays[a as usize].value(i as usize)
    }

    pub(super) fn push(&mut self, keys: StringArray) {
        let a = self.arrays.len() as u32;
        self.arrays.push(keys);
        let arrays = &self.arrays;
        let text = |(a, i): (u32, u32)| arrays[a as usize].value(i as usize);
        let keys = &arrays[a as usize];
        for i in (0..keys.len()).filter(|&i| keys.is_valid(i)) {
            let k = keys.value(i);
            if let hashbrown::hash_table::Entry::Vacant(v) =
                self.table.entry(hash(k), |&s| text(s) == k, |&s| hash(text(s)))
            {
                v.insert((a, i as u32));
            }
        }
    }

    pub(super) fn remove(&mut self, k: &str) {
        let arrays = &self.arrays;
        if let Ok(e) = self
            .table
            .find_entry(hash(k), |&(a, i)| arrays[a as usize].value(i as usize) == k)
        {
            e.remove();
        }
    }

    pub(super) fn each(&self, mut f: impl FnMut(&str)) {
        self.table.iter().for_each(|&s| f(self.text(s)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn array_keys_are_exact_sets() {
        let mut old = ArrayKeys::default();
        old.push(StringArray::from(vec![Some("a"), Some("b"), None, Some("a")]));
        old.push(StringArray::from(vec!["c", "d"]));
        old.remove("b");
        old.remove("zz");
        let mut left = Vec::new();
        old.each(|k| left.push(k.to_string()));
        left.sort();
        assert_eq!(left, ["a", "c", "d"]);
        let mut f = KeyFilter::default();
        f.insert("x");
        f.insert("x");
        assert_eq!(f.len(), 1);
        let m = f.mask(&StringArray::from(vec![Some("x"), None, Some("y")]));
        assert_eq!(m, BooleanArray::from(vec![true, false, false]));
    }

    #[test]
    fn rows_are_selected_by_row_hash_and_removed_keys_select_none() {
        let mut f = KeyFilter::default();
        f.insert("a");
        f.insert("b");
        f.remove("b");
        f.keep_rows("f.parquet".into(), vec![row_hash("b"), row_hash("a"), row_hash("c")]);
        let h = f.rows_of("f.parquet").unwrap();
        let picked: Vec<bool> = h.iter().map(|&h| f.contains_hash(h)).collect();
        assert_eq!(picked, [false, true, false]);
        assert!(f.contains("a") && !f.contains("b"));
        assert!(f.rows_of("g.parquet").is_none());
    }

    #[test]
    fn the_row_bits_turn_away_only_rows_of_no_key_as_they_grow() {
        let mut f = KeyFilter::default();
        assert!(!f.contains("k0"), "an empty filter holds nothing");
        // selected: exactly the rows whose row hash is a held key's, through several rebuilds of
        // the bits (4096 hold 256 keys), at their cap, and past it (every row asked of the table)
        for (n, shift, full) in [
            (30_000, 19, false),
            (300_000, RowBits::MAX_BITS, false),
            (1_100_000, RowBits::MAX_BITS, true),
        ] {
            for i in 0..n {
                f.insert(&format!("k{i}"));
            }
            for i in (0..n).step_by(7) {
                f.remove(&format!("k{i}"));
            }
            assert_eq!((f.bits.shift, f.bits.full), (shift, full));
            let held: std::collections::HashSet<u32> = (0..n)
                .filter(|i| i % 7 != 0)
                .map(|i| row_hash(&format!("k{i}")))
                .collect();
            for k in (0..n)
                .map(|i| format!("k{i}"))
                .chain((0..100_000).map(|i| format!("x{i}")))
            {
                assert_eq!(f.contains(&k), held.contains(&row_hash(&k)), "{k}");
            }
        }
    }
}
