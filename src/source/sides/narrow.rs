//! A diff beyond `read.memory.budget` that decides its changed keys first, so that only their
//! rows are held (Iceberg copy-on-write rewrites, Delta remove/add without a change feed).
//!
//! Pass one reads every piece and keeps, per key, a 128-bit hash of the key and a 64-bit one of
//! its winning row on each side (the last row of the key in side order, as
//! [`crate::source::rows::diff`] picks it): 41 bytes a table slot, about 60 a key, instead of its
//! rows. A key whose two winners hash alike is carried over and emits nothing. Pass two reads
//! the pieces again and keeps the rows of the other keys only, which are then diffed in memory: the same events, in the same order, as the
//! in-memory diff of everything (so a resumed unit may take either path). The price is a second
//! read of the rewritten files, in place of writing and reading back every row in key buckets.
//! Where the keys or the changed rows would not fit the budget either, the unit goes to key
//! buckets as before (nothing has been emitted yet). Keys are told apart by xxh3-128, rows by
//! xxh3-64: a changed row would be taken for a carried-over one only if its two images hashed
//! alike (odds 2⁻⁶⁴ a changed row).

use arrow_array::{BooleanArray, RecordBatch};
use hashbrown::HashMap;

use super::{DiffJob, Sides};
use crate::source::rows::RowKeys;
use crate::source::{parallel, SourceError};

/// A key's winning row hash on each side (`sides`: bit 0 old, bit 1 new seen), and its rows on
/// both: 24 bytes.
#[derive(Default, Clone, Copy)]
struct Seen {
    old: u64,
    new: u64,
    rows: u32,
    sides: u8,
}

impl Seen {
    fn changed(&self) -> bool {
        self.sides != 3 || self.old != self.new
    }
}

/// A key hash (128 bits, as two words: no 16-byte alignment in the table).
type KeyHash = [u64; 2];

/// What a slot of the table costs: the key hash, [`Seen`] and its control byte.
const SLOT_BYTES: usize = std::mem::size_of::<(KeyHash, Seen)>() + 1;

/// The key hashes of each row of `b`.
fn key_hashes(keys: &RowKeys, b: &RecordBatch) -> Result<Vec<KeyHash>, SourceError> {
    let rows = keys.rows(b)?;
    Ok((0..b.num_rows())
        .map(|i| {
            let h = twox_hash::XxHash3_128::oneshot(rows.row(i).as_ref());
            [h as u64, (h >> 64) as u64]
        })
        .collect())
}

