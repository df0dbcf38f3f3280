//! Which log records are deletes, and delete-block entries that take part in event-time ordering
//! (see [`super::super::rule`]): a data row is a delete when `_hoodie_is_deleted` is true, its
//! `_hoodie_operation` is `D`, or the table's delete marker matches (Hudi's
//! `RecordContext.isDeleteRecord`); its ordering value is its own. A delete-block entry with an
//! ordering value of the ordering column's type becomes a record of the merge columns (key,
//! ordering value, deleted), so it is ordered exactly as a soft delete is; one without (or with
//! Hudi's default, an `Integer` 0, or of another type, which Hudi's same-class check lets win) is
//! a delete by commit time.

use std::sync::Arc;

use arrow_array::{
    Array, ArrayRef, BinaryArray, BooleanArray, Float32Array, Float64Array, Int32Array, Int64Array, RecordBatch,
    StringArray,
};
use arrow_schema::{DataType, SchemaRef, TimeUnit};

use super::super::log::{DeletedKey, OrderingValue};
use super::super::rule::{MergeConfig, MergeMode};
use crate::source::SourceError;

/// A log batch's records as the merge takes them: changelog before-images (`-U`) dropped, and
/// which of the rest are deletes (`None`: none is).
pub(in crate::source::hudi) fn log_deletes(
    batch: &RecordBatch,
    merge: &MergeConfig,
) -> Result<(RecordBatch, Option<BooleanArray>), SourceError> {
    let kept = without_before_images(batch)?;
    let n = kept.num_rows();
    let flag = |name: &str| kept.column_by_name(name);
    let soft = flag("_hoodie_is_deleted").and_then(|c| c.as_any().downcast_ref::<BooleanArray>().cloned());
    let ops = flag("_hoodie_operation").and_then(|c| c.as_any().downcast_ref::<StringArray>().cloned());
    let marked = match &merge.delete_marker {
        Some((field, marker)) => match flag(field) {
            Some(c) => Some(text_equals(c, marker)?),
            None => None,
        },
        None => None,
    };
    if soft.is_none() && ops.is_none() && marked.is_none() {
        return Ok((kept, None));
    }
    let deleted: BooleanArray = (0..n)
        .map(|r| {
            let s = soft.as_ref().is_some_and(|c| c.is_valid(r) && c.value(r));
            let o = ops.as_ref().is_some_and(|c| c.is_valid(r) && c.value(r) == "D");
            let m = marked.as_ref().is_some_and(|c| c.value(r));
            Some(s || o || m)
        })
        .collect();
    Ok((kept, (deleted.true_count() > 0).then_some(deleted)))
}

/// A log batch without its changelog before-images (`-U`), which take no part in a merge.
pub(in crate::source::hudi) fn without_before_images(batch: &RecordBatch) -> Result<RecordBatch, SourceError> {
    let ops = batch
        .column_by_name("_hoodie_operation")
        .and_then(|c| c.as_any().downcast_ref::<StringArray>());
    match ops {
        Some(ops) if (0..ops.len()).any(|i| ops.is_valid(i) && ops.value(i) == "-U") => {
            let keep: BooleanArray = (0..ops.len())
                .map(|i| Some(!(ops.is_valid(i) && ops.value(i) == "-U")))
                .collect();
            arrow::compute::filter_record_batch(batch, &keep).map_err(SourceError::arrow("filtering log records"))
        }
        _ => Ok(batch.clone()),
    }
}

/// Which values of `c` read as `marker` (Hudi compares `value.toString()`, case-sensitive).
pub(super) fn text_equals(c: &ArrayRef, marker: &str) -> Result<BooleanArray, SourceError> {
    let text = arrow::compute::cast(c, &DataType::Utf8).map_err(SourceError::arrow("a marker column"))?;
    let text = text
        .as_any()
        .downcast_ref::<StringArray>()
        .expect("cast to Utf8 gives a StringArray");
    Ok((0..text.len())
        .map(|r| Some(text.is_valid(r) && text.value(r) == marker))
        .collect())
}

