//! Which keys of a rewritten file group's old slice are gone from its new slice, found by
//! walking both in file order ([`OldKeys`]).
//!
//! Hudi rewrites a base file in the order of the old one: the merge handle streams the old file,
//! writes each record as is or merged with its update, drops deleted ones and appends inserts
//! (the sorted handle and compaction interleave new records, same order otherwise). So a cursor
//! over the old keys meets each carried-over row of the new slice a few rows ahead at most; the
//! old keys it steps over without a match are the deleted ones, or rows the instant rewrote
//! elsewhere in the file (those are changed keys anyway). Matching by comparing neighbours
//! replaces a hash table of every old key of the file group (insert, then remove for each new
//! key), which was half of a copy-on-write change unit's candidate pass. A new slice in another
//! order (a carried-over row not found within [`LOOKAHEAD`] rows of the cursor) switches to that
//! hash table for the rest of the file group: same result, only slower.

use arrow_array::{Array, StringArray};

use super::selection::{ArrayKeys, KeyFilter};

/// Old rows a carried-over row is looked for ahead of the cursor before the walk gives up.
const LOOKAHEAD: usize = 4096;

/// The old slice's keys, in file order, and how far the new slice matched them.
#[derive(Default)]
pub(super) struct OldKeys {
    arrays: Vec<StringArray>,
    /// Old rows matched by a new row, per array (the walk only).
    matched: Vec<Vec<bool>>,
    /// The cursor: (array, row); rows before it are matched or stepped over.
    at: (usize, usize),
    /// Set once the walk gave up: the old keys not matched yet.
    table: Option<ArrayKeys>,
    /// New rows written by the instant that the walk did not match (their old rows, if any,
    /// are stepped over or still ahead).
    unmatched_new: Vec<Box<str>>,
}

impl OldKeys {
    /// The next batch of old keys, in file order.
    pub(super) fn push(&mut self, keys: StringArray) {
        self.matched.push(vec![false; keys.len()]);
        self.arrays.push(keys);
    }

    fn key(&self, (a, i): (usize, usize)) -> Option<&str> {
        let arr = &self.arrays[a];
        arr.is_valid(i).then(|| arr.value(i))
    }

    /// The first old row at or after `(a, i)`, if any.
    fn at_or_after(&self, (mut a, mut i): (usize, usize)) -> Option<(usize, usize)> {
        while a < self.arrays.len() {
            if i < self.arrays[a].len() {
                return Some((a, i));
            }
            (a, i) = (a + 1, 0);
        }
        None
    }

    /// The old row after `p`, if any.
    fn next(&self, (a, i): (usize, usize)) -> Option<(usize, usize)> {
        self.at_or_after((a, i + 1))
    }

    /// A live key of the new slice, in file order; `written` when the instant wrote its row.
    pub(super) fn meet(&mut self, key: &str, written: bool) {
        if let Some(t) = &mut self.table {
            t.remove(key);
            return;
        }
        let cursor = self.at_or_after(self.at);
        if let Some(p) = cursor.filter(|&p| self.key(p) == Some(key)) {
            self.matched[p.0][p.1] = true;
            self.at = (p.0, p.1 + 1);
            return;
        }
        if written {
            // an update elsewhere in the file or an insert: a changed key whatever its old row
            self.unmatched_new.push(key.into());
            return;
        }
        // a carried-over row: its old row lies ahead, past deleted ones
        let mut p = cursor;
        for _ in 0..LOOKAHEAD {
            let Some(q) = p else { break };
            if self.key(q) == Some(key) {
                self.matched[q.0][q.1] = true;
                self.at = (q.0, q.1 + 1);
                return;
            }
            p = self.next(q);
        }
        self.give_up(key);
    }

    /// The new slice is in another order: every old key not matched yet goes into a hash table,
    /// the new keys met but not matched are taken out of it, then `key`.
    fn give_up(&mut self, key: &str) {
        let mut t = ArrayKeys::default();
        for (arr, matched) in self.arrays.iter().zip(&self.matched) {
            let left: StringArray = arr
                .iter()
                .zip(matched)
                .map(|(k, &m)| if m { None } else { k })
                .collect();
            t.push(left);
        }
        for k in std::mem::take(&mut self.unmatched_new) {
            t.remove(&k);
        }
        t.remove(key);
        self.table = Some(t);
    }

    /// Whether the walk gave up (the new slice is in another order than the old).
    pub(super) fn gave_up(&self) -> bool {
        self.table.is_some()
    }

    /// Every old key the new slice did not match (deleted, or rewritten elsewhere in the file:
    /// a superset of the deleted keys) into `out`.
    pub(super) fn unmatched(&self, out: &mut KeyFilter) {
        if let Some(t) = &self.table {
            t.each(|k| out.insert(k));
            return;
        }
        for (arr, matched) in self.arrays.iter().zip(&self.matched) {
            for (i, &m) in matched.iter().enumerate() {
                if !m && arr.is_valid(i) {
                    out.insert(arr.value(i));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The unmatched old keys after meeting `new` ((key, written) in order), old pushed in
    /// batches of 2.
    fn gone(old: &[&str], new: &[(&str, bool)]) -> Vec<String> {
        let mut o = OldKeys::default();
        for c in old.chunks(2) {
            o.push(StringArray::from(c.to_vec()));
        }
        for (k, w) in new {
            o.meet(k, *w);
        }
        let mut out = KeyFilter::default();
        o.unmatched(&mut out);
        let mut v: Vec<String> = ["a", "b", "c", "d", "e", "f", "x"]
            .iter()
            .filter(|k| out.contains(k))
            .map(|k| k.to_string())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn deleted_keys_are_the_old_keys_the_walk_steps_over() {
        // merge-handle order: b and e deleted, d updated in place, x appended
        let new = [("a", false), ("c", false), ("d", true), ("x", true)];
        assert_eq!(gone(&["a", "b", "c", "d", "e"], &new), ["b", "e"]);
        // c updated right after a deleted row: its old row is stepped over (a changed key anyway)
        let new = [("a", false), ("c", true), ("d", false), ("x", true)];
        assert_eq!(gone(&["a", "b", "c", "d", "e"], &new), ["b", "c", "e"]);
        // nothing deleted
        assert!(gone(&["a", "b"], &[("a", false), ("b", true)]).is_empty());
        // an update written out of place: its old row is stepped over (a changed key anyway)
        let new = [("a", false), ("d", true), ("b", false), ("c", false)];
        assert_eq!(gone(&["a", "b", "c", "d"], &new), ["d"]);
    }

    #[test]
    fn a_new_slice_in_another_order_gives_the_same_keys_through_the_hash_table() {
        // carried-over rows in reverse order: the walk gives up and the table decides
        let new = [("e", false), ("d", false), ("a", false), ("x", true)];
        assert_eq!(gone(&["a", "b", "c", "d", "e"], &new), ["b", "c"]);
        let new = [("c", false), ("b", true), ("a", false)];
        assert_eq!(gone(&["a", "b", "c", "d"], &new), ["d"]);
    }
}
