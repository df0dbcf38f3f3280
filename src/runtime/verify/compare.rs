//! One bucket of each side compared: the topic's records replayed by key (the last one wins; a
//! delete or tombstone removes the key) against the table's rows. A keyless table's rows are
//! compared as a multiset of images (an event's `after` adds one, its `before` removes one).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Serialize;

use super::runs::{read_bucket, Partitions, Rec};

/// Rows and differences of one table partition (or of the whole table).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub table_rows: u64,
    pub replayed_rows: u64,
    /// In the table, not in the replayed topic.
    pub missing: u64,
    /// In the replayed topic, not in the table.
    pub extra: u64,
    /// In both, with different values.
    pub differing: u64,
    /// Keys the table holds more than once (it cannot be replayed by key).
    #[serde(skip_serializing_if = "is_zero")]
    pub duplicate_keys: u64,
    /// Events published twice: a key's event with the lake commit and op of its previous one
    /// (not counted with `changelog.enabled`, where a commit may change a key several times).
    pub duplicated_events: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl Counts {
    pub fn mismatched(&self) -> u64 {
        self.missing + self.extra + self.differing + self.duplicate_keys + self.duplicated_events
    }

    fn add(&mut self, o: &Counts) {
        self.table_rows += o.table_rows;
        self.replayed_rows += o.replayed_rows;
        self.missing += o.missing;
        self.extra += o.extra;
        self.differing += o.differing;
        self.duplicate_keys += o.duplicate_keys;
        self.duplicated_events += o.duplicated_events;
    }
}

/// Example keys of each kind of difference (at most `limit` each).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize)]
pub struct Examples {
    pub missing: Vec<String>,
    pub extra: Vec<String>,
    pub differing: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub duplicate_keys: Vec<String>,
    pub duplicated_events: Vec<String>,
}

#[derive(Debug, Default)]
pub struct Tally {
    pub by_partition: BTreeMap<String, Counts>,
    pub examples: Examples,
    pub limit: usize,
    /// Look for duplicated events (off with `changelog.enabled`).
    pub duplicates: bool,
}

impl Tally {
    pub fn total(&self) -> Counts {
        let mut t = Counts::default();
        self.by_partition.values().for_each(|c| t.add(c));
        t
    }

    fn at(&mut self, partition: &str) -> &mut Counts {
        if !self.by_partition.contains_key(partition) {
            self.by_partition.insert(partition.to_string(), Counts::default());
        }
        self.by_partition.get_mut(partition).expect("inserted")
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Missing,
    Extra,
    Differing,
    Duplicate,
    Duplicated,
}

/// A key of the bucket, packed (64 bytes: the bucket's memory is about 80-160 bytes a key).
#[derive(Default)]
struct Slot {
    topic_image: u128,
    table_image: u128,
    /// The commit of the key's last topic event.
    last_commit: u64,
    topic_part: u32,
    table_part: u32,
    /// Rows of the table with this key.
    rows: u32,
    last_op: u8,
    /// `LIVE`: the replay holds the key; `DUPLICATED`: an event repeated the one before it.
    flags: u8,
}

const LIVE: u8 = 1;
const DUPLICATED: u8 = 2;

impl Slot {
    fn topic(&self) -> Option<(u128, u32)> {
        (self.flags & LIVE != 0).then_some((self.topic_image, self.topic_part))
    }

    fn table(&self) -> Option<(u128, u32)> {
        (self.rows > 0).then_some((self.table_image, self.table_part))
    }
}

/// The two sides' partition names.
pub struct Names<'a> {
    pub topic: &'a Partitions,
    pub table: &'a Partitions,
}

fn name(p: &Partitions, i: u32) -> &str {
    p.names.get(i as usize).map_or("", |s| s.as_str())
}