/// The unit's sides restricted to the keys it changed, and the rows pass one read; `None` where
/// the keys or the changed rows would not fit the budget (see the module doc).
pub(super) fn restricted(
    job: &DiffJob<'_>,
    n: usize,
    read: &(dyn Fn(usize) -> Result<Sides, SourceError> + Sync),
) -> Result<Option<(Sides, u64)>, SourceError> {
    let keys = RowKeys::new(&job.schema, Some(job.keys.clone()))?;
    let full = RowKeys::new(&job.schema, None)?;
    let mut seen: HashMap<KeyHash, Seen> = HashMap::new();
    let (mut rows_read, mut bytes, mut too_many) = (0u64, 0u64, false);
    let limit = job.budget / 2;
    let first = parallel::ordered(n, job.threads, read, &mut |s: Sides| {
        bytes += s.bytes;
        for (is_new, side) in [(false, &s.old), (true, &s.new)] {
            for (b, _) in side {
                rows_read += b.num_rows() as u64;
                // the table may double to take this batch: the old and the new one must both fit
                let need = seen.len() + b.num_rows();
                if need > seen.capacity() && (seen.capacity() + need.max(2 * seen.capacity())) * SLOT_BYTES > limit {
                    // stop reading and give the table's memory back: the unit goes to key buckets
                    (too_many, seen) = (true, HashMap::new());
                    return Err(SourceError::Stopped);
                }
                let (k, r) = (key_hashes(&keys, b)?, full.rows(b)?);
                for (i, k) in k.into_iter().enumerate() {
                    let e = seen.entry(k).or_default();
                    let h = twox_hash::XxHash3_64::oneshot(r.row(i).as_ref());
                    *if is_new { &mut e.new } else { &mut e.old } = h;
                    e.sides |= if is_new { 2 } else { 1 };
                    e.rows = e.rows.saturating_add(1);
                }
            }
        }
        Ok(())
    });
    match first {
        Err(SourceError::Stopped) if too_many => {}
        other => other?,
    }
    let row_bytes = (bytes * crate::source::buckets::DECODED_PER_FILE_BYTE)
        .checked_div(rows_read)
        .unwrap_or(1024);
    if too_many {
        tracing::info!(connector = %job.connector, unit = %job.unit, rows_read,
            "the unit's keys beyond half of read.memory.budget: diffing in key buckets");
        return Ok(None);
    }
    seen.retain(|_, e| e.changed());
    seen.shrink_to_fit();
    let changed_rows: u64 = seen.values().map(|e| e.rows as u64).sum();
    if changed_rows * row_bytes > limit as u64 {
        tracing::info!(connector = %job.connector, unit = %job.unit, changed_keys = seen.len(), changed_rows,
            "the changed keys' rows beyond half of read.memory.budget: diffing in key buckets");
        return Ok(None);
    }
    tracing::info!(connector = %job.connector, unit = %job.unit, changed_keys = seen.len(), changed_rows, rows_read,
        "change unit beyond read.memory.budget: reading the changed keys' rows only");
    let mut all = Sides::default();
    parallel::ordered(n, job.threads, read, &mut |s: Sides| {
        all.bytes += s.bytes;
        for (is_new, side) in [(false, s.old), (true, s.new)] {
            for (b, label) in side {
                let k = key_hashes(&keys, &b)?;
                let keep = BooleanArray::from_iter(k.iter().map(|k| Some(seen.contains_key(k))));
                if keep.true_count() == 0 {
                    continue;
                }
                let b = arrow::compute::filter_record_batch(&b, &keep)
                    .map_err(SourceError::arrow("selecting changed keys"))?;
                if is_new { &mut all.new } else { &mut all.old }.push((b, label));
            }
        }
        Ok(())
    })?;
    Ok(Some((all, rows_read)))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Array, Int64Array, StringArray};
    use arrow_schema::{DataType, Field, Schema, SchemaRef};

    use super::super::{diff_split, DiffJob, Sides};
    use super::*;
    use crate::source::{Op, SplitChanges, SplitSpec};

    fn batch(schema: &SchemaRef, rows: &[(i64, &str)]) -> RecordBatch {
        RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0))),
                Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1))),
            ],
        )
        .unwrap()
    }

    /// A change as (op, key before, key after, value after).
    type Change = (Op, Option<i64>, Option<i64>, Option<String>);
    /// A file's rows before and after.
    type Piece<'a> = (Vec<(i64, &'a str)>, Vec<(i64, &'a str)>);

    fn changes(out: &[SplitChanges]) -> Vec<Change> {
        let mut v = Vec::new();
        for sc in out {
            let id = |r: crate::source::RowRef| {
                let b = &sc.batches[r.batch as usize];
                let ids = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                let vs = b.column(1).as_any().downcast_ref::<StringArray>().unwrap();
                (ids.value(r.row as usize), vs.value(r.row as usize).to_string())
            };
            for c in &sc.rows {
                v.push((
                    c.op,
                    c.before().map(|r| id(r).0),
                    c.after().map(|r| id(r).0),
                    c.after().map(|r| id(r).1),
                ));
            }
        }
        v
    }

    #[test]
    fn the_narrow_diff_publishes_the_in_memory_diffs_events_in_its_order() {
        let schema: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("v", DataType::Utf8, false),
        ]));
        // three rewritten files: carried-over rows, updates, deletes, inserts, a duplicate key
        // (the later row wins on each side) and a key moving between files
        let pieces: Vec<Piece> = vec![
            (
                vec![(1, "a"), (2, "b"), (3, "c"), (4, "d")],
                vec![(1, "a"), (2, "B"), (4, "d"), (9, "i")],
            ),
            (
                vec![(5, "e"), (6, "f"), (6, "g")],
                vec![(6, "x"), (6, "g"), (5, "e"), (3, "c")],
            ),
            (vec![(7, "h"), (8, "j")], vec![(8, "J"), (10, "k")]),
        ];
        let read = |i: usize| -> Result<Sides, SourceError> {
            let label = (String::new(), format!("f{i}"));
            Ok(Sides {
                old: vec![(batch(&schema, &pieces[i].0), label.clone())],
                new: vec![(batch(&schema, &pieces[i].1), label)],
                bytes: 10,
            })
        };
        let dir = tempfile::tempdir().unwrap();
        let split = SplitSpec {
            id: "diff".into(),
            partition: String::new(),
            reads: String::new(),
        };
        let run = |buckets: u32, narrow: bool| {
            let job = DiffJob {
                schema: schema.clone(),
                keys: vec![0],
                keyless: false,
                threads: 2,
                budget: 1 << 20,
                narrow,
                spill_dir: dir.path(),
                connector: "t",
                unit: "u".into(),
            };
            let mut out = Vec::new();
            diff_split(&job, &split, buckets, pieces.len(), &read, &mut |sc| {
                out.push(sc);
                Ok(())
            })
            .unwrap();
            out
        };
        let whole = run(1, false);
        let narrow = run(4, true);
        assert_eq!(narrow.len(), 1);
        assert_eq!(
            narrow[0].buckets, 1,
            "the narrow diff has the in-memory diff's row order"
        );
        let rows_kept: usize = narrow[0].batches.iter().map(|b| b.num_rows()).sum();
        assert!(rows_kept < 12, "carried-over rows were kept: {rows_kept}");
        let want = changes(&whole);
        assert_eq!(changes(&narrow), want);
        assert_eq!(
            want.iter().map(|c| (c.0, c.1, c.2)).collect::<Vec<_>>(),
            [
                (Op::Update, Some(2), Some(2)),
                (Op::Create, None, Some(9)),
                (Op::Update, Some(8), Some(8)),
                (Op::Create, None, Some(10)),
                (Op::Delete, Some(7), None),
            ]
        );
        // a resumed unit pinned to one in-memory diff may take the narrow diff too
        assert_eq!(changes(&run(1, true)), want);
        // the bucketed diff (a resumed unit pinned to its buckets) has the same events
        let mut bucketed = changes(&run(4, false));
        bucketed.sort_by_key(|c| format!("{c:?}"));
        let mut sorted = want.clone();
        sorted.sort_by_key(|c| format!("{c:?}"));
        assert_eq!(bucketed, sorted);
    }

    #[test]
    fn only_a_unit_beyond_the_budget_not_pinned_to_buckets_decides_its_keys_first() {
        use super::super::plan_diff;
        let (big, small, budget) = (100 << 20, 1 << 20, 16 << 20);
        assert!(matches!(plan_diff(None, big, budget, true), (b, true) if b > 1));
        assert_eq!(plan_diff(None, small, budget, true), (1, false));
        assert_eq!(plan_diff(Some(7), big, budget, true), (7, false));
        assert_eq!(plan_diff(Some(1), big, budget, true), (1, true));
        assert_eq!(plan_diff(Some(1), small, budget, true), (1, false));
        assert!(matches!(plan_diff(None, big, budget, false), (b, false) if b > 1));
    }
}
