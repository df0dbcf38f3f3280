//! Unit tests of `buckets`.

use super::*;
use crate::source::rows::diff;
use crate::source::Op;
use arrow_array::Int64Array;

fn batch(keys: &[i64], vals: &[i64]) -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, true),
        Field::new("v", DataType::Int64, true),
    ]));
    RecordBatch::try_new(
        schema,
        vec![
            Arc::new(Int64Array::from(keys.to_vec())),
            Arc::new(Int64Array::from(vals.to_vec())),
        ],
    )
    .unwrap()
}

fn summary(batches: &[RecordBatch], rows: &[ChangeRow]) -> Vec<(Op, i64)> {
    let key = |r: RowRef| {
        batches[r.batch as usize]
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .value(r.row as usize)
    };
    let mut v: Vec<(Op, i64)> = rows
        .iter()
        .map(|c| (c.op, key(c.after().or(c.before()).unwrap())))
        .collect();
    v.sort_by_key(|x| x.1);
    v
}

#[test]
fn bucketed_diff_equals_the_in_memory_diff() {
    // split 0 and 1, old and new; key 3 moves from split 0 to 1, key 7 vanishes, 9 is new
    let old = [batch(&[1, 2, 3, 4], &[1, 2, 3, 4]), batch(&[5, 6, 7], &[5, 6, 7])];
    let new = [batch(&[1, 2, 4], &[1, 20, 4]), batch(&[5, 6, 3, 9], &[5, 6, 30, 9])];
    let all: Vec<RecordBatch> = old.iter().chain(new.iter()).cloned().collect();
    let whole = diff(&all, &[vec![0], vec![1]], &[vec![2], vec![3]], &[0], None).unwrap();
    for n in [1u32, 2, 3, 7] {
        let dir = tempfile::tempdir().unwrap();
        let mut w = BucketWriter::new(dir.path(), all[0].schema(), vec![0], n, 1 << 20).unwrap();
        for s in 0..2 {
            w.push(s as u32, false, 0, &old[s]).unwrap();
            w.push(s as u32, true, 0, &new[s]).unwrap();
        }
        let r = w.finish().unwrap();
        let mut per_split: Vec<Vec<(Op, i64)>> = vec![Vec::new(); 2];
        for p in 0..r.len() {
            let b = r.read(p, 2).unwrap();
            let out = diff(&b.batches, &b.old, &b.new, &[0], None).unwrap();
            for (s, rows) in out.into_iter().enumerate() {
                let (bs, rows) = restrict(&b.batches, rows);
                per_split[s].extend(summary(&bs, &rows));
            }
        }
        for s in 0..2 {
            per_split[s].sort_by_key(|x| x.1);
            assert_eq!(per_split[s], summary(&all, &whole[s]), "{n} buckets, split {s}");
        }
    }
    assert_eq!(
        summary(&all, &whole[1]),
        vec![(Op::Update, 3), (Op::Delete, 7), (Op::Create, 9)]
    );
}

#[test]
fn a_bucket_flushed_several_times_reads_back_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let big = |from: i64| batch(&(from..from + 40_000).collect::<Vec<_>>(), &vec![1; 40_000]);
    let mut w = BucketWriter::new(dir.path(), big(0).schema(), vec![0], 1, 0).unwrap();
    for (i, from) in [0i64, 40_000, 80_000].into_iter().enumerate() {
        w.push((i % 2) as u32, i == 2, 0, &big(from)).unwrap();
    }
    let r = w.finish().unwrap();
    assert!(r.bytes > 0);
    let b = r.read(0, 2).unwrap();
    let keys = |i: u32| {
        b.batches[i as usize]
            .column(0)
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
            .values()
            .to_vec()
    };
    assert_eq!(b.old[0].len(), 1);
    assert_eq!(keys(b.old[0][0]), (0..40_000).collect::<Vec<i64>>());
    assert_eq!(keys(b.old[1][0]), (40_000..80_000).collect::<Vec<i64>>());
    assert_eq!(keys(b.new[0][0]), (80_000..120_000).collect::<Vec<i64>>());
}

#[test]
fn tags_come_back_as_runs_in_read_order() {
    let dir = tempfile::tempdir().unwrap();
    let mut w = BucketWriter::new(dir.path(), batch(&[1], &[1]).schema(), vec![0], 1, 0).unwrap();
    w.push(0, true, 7, &batch(&[1, 2], &[0, 0])).unwrap();
    w.push(0, true, 3, &batch(&[3], &[0])).unwrap();
    w.push(0, false, 5, &batch(&[4], &[0])).unwrap();
    w.push(0, true, 7, &batch(&[5], &[0])).unwrap();
    let b = w.finish().unwrap().read(0, 1).unwrap();
    let tags: Vec<u32> = b.new[0].iter().map(|&i| b.tags[i as usize]).collect();
    let rows: Vec<usize> = b.new[0].iter().map(|&i| b.batches[i as usize].num_rows()).collect();
    assert_eq!((tags, rows), (vec![7, 3, 7], vec![2, 1, 1]));
    assert_eq!(
        b.old[0].iter().map(|&i| b.tags[i as usize]).collect::<Vec<_>>(),
        vec![5]
    );
}

#[test]
fn key_hashes_are_stable_and_type_blind() {
    let a = key_hashes(&batch(&[1, 2], &[0, 0]), &[0]).unwrap();
    let s = RecordBatch::try_new(
        Arc::new(Schema::new(vec![Field::new("k", DataType::Utf8, true)])),
        vec![Arc::new(StringArray::from(vec!["1", "2"]))],
    )
    .unwrap();
    assert_eq!(a, key_hashes(&s, &[0]).unwrap());
    // pinned: a change of this function changes the row order of resumed units
    assert_eq!(a[0], 0x07f7_c907_b4b8_b319, "FNV-1a 64 of b\"1\\xff\"");
    assert_eq!(buckets_for(0, 100), 1);
    assert_eq!(buckets_for(1000, 600), 10);
}
