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
//!
//! The old slice is streamed: its keys arrive batch by batch as the cursor needs them (see
//! `rewritten_keys`, which reads the old slice on a thread of its own) and a batch is dropped once
//! the cursor has left it, its unmatched keys kept as gone. Memory holds the cursor's window, not
//! the file group (at 16M rows, two file groups' old keys were ~50 MiB of a unit's peak).

use std::collections::VecDeque;

use arrow_array::{Array, StringArray};

use super::keys::{ArrayKeys, KeyFilter};

/// Old rows a carried-over row is looked for ahead of the cursor before the walk gives up.
const LOOKAHEAD: usize = 4096;

/// The old slice's keys, in file order, and how far the new slice matched them.
pub(super) struct OldKeys<'a> {
    /// The old keys not pulled yet, batch by batch in file order.
    feed: Box<dyn Iterator<Item = StringArray> + 'a>,
    /// Pulled batches from the cursor's on, with the rows matched by a new row (the walk only).
    arrays: VecDeque<(StringArray, Vec<bool>)>,
    /// The cursor: (batch in `arrays`, row); rows before it are matched or stepped over.
    at: (usize, usize),
    /// Set once the walk gave up: the old keys not matched yet.
    table: Option<ArrayKeys>,
    /// New rows written by the instant that the walk did not match (their old rows, if any,
    /// are stepped over or still ahead).
    unmatched_new: Vec<Box<str>>,
    /// Old keys of batches the cursor left behind without a match (taken out again if the walk
    /// gives up and meets them).
    gone: KeyFilter,
}

impl<'a> OldKeys<'a> {
    /// A walk over the old keys `feed` yields, in file order.
    pub(super) fn new(feed: impl Iterator<Item = StringArray> + 'a) -> Self {
        Self {
            feed: Box::new(feed),
            arrays: VecDeque::new(),
            at: (0, 0),
            table: None,
            unmatched_new: Vec::new(),
            gone: KeyFilter::default(),
        }
    }

    /// Whether batch `a` is pulled (pulling it if the feed has it).
    fn load(&mut self, a: usize) -> bool {
        while self.arrays.len() <= a {
            let Some(keys) = self.feed.next() else {
                return false;
            };
            let n = keys.len();
            self.arrays.push_back((keys, vec![false; n]));
        }
        true
    }

    fn key(&self, (a, i): (usize, usize)) -> Option<&str> {
        let arr = &self.arrays[a].0;
        arr.is_valid(i).then(|| arr.value(i))
    }

    /// The first old row at or after `(a, i)`, if any.
    fn at_or_after(&mut self, (mut a, mut i): (usize, usize)) -> Option<(usize, usize)> {
        while self.load(a) {
            if i < self.arrays[a].0.len() {
                return Some((a, i));
            }
            (a, i) = (a + 1, 0);
        }
        None
    }

    /// The batches before the cursor's: their unmatched keys are gone, their rows dropped.
    fn retire(&mut self) {
        while self.at.0 > 0 {
            if let Some((arr, matched)) = self.arrays.pop_front() {
                unmatched_of(&arr, &matched, &mut self.gone);
            }
            self.at.0 -= 1;
        }
    }

    /// A live key of the new slice, in file order; `written` when the instant wrote its row.
    pub(super) fn meet(&mut self, key: &str, written: bool) {
        if let Some(t) = &mut self.table {
            t.remove(key);
            self.gone.remove(key);
            return;
        }
        self.retire();
        let cursor = self.at_or_after(self.at);
        if let Some(p) = cursor.filter(|&p| self.key(p) == Some(key)) {
            self.arrays[p.0].1[p.1] = true;
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
                self.arrays[q.0].1[q.1] = true;
                self.at = (q.0, q.1 + 1);
                return;
            }
            p = self.at_or_after((q.0, q.1 + 1));
        }
        self.give_up(key);
    }

    /// The new slice is in another order: every old key not matched yet (the rest of the feed
    /// too) goes into a hash table, the new keys met but not matched are taken out of it, then
    /// `key`.
    fn give_up(&mut self, key: &str) {
        let mut t = ArrayKeys::default();
        for (arr, matched) in std::mem::take(&mut self.arrays) {
            t.push(
                arr.iter()
                    .zip(&matched)
                    .map(|(k, &m)| if m { None } else { k })
                    .collect(),
            );
        }
        self.feed.by_ref().for_each(|arr| t.push(arr));
        // a key stepped over in a batch already left behind is not gone if it comes back
        for k in std::mem::take(&mut self.unmatched_new) {
            t.remove(&k);
            self.gone.remove(&k);
        }
        t.remove(key);
        self.gone.remove(key);
        self.table = Some(t);
    }

    /// Whether the walk gave up (the new slice is in another order than the old).
    pub(super) fn gave_up(&self) -> bool {
        self.table.is_some()
    }

    /// Every old key the new slice did not match (deleted, or rewritten elsewhere in the file:
    /// a superset of the deleted keys) into `out`; the rest of the feed is read.
    pub(super) fn unmatched(mut self, out: &mut KeyFilter) {
        out.extend(&self.gone);
        if let Some(t) = &self.table {
            t.each(|k| out.insert(k));
            return;
        }
        for (arr, matched) in &self.arrays {
            unmatched_of(arr, matched, out);
        }
        for arr in self.feed.by_ref() {
            arr.iter().flatten().for_each(|k| out.insert(k));
        }
    }
}

/// The keys of `arr` not `matched` into `out`.
fn unmatched_of(arr: &StringArray, matched: &[bool], out: &mut KeyFilter) {
    for (i, &m) in matched.iter().enumerate() {
        if !m && arr.is_valid(i) {
            out.insert(arr.value(i));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The unmatched old keys after meeting `new` ((key, written) in order), old pushed in
    /// batches of 2.
    fn gone(old: &[&str], new: &[(&str, bool)]) -> Vec<String> {
        let mut o = OldKeys::new(old.chunks(2).map(|c| StringArray::from(c.to_vec())));
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
        // b deleted in a batch the cursor left behind, then the order breaks: b stays gone
        let new = [("a", false), ("c", false), ("d", false), ("f", false), ("e", false)];
        assert_eq!(gone(&["a", "b", "c", "d", "e", "f"], &new), ["b"]);
        // an old row stepped over and left behind, met again after the walk gave up: not gone
        let new = [
            ("b", false),
            ("c", false),
            ("d", false),
            ("e", false),
            ("f", false),
            ("a", false),
        ];
        assert_eq!(gone(&["a", "b", "c", "d", "e", "f"], &new), Vec::<String>::new());
    }
}
