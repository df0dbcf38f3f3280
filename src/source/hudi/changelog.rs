//! Changelog mode (`changelog.enabled=true`): instead of the net change of an instant, every log
//! record it wrote becomes an event, in write order, with the op its `_hoodie_operation` gives:
//! `I` → `c`, `U` → `u` (paired with a preceding `-U` before-image of the same key, else with the
//! key's current row), `D` → `d`; delete-block keys → `d`. A record that loses the table's
//! event-time ordering changes nothing and emits nothing, so replaying still yields the merged
//! table. `skip_merge` emits the records as written, ordering ignored (Flink's skip_merge).

use std::collections::HashMap;

use arrow::row::Rows;
use arrow_array::{Array, BooleanArray, RecordBatch, StringArray};
use arrow_schema::SchemaRef;

use super::files::LAYOUT_META_COLUMNS;
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
    // the operation of each record of the instant's batches (by batch index)
    let mut ops: HashMap<usize, Option<StringArray>> = HashMap::new();
    for b in blocks {
        if let InstantBlock::Data(v) = b {
            for raw in v {
                ops.insert(batches.len(), string_column(raw, "_hoodie_operation"));
                batches.push(conform(raw, &target)?);
            }
        }
    }
    let records = Records::new(&batches, &target, merge, ordered, ops)?;
    let mut changes = Changes::of_old(&records.keys[..old_count]);
    let mut next = old_count;
    for block in blocks {
        match block {
            InstantBlock::Delete(deleted) => {
                for d in deleted {
                    changes.delete(&d.record_key);
                }
            }
            InstantBlock::Data(v) => {
                for _ in v {
                    changes.batch(&records, next);
                    next += 1;
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
                message: "changelog mode needs _hoodie_record_key".into(),
            })?;
        let keys: Vec<StringArray> = batches
            .iter()
            .map(|b| b.column(key_idx).as_any().downcast_ref::<StringArray>().cloned())
            .collect::<Option<_>>()
            .ok_or_else(|| SourceError::Unreadable {
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
            before_image: HashMap::new(),
            rows: Vec::new(),
        }
    }

    /// A delete of `key`: a `d` if the key has a row.
    fn delete(&mut self, key: &str) {
        if let Some(before) = self.current.remove(key) {
            self.rows.push(ChangeRow {
                op: Op::Delete,
                before: Some(before),
                after: None,
            });
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
                    self.delete(key);
                }
                _ => self.upsert(records, key, this),
            }
        }
    }

    /// An insert or update of `key` by record `this`: `c` or `u` (before: the pending `-U`, else
    /// the current row), unless it loses the event-time ordering (then nothing changes).
    fn upsert(&mut self, records: &Records, key: &str, this: RowRef) {
        let cur = self.current.get(key).copied();
        if cur.is_some_and(|c| records.loses(this, c)) {
            self.before_image.remove(key);
            return; // a late record loses: the table does not change
        }
        let before = self.before_image.remove(key).or(cur);
        let op = if cur.is_some() { Op::Update } else { Op::Create };
        let before = if op == Op::Create { None } else { before };
        self.rows.push(ChangeRow {
            op,
            before,
            after: Some(this),
        });
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
            if let (Op::Delete, Some(k)) = (c.op, c.before.and_then(key_of)) {
                departures.insert(k, (s, i));
            }
        }
    }
    let mut gone: Vec<(usize, usize)> = Vec::new();
    for s in 0..per_split.len() {
        for i in 0..per_split[s].len() {
            let c = per_split[s][i];
            let Some(k) = (c.op == Op::Create).then_some(c.after).flatten().and_then(key_of) else {
                continue;
            };
            if let Some(&(ds, di)) = departures.get(&k) {
                if ds != s {
                    per_split[s][i] = ChangeRow {
                        op: Op::Update,
                        before: per_split[ds][di].before,
                        after: c.after,
                    };
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
mod tests {
    use std::sync::Arc;

    use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
    use arrow_schema::{DataType, Field, Schema};

    use super::*;
    use crate::source::hudi::log::DeletedKey;
    use crate::source::hudi::slice::MergeMode;

    /// `(key, partition, ts, op)`.
    type Row<'a> = (&'a str, &'a str, i64, Option<&'a str>);
    /// (op, before (batch, row), after (batch, row)).
    type Shape = (&'static str, Option<(u32, u32)>, Option<(u32, u32)>);

    /// Rows as a log block (or slice) batch.
    fn batch(rows: &[Row]) -> RecordBatch {
        let col = |f: &dyn Fn(&Row) -> Option<String>| -> ArrayRef {
            Arc::new(StringArray::from(rows.iter().map(f).collect::<Vec<_>>()))
        };
        let schema = Schema::new(vec![
            Field::new("_hoodie_record_key", DataType::Utf8, true),
            Field::new("_hoodie_partition_path", DataType::Utf8, true),
            Field::new("ts", DataType::Int64, true),
            Field::new("_hoodie_operation", DataType::Utf8, true),
        ]);
        RecordBatch::try_new(
            Arc::new(schema),
            vec![
                col(&|r| Some(r.0.to_string())),
                col(&|r| Some(r.1.to_string())),
                Arc::new(Int64Array::from(rows.iter().map(|r| r.2).collect::<Vec<_>>())),
                col(&|r| r.3.map(String::from)),
            ],
        )
        .unwrap()
    }

    fn merge(mode: MergeMode) -> MergeConfig {
        MergeConfig {
            mode,
            ordering: vec!["ts".into()],
            virtual_keys: false,
            key_fields: vec!["_hoodie_record_key".into()],
        }
    }

    fn shape(rows: &[ChangeRow]) -> Vec<Shape> {
        rows.iter()
            .map(|r| {
                (
                    r.op.code(),
                    r.before.map(|x| (x.batch, x.row)),
                    r.after.map(|x| (x.batch, x.row)),
                )
            })
            .collect()
    }

    #[test]
    fn changelog_rows_follow_operations_in_write_order() {
        let old = [batch(&[("a", "p", 1, None), ("b", "p", 1, None)])];
        let blocks = [
            InstantBlock::Data(vec![batch(&[
                ("a", "p", 2, Some("-U")),
                ("a", "p", 2, Some("U")),
                ("c", "p", 2, Some("I")),
                ("c", "p", 3, Some("U")),
            ])]),
            InstantBlock::Delete(vec![DeletedKey {
                record_key: "b".into(),
                partition_path: None,
            }]),
            InstantBlock::Data(vec![batch(&[("c", "p", 4, Some("D"))])]),
        ];
        let (_, rows) = changelog_rows(&old, &blocks, &merge(MergeMode::CommitTime), true).unwrap();
        assert_eq!(
            shape(&rows),
            vec![
                ("u", Some((1, 0)), Some((1, 1))), // the -U before image pairs with its U
                ("c", None, Some((1, 2))),
                ("u", Some((1, 2)), Some((1, 3))), // an update of a key created in this instant
                ("d", Some((0, 1)), None),         // delete block: the slice's row
                ("d", Some((1, 3)), None),         // a D record deletes the current row
            ]
        );
    }

    #[test]
    fn under_event_time_ordering_a_late_record_changes_nothing() {
        let old = [batch(&[("a", "p", 5, None)])];
        let blocks = [InstantBlock::Data(vec![batch(&[
            ("a", "p", 3, Some("U")),
            ("a", "p", 7, Some("U")),
        ])])];
        let (_, rows) = changelog_rows(&old, &blocks, &merge(MergeMode::EventTime), true).unwrap();
        assert_eq!(
            shape(&rows),
            vec![("u", Some((0, 0)), Some((1, 1)))],
            "ts 3 < 5 loses, ts 7 wins"
        );
        // skip_merge: every record as written
        let (_, rows) = changelog_rows(&old, &blocks, &merge(MergeMode::EventTime), false).unwrap();
        assert_eq!(shape(&rows).len(), 2);
    }

    #[test]
    fn a_key_moving_between_file_groups_is_one_update() {
        // batch 0: the key's old row (partition p1), batch 1: its new row (partition p2)
        let batches = [
            batch(&[("k", "p1", 1, None), ("x", "p1", 1, None)]),
            batch(&[("k", "p2", 2, None)]),
        ];
        let at = |b, r| Some(RowRef { batch: b, row: r });
        let split_rows = || {
            vec![
                vec![
                    ChangeRow {
                        op: Op::Delete,
                        before: at(0, 0),
                        after: None,
                    },
                    ChangeRow {
                        op: Op::Delete,
                        before: at(0, 1),
                        after: None,
                    },
                ],
                vec![ChangeRow {
                    op: Op::Create,
                    before: None,
                    after: at(1, 0),
                }],
            ]
        };
        let mut per_split = split_rows();
        pair_moves(&batches, &mut per_split, false);
        assert_eq!(
            shape(&per_split[0]),
            vec![("d", Some((0, 1)), None)],
            "the departure goes"
        );
        assert_eq!(
            shape(&per_split[1]),
            vec![("u", Some((0, 0)), Some((1, 0)))],
            "the arrival is the update"
        );
        // keyed by partition path, the rows in p1 and p2 are two rows: nothing pairs
        let mut per_split = split_rows();
        pair_moves(&batches, &mut per_split, true);
        assert_eq!(per_split.iter().map(Vec::len).sum::<usize>(), 3);
        assert!(per_split.iter().flatten().all(|r| r.op != Op::Update));
    }
}
