//! Format-independent row work shared by the readers: conforming batches to one schema, row
//! identity (key) and equality, and the keyed diff between two versions of a set of file slices.

use std::sync::Arc;

// foldhash, not std's SipHash: the diff's key maps took a tenth of a change unit's CPU
use hashbrown::hash_map::Entry;
use hashbrown::HashMap;

use arrow::row::{Row, RowConverter, Rows, SortField};
use arrow_array::{Array, ArrayRef, ListArray, MapArray, RecordBatch, StringArray, StructArray};
use arrow_schema::{DataType, Field, Schema, SchemaRef};

use super::{ChangeRow, Op, RowRef, SourceError};

/// Cast / reorder / null-fill `batch` to `target` (columns matched by name).
pub fn conform(batch: &RecordBatch, target: &SchemaRef) -> Result<RecordBatch, SourceError> {
    if batch.schema().as_ref() == target.as_ref() {
        return Ok(batch.clone());
    }
    let mut cols = Vec::with_capacity(target.fields().len());
    for f in target.fields() {
        let col = match batch.column_by_name(f.name()) {
            Some(c) if c.data_type() == f.data_type() => c.clone(),
            Some(c) => cast(c, f.data_type()).map_err(SourceError::arrow(format!(
                "casting column `{}` to {}",
                f.name(),
                f.data_type()
            )))?,
            None => arrow_array::new_null_array(f.data_type(), batch.num_rows()),
        };
        cols.push(col);
    }
    RecordBatch::try_new(target.clone(), cols).map_err(SourceError::arrow("conforming batch"))
}

/// A file's column as the table's type. A timestamp without a zone (Spark's INT96, read as
/// nanoseconds) becomes a UTC one by its unit alone: its values are already UTC instants, and
/// arrow's own cast would look the zone name up (it knows only offsets without `chrono-tz`).
pub fn cast(c: &ArrayRef, to: &DataType) -> Result<ArrayRef, arrow_schema::ArrowError> {
    match (c.data_type(), to) {
        (DataType::Timestamp(_, None), DataType::Timestamp(unit, Some(tz)))
            if matches!(tz.as_ref(), "UTC" | "Etc/UTC" | "Z" | "+00:00" | "+0000" | "utc") =>
        {
            let naive = arrow::compute::cast(c, &DataType::Timestamp(*unit, None))?;
            // the same values with the zone attached (the data type's zone only labels them)
            let data = naive.to_data().into_builder().data_type(to.clone()).build()?;
            Ok(arrow_array::make_array(data))
        }
        _ => arrow::compute::cast(c, to),
    }
}

/// The schema with every top-level field nullable (so columns missing from old files can be null).
pub fn nullable(schema: &Schema, drop: &[&str]) -> SchemaRef {
    Arc::new(Schema::new(
        schema
            .fields()
            .iter()
            .filter(|f| !drop.contains(&f.name().as_str()))
            .map(|f| f.as_ref().clone().with_nullable(true))
            .collect::<Vec<Field>>(),
    ))
}

/// Maps are not orderable by arrow-row; a map is a list of key/value structs underneath.
fn comparable(col: &ArrayRef) -> ArrayRef {
    match col.data_type() {
        DataType::Map(_, _) => {
            let m = col.as_any().downcast_ref::<MapArray>().expect("map array");
            let entries = comparable_struct(m.entries());
            let field = Arc::new(Field::new("entries", entries.data_type().clone(), false));
            Arc::new(ListArray::new(
                field,
                m.offsets().clone(),
                Arc::new(entries),
                m.nulls().cloned(),
            ))
        }
        DataType::Struct(_) => {
            let s = col.as_any().downcast_ref::<StructArray>().expect("struct array");
            Arc::new(comparable_struct(s))
        }
        DataType::List(_) => {
            let l = col.as_any().downcast_ref::<ListArray>().expect("list array");
            let values = comparable(l.values());
            let field = Arc::new(Field::new("item", values.data_type().clone(), true));
            Arc::new(ListArray::new(field, l.offsets().clone(), values, l.nulls().cloned()))
        }
        DataType::LargeList(_) | DataType::FixedSizeList(_, _) => {
            let as_list = arrow::compute::cast(
                col,
                &DataType::List(Arc::new(Field::new("item", list_value_type(col.data_type()), true))),
            )
            .unwrap_or_else(|_| col.clone());
            if matches!(as_list.data_type(), DataType::List(_)) {
                comparable(&as_list)
            } else {
                as_list
            }
        }
        DataType::Dictionary(_, v) => arrow::compute::cast(col, v).unwrap_or_else(|_| col.clone()),
        _ => col.clone(),
    }
}