/// A delete block's entries split: those ordered by event time, as records of `schema` (the
/// record key, the ordering fields, `_hoodie_is_deleted` true where `schema` has it, every other
/// column null), and the rest, which delete by commit time.
pub(in crate::source::hudi) fn ordered_deletes(
    keys: Vec<DeletedKey>,
    schema: &SchemaRef,
    merge: &MergeConfig,
) -> Result<(Option<RecordBatch>, Vec<DeletedKey>), SourceError> {
    let ords: Option<Vec<usize>> = match merge.mode {
        MergeMode::EventTime => merge.ordering.iter().map(|f| schema.index_of(f).ok()).collect(),
        MergeMode::CommitTime => None,
    };
    let (Some(ords), Ok(key)) = (ords.filter(|o| !o.is_empty()), schema.index_of("_hoodie_record_key")) else {
        return Ok((None, keys));
    };
    let types: Vec<&DataType> = ords.iter().map(|&i| schema.field(i).data_type()).collect();
    let (ordered, by_commit): (Vec<_>, Vec<_>) = keys.into_iter().partition(|d| {
        d.ordering
            .as_ref()
            .is_some_and(|v| !v.is_default() && parts(v, &types).is_some())
    });
    if ordered.is_empty() {
        return Ok((None, by_commit));
    }
    let n = ordered.len();
    let values: Vec<Vec<&OrderingValue>> = ordered
        .iter()
        .filter_map(|d| d.ordering.as_ref().and_then(|v| parts(v, &types)))
        .collect();
    let mut cols = Vec::with_capacity(schema.fields().len());
    for (i, f) in schema.fields().iter().enumerate() {
        cols.push(match ords.iter().position(|&o| o == i) {
            _ if i == key => Arc::new(StringArray::from_iter_values(
                ordered.iter().map(|d| d.record_key.as_str()),
            )),
            Some(j) => column_of(types[j], &values.iter().map(|v| v[j]).collect::<Vec<_>>())?,
            None if f.name() == "_hoodie_is_deleted" && f.data_type() == &DataType::Boolean => {
                Arc::new(BooleanArray::from(vec![true; n])) as ArrayRef
            }
            None => arrow_array::new_null_array(f.data_type(), n),
        });
    }
    let batch = RecordBatch::try_new(schema.clone(), cols).map_err(SourceError::arrow("ordered delete records"))?;
    Ok((Some(batch), by_commit))
}

/// A delete's ordering value field by field, where each is of its field's class (one field: the
/// value itself; several: an array of as many, Hudi's `ArrayComparable`).
fn parts<'v>(v: &'v OrderingValue, types: &[&DataType]) -> Option<Vec<&'v OrderingValue>> {
    let values: Vec<&OrderingValue> = match (v, types.len()) {
        (OrderingValue::Array(items), n) if n > 1 && items.len() == n => {
            items.iter().map(Option::as_ref).collect::<Option<_>>()?
        }
        (OrderingValue::Array(_), _) => return None,
        (v, 1) => vec![v],
        _ => return None,
    };
    values
        .iter()
        .zip(types)
        .all(|(v, t)| same_class(t, v))
        .then_some(values)
}

/// Does a delete's ordering value have the Java class of the ordering column's values as Hudi
/// reads them (Spark's internal types: `long` and timestamps `Long`, `int` `Integer`, strings,
/// `double`, `float`, `boolean`, `binary`)? Other pairs Hudi's `isSameClass` lets the delete win.
fn same_class(ty: &DataType, v: &OrderingValue) -> bool {
    use OrderingValue as V;
    matches!(
        (ty, v),
        (DataType::Int64, V::Long(_))
            | (DataType::Timestamp(TimeUnit::Microsecond, _), V::Long(_))
            | (DataType::Int32, V::Int(_))
            | (DataType::Utf8 | DataType::LargeUtf8, V::String(_))
            | (DataType::Float64, V::Double(_))
            | (DataType::Float32, V::Float(_))
            | (DataType::Boolean, V::Bool(_))
            | (DataType::Binary | DataType::LargeBinary, V::Bytes(_))
    )
}

