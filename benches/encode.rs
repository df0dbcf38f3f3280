//! Avro encoding alone, no broker: lakestream's column encoder (`changelog::avro::RowEncoder`,
//! one record into one reused buffer, as the runtime encodes) against arrow-avro's `Encoder`
//! (`AvroBinaryFormat`: a whole batch into one buffer with row offsets), on the same batches of a
//! table shaped like the generated benchmark tables (key, partition, 3 strings, 2 longs, 2
//! doubles, a timestamp, a boolean; a tenth of the optional values null). Prints rows/s and ns
//! per row for each, best of `BENCH_ROUNDS` (default 5) rounds over `BENCH_ROWS` (default 1M) rows.
//!
//! `cargo bench --bench encode`

use std::sync::Arc;
use std::time::Instant;

use arrow_array::{
    ArrayRef, BooleanArray, Float64Array, Int64Array, RecordBatch, StringArray, TimestampMicrosecondArray,
};
use arrow_avro::writer::format::AvroBinaryFormat;
use arrow_avro::writer::WriterBuilder;
use arrow_schema::{DataType, Field, Schema, TimeUnit};
use lakestream::changelog::avro::RowEncoder;

const BATCH: usize = 8192;

fn batch(start: usize) -> RecordBatch {
    let n = BATCH;
    let opt = |i: usize| (i % 10) != 3;
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Utf8, false),
        Field::new("part", DataType::Utf8, false),
        Field::new("name", DataType::Utf8, true),
        Field::new("city", DataType::Utf8, true),
        Field::new("note", DataType::Utf8, true),
        Field::new("qty", DataType::Int64, true),
        Field::new("ts", DataType::Int64, false),
        Field::new("price", DataType::Float64, true),
        Field::new("score", DataType::Float64, true),
        Field::new(
            "at",
            DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
            true,
        ),
        Field::new("flag", DataType::Boolean, true),
    ]));
    let ids = start..start + n;
    let cols: Vec<ArrayRef> = vec![
        Arc::new(StringArray::from_iter_values(
            ids.clone().map(|i| format!("key-{i:012}")),
        )),
        Arc::new(StringArray::from_iter_values(
            ids.clone().map(|i| format!("p{}", i % 10)),
        )),
        Arc::new(StringArray::from_iter(
            ids.clone().map(|i| opt(i).then(|| format!("name number {i}"))),
        )),
        Arc::new(StringArray::from_iter(ids.clone().map(|i| {
            opt(i + 1).then(|| ["Lisbon", "Osaka", "Quito", "Tallinn"][i % 4].to_string())
        }))),
        Arc::new(StringArray::from_iter(
            ids.clone().map(|i| opt(i + 2).then(|| "x".repeat(20 + i % 40))),
        )),
        Arc::new(Int64Array::from_iter(
            ids.clone().map(|i| opt(i).then_some(i as i64 * 7)),
        )),
        Arc::new(Int64Array::from_iter_values(
            ids.clone().map(|i| 1_700_000_000_000 + i as i64),
        )),
        Arc::new(Float64Array::from_iter(
            ids.clone().map(|i| opt(i + 3).then_some(i as f64 * 0.25)),
        )),
        Arc::new(Float64Array::from_iter(
            ids.clone().map(|i| opt(i + 4).then_some(1.0 / (i + 1) as f64)),
        )),
        Arc::new(
            TimestampMicrosecondArray::from_iter(
                ids.clone()
                    .map(|i| opt(i + 5).then_some(1_700_000_000_000_000 + i as i64)),
            )
            .with_timezone("UTC"),
        ),
        Arc::new(BooleanArray::from_iter(ids.map(|i| opt(i + 6).then_some(i % 2 == 0)))),
    ];
    RecordBatch::try_new(schema, cols).expect("bench batch")
}

fn best<F: FnMut() -> usize>(rounds: usize, mut f: F) -> (f64, usize) {
    let mut best = f64::MAX;
    let mut bytes = 0;
    for _ in 0..rounds {
        let t = Instant::now();
        bytes = f();
        best = best.min(t.elapsed().as_secs_f64());
    }
    (best, bytes)
}

fn main() {
    let rows: usize = std::env::var("BENCH_ROWS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let batches: Vec<RecordBatch> = (0..rows.div_ceil(BATCH)).map(|b| batch(b * BATCH)).collect();
    let n: usize = batches.iter().map(RecordBatch::num_rows).sum();
    let all: Vec<usize> = (0..batches[0].num_columns()).collect();

    // the two must write the same bytes, or the comparison means nothing
    {
        let b = &batches[0];
        let ours = RowEncoder::new(b, &all, &Default::default()).expect("encoder");
        let mut theirs = WriterBuilder::new((*b.schema()).clone())
            .build_encoder::<AvroBinaryFormat>()
            .expect("arrow-avro encoder");
        theirs.encode(b).expect("encode");
        for (r, row) in theirs.flush().iter().enumerate() {
            let mut out = Vec::new();
            ours.write(r, &mut out);
            assert_eq!(out, row.as_ref(), "row {r} encodes differently");
        }
    }
    // lakestream: downcast once per batch, then one record at a time into a reused buffer (the
    // runtime hands each record to the producer, which copies it)
    let (ours, ours_bytes) = best(rounds, || {
        let mut out = Vec::with_capacity(512);
        let mut bytes = 0;
        for b in &batches {
            let enc = RowEncoder::new(b, &all, &Default::default()).expect("encoder");
            for r in 0..b.num_rows() {
                out.clear();
                enc.write(r, &mut out);
                bytes += out.len();
                std::hint::black_box(&out);
            }
        }
        bytes
    });
    // arrow-avro: a whole batch at a time into one buffer, rows sliced by offsets
    let (theirs, theirs_bytes) = best(rounds, || {
        let mut enc = WriterBuilder::new((*batches[0].schema()).clone())
            .build_encoder::<AvroBinaryFormat>()
            .expect("arrow-avro encoder");
        let mut bytes = 0;
        for b in &batches {
            enc.encode(b).expect("encode");
            let rows = enc.flush();
            for r in rows.iter() {
                bytes += r.len();
                std::hint::black_box(&r);
            }
        }
        bytes
    });
    println!(
        "Avro encoding of {n} rows, {} columns, best of {rounds} rounds:",
        all.len()
    );
    for (label, secs, bytes) in [
        ("lakestream RowEncoder", ours, ours_bytes),
        ("arrow-avro Encoder", theirs, theirs_bytes),
    ] {
        println!(
            "  {label:<22} {:>8.1} ms  {:>6.2} M rows/s  {:>6.1} ns/row  {:>5.1} bytes/row",
            secs * 1e3,
            n as f64 / secs / 1e6,
            secs * 1e9 / n as f64,
            bytes as f64 / n as f64
        );
    }
}