fn list_value_type(dt: &DataType) -> DataType {
    match dt {
        DataType::LargeList(f) | DataType::FixedSizeList(f, _) => f.data_type().clone(),
        other => other.clone(),
    }
}

fn comparable_struct(s: &StructArray) -> StructArray {
    let cols: Vec<ArrayRef> = s.columns().iter().map(comparable).collect();
    let fields: Vec<Field> = s
        .fields()
        .iter()
        .zip(&cols)
        .map(|(f, c)| Field::new(f.name(), c.data_type().clone(), true))
        .collect();
    StructArray::new(fields.into(), cols, s.nulls().cloned())
}

/// Byte-comparable rows over the given columns (all of them when `columns` is None).
pub struct RowKeys {
    converter: RowConverter,
    columns: Option<Vec<usize>>,
}

impl RowKeys {
    pub fn new(schema: &SchemaRef, columns: Option<Vec<usize>>) -> Result<Self, SourceError> {
        let idx: Vec<usize> = columns.clone().unwrap_or_else(|| (0..schema.fields().len()).collect());
        let empty = RecordBatch::new_empty(schema.clone());
        let fields = idx
            .iter()
            .map(|i| SortField::new(comparable(empty.column(*i)).data_type().clone()))
            .collect();
        let converter = RowConverter::new(fields).map_err(SourceError::arrow("row converter"))?;
        Ok(Self { converter, columns })
    }

    pub fn rows(&self, batch: &RecordBatch) -> Result<Rows, SourceError> {
        let cols: Vec<ArrayRef> = match &self.columns {
            Some(idx) => idx.iter().map(|i| comparable(batch.column(*i))).collect(),
            None => batch.columns().iter().map(comparable).collect(),
        };
        self.converter
            .convert_columns(&cols)
            .map_err(SourceError::arrow("row conversion"))
    }
}

/// The rows of one side (old or new) of one split, conformed to the unit schema.
pub struct SideRows {
    pub batch: u32,
    pub rows: usize,
}

/// Keyed diff of a unit: `old[s]` / `new[s]` are the batch indexes (into `batches`) of split `s`
/// before and after the unit. Returns the change rows per split, in split order; within a split
/// creates/updates in new-row order, then deletes in old-row order. A key that moves between
/// splits becomes one update in the split it moved to. Duplicate keys on one side keep the row with
/// the greatest `order` value (Hudi: `_hoodie_commit_time`), later rows winning ties.
pub fn diff(
    batches: &[RecordBatch],
    old: &[Vec<u32>],
    new: &[Vec<u32>],
    key_cols: &[usize],
    order_col: Option<usize>,
) -> Result<Vec<Vec<ChangeRow>>, SourceError> {
    let Some(first) = batches.first() else {
        return Ok(vec![Vec::new(); old.len()]);
    };
    let schema = first.schema();
    let keys = RowKeys::new(&schema, Some(key_cols.to_vec()))?;
    let full = RowKeys::new(&schema, None)?;
    let key_rows: Vec<Rows> = batches.iter().map(|b| keys.rows(b)).collect::<Result<_, _>>()?;
    // full-row images are only needed to tell updates from unchanged rows
    let full_rows: Vec<Rows> = if old.iter().all(Vec::is_empty) {
        Vec::new()
    } else {
        batches.iter().map(|b| full.rows(b)).collect::<Result<_, _>>()?
    };
    let order_cols: Vec<Option<&StringArray>> = batches
        .iter()
        .map(|b| order_col.and_then(|c| b.column(c).as_any().downcast_ref::<StringArray>()))
        .collect();
    let order_of = |r: RowRef| -> Option<&str> {
        let s = order_cols[r.batch as usize]?;
        s.is_valid(r.row as usize).then(|| s.value(r.row as usize))
    };
    let key = |r: RowRef| key_rows[r.batch as usize].row(r.row as usize);
    let mut old_idx = winners(batches, old, &key_rows, &order_of);
    let new_idx = winners(batches, new, &key_rows, &order_of);
    let mut out: Vec<Vec<ChangeRow>> = vec![Vec::new(); old.len()];
    for (s, r) in side_rows(batches, new) {
        let k = key(r);
        if new_idx.get(&k).map(|(_, w)| *w) != Some(r) {
            continue; // a duplicate of this key that lost
        }
        match old_idx.remove(&k) {
            Some((_, o)) => {
                if full_rows[o.batch as usize].row(o.row as usize) != full_rows[r.batch as usize].row(r.row as usize) {
                    out[s].push(ChangeRow::to(Op::Update, Some(o), r));
                }
            }
            None => out[s].push(ChangeRow::to(Op::Create, None, r)),
        }
    }
    // what is left of the old side vanished: deletes, in old-row order per split
    for (s, r) in side_rows(batches, old) {
        if let Some((os, w)) = old_idx.get(&key(r)) {
            if *w == r {
                debug_assert_eq!(*os, s);
                out[s].push(ChangeRow::deleted(r));
            }
        }
    }
    Ok(out)
}

