//! The connector's position as the runtime keeps it: what each task has issued, the unit it has
//! in flight (per-split progress), the generation it belongs to and the handoff from the previous
//! one, and the rules that decide whether a row was already published ([`Handoff::published`]).
//! Stored as JSON in the compacted offsets topic (the sink reads and writes the bytes), in the
//! same transaction as the records it accounts for.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::RuntimeError;
use crate::config::ConnectorConfig;
use crate::sink::Cluster;
use crate::source::{Ownership, Position};

/// Progress inside a unit that is not fully emitted yet.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitProgress {
    /// Change rows of the split already committed.
    pub consumed: u64,
    pub done: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InFlight {
    pub unit: Position,
    pub snapshot: bool,
    pub splits: BTreeMap<String, SplitProgress>,
    /// Key buckets the unit is being read with (part of its row order; absent: one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub buckets: Option<u32>,
    /// Events of the unit published so far (transaction metadata: the next `total_order`, and
    /// whether its BEGIN was published).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub events: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl InFlight {
    pub fn new(unit: Position, snapshot: bool) -> Self {
        InFlight {
            unit,
            snapshot,
            splits: BTreeMap::new(),
            buckets: None,
            events: 0,
        }
    }

    /// The bucket count a resumed read must use: the stored one, or one (the only count older
    /// builds used) once any progress was recorded. `None`: free to choose.
    pub fn pinned_buckets(&self) -> Option<u32> {
        self.buckets.or((!self.splits.is_empty()).then_some(1))
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Offsets {
    /// The last unit fully emitted.
    pub issued: Option<Position>,
    /// The unit being emitted, with per-split progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<InFlight>,
    /// Records produced by this task so far (informational).
    #[serde(default)]
    pub records: u64,
    #[serde(default)]
    pub updated_ms: i64,
    /// `tasks.max` of the generation that wrote this record (0 in records of older builds: 1).
    #[serde(default)]
    pub tasks: u32,
    /// Generation counter: bumped each time `tasks.max` or the ownership scheme changes.
    #[serde(default)]
    pub epoch: u64,
    /// How the generation divides the table (records of older builds: by key).
    #[serde(default, skip_serializing_if = "is_key")]
    pub ownership: Ownership,
    /// While this task still covers keys the previous generation had partly emitted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<Handoff>,
    /// The first unit this task emitted (the start strategy's choice), so a later generation
    /// can redo it for keys whose owner never finished it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first: Option<FirstUnit>,
    /// The fields the published events are keyed by (records of older builds: none stored).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub key: Vec<String>,
    /// The instance running the task, recorded with `idle.release` (see `park`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub holder: Option<Holder>,
    /// A resync under way (see `resync`): `issued` stays the position it started from until the
    /// transaction that finishes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync: Option<ResyncProgress>,
    /// The table's own id where its format keeps one (see `Source::identity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_id: Option<String>,
}

/// How far a resync got (see `resync`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResyncProgress {
    /// The table's commit it converges to.
    pub target: Position,
    /// Key buckets both sides are spilled into.
    pub buckets: u32,
    /// Buckets whose events are all committed (a resumed resync starts after them).
    pub done: u32,
    /// Events committed so far: `c`, `u`, `d`.
    pub events: [u64; 3],
}

/// An instance of a task: a process's random id and start time (see `park`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    pub instance: String,
    pub started_ms: i64,
}

impl Offsets {
    /// Nothing issued, nothing in flight, no handoff under way.
    pub fn is_fresh(&self) -> bool {
        self.issued.is_none() && self.in_flight.is_none() && self.handoff.is_none()
    }
}

fn is_key(o: &Ownership) -> bool {
    *o == Ownership::Key
}

/// What places a row on a task under either scheme.
#[derive(Debug, Clone, Copy, Default)]
pub struct RowOwner {
    pub key_hash: u32,
    pub partition_hash: u32,
}

