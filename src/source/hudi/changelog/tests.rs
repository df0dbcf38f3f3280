use std::sync::Arc;

use arrow_array::{ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow_schema::{DataType, Field, Schema};

use super::*;
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
        delete_marker: None,
        partial: None,
        binlog_seq: false,
    }
}

fn shape(rows: &[ChangeRow]) -> Vec<Shape> {
    rows.iter()
        .map(|r| {
            (
                r.op.code(),
                r.before().map(|x| (x.batch, x.row)),
                r.after().map(|x| (x.batch, x.row)),
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
            ordering: None,
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
fn under_event_time_ordering_a_late_delete_changes_nothing() {
    use crate::source::hudi::log::OrderingValue;
    let old = [batch(&[("a", "p", 5, None), ("b", "p", 5, None), ("c", "p", 5, None)])];
    let del = |k: &str, ts| DeletedKey {
        record_key: k.into(),
        partition_path: None,
        ordering: Some(OrderingValue::Long(ts)),
    };
    let blocks = [
        // a: a late soft delete (operation D); b: a delete-block entry below the row, c: a tie
        InstantBlock::Data(vec![batch(&[("a", "p", 4, Some("D"))])]),
        InstantBlock::Delete(vec![del("b", 4), del("c", 5)]),
        // c again, below its delete: stays deleted
        InstantBlock::Data(vec![batch(&[("c", "p", 4, Some("I"))])]),
    ];
    let (_, rows) = changelog_rows(&old, &blocks, &merge(MergeMode::EventTime), true).unwrap();
    assert_eq!(
        shape(&rows),
        vec![("d", Some((0, 2)), None)],
        "only c's delete outranks its row"
    );
    // commit-time ordering: every delete wins, and the later insert of c too
    let (_, rows) = changelog_rows(&old, &blocks, &merge(MergeMode::CommitTime), true).unwrap();
    assert_eq!(shape(&rows).len(), 4);
}

#[test]
fn a_key_moving_between_file_groups_is_one_update() {
    // batch 0: the key's old row (partition p1), batch 1: its new row (partition p2)
    let batches = [
        batch(&[("k", "p1", 1, None), ("x", "p1", 1, None)]),
        batch(&[("k", "p2", 2, None)]),
    ];
    let at = |b, r| RowRef { batch: b, row: r };
    let split_rows = || {
        vec![
            vec![ChangeRow::deleted(at(0, 0)), ChangeRow::deleted(at(0, 1))],
            vec![ChangeRow::to(Op::Create, None, at(1, 0))],
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