/// Each key's row on one side of a diff (the greatest `order_of`, later rows winning ties),
/// with its split. The keys borrow the converted rows: no allocation per row.
fn winners<'r>(
    batches: &[RecordBatch],
    side: &[Vec<u32>],
    key_rows: &'r [Rows],
    order_of: &dyn Fn(RowRef) -> Option<&'r str>,
) -> HashMap<Row<'r>, (usize, RowRef)> {
    // sized for the side's rows (keys are rarely repeated) and one hash a row: the entry
    let rows = side.iter().flatten().map(|&b| batches[b as usize].num_rows()).sum();
    let mut m: HashMap<Row<'r>, (usize, RowRef)> = HashMap::with_capacity(rows);
    for (s, r) in side_rows(batches, side) {
        let k = key_rows[r.batch as usize].row(r.row as usize);
        match m.entry(k) {
            Entry::Occupied(mut e) => {
                if order_of(e.get().1) <= order_of(r) {
                    e.insert((s, r));
                }
            }
            Entry::Vacant(e) => {
                e.insert((s, r));
            }
        }
    }
    m
}

/// Every row of one side of a diff with its split, in split then row order.
fn side_rows<'a>(batches: &'a [RecordBatch], side: &'a [Vec<u32>]) -> impl Iterator<Item = (usize, RowRef)> + 'a {
    side.iter().enumerate().flat_map(move |(s, bs)| {
        bs.iter().flat_map(move |&b| {
            (0..batches[b as usize].num_rows() as u32).map(move |row| (s, RowRef { batch: b, row }))
        })
    })
}

