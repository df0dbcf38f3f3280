//! Changelog mode (`changelog.enabled=true`): instead of the net change of an instant, every log
//! record it wrote becomes an event, in write order, with the op its `_hoodie_operation` gives:
//! `I` → `c`, `U` → `u` (paired with a preceding `-U` before-image of the same key, else with the
//! key's current row), `D` → `d`; delete-block keys → `d`. A record that loses the table's
//! event-time ordering changes nothing and emits nothing — a late delete (soft, or a delete-block
//! entry with an ordering value) included, and a record that does not outrank a delete before it
//! in the instant — so replaying still yields the merged table. `skip_merge` emits the records as
//! written, ordering ignored (Flink's skip_merge).

use std::collections::HashMap;

use arrow::row::Rows;
use arrow_array::{Array, BooleanArray, RecordBatch, StringArray};
use arrow_schema::SchemaRef;

use super::files::LAYOUT_META_COLUMNS;
use super::log::DeletedKey;
use super::merge::deletes::ordered_deletes;
use super::slice::{InstantBlock, MergeConfig, MergeMode};
use super::string_column;
use crate::source::rows::{conform, nullable, RowKeys};
use crate::source::{ChangeRow, Op, RowRef, SourceError};

/// The change rows of one file group for one instant: (batches, rows). `old` is the merged
/// slice before the instant.
pub fn changelog_rows(
    old: &[RecordBatch],
    blocks: &[InstantBlock],
    merge: &MergeConfig,
    ordered: bool,
) -> Result<(Vec<RecordBatch>, Vec<ChangeRow>), SourceError> {
    let newest = blocks
        .iter()
        .rev()
        .find_map(|b| match b {
            InstantBlock::Data(v) => v.first(),
            InstantBlock::Delete(_) => None,
        })
        .or(old.first());
    let Some(newest) = newest else {
        return Ok((Vec::new(), Vec::new()));
    };
    let target = nullable(&newest.schema(), LAYOUT_META_COLUMNS);
    let mut batches: Vec<RecordBatch> = old.iter().map(|b| conform(b, &target)).collect::<Result<_, _>>()?;
    let old_count = batches.len();
    // the operation of each record of the instant's batches (by batch index); delete-block
    // entries ordered by event time become records (`D`) that take part in the ordering
    let mut ops: HashMap<usize, Option<StringArray>> = HashMap::new();
    let mut steps: Vec<Result<usize, Vec<DeletedKey>>> = Vec::new();
    for b in blocks {
        match b {
            InstantBlock::Data(v) => {
                for raw in v {
                    ops.insert(batches.len(), string_column(raw, "_hoodie_operation"));
                    steps.push(Ok(batches.len()));
                    batches.push(conform(raw, &target)?);
                }
            }
            InstantBlock::Delete(deleted) => {
                let (by_time, by_commit) = match ordered {
                    true => ordered_deletes(deleted.clone(), &target, merge)?,
                    false => (None, deleted.clone()),
                };
                if let Some(d) = by_time {
                    ops.insert(batches.len(), Some(StringArray::from(vec!["D"; d.num_rows()])));
                    steps.push(Ok(batches.len()));
                    batches.push(d);
                }
                steps.push(Err(by_commit));
            }
        }
    }
    let records = Records::new(&batches, &target, merge, ordered, ops)?;
    let mut changes = Changes::of_old(&records.keys[..old_count]);
    for step in steps {
        match step {
            Ok(b) => changes.batch(&records, b),
            Err(by_commit) => {
                for d in by_commit {
                    changes.tombstones.remove(&d.record_key);
                    changes.delete(&d.record_key);
                }
            }
        }
    }
    Ok((batches, changes.rows))
}

/// What changelog mode reads of each batch's records: key, operation, soft-delete flag and
/// (under event-time ordering) the ordering value as a byte-comparable row.
struct Records {
    keys: Vec<StringArray>,
    ops: HashMap<usize, Option<StringArray>>,
    soft_deleted: Vec<Option<BooleanArray>>,
    ord: Option<Vec<Rows>>,
}