/// Compare one bucket of a keyed table.
pub fn keyed(topic: &Path, table: &Path, names: &Names, tally: &mut Tally) -> std::io::Result<()> {
    let mut slots: HashMap<u128, Slot> = HashMap::new();
    let duplicates = tally.duplicates;
    read_bucket(topic, &mut |r: Rec| {
        let s = slots.entry(r.key).or_default();
        (s.topic_image, s.topic_part) = (r.image, r.partition);
        s.flags = if r.delta == 1 { s.flags | LIVE } else { s.flags & !LIVE };
        if r.commit != 0 {
            if duplicates && (s.last_commit, s.last_op) == (r.commit, r.op) {
                s.flags |= DUPLICATED;
            }
            (s.last_commit, s.last_op) = (r.commit, r.op);
        }
    })?;
    read_bucket(table, &mut |r: Rec| {
        let s = slots.entry(r.key).or_default();
        s.rows += 1;
        (s.table_image, s.table_part) = (r.image, r.partition);
    })?;
    let mut wanted: HashMap<u128, Kind> = HashMap::new();
    let room = |tally: &Tally, wanted: &HashMap<u128, Kind>, k: Kind| {
        let have = match k {
            Kind::Missing => tally.examples.missing.len(),
            Kind::Extra => tally.examples.extra.len(),
            Kind::Differing => tally.examples.differing.len(),
            Kind::Duplicate => tally.examples.duplicate_keys.len(),
            Kind::Duplicated => tally.examples.duplicated_events.len(),
        };
        have + wanted.values().filter(|w| **w == k).count() < tally.limit
    };
    for (key, s) in &slots {
        let (in_topic, in_table) = (s.topic(), s.table());
        if let Some((_, p)) = in_topic {
            tally.at(name(names.topic, p)).replayed_rows += 1;
        }
        let kind = match (in_table, in_topic) {
            (Some((_, p)), None) => Some((Kind::Missing, name(names.table, p))),
            (None, Some((_, p))) => Some((Kind::Extra, name(names.topic, p))),
            (Some((a, p)), Some((b, _))) if a != b => Some((Kind::Differing, name(names.table, p))),
            _ => None,
        };
        if let Some((_, p)) = in_table {
            tally.at(name(names.table, p)).table_rows += s.rows as u64;
        }
        if s.rows > 1 {
            let p = s.table_part;
            tally.at(name(names.table, p)).duplicate_keys += 1;
            if room(tally, &wanted, Kind::Duplicate) {
                wanted.insert(*key, Kind::Duplicate);
            }
        }
        if s.flags & DUPLICATED != 0 {
            let (names_of, p) = match in_topic {
                Some((_, p)) => (names.topic, p),
                None => (names.table, s.table_part),
            };
            tally.at(name(names_of, p)).duplicated_events += 1;
            if room(tally, &wanted, Kind::Duplicated) && !wanted.contains_key(key) {
                wanted.insert(*key, Kind::Duplicated);
            }
        }
        let Some((kind, partition)) = kind else { continue };
        let c = tally.at(partition);
        match kind {
            Kind::Missing => c.missing += 1,
            Kind::Extra => c.extra += 1,
            _ => c.differing += 1,
        }
        if room(tally, &wanted, kind) && !wanted.contains_key(key) {
            wanted.insert(*key, kind);
        }
    }
    if !wanted.is_empty() {
        name_examples(topic, table, wanted, &mut tally.examples)?;
    }
    Ok(())
}

/// The texts of the example keys, read back from the bucket files.
fn name_examples(
    topic: &Path,
    table: &Path,
    mut wanted: HashMap<u128, Kind>,
    ex: &mut Examples,
) -> std::io::Result<()> {
    for path in [table, topic] {
        read_bucket(path, &mut |r: Rec| {
            if let Some(kind) = wanted.remove(&r.key) {
                match kind {
                    Kind::Missing => ex.missing.push(r.text),
                    Kind::Extra => ex.extra.push(r.text),
                    Kind::Differing => ex.differing.push(r.text),
                    Kind::Duplicate => ex.duplicate_keys.push(r.text),
                    Kind::Duplicated => ex.duplicated_events.push(r.text),
                }
            }
        })?;
    }
    Ok(())
}

/// Compare one bucket of a keyless table (multisets of row images).
pub fn keyless(topic: &Path, table: &Path, names: &Names, tally: &mut Tally) -> std::io::Result<()> {
    // image -> (net count replayed, count in table, topic partition, table partition)
    let mut counts: HashMap<u128, (i64, i64, u32, Option<u32>)> = HashMap::new();
    read_bucket(topic, &mut |r: Rec| {
        let e = counts.entry(r.key).or_insert((0, 0, r.partition, None));
        e.0 += r.delta as i64;
        e.2 = r.partition;
    })?;
    read_bucket(table, &mut |r: Rec| {
        let e = counts.entry(r.key).or_insert((0, 0, r.partition, None));
        e.1 += 1;
        e.3 = Some(r.partition);
    })?;
    for (image, (replayed, rows, tp, pp)) in counts {
        let replayed_rows = replayed.max(0) as u64;
        tally.at(name(names.topic, tp)).replayed_rows += replayed_rows;
        let partition = pp
            .map_or_else(|| name(names.topic, tp), |p| name(names.table, p))
            .to_string();
        let limit = tally.limit;
        let ex = &mut tally.examples;
        let c = tally.by_partition.entry(partition.clone()).or_default();
        c.table_rows += rows as u64;
        let diff = rows - replayed.max(0);
        let text = || format!("row image {image:032x} in partition {partition:?}");
        if diff > 0 {
            c.missing += diff as u64;
            if ex.missing.len() < limit {
                ex.missing.push(text());
            }
        } else if diff < 0 {
            c.extra += (-diff) as u64;
            if ex.extra.len() < limit {
                ex.extra.push(text());
            }
        }
    }
    Ok(())
}