/// The diff of a keyless table between an old and a new set of rows, compared whole as a
/// multiset: a row removed and re-added unchanged (a copy-on-write carry-over) cancels, as
/// Spark's `create_changelog_view` does; what is left are creates (new rows, in row order) then
/// deletes (old rows, in row order). Never an update: without a key nothing pairs two rows.
pub fn multiset_diff(batches: &[RecordBatch], old: &[u32], new: &[u32]) -> Result<Vec<ChangeRow>, SourceError> {
    let Some(first) = batches.first() else {
        return Ok(Vec::new());
    };
    let full = RowKeys::new(&first.schema(), None)?;
    let rows: Vec<Rows> = batches.iter().map(|b| full.rows(b)).collect::<Result<_, _>>()?;
    // each distinct old row -> its occurrences, last first (so cancelling pops the latest)
    let mut left: HashMap<Row<'_>, Vec<RowRef>> = HashMap::new();
    for &b in old {
        for i in 0..batches[b as usize].num_rows() {
            left.entry(rows[b as usize].row(i)).or_default().push(RowRef {
                batch: b,
                row: i as u32,
            });
        }
    }
    let mut out = Vec::new();
    for &b in new {
        for i in 0..batches[b as usize].num_rows() {
            let cancelled = left.get_mut(&rows[b as usize].row(i)).and_then(Vec::pop).is_some();
            if !cancelled {
                out.push(ChangeRow::to(
                    Op::Create,
                    None,
                    RowRef {
                        batch: b,
                        row: i as u32,
                    },
                ));
            }
        }
    }
    let order: HashMap<u32, usize> = old.iter().enumerate().map(|(i, b)| (*b, i)).collect();
    let mut gone: Vec<RowRef> = left.into_values().flatten().collect();
    gone.sort_by_key(|r| (order[&r.batch], r.row));
    out.extend(gone.into_iter().map(ChangeRow::deleted));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::Int64Array;

    #[test]
    fn zone_less_timestamps_become_utc_by_unit() {
        use arrow_array::{TimestampMicrosecondArray, TimestampNanosecondArray};
        use arrow_schema::TimeUnit;
        let int96: ArrayRef = Arc::new(TimestampNanosecondArray::from(vec![
            Some(1_700_000_000_123_456_789),
            None,
        ]));
        let to = DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()));
        let got = cast(&int96, &to).unwrap();
        assert_eq!(got.data_type(), &to);
        let got = got.as_any().downcast_ref::<TimestampMicrosecondArray>().unwrap();
        assert_eq!((got.value(0), got.is_null(1)), (1_700_000_000_123_456, true));
    }

    fn batch(keys: &[&str], vals: &[i64], commit: &[&str]) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("_hoodie_commit_time", DataType::Utf8, true),
            Field::new("k", DataType::Utf8, true),
            Field::new("v", DataType::Int64, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(commit.to_vec())),
                Arc::new(StringArray::from(keys.to_vec())),
                Arc::new(Int64Array::from(vals.to_vec())),
            ],
        )
        .unwrap()
    }

    type At = Option<(u32, u32)>;

    fn ops(rows: &[ChangeRow]) -> Vec<(Op, At, At)> {
        rows.iter()
            .map(|r| {
                (
                    r.op,
                    r.before().map(|x| (x.batch, x.row)),
                    r.after().map(|x| (x.batch, x.row)),
                )
            })
            .collect()
    }

    #[test]
    fn diff_emits_creates_updates_deletes_and_keeps_moves_as_updates() {
        let batches = vec![
            batch(&["a", "b", "c"], &[1, 2, 3], &["1", "1", "1"]), // split 0, old
            batch(&["d"], &[4], &["1"]),                           // split 1, old
            batch(&["a", "b"], &[1, 20], &["1", "2"]),             // split 0, new: a same, b updated, c gone
            batch(&["d", "c", "e"], &[4, 30, 5], &["1", "2", "2"]), // split 1, new: c moved here, e new
        ];
        let out = diff(&batches, &[vec![0], vec![1]], &[vec![2], vec![3]], &[1], Some(0)).unwrap();
        assert_eq!(ops(&out[0]), vec![(Op::Update, Some((0, 1)), Some((2, 1)))]);
        assert_eq!(
            ops(&out[1]),
            vec![
                (Op::Update, Some((0, 2)), Some((3, 1))),
                (Op::Create, None, Some((3, 2)))
            ]
        );
    }

    #[test]
    fn a_keyless_diff_cancels_carried_over_rows_and_counts_duplicates() {
        let batches = vec![
            batch(&["a", "a", "b", "c"], &[1, 1, 2, 3], &["1", "1", "1", "1"]), // old: a twice
            batch(&["a", "b", "d", "d"], &[1, 2, 4, 4], &["1", "1", "1", "1"]), // new: one a gone, c gone, d twice
        ];
        let out = multiset_diff(&batches, &[0], &[1]).unwrap();
        assert_eq!(
            ops(&out),
            vec![
                (Op::Create, None, Some((1, 2))),
                (Op::Create, None, Some((1, 3))),
                (Op::Delete, Some((0, 0)), None),
                (Op::Delete, Some((0, 3)), None),
            ]
        );
        // a row changed in place is a delete and a create: nothing pairs them
        let batches = vec![batch(&["a"], &[1], &["1"]), batch(&["a"], &[2], &["2"])];
        let ops_only: Vec<Op> = multiset_diff(&batches, &[0], &[1])
            .unwrap()
            .iter()
            .map(|r| r.op)
            .collect();
        assert_eq!(ops_only, vec![Op::Create, Op::Delete]);
    }

    #[test]
    fn vanished_keys_are_deletes_and_duplicates_keep_the_latest_commit() {
        let batches = vec![
            batch(&["a", "b"], &[1, 2], &["1", "1"]),
            batch(&["a", "a"], &[7, 5], &["3", "2"]),
        ];
        let out = diff(&batches, &[vec![0]], &[vec![1]], &[1], Some(0)).unwrap();
        assert_eq!(
            ops(&out[0]),
            vec![
                (Op::Update, Some((0, 0)), Some((1, 0))),
                (Op::Delete, Some((0, 1)), None)
            ]
        );
    }
}
