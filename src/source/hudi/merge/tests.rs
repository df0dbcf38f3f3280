//! The slice merge on a merge-on-read file group built by hand: a base file (from `generate`),
//! then log blocks of completed instants, a failed (inflight-only) write, a completed write
//! rolled back by a command block, a hard delete and a re-insert after it, read through the
//! source as a full scan under event-time and commit-time ordering.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use arrow::compute::take;
use arrow_array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray, UInt32Array};

use crate::avro_binary::{write_bytes, write_long};
use crate::changelog::avro::{record, RowEncoder};
use crate::source::hudi::log::{
    avro_data_content, encode_block, COMMAND_BLOCK_TYPE, INSTANT_TIME, SCHEMA, TARGET_INSTANT_TIME,
};
use crate::source::Resume;

/// The table's base rows (sorted by key) and the partition directory.
struct Table {
    root: std::path::PathBuf,
    part: String,
    base: RecordBatch,
    file_id: String,
    base_instant: String,
    log: Vec<u8>,
}

impl Table {
    fn new(dir: &Path) -> Table {
        let root = dir.join("t");
        crate::generate::hudi(&crate::generate::GenerateOptions {
            rows: 6,
            partitions: 1,
            seed: 3,
            ..crate::generate::GenerateOptions::defaults(crate::generate::TableType::Mor, root.clone())
        })
        .unwrap();
        let part_dir = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.file_name().unwrap().to_str().unwrap().starts_with("part="))
            .unwrap();
        let base_file = std::fs::read_dir(&part_dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.extension().is_some_and(|x| x == "parquet"))
            .unwrap();
        let name = base_file.file_name().unwrap().to_str().unwrap().to_string();
        let file_id = name.split('_').next().unwrap().to_string();
        let base_instant = name
            .rsplit('_')
            .next()
            .unwrap()
            .trim_end_matches(".parquet")
            .to_string();
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            std::fs::File::open(&base_file).unwrap(),
        )
        .unwrap()
        .build()
        .unwrap();
        let batches: Vec<RecordBatch> = reader.map(Result::unwrap).collect();
        let base = arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap();
        // keys in order, so rows can be named k0..k5
        let keys = base.column_by_name("id").unwrap();
        let order = arrow::compute::sort_to_indices(keys, None, None).unwrap();
        let base = take_rows(&base, &order);
        Table {
            part: part_dir.file_name().unwrap().to_str().unwrap().to_string(),
            root,
            base,
            file_id,
            base_instant,
            log: Vec::new(),
        }
    }

    fn key(&self, k: usize) -> String {
        text(&self.base, "id", k)
    }

    fn ts(&self, k: usize) -> i64 {
        let c = self.base.column_by_name("ts").unwrap();
        c.as_any().downcast_ref::<Int64Array>().unwrap().value(k)
    }

    /// A data block of instant `t`: base row `k` with `ts` moved by `dts` and `tag` set.
    fn upsert(&mut self, t: &str, rows: &[(usize, i64, &str)]) {
        let idx = UInt32Array::from_iter_values(rows.iter().map(|r| r.0 as u32));
        let picked = take_rows(&self.base, &idx);
        let mut cols: Vec<ArrayRef> = picked.columns().to_vec();
        let schema = picked.schema();
        let set = |cols: &mut Vec<ArrayRef>, name: &str, a: ArrayRef| cols[schema.index_of(name).unwrap()] = a;
        set(
            &mut cols,
            "ts",
            Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| self.ts(r.0) + r.1))),
        );
        set(
            &mut cols,
            "tag",
            Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.2))),
        );
        set(
            &mut cols,
            "_hoodie_commit_time",
            Arc::new(StringArray::from_iter_values(rows.iter().map(|_| t))),
        );
        let batch = RecordBatch::try_new(schema, cols).unwrap();
        let avro = record(
            "demo_record",
            batch.schema().fields(),
            "demo_record",
            Default::default(),
        )
        .unwrap();
        let enc = RowEncoder::new(
            &batch,
            &(0..batch.num_columns()).collect::<Vec<_>>(),
            &Default::default(),
        )
        .unwrap();
        let content = avro_data_content(batch.num_rows(), |i, d| enc.write(i, d));
        self.log.extend(encode_block(
            3,
            &[(INSTANT_TIME, t), (SCHEMA, &avro.to_string())],
            &content,
        ));
    }

    /// A delete block of instant `t` (keys of base rows).
    fn delete(&mut self, t: &str, rows: &[usize]) {
        self.delete_block(t, &rows.iter().map(|&k| (k, None)).collect::<Vec<_>>());
    }

    /// A delete block of instant `t` whose entries carry an ordering value (`LongWrapper`, as
    /// Spark writes a soft delete's): base row `k`'s `ts` moved by `dts`.
    fn delete_ordered(&mut self, t: &str, rows: &[(usize, i64)]) {
        self.delete_block(t, &rows.iter().map(|&(k, dts)| (k, Some(dts))).collect::<Vec<_>>());
    }

    fn delete_block(&mut self, t: &str, rows: &[(usize, Option<i64>)]) {
        let mut datum = Vec::new();
        write_long(&mut datum, rows.len() as i64);
        for &(k, dts) in rows {
            datum.push(2);
            write_bytes(&mut datum, self.key(k).as_bytes());
            datum.push(2);
            write_bytes(&mut datum, self.part.as_bytes());
            match dts {
                Some(dts) => {
                    write_long(&mut datum, 3); // the union's LongWrapper
                    write_long(&mut datum, self.ts(k) + dts);
                }
                None => datum.push(0),
            }
        }
        datum.push(0);
        let mut content = Vec::new();
        content.extend_from_slice(&3i32.to_be_bytes());
        content.extend_from_slice(&(datum.len() as i32).to_be_bytes());
        content.extend_from_slice(&datum);
        self.log.extend(encode_block(1, &[(INSTANT_TIME, t)], &content));
    }

    /// A rollback command block of instant `t` for `target`.
    fn rollback(&mut self, t: &str, target: &str) {
        self.log.extend(encode_block(
            0,
            &[
                (INSTANT_TIME, t),
                (TARGET_INSTANT_TIME, target),
                (COMMAND_BLOCK_TYPE, "0"),
            ],
            &[],
        ));
    }

    /// Instant `t` on the timeline: completed, or requested and inflight only (a failed write).
    fn instant(&self, t: &str, action: &str, completed: bool) {
        let h = self.root.join(".hoodie");
        std::fs::write(h.join(format!("{t}.{action}.requested")), b"").unwrap();
        std::fs::write(h.join(format!("{t}.{action}.inflight")), b"").unwrap();
        if completed {
            let md = serde_json::json!({"partitionToWriteStats": {}, "operationType": "UPSERT",
                "extraMetadata": {"schema": crate::generate::AVRO_SCHEMA}});
            std::fs::write(h.join(format!("{t}.{action}")), md.to_string()).unwrap();
        }
    }

    /// Write the log file and read the table as a full scan: tag (or `base`) by key index.
    fn read(&self, event_time: bool) -> BTreeMap<usize, String> {
        let dir = self.root.join(&self.part);
        std::fs::write(
            dir.join(format!(".{}_{}.log.1_0-1-1", self.file_id, self.base_instant)),
            &self.log,
        )
        .unwrap();
        let props = self.root.join(".hoodie/hoodie.properties");
        let p = std::fs::read_to_string(&props).unwrap();
        let payload = if event_time {
            "DefaultHoodieRecordPayload"
        } else {
            "OverwriteWithLatestAvroPayload"
        };
        let p: String = p
            .lines()
            .map(|l| match l.starts_with("hoodie.compaction.payload.class=") {
                true => format!("hoodie.compaction.payload.class=org.apache.hudi.common.model.{payload}\n"),
                false => format!("{l}\n"),
            })
            .collect();
        std::fs::write(&props, p).unwrap();
        let file = self.root.with_extension("properties");
        std::fs::write(
            &file,
            format!(
                "name=m\nconnector.class=hudi\ntable.path={}\ntopic=m\nbootstrap.servers=127.0.0.1:9\n\
                 schema.registry.url=http://127.0.0.1:9\nread.start-commit=earliest\n",
                self.root.display()
            ),
        )
        .unwrap();
        let cfg = crate::config::load_connector(&file, 0).unwrap();
        let src = crate::source::open(&cfg.source()).unwrap();
        let units = src.poll(None).unwrap();
        assert!(units.len() == 1 && units[0].snapshot, "{units:?}");
        let keys: Vec<String> = (0..self.base.num_rows()).map(|k| self.key(k)).collect();
        let mut out = BTreeMap::new();
        src.read_unit(&units[0], &Resume::default(), &mut |sc| {
            for row in &sc.rows {
                let r = row.after().expect("a full scan reads rows");
                let b = &sc.batches[r.batch as usize];
                let k = keys.iter().position(|x| *x == text(b, "id", r.row as usize)).unwrap();
                let tag = text(b, "tag", r.row as usize);
                let shown = if tag == text(&self.base, "tag", k) {
                    "base".to_string()
                } else {
                    tag
                };
                assert!(out.insert(k, shown).is_none(), "key {k} twice");
            }
            Ok(())
        })
        .unwrap();
        out
    }
}