/// The ordering values as a column of `ty` (each of [`same_class`]).
fn column_of(ty: &DataType, values: &[&OrderingValue]) -> Result<ArrayRef, SourceError> {
    use OrderingValue as V;
    let arr: ArrayRef = match ty {
        DataType::Int64 | DataType::Timestamp(..) => {
            let millis_too = matches!(ty, DataType::Timestamp(..));
            Arc::new(Int64Array::from_iter(values.iter().map(|v| match v {
                // Hudi reads a timestamp's ordering value this small as milliseconds
                // (`OrderingValueEngineTypeConverter`)
                V::Long(x) if millis_too && *x <= 9_999_999_999_999 => Some(x * 1000),
                V::Long(x) => Some(*x),
                _ => None,
            })))
        }
        DataType::Int32 => Arc::new(Int32Array::from_iter(values.iter().map(|v| match v {
            V::Int(x) => Some(*x),
            _ => None,
        }))),
        DataType::Float64 => Arc::new(Float64Array::from_iter(values.iter().map(|v| match v {
            V::Double(x) => Some(*x),
            _ => None,
        }))),
        DataType::Float32 => Arc::new(Float32Array::from_iter(values.iter().map(|v| match v {
            V::Float(x) => Some(*x),
            _ => None,
        }))),
        DataType::Boolean => Arc::new(BooleanArray::from_iter(values.iter().map(|v| match v {
            V::Bool(x) => Some(*x),
            _ => None,
        }))),
        DataType::Utf8 | DataType::LargeUtf8 => Arc::new(StringArray::from_iter(values.iter().map(|v| match v {
            V::String(x) => Some(x.as_str()),
            _ => None,
        }))),
        _ => Arc::new(BinaryArray::from_iter(values.iter().map(|v| match v {
            V::Bytes(x) => Some(x.as_slice()),
            _ => None,
        }))),
    };
    if arr.data_type() == ty {
        return Ok(arr);
    }
    arrow::compute::cast(&arr, ty).map_err(SourceError::arrow("a delete's ordering value"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_schema::{Field, Schema};

    fn config(mode: MergeMode) -> MergeConfig {
        MergeConfig {
            mode,
            ordering: vec!["ts".into()],
            virtual_keys: false,
            key_fields: vec!["id".into()],
            delete_marker: None,
            partial: None,
            binlog_seq: false,
        }
    }

    fn deleted(key: &str, ordering: Option<OrderingValue>) -> DeletedKey {
        DeletedKey {
            record_key: key.into(),
            partition_path: None,
            ordering,
        }
    }

    #[test]
    fn deletes_with_an_ordering_value_of_the_columns_type_are_ordered_by_event_time() {
        let proj: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("_hoodie_record_key", DataType::Utf8, true),
            Field::new("ts", DataType::Int64, true),
            Field::new("_hoodie_is_deleted", DataType::Boolean, true),
        ]));
        let keys = vec![
            deleted("a", Some(OrderingValue::Long(1059))),
            deleted("b", None),
            deleted("c", Some(OrderingValue::Int(0))), // Hudi's default: by commit time
            deleted("d", Some(OrderingValue::Int(7))), // another class: by commit time
            deleted("e", Some(OrderingValue::Long(0))), // a Long 0 is a value
        ];
        let (ordered, rest) = ordered_deletes(keys.clone(), &proj, &config(MergeMode::EventTime)).unwrap();
        let ordered = ordered.unwrap();
        assert_eq!(ordered.num_rows(), 2);
        let ts = ordered.column(1).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!((ts.value(0), ts.value(1)), (1059, 0));
        assert_eq!(
            rest.iter().map(|d| d.record_key.as_str()).collect::<Vec<_>>(),
            ["b", "c", "d"]
        );
        // commit-time ordering: every delete wins
        let (none, all) = ordered_deletes(keys, &proj, &config(MergeMode::CommitTime)).unwrap();
        assert!(none.is_none());
        assert_eq!(all.len(), 5);
    }

    #[test]
    fn several_ordering_fields_take_an_array_of_as_many_values_of_their_types() {
        let proj: SchemaRef = Arc::new(Schema::new(vec![
            Field::new("_hoodie_record_key", DataType::Utf8, true),
            Field::new("file", DataType::Utf8, true),
            Field::new("pos", DataType::Int64, true),
        ]));
        let mut merge = config(MergeMode::EventTime);
        merge.ordering = vec!["file".into(), "pos".into()];
        let arr = |f: &str, p: i64| {
            Some(OrderingValue::Array(vec![
                Some(OrderingValue::String(f.into())),
                Some(OrderingValue::Long(p)),
            ]))
        };
        let keys = vec![
            deleted("a", arr("bin.3", 17)),
            deleted("b", Some(OrderingValue::Long(3))), // not an array: by commit time
            deleted("c", Some(OrderingValue::Array(vec![Some(OrderingValue::Int(1)), None]))),
        ];
        let (ordered, rest) = ordered_deletes(keys, &proj, &merge).unwrap();
        let ordered = ordered.unwrap();
        assert_eq!(ordered.num_rows(), 1);
        let pos = ordered.column(2).as_any().downcast_ref::<Int64Array>().unwrap();
        assert_eq!(pos.value(0), 17);
        assert_eq!(rest.len(), 2);
    }

    #[test]
    fn soft_deletes_operations_and_markers_are_deletes_and_before_images_go() {
        let schema = Arc::new(Schema::new(vec![
            Field::new("_hoodie_record_key", DataType::Utf8, true),
            Field::new("_hoodie_operation", DataType::Utf8, true),
            Field::new("_hoodie_is_deleted", DataType::Boolean, true),
            Field::new("Op", DataType::Utf8, true),
        ]));
        let b = RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(vec!["a", "b", "c", "d", "e"])),
                Arc::new(StringArray::from(vec![Some("-U"), Some("U"), Some("D"), None, None])),
                Arc::new(BooleanArray::from(vec![None, Some(false), None, Some(true), None])),
                Arc::new(StringArray::from(vec![None, Some("d"), None, None, Some("D")])),
            ],
        )
        .unwrap();
        let mut merge = config(MergeMode::CommitTime);
        merge.delete_marker = Some(("Op".into(), "D".into()));
        let (kept, del) = log_deletes(&b, &merge).unwrap();
        assert_eq!(kept.num_rows(), 4);
        let del = del.unwrap();
        // b: `d` is not the marker (case-sensitive); c: operation D; d: soft; e: marker
        assert_eq!(
            (0..4).map(|r| del.value(r)).collect::<Vec<_>>(),
            [false, true, true, true]
        );
    }
}