impl Records {
    fn new(
        batches: &[RecordBatch],
        target: &SchemaRef,
        merge: &MergeConfig,
        ordered: bool,
        ops: HashMap<usize, Option<StringArray>>,
    ) -> Result<Self, SourceError> {
        let key_idx = target
            .index_of("_hoodie_record_key")
            .map_err(|_| SourceError::Unreadable {
                why: crate::source::Unreadable::Damaged,
                message: "changelog mode needs _hoodie_record_key".into(),
            })?;
        let keys: Vec<StringArray> = batches
            .iter()
            .map(|b| b.column(key_idx).as_any().downcast_ref::<StringArray>().cloned())
            .collect::<Option<_>>()
            .ok_or_else(|| SourceError::Unreadable {
                why: crate::source::Unreadable::Damaged,
                message: "_hoodie_record_key is not a string column".into(),
            })?;
        let ord_idx: Vec<usize> = merge.ordering.iter().filter_map(|f| target.index_of(f).ok()).collect();
        let ord = if ordered && merge.mode == MergeMode::EventTime && !ord_idx.is_empty() {
            let conv = RowKeys::new(target, Some(ord_idx))?;
            Some(batches.iter().map(|b| conv.rows(b)).collect::<Result<Vec<_>, _>>()?)
        } else {
            None
        };
        let soft_deleted = batches
            .iter()
            .map(|b| {
                b.column_by_name("_hoodie_is_deleted")
                    .and_then(|c| c.as_any().downcast_ref().cloned())
            })
            .collect();
        Ok(Self {
            keys,
            ops,
            soft_deleted,
            ord,
        })
    }

    /// Record `r` of batch `b`'s operation: `_hoodie_operation` (`U` where it has none), `D`
    /// for a soft delete.
    fn op(&self, b: usize, r: usize) -> &str {
        if self.soft_deleted[b]
            .as_ref()
            .is_some_and(|d| d.is_valid(r) && d.value(r))
        {
            return "D";
        }
        self.ops[&b]
            .as_ref()
            .filter(|o| o.is_valid(r))
            .map(|o| o.value(r))
            .unwrap_or("U")
    }

    /// Does record `this` lose to the key's current row under event-time ordering?
    fn loses(&self, this: RowRef, cur: RowRef) -> bool {
        self.ord.as_ref().is_some_and(|ord| {
            ord[this.batch as usize].row(this.row as usize) < ord[cur.batch as usize].row(cur.row as usize)
        })
    }
}

/// The change rows so far, with each key's current row and a pending `-U` before-image.
struct Changes {
    current: HashMap<String, RowRef>,
    /// Keys deleted in the instant by a delete with an ordering value: a later record must
    /// outrank it (event-time ordering).
    tombstones: HashMap<String, RowRef>,
    before_image: HashMap<String, RowRef>,
    rows: Vec<ChangeRow>,
}

impl Changes {
    /// The merged slice before the instant as the current rows.
    fn of_old(keys: &[StringArray]) -> Self {
        let mut current = HashMap::new();
        for (b, k) in keys.iter().enumerate() {
            for r in 0..k.len() {
                if k.is_valid(r) {
                    current.insert(
                        k.value(r).to_string(),
                        RowRef {
                            batch: b as u32,
                            row: r as u32,
                        },
                    );
                }
            }
        }
        Self {
            current,
            tombstones: HashMap::new(),
            before_image: HashMap::new(),
            rows: Vec::new(),
        }
    }

    /// A delete of `key`: a `d` if the key has a row.
    fn delete(&mut self, key: &str) {
        if let Some(before) = self.current.remove(key) {
            self.rows.push(ChangeRow::deleted(before));
        }
    }