fn take_rows(b: &RecordBatch, idx: &UInt32Array) -> RecordBatch {
    let cols = b.columns().iter().map(|c| take(c, idx, None).unwrap()).collect();
    RecordBatch::try_new(b.schema(), cols).unwrap()
}

fn text(b: &RecordBatch, col: &str, row: usize) -> String {
    let c = b.column_by_name(col).unwrap();
    c.as_any().downcast_ref::<StringArray>().unwrap().value(row).to_string()
}

/// Instants after the base one, in order.
fn after(base: &str, n: u64) -> String {
    (base.parse::<u64>().unwrap() + n).to_string()
}

/// The history both tests write.
fn history(t: &mut Table) {
    let b = t.base_instant.clone();
    let [i2, i3, i4, i5, i6, i7, i8] = [1, 2, 3, 4, 5, 6, 7].map(|n| after(&b, n));
    // i2: k0 newer, k1 a late record (lower ordering value), k2 newer
    t.upsert(&i2, &[(0, 10, "i2-k0"), (1, -10, "i2-late-k1"), (2, 10, "i2-k2")]);
    t.instant(&i2, "deltacommit", true);
    t.upsert(&i2, &[(3, 10, "i2-k3")]);
    // i3: k2 deleted (a hard delete wins whatever the ordering value); k3 late against i2's
    t.delete(&i3, &[2]);
    t.upsert(&i3, &[(3, 5, "i3-late-k3")]);
    t.instant(&i3, "deltacommit", true);
    // i4: a completed write rolled back by i5's command block
    t.upsert(&i4, &[(0, 20, "i4-k0-rolled-back"), (3, 20, "i4-k3-rolled-back")]);
    t.instant(&i4, "deltacommit", true);
    t.rollback(&i5, &i4);
    t.instant(&i5, "rollback", true);
    // i6: a failed write (never completed)
    t.upsert(&i6, &[(4, 10, "i6-k4-failed")]);
    t.instant(&i6, "deltacommit", false);
    // i7, i8: k5 deleted, then inserted again with a lower ordering value: the re-insert
    // replaces the delete in the log, then meets the base row, which outranks it (Hudi 1.1's
    // `KeyBasedFileGroupRecordBuffer` keeps one record a key; `finalMerge` orders it against the
    // base row): the base row is what Hudi's snapshot returns
    t.delete(&i7, &[5]);
    t.instant(&i7, "deltacommit", true);
    t.upsert(&i8, &[(5, -100, "i8-k5-again")]);
    t.instant(&i8, "deltacommit", true);
}