impl RowOwner {
    pub fn task(&self, ownership: Ownership, tasks: u32) -> u32 {
        let h = match ownership {
            Ownership::Key => self.key_hash,
            Ownership::Partition => self.partition_hash,
        };
        h % tasks.max(1)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FirstUnit {
    pub unit: Position,
    pub snapshot: bool,
}

/// The previous generation's positions, for a task of a new `tasks.max`: a key's events up to its
/// old owner's position were already published by that owner.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Handoff {
    pub tasks: u32,
    /// The old generation's scheme.
    #[serde(default, skip_serializing_if = "is_key")]
    pub ownership: Ownership,
    pub old: BTreeMap<u32, OldTask>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OldTask {
    pub issued: Option<Position>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<InFlight>,
    /// The new task has emitted past `issued`.
    #[serde(default)]
    pub passed: bool,
    /// The old task's own unfinished handoff (tasks.max changed again before it completed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff: Option<Handoff>,
}

impl OldTask {
    /// An old task's record as the new generation tracks it: passed already when it issued
    /// nothing or stands where the new generation starts.
    pub fn of(o: Offsets, start: &Option<Position>) -> OldTask {
        OldTask {
            passed: o.issued.is_none() || o.issued == *start,
            issued: o.issued,
            in_flight: o.in_flight,
            handoff: o.handoff,
        }
    }
}

impl Handoff {
    /// Whether a key's event at `row` of `split` of `unit` is already published: by its old owner
    /// (up to the owner's position, or inside the unit it had in flight), or by whoever the old
    /// owner had taken over from.
    pub fn published(&self, owner: RowOwner, unit: &Position, snapshot: bool, split: &str, row: u64) -> bool {
        let Some(old) = self.old.get(&owner.task(self.ownership, self.tasks)) else {
            return false;
        };
        if !old.passed {
            return true;
        }
        let partial = match &old.in_flight {
            Some(f) if f.unit == *unit && f.snapshot == snapshot => {
                f.splits.get(split).is_some_and(|p| p.done || row < p.consumed)
            }
            _ => false,
        };
        partial
            || old
                .handoff
                .as_ref()
                .is_some_and(|h| h.published(owner, unit, snapshot, split, row))
    }

    /// After the new task finished `unit`: old tasks whose position it was are passed. True once
    /// every old task (and every one they took over from) is passed and beyond its in-flight unit.
    pub fn finished(&mut self, unit: &Position) -> bool {
        let mut done = true;
        for o in self.old.values_mut() {
            if o.passed && o.in_flight.as_ref().is_some_and(|f| f.unit == *unit) {
                o.in_flight = None;
            }
            if !o.passed && o.issued.as_ref() == Some(unit) {
                o.passed = true;
            }
            if o.handoff.as_mut().is_some_and(|h| h.finished(unit)) {
                o.handoff = None;
            }
            done &= o.passed && o.in_flight.is_none() && o.handoff.is_none();
        }
        done
    }
}

/// The latest committed offsets of every key `want` accepts in the connector's offsets topic
/// (read_committed, to the end). Must run after the task's producer has fenced/aborted any
/// transaction it left open. A record that is not a lakestream position stops the read.
pub fn read_offsets_matching(
    cluster: &dyn Cluster,
    cfg: &ConnectorConfig,
    want: &dyn Fn(&[u8]) -> bool,
    to: crate::sink::ReadTo,
) -> Result<HashMap<Vec<u8>, Offsets>, RuntimeError> {
    let mut out = HashMap::new();
    for (key, r) in cluster.read_offsets(&cfg.sink(), want, to)? {
        let o = parse_record(&r.value).map_err(|e| {
            RuntimeError::Position(format!(
                "offsets record of `{}` at partition {} offset {} is not a lakestream position ({e}); it was not \
                 written by this connector. Inspect it with `lakestream offsets show`; delete it (a tombstone for that \
                 key) only if the connector should start over",
                String::from_utf8_lossy(&key),
                r.partition,
                r.offset
            ))
        })?;
        out.insert(key, o);
    }
    Ok(out)
}

/// An offsets record's value: the JSON object lakestream writes, every field known and
/// `issued` present (`{"foo": 1}` must not read as "no position", which would rescan the table).
fn parse_record(v: &[u8]) -> Result<Offsets, String> {
    let value: serde_json::Value = serde_json::from_slice(v).map_err(|e| e.to_string())?;
    let Some(obj) = value.as_object() else {
        return Err("not a JSON object".into());
    };
    if !obj.contains_key("issued") {
        return Err("no `issued` field".into());
    }
    serde_json::from_value(value).map_err(|e| e.to_string())
}

/// A connector's offsets records: key -> (tasks, task, by partition, record).
pub type Records = HashMap<String, (u32, u32, bool, Offsets)>;

/// The offsets records of `cfg`'s connector and table.
pub fn records_of(cfg: &ConnectorConfig) -> Result<Records, RuntimeError> {
    let shape = |k: &[u8]| -> Option<(u32, u32, bool)> {
        let v: serde_json::Value = serde_json::from_slice(k).ok()?;
        let (name, o) = (v.get(0)?.as_str()?, v.get(1)?.as_object()?);
        (name == cfg.name && o.get("table")?.as_str()? == cfg.table_id).then_some(())?;
        let tasks = o.get("tasks").and_then(|t| t.as_u64()).unwrap_or(1) as u32;
        Some((
            tasks,
            o.get("task")?.as_u64()? as u32,
            o.get("by").and_then(|b| b.as_str()) == Some("partition"),
        ))
    };
    let found = read_offsets_matching(
        &crate::sink::Kafka,
        cfg,
        &|k| shape(k).is_some(),
        crate::sink::ReadTo::Stable,
    )?;
    Ok(found
        .into_iter()
        .filter_map(|(k, o)| {
            let (tasks, task, by) = shape(&k)?;
            Some((String::from_utf8_lossy(&k).into_owned(), (tasks, task, by, o)))
        })
        .collect())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A position at requested instant `i` (no completion time).
    pub(in crate::runtime) fn pos(i: &str) -> Position {
        Position {
            version: i.into(),
            completed: None,
        }
    }

    #[test]
    fn handoff_publishes_up_to_each_old_owner_and_inside_its_unit() {
        let mut splits = BTreeMap::new();
        splits.insert(
            "s".to_string(),
            SplitProgress {
                consumed: 2,
                done: false,
            },
        );
        let mut old = BTreeMap::new();
        // old task 0 is at 5 with 6 half emitted; old task 1 is at 3 (the new task starts there)
        old.insert(
            0,
            OldTask {
                issued: Some(pos("5")),
                in_flight: Some(InFlight {
                    unit: pos("6"),
                    snapshot: false,
                    splits,
                    buckets: None,
                    events: 0,
                }),
                passed: false,
                handoff: None,
            },
        );
        old.insert(
            1,
            OldTask {
                issued: Some(pos("3")),
                in_flight: None,
                passed: true,
                handoff: None,
            },
        );
        let key = |h: u32| RowOwner {
            key_hash: h,
            partition_hash: h + 1,
        };
        let mut h = Handoff {
            tasks: 2,
            ownership: Ownership::Key,
            old,
        };
        assert!(h.published(key(0), &pos("4"), false, "s", 0), "owner 0 emitted up to 5");
        assert!(!h.published(key(1), &pos("4"), false, "s", 0), "owner 1 stopped at 3");
        let by_partition = Handoff {
            ownership: Ownership::Partition,
            ..h.clone()
        };
        assert!(
            by_partition.published(key(1), &pos("4"), false, "s", 0),
            "an old partition-owned generation: partition 2 was task 0's"
        );
        assert!(!h.finished(&pos("4")));
        assert!(!h.finished(&pos("5")));
        assert!(
            h.published(key(0), &pos("6"), false, "s", 1) && !h.published(key(0), &pos("6"), false, "s", 2),
            "inside the unit"
        );
        assert!(h.finished(&pos("6")), "past every old position and in-flight unit");
    }

    #[test]
    fn offsets_json_round_trip() {
        let mut splits = BTreeMap::new();
        splits.insert(
            "p/fg".to_string(),
            SplitProgress {
                consumed: 3,
                done: false,
            },
        );
        let o = Offsets {
            issued: Some(Position {
                version: "1".into(),
                completed: Some("2".into()),
            }),
            in_flight: Some(InFlight {
                unit: Position {
                    version: "3".into(),
                    completed: None,
                },
                snapshot: false,
                splits,
                buckets: None,
                events: 0,
            }),
            records: 9,
            updated_ms: 1,
            tasks: 3,
            epoch: 2,
            handoff: None,
            resync: None,
            table_id: None,
            first: None,
            ownership: Ownership::Partition,
            key: vec!["id".into()],
            holder: Some(Holder {
                instance: "0123456789abcdef".into(),
                started_ms: 5,
            }),
        };
        let s = serde_json::to_string(&o).unwrap();
        assert_eq!(serde_json::from_str::<Offsets>(&s).unwrap(), o);
        assert_eq!(parse_record(s.as_bytes()).unwrap(), o);
        let none = serde_json::to_string(&Offsets::default()).unwrap();
        assert_eq!(
            parse_record(none.as_bytes()).unwrap(),
            Offsets::default(),
            "a record with no position yet"
        );
        for bad in [
            &br#"{"foo": 1}"#[..],
            b"{}",
            b"[]",
            b"null",
            br#"{"issued": null, "extra": 1}"#,
            b"not json",
        ] {
            assert!(parse_record(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }
}
