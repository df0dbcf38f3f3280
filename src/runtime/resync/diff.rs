//! One bucket of a resync: the topic's records replayed by key (the last one wins; a delete or
//! tombstone removes the key) against the table's rows at the target, and the changes that make
//! the first equal the second. A keyless table's rows are a multiset of images: as many `c` as
//! the table holds more of an image, as many `d` as the topic holds more.

use std::collections::HashMap;
use std::path::Path;

use crate::runtime::verify::runs::{read_bucket, Rec, NO_PAYLOAD};

/// A change to publish, by where its images are kept (payload locations in the bucket's files).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// In the table, not in the topic.
    Create { table: u64 },
    /// In both, different: before from the topic, after from the table.
    Update { topic: u64, table: u64 },
    /// In the topic, not in the table.
    Delete { topic: u64 },
}

#[derive(Default)]
struct Slot {
    topic_image: u128,
    table_image: u128,
    topic_loc: u64,
    table_loc: u64,
    live: bool,
    rows: u32,
}

/// The changes of one bucket of a keyed table. A key the table holds twice (it cannot be
/// replayed by key) converges to its last row and is counted in `duplicates`.
pub fn keyed(topic: &Path, table: &Path, duplicates: &mut u64) -> std::io::Result<Vec<Change>> {
    let mut slots: HashMap<u128, Slot> = HashMap::new();
    read_bucket(topic, &mut |r: Rec| {
        let s = slots.entry(r.key).or_default();
        s.live = r.delta == 1;
        (s.topic_image, s.topic_loc) = (r.image, r.loc);
    })?;
    read_bucket(table, &mut |r: Rec| {
        let s = slots.entry(r.key).or_default();
        s.rows += 1;
        (s.table_image, s.table_loc) = (r.image, r.loc);
    })?;
    let mut out = Vec::new();
    for s in slots.values() {
        *duplicates += (s.rows > 1) as u64;
        match (s.live && s.topic_loc != NO_PAYLOAD, s.rows > 0) {
            (false, true) => out.push(Change::Create { table: s.table_loc }),
            (true, false) => out.push(Change::Delete { topic: s.topic_loc }),
            (true, true) if s.topic_image != s.table_image => out.push(Change::Update {
                topic: s.topic_loc,
                table: s.table_loc,
            }),
            _ => {}
        }
    }
    Ok(out)
}

/// The changes of one bucket of a keyless table.
pub fn keyless(topic: &Path, table: &Path) -> std::io::Result<Vec<Change>> {
    // image -> (net count in the topic, a payload of it there, count in the table, a row of it)
    let mut counts: HashMap<u128, (i64, u64, i64, u64)> = HashMap::new();
    read_bucket(topic, &mut |r: Rec| {
        let e = counts.entry(r.key).or_insert((0, NO_PAYLOAD, 0, NO_PAYLOAD));
        e.0 += r.delta as i64;
        if r.loc != NO_PAYLOAD {
            e.1 = r.loc;
        }
    })?;
    read_bucket(table, &mut |r: Rec| {
        let e = counts.entry(r.key).or_insert((0, NO_PAYLOAD, 0, NO_PAYLOAD));
        e.2 += 1;
        e.3 = r.loc;
    })?;
    let mut out = Vec::new();
    for (replayed, topic, rows, table) in counts.into_values() {
        let diff = rows - replayed.max(0);
        let change = match diff > 0 {
            true => Change::Create { table },
            false => Change::Delete { topic },
        };
        out.extend(std::iter::repeat_n(change, diff.unsigned_abs() as usize));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::verify::runs::{RunWriter, Side};

    /// (key, image, delta, loc)
    fn write(dir: &Path, side: Side, recs: &[(u128, u128, i8, u64)]) -> std::path::PathBuf {
        let mut w = RunWriter::new(dir, side, 1, 4096).unwrap();
        for (key, image, delta, loc) in recs {
            w.push(&Rec {
                key: *key,
                image: *image,
                delta: *delta,
                commit: 1,
                op: b'c',
                partition: 0,
                text: String::new(),
                loc: *loc,
            })
            .unwrap();
        }
        w.finish().unwrap().remove(0)
    }

    fn sorted(mut v: Vec<Change>) -> Vec<Change> {
        v.sort_by_key(|c| format!("{c:?}"));
        v
    }

    #[test]
    fn keyed_changes_are_the_net_difference() {
        let dir = tempfile::tempdir().unwrap();
        // topic: 1 live (a), 2 live (b) then deleted, 3 live (c), 4 live (d)
        let topic = write(
            dir.path(),
            Side::Topic,
            &[
                (1, 10, 1, 100),
                (2, 20, 1, 200),
                (2, 0, 0, NO_PAYLOAD),
                (3, 30, 1, 300),
                (4, 40, 1, 400),
            ],
        );
        // table: 1 equal, 2 back (create), 3 changed (update), 4 gone (delete), 5 new (create)
        let table = write(
            dir.path(),
            Side::Table,
            &[(1, 10, 1, 1), (2, 21, 1, 2), (3, 31, 1, 3), (5, 50, 1, 5)],
        );
        let mut dup = 0;
        let got = sorted(keyed(&topic, &table, &mut dup).unwrap());
        let want = sorted(vec![
            Change::Create { table: 2 },
            Change::Update { topic: 300, table: 3 },
            Change::Delete { topic: 400 },
            Change::Create { table: 5 },
        ]);
        assert_eq!(got, want);
        assert_eq!(dup, 0);
    }

    #[test]
    fn keyless_changes_balance_each_image() {
        let dir = tempfile::tempdir().unwrap();
        // topic: image 7 twice (one later removed), image 8 once
        let topic = write(
            dir.path(),
            Side::Topic,
            &[(7, 0, 1, 70), (7, 0, 1, 71), (7, 0, -1, NO_PAYLOAD), (8, 0, 1, 80)],
        );
        // table: image 7 three times, image 9 once; 8 gone
        let table = write(
            dir.path(),
            Side::Table,
            &[(7, 0, 1, 1), (7, 0, 1, 2), (7, 0, 1, 3), (9, 0, 1, 9)],
        );
        let got = sorted(keyless(&topic, &table).unwrap());
        let want = sorted(vec![
            Change::Create { table: 3 },
            Change::Create { table: 3 },
            Change::Create { table: 9 },
            Change::Delete { topic: 80 },
        ]);
        assert_eq!(got, want);
    }
}