fn expect(pairs: &[(usize, &str)]) -> BTreeMap<usize, String> {
    pairs.iter().map(|(k, v)| (*k, v.to_string())).collect()
}

#[test]
fn event_time_ordering_keeps_the_greater_ordering_value_and_applies_deletes_and_rollbacks() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = Table::new(dir.path());
    history(&mut t);
    assert_eq!(
        t.read(true),
        expect(&[(0, "i2-k0"), (1, "base"), (3, "i2-k3"), (4, "base"), (5, "base")])
    );
}

#[test]
fn commit_time_ordering_keeps_the_later_write() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = Table::new(dir.path());
    history(&mut t);
    assert_eq!(
        t.read(false),
        expect(&[
            (0, "i2-k0"),
            (1, "i2-late-k1"),
            (3, "i3-late-k3"),
            (4, "base"),
            (5, "i8-k5-again")
        ])
    );
}

/// Deletes that carry an ordering value (Spark's soft deletes on merge-on-read go to a delete
/// block with the row's ordering value) obey event-time ordering: a late one loses to the log
/// record and to the base row it does not outrank, a tie goes to the delete, and a later record
/// must outrank the delete to bring the key back. Under commit-time ordering every delete wins.
#[test]
fn deletes_with_ordering_values_obey_event_time_ordering() {
    let dir = tempfile::tempdir().unwrap();
    let mut t = Table::new(dir.path());
    let b = t.base_instant.clone();
    let [i2, i3, i4] = [1, 2, 3].map(|n| after(&b, n));
    t.upsert(&i2, &[(0, 10, "i2-k0"), (1, 10, "i2-k1")]);
    t.instant(&i2, "deltacommit", true);
    // k0 below i2's record, k1 a tie with it, k2 below the base row, k3 above it
    t.delete_ordered(&i3, &[(0, 5), (1, 10), (2, -1), (3, 1)]);
    t.instant(&i3, "deltacommit", true);
    // k3 written again below its delete, k4 above the base row
    t.upsert(&i4, &[(3, 0, "i4-k3-late"), (4, 1, "i4-k4")]);
    t.instant(&i4, "deltacommit", true);
    assert_eq!(
        t.read(true),
        expect(&[(0, "i2-k0"), (2, "base"), (4, "i4-k4"), (5, "base")])
    );
    assert_eq!(t.read(false), expect(&[(3, "i4-k3-late"), (4, "i4-k4"), (5, "base")]));
}
