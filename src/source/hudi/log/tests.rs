//! Unit tests of `log`.

use super::*;

#[test]
fn damaged_stretches_are_skipped_and_counted() {
    let rollback = encode_block(
        0,
        &[
            (INSTANT_TIME, "2"),
            (COMMAND_BLOCK_TYPE, "0"),
            (TARGET_INSTANT_TIME, "1"),
        ],
        b"",
    );
    let other = encode_block(
        0,
        &[
            (INSTANT_TIME, "3"),
            (COMMAND_BLOCK_TYPE, "0"),
            (TARGET_INSTANT_TIME, "2"),
        ],
        b"",
    );
    let mut file = b"garbage#HU".to_vec();
    file.extend_from_slice(&rollback);
    file.extend_from_slice(b"\x00\x01#HUDI#\xff");
    file.extend_from_slice(&other);
    file.extend_from_slice(&rollback[..rollback.len() - 5]); // truncated tail block
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".fg_1.log.1_0-0-0");
    std::fs::write(&path, &file).unwrap();
    let before = metrics::CORRUPT_LOG_BLOCKS.with_label_values(&["log-test"]).get();
    let blocks = read_blocks(&Storage::default(), &path, "log-test").unwrap();
    let targets: Vec<_> = blocks.iter().map(|b| b.header[&TARGET_INSTANT_TIME].as_str()).collect();
    assert_eq!(targets, ["1", "2"]);
    assert_eq!(blocks[0].block_type, BlockType::Command);
    // leading garbage, the bytes before a false magic, the false magic, the truncated tail
    assert_eq!(
        metrics::CORRUPT_LOG_BLOCKS.with_label_values(&["log-test"]).get() - before,
        4
    );
}

const KV_SCHEMA: &str = r#"{"type":"record","name":"r","fields":[{"name":"_hoodie_record_key","type":"string"},{"name":"v","type":"long"}]}"#;

/// An Avro data block of `n` records `k<i>` → `i + from`.
fn kv_block(instant: &str, from: i64, n: i64) -> Vec<u8> {
    let mut content = Vec::new();
    content.extend_from_slice(&2i32.to_be_bytes());
    content.extend_from_slice(&(n as i32).to_be_bytes());
    for i in 0..n {
        let mut datum = Vec::new();
        crate::avro_binary::write_bytes(&mut datum, format!("key-{:012}", i).as_bytes());
        crate::avro_binary::write_long(&mut datum, i + from);
        content.extend_from_slice(&(datum.len() as i32).to_be_bytes());
        content.extend_from_slice(&datum);
    }
    encode_block(3, &[(INSTANT_TIME, instant), (SCHEMA, KV_SCHEMA)], &content)
}

fn decoded(blocks: &[LogBlock], path: &Path) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for b in blocks.iter().filter(|b| b.block_type == BlockType::AvroData) {
        avro_block_batches(b, path, &mut |x| {
            let k = x
                .column(0)
                .as_any()
                .downcast_ref::<arrow_array::StringArray>()
                .unwrap()
                .clone();
            let v = x
                .column(1)
                .as_any()
                .downcast_ref::<arrow_array::Int64Array>()
                .unwrap()
                .clone();
            out.extend((0..x.num_rows()).map(|i| (k.value(i).to_string(), v.value(i))));
            Ok(true)
        })
        .unwrap();
    }
    out
}

#[test]
fn large_files_are_read_block_by_block_as_if_read_whole() {
    use arrow_array::Array;
    // two data blocks around a rollback command: more than LAZY_FILE_BYTES
    let mut file = kv_block("1", 0, 120_000);
    file.extend_from_slice(&encode_block(
        0,
        &[
            (INSTANT_TIME, "3"),
            (COMMAND_BLOCK_TYPE, "0"),
            (TARGET_INSTANT_TIME, "2"),
        ],
        b"",
    ));
    file.extend_from_slice(&kv_block("2", 1_000_000, 100_000));
    assert!(file.len() as u64 > LAZY_FILE_BYTES);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(".fg_1.log.1_0-0-0");
    std::fs::write(&path, &file).unwrap();
    let lazy = read_blocks(&Storage::default(), &path, "log-test").unwrap();
    let whole = read_whole(&Storage::default(), &path, "log-test").unwrap();
    assert!(
        lazy.iter().all(|b| matches!(b.content, Content::At { .. })),
        "contents stay in the file"
    );
    assert!(whole.iter().all(|b| matches!(b.content, Content::Mem { .. })));
    let shape = |v: &[LogBlock]| {
        v.iter()
            .map(|b| (b.block_type, b.header.clone(), b.offset))
            .collect::<Vec<_>>()
    };
    assert_eq!(shape(&lazy), shape(&whole));
    let (a, b) = (decoded(&lazy, &path), decoded(&whole, &path));
    assert_eq!(a.len(), 220_000);
    assert_eq!(a, b);
    assert_eq!(a[120_000], ("key-000000000000".to_string(), 1_000_000));
    let unloaded: Vec<LogBlock> = whole.iter().map(|b| b.unloaded(&Storage::default(), &path)).collect();
    assert!(unloaded.iter().all(|b| matches!(b.content, Content::At { .. })));
    assert_eq!(decoded(&unloaded, &path), a);
    // stopping early reads no further
    let mut batches = 0;
    avro_block_batches(&lazy[0], &path, &mut |x| {
        batches += 1;
        assert!(x.column(0).len() <= BATCH_RECORDS);
        Ok(false)
    })
    .unwrap();
    assert_eq!(batches, 1);
    // a damaged tail: the file is read whole, the damage skipped and counted
    file.extend_from_slice(&kv_block("4", 0, 10)[..40]);
    std::fs::write(&path, &file).unwrap();
    let before = metrics::CORRUPT_LOG_BLOCKS.with_label_values(&["log-test-lazy"]).get();
    let blocks = read_blocks(&Storage::default(), &path, "log-test-lazy").unwrap();
    assert_eq!(shape(&blocks), shape(&whole));
    assert!(blocks.iter().all(|b| matches!(b.content, Content::Mem { .. })));
    assert_eq!(
        metrics::CORRUPT_LOG_BLOCKS.with_label_values(&["log-test-lazy"]).get() - before,
        1
    );
}