    /// Batch `b`'s records, in write order.
    fn batch(&mut self, records: &Records, b: usize) {
        let keys = &records.keys[b];
        for r in 0..keys.len() {
            if !keys.is_valid(r) {
                continue;
            }
            let key = keys.value(r);
            let this = RowRef {
                batch: b as u32,
                row: r as u32,
            };
            match records.op(b, r) {
                "-U" => {
                    self.before_image.insert(key.to_string(), this);
                }
                "D" => {
                    self.before_image.remove(key);
                    // a late delete loses to the row (or delete) it does not outrank
                    let last = self.current.get(key).or(self.tombstones.get(key));
                    if last.is_some_and(|&c| records.loses(this, c)) {
                        continue;
                    }
                    self.delete(key);
                    self.tombstones.insert(key.to_string(), this);
                }
                _ => self.upsert(records, key, this),
            }
        }
    }

    /// An insert or update of `key` by record `this`: `c` or `u` (before: the pending `-U`, else
    /// the current row), unless it loses the event-time ordering (then nothing changes).
    fn upsert(&mut self, records: &Records, key: &str, this: RowRef) {
        let cur = self.current.get(key).copied();
        if cur
            .or(self.tombstones.get(key).copied())
            .is_some_and(|c| records.loses(this, c))
        {
            self.before_image.remove(key);
            return; // a late record loses: the table does not change
        }
        self.tombstones.remove(key);
        let before = self.before_image.remove(key).or(cur);
        let op = if cur.is_some() { Op::Update } else { Op::Create };
        let before = if op == Op::Create { None } else { before };
        self.rows.push(ChangeRow::to(op, before, this));
        self.current.insert(key.to_string(), this);
    }
}

/// A key that left one file group and arrived in another within the instant (a partition move
/// under a global index, an insert overwrite) is one update: the arrival's `c` takes the
/// departure's row as `before`, and the departure's `d` goes. Without this, the two events would
/// race across splits.
/// With `by_partition` (the partition path is part of the key) only moves within a partition pair.
pub fn pair_moves(batches: &[RecordBatch], per_split: &mut [Vec<ChangeRow>], by_partition: bool) {
    let keys: Vec<Option<StringArray>> = batches.iter().map(|b| string_column(b, "_hoodie_record_key")).collect();
    let parts: Vec<Option<StringArray>> = batches
        .iter()
        .map(|b| {
            if by_partition {
                string_column(b, super::PARTITION_PATH)
            } else {
                None
            }
        })
        .collect();
    let key_of = |r: RowRef| -> Option<(&str, &str)> {
        let (b, i) = (r.batch as usize, r.row as usize);
        let k = keys[b].as_ref()?;
        let p = parts[b]
            .as_ref()
            .map_or("", |p| if p.is_valid(i) { p.value(i) } else { "" });
        k.is_valid(i).then(|| (k.value(i), p))
    };
    let mut departures: HashMap<(&str, &str), (usize, usize)> = HashMap::new();
    for (s, rows) in per_split.iter().enumerate() {
        for (i, c) in rows.iter().enumerate() {
            if let (Op::Delete, Some(k)) = (c.op, c.before().and_then(key_of)) {
                departures.insert(k, (s, i));
            }
        }
    }
    let mut gone: Vec<(usize, usize)> = Vec::new();
    for s in 0..per_split.len() {
        for i in 0..per_split[s].len() {
            let c = per_split[s][i];
            let Some(k) = (c.op == Op::Create).then_some(c.after()).flatten().and_then(key_of) else {
                continue;
            };
            if let Some(&(ds, di)) = departures.get(&k) {
                let moved = ChangeRow::of(Op::Update, per_split[ds][di].before(), c.after());
                if let (true, Some(moved)) = (ds != s, moved) {
                    per_split[s][i] = moved;
                    departures.remove(&k);
                    gone.push((ds, di));
                }
            }
        }
    }
    gone.sort_unstable_by(|a, b| b.cmp(a));
    for (s, i) in gone {
        per_split[s].remove(i);
    }
}

#[cfg(test)]
mod tests;
