//! End-to-end benchmark: tables streamed into Kafka through the real pipeline (Parquet / log
//! blocks → merge → diff → Avro → registry → transactional producer), each case in its own child
//! process so that its peak RSS and CPU time are its own; each case's topics are deleted after it
//! (the test broker keeps every byte in RAM).
//!
//! * generated copy-on-write and merge-on-read tables at each size in `BENCH_SIZES` (default
//!   1M, 4M, 16M rows; 10 partitions, one file group each) plus one upsert commit touching every
//!   file group (10 % updated, 1 % deleted, 1 % inserted): the full scan, and the upsert instant
//!   alone, at the default `read.memory.budget`; hudi-rs (PyPI `hudi`) reading the same MOR
//!   table, side by side;
//! * the 1M-row merge-on-read fixture `perf_mor_v8` (5 rounds of 100k upserts in log files): full
//!   scan next to hudi-rs reading it, and changes with a small and a large budget;
//! * a 1,000,000-row Iceberg table written by pyiceberg (`scripts/gen_iceberg.py`, run with
//!   `BENCH_PYTHON`): full scan, and changes (1M `c`, then a copy-on-write delete diffed);
//! * Delta tables written by delta-rs at each size in `BENCH_DELTA_SIZES` (default 1M, 4M;
//!   `scripts/gen_delta.py`): the snapshot, and a MERGE + DELETE as changes, from change-data
//!   files (CDF on) and diffed from remove/add actions (CDF off).
//!
//! Each full scan is followed by the **raw produce limit** of lakestream's own producer in the same
//! run: the same settings (transactional, lz4, `transaction.max.records`), as many records as the
//! table has rows, cycling through records sampled from the case's topic — nothing read or
//! encoded — and the ratio of the end-to-end rate to that limit.
//!
//! Needs `KAFKA_BOOTSTRAP` and `SCHEMA_REGISTRY_URL` (scripts/bench.sh starts both).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lakestream::config::load_connector;
use lakestream::generate::{self, GenerateOptions, TableType};
use lakestream::metrics;
use lakestream::runtime::{run_connector, RunOptions};

#[path = "end_to_end/change.rs"]
mod change;

fn counter_sum(c: &prometheus::IntCounterVec, ops: &[&str]) -> u64 {
    ops.iter()
        .map(|op| {
            c.get_metric_with_label_values(&["bench", op])
                .map(|c| c.get())
                .unwrap_or(0)
        })
        .sum()
}

/// User + system CPU seconds of this process (/proc/self/stat, 100 ticks a second).
fn cpu_seconds() -> f64 {
    std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|s| {
            let rest = s.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) / 100.0)
        })
        .unwrap_or(0.0)
}

/// Bytes this process read through read(2)/pread(2) (`rchar` of /proc/self/io): local table files.
fn read_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("rchar: ")?.trim().parse().ok()))
        .unwrap_or(0)
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// The case's connector file: the table, its topic, lz4, `extra`.
fn write_props(dir: &Path, table: &Path, topic: &str, extra: &str) -> PathBuf {
    let p = dir.join("bench.properties");
    std::fs::write(
        &p,
        format!(
            "name=bench\n{}table.path={}\ntopic={topic}\nbootstrap.servers={}\n\
             schema.registry.url={}\noffsets.storage.topic={topic}-offsets\nproducer.override.compression.type=lz4\n{extra}",
            match extra {
                e if e.contains("connector.class=") => "",
                e if e.contains("starting-strategy") => "connector.class=iceberg\n",
                _ => "connector.class=hudi\n",
            },
            table.display(),
            std::env::var("KAFKA_BOOTSTRAP").expect("KAFKA_BOOTSTRAP"),
            std::env::var("SCHEMA_REGISTRY_URL").expect("SCHEMA_REGISTRY_URL"),
        ),
    )
    .expect("write properties");
    p
}

/// Child: stream one table with the given extra properties and print one result line.
fn run_case(label: &str, table: &Path, extra: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let topic = std::env::var("BENCH_TOPIC").expect("BENCH_TOPIC");
    let p = write_props(dir.path(), table, &topic, extra);
    let cfg = load_connector(&p, 0).expect("config");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let t = Instant::now();
    rt.block_on(run_connector(
        cfg,
        RunOptions {
            once: true,
            shutdown: rx,
            health: lakestream::health::Health::new(),
            first_units: Default::default(),
            cluster: std::sync::Arc::new(lakestream::sink::Kafka),
            polls: Default::default(),
            instance: lakestream::runtime::state::Holder::this_process(),
            memory: Default::default(),
        },
    ))
    .expect("run");
    let secs = t.elapsed().as_secs_f64();
    let events = counter_sum(&metrics::RECORDS_POLLED, &["r", "c", "u", "d"]);
    let rows = metrics::ROWS_READ
        .get_metric_with_label_values(&["bench", "0"])
        .map(|c| c.get())
        .unwrap_or(0);
    let spilled = metrics::SPILLED_BYTES
        .get_metric_with_label_values(&["bench"])
        .map(|c| c.get())
        .unwrap_or(0);
    // the units alone (their reading to their last event): what a running connector pays per commit
    let unit: f64 = metrics::UnitKind::ALL
        .iter()
        .filter_map(|k| {
            metrics::UNIT_SECONDS
                .get_metric_with_label_values(&["bench", "0", k.label()])
                .ok()
        })
        .map(|h| h.get_sample_sum())
        .sum();
    println!(
        "{label:<58} {events:>9} events {rows:>9} rows read {secs:>6.2} s (units {unit:.2} s) {:>8.0} events/s  cpu {:>6.1} s  peak RSS {:>5.0} MiB  spilled {:>5} MiB  read {:>6} MiB",
        events as f64 / secs,
        cpu_seconds(),
        peak_rss_mib(),
        spilled >> 20,
        read_bytes() >> 20
    );
    record_result(events, secs);
}

/// A child's events and seconds, for the parent's ratio line (`BENCH_RESULT`).
fn record_result(events: u64, secs: f64) {
    if let Ok(f) = std::env::var("BENCH_RESULT") {
        std::fs::write(f, format!("{events} {secs}")).expect("write result");
    }
}

/// Child: the raw produce limit with lakestream's own producer (same settings, transactional,
/// same compression, `transaction.max.records` commits): `count` records cycling through up to
/// 4,096 records sampled (read_committed) from the topic a case just wrote, so sizes and
/// compressibility are the case's own. Nothing is read from the table, nothing encoded.
fn run_raw(label: &str, table: &Path, extra: &str, from: &str, count: u64) {
    use lakestream::changelog::KafkaRecord;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::Message;
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set(
            "bootstrap.servers",
            std::env::var("KAFKA_BOOTSTRAP").expect("KAFKA_BOOTSTRAP"),
        )
        .set("group.id", format!("bench-raw-{}", std::process::id()))
        .set("isolation.level", "read_committed")
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .expect("consumer");
    consumer.subscribe(&[from]).expect("subscribe");
    let mut samples: Vec<KafkaRecord> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while samples.len() < 4096 && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            if let (Some(k), Some(v)) = (m.key(), m.payload()) {
                samples.push(KafkaRecord {
                    key: k.to_vec(),
                    value: Some(v.to_vec()),
                });
            }
        }
    }
    drop(consumer);
    assert!(!samples.is_empty(), "no records to sample in {from}");
    let avg = samples
        .iter()
        .map(|r| r.key.len() + r.value.as_ref().map_or(0, Vec::len))
        .sum::<usize>()
        / samples.len();
    let dir = tempfile::tempdir().expect("tempdir");
    let topic = std::env::var("BENCH_TOPIC").expect("BENCH_TOPIC");
    let cfg = load_connector(&write_props(dir.path(), table, &topic, extra), 0).expect("config");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let t = Instant::now();
    rt.block_on(async {
        let mut sink = lakestream::sink::TxnSink::start(
            &cfg.sink(),
            false,
            lakestream::health::Health::new().task("bench", 0, Duration::MAX),
        )
        .await
        .expect("producer");
        let offsets = lakestream::runtime::state::Offsets::default();
        for i in 0..count as usize {
            sink.send(std::slice::from_ref(&samples[i % samples.len()]))
                .expect("send");
            if sink.txn_records() >= cfg.runtime.max_txn_records as u64 {
                sink.commit(serde_json::to_vec(&offsets).expect("offsets"))
                    .await
                    .expect("commit");
            }
        }
        sink.commit(serde_json::to_vec(&offsets).expect("offsets"))
            .await
            .expect("commit");
    });
    let secs = t.elapsed().as_secs_f64();
    println!(
        "{label:<58} {count:>9} records ({avg} B avg) {secs:>9.2} s {:>8.0} events/s  cpu {:>6.1} s  peak RSS {:>5.0} MiB",
        count as f64 / secs,
        cpu_seconds(),
        peak_rss_mib(),
    );
    record_result(count, secs);
}

fn child(label: &str, table: &Path, extra: &str) {
    child_kept_deleted(label, table, extra);
}

/// [`child`], returning its topic (deleted) and its (events, seconds).
fn child_kept_deleted(label: &str, table: &Path, extra: &str) -> (String, (f64, f64)) {
    let (topic, result) = child_keeping(label, table, extra, &[]);
    delete_topics(&[topic.clone(), format!("{topic}-offsets")]);
    (topic, result)
}

/// A case in its own process; its topic is left for the caller to delete. Returns the topic and
/// the case's (events, seconds).
fn child_keeping(label: &str, table: &Path, extra: &str, env: &[(&str, String)]) -> (String, (f64, f64)) {
    let topic = format!(
        "bench-{}-{}",
        std::process::id(),
        label.replace(|c: char| !c.is_ascii_alphanumeric(), "")
    );
    let result = tempfile::NamedTempFile::new().expect("result file");
    let status = Command::new(std::env::current_exe().expect("current exe"))
        .env("BENCH_CASE", label)
        .env("BENCH_TABLE", table)
        .env("BENCH_EXTRA", extra)
        .env("BENCH_TOPIC", &topic)
        .env("BENCH_RESULT", result.path())
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .status()
        .expect("spawn bench case");
    if !status.success() {
        delete_topics(&[topic.clone(), format!("{topic}-offsets")]);
        panic!("case {label} failed");
    }
    let text = std::fs::read_to_string(result.path()).unwrap_or_default();
    let f: Vec<f64> = text.split_whitespace().filter_map(|x| x.parse().ok()).collect();
    (
        topic,
        (f.first().copied().unwrap_or(0.0), f.get(1).copied().unwrap_or(1.0)),
    )
}

/// An end-to-end case, then the raw produce limit measured right after it with the same producer
/// settings and payloads sampled from its topic; prints the ratio of the two rates.
fn child_with_produce_limit(label: &str, table: &Path, extra: &str, count: u64) {
    let (topic, (events, secs)) = child_keeping(label, table, extra, &[]);
    let env = [
        ("BENCH_RAW_FROM", topic.clone()),
        ("BENCH_RAW_COUNT", count.to_string()),
    ];
    let (raw_topic, (n, raw_secs)) = child_keeping(
        "  raw produce limit (same producer, payloads sampled above)",
        table,
        extra,
        &env,
    );
    delete_topics(&[
        topic.clone(),
        format!("{topic}-offsets"),
        raw_topic.clone(),
        format!("{raw_topic}-offsets"),
    ]);
    let (rate, limit) = (events / secs, n / raw_secs);
    println!(
        "  end to end / raw produce limit: {:.0} / {:.0} events/s = {:.2}x",
        rate,
        limit,
        rate / limit
    );
}

/// The broker keeps every byte in RAM: drop a case's topics once it is measured.
fn delete_topics(topics: &[String]) {
    use rdkafka::admin::{AdminClient, AdminOptions};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set(
            "bootstrap.servers",
            std::env::var("KAFKA_BOOTSTRAP").expect("KAFKA_BOOTSTRAP"),
        )
        .create()
        .expect("admin client");
    let names: Vec<&str> = topics.iter().map(String::as_str).collect();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    if let Err(e) = rt.block_on(admin.delete_topics(&names, &AdminOptions::new())) {
        println!("(could not delete topics {names:?}: {e})");
    }
}

/// hudi-rs (PyPI `hudi`) reading the table's latest snapshot, read only, timed inside Python.
fn hudi_rs(label: &str, table: &Path) {
    let python = std::env::var("BENCH_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = "import sys, time, resource\nfrom hudi import HudiTableBuilder\nt0 = time.time()\n\
        rows = sum(b.num_rows for b in HudiTableBuilder.from_base_uri(sys.argv[1]).build().read())\n\
        s = time.time() - t0\nr = resource.getrusage(resource.RUSAGE_SELF)\n\
        print(f'{rows} {s:.3f} {r.ru_utime + r.ru_stime:.1f} {r.ru_maxrss / 1024:.0f}')";
    match Command::new(&python).arg("-c").arg(script).arg(table).output() {
        Ok(o) if o.status.success() => {
            let out = String::from_utf8_lossy(&o.stdout);
            let f: Vec<f64> = out.split_whitespace().filter_map(|x| x.parse().ok()).collect();
            if let [rows, secs, cpu, rss] = f[..] {
                println!(
                    "{label:<58} {rows:>9} rows (read only) {secs:>16.2} s {:>8.0} rows/s      cpu {cpu:>6.1} s  peak RSS {rss:>5.0} MiB",
                    rows / secs
                );
            }
        }
        _ => println!("(hudi-rs not available to {python}: {label} skipped)"),
    }
}

fn second_instant(table: &Path) -> String {
    let mut names = instants(table);
    names.sort();
    names.get(1).cloned().expect("a second instant")
}

fn instants(table: &Path) -> Vec<String> {
    ["", "timeline"]
        .iter()
        .filter_map(|d| std::fs::read_dir(table.join(".hoodie").join(d)).ok())
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str().map(String::from))
        .filter(|n| n.ends_with(".commit") || n.ends_with(".deltacommit"))
        .map(|n| n.split(['_', '.']).next().expect("instant").to_string())
        .collect()
}

/// A generated table of `rows` rows in 10 partitions and one upsert commit touching every file
/// group: `updated` of the rows updated, `deleted` deleted and as many inserted.
fn upsert_table(table_type: TableType, path: &Path, rows: usize, updated: f64, deleted: f64) -> GenerateOptions {
    GenerateOptions {
        table_type,
        path: path.to_path_buf(),
        rows,
        partitions: 10,
        commits: 1,
        interval: Duration::ZERO,
        update_fraction: updated,
        delete_fraction: deleted,
        insert_fraction: deleted,
        compact_every: 0,
        seed: 7,
        operation_field: false,
        repeat_updates: false,
        move_fraction: 0.0,
        index: generate::IndexKind::Simple,
        cdc: None,
    }
}

/// Generated COW and MOR tables of `rows` rows: full scan and the upsert instant alone.
fn generated_cases(dir: &Path, rows: usize) {
    let m = if rows % 1_000_000 == 0 {
        format!("{}M", rows / 1_000_000)
    } else {
        rows.to_string()
    };
    for table_type in [TableType::Cow, TableType::Mor] {
        let kind = if table_type == TableType::Cow { "COW" } else { "MOR" };
        let path = dir.join(format!("gen_{kind}_{rows}"));
        let t = Instant::now();
        generate::hudi(&upsert_table(table_type, &path, rows, 0.1, 0.01)).expect("generate");
        println!(
            "generated {rows}-row {kind} table (10 partitions) + 1 upsert commit in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        // the broker's own limit does not depend on the table: measured next to the smaller
        // cases only (sampling a 16M-record topic read_committed took noida-db over a minute)
        if rows <= 4_000_000 {
            child_with_produce_limit(
                &format!("{kind} {m} full scan"),
                &path,
                "read.start-commit=earliest\n",
                rows as u64,
            );
        } else {
            child(&format!("{kind} {m} full scan"), &path, "read.start-commit=earliest\n");
        }
        child(
            &format!("{kind} {m} upsert instant (every file group)"),
            &path,
            &format!("read.start-commit={}\n", second_instant(&path)),
        );
        if table_type == TableType::Mor {
            hudi_rs(&format!("hudi-rs {kind} {m} read (same table)"), &path);
        }
        let _ = std::fs::remove_dir_all(&path);
    }
}

fn main() {
    if let (Ok(label), Ok(table)) = (std::env::var("BENCH_CASE"), std::env::var("BENCH_TABLE")) {
        let extra = std::env::var("BENCH_EXTRA").unwrap_or_default();
        if let (Ok(from), Ok(n)) = (std::env::var("BENCH_RAW_FROM"), std::env::var("BENCH_RAW_COUNT")) {
            return run_raw(
                &label,
                Path::new(&table),
                &extra,
                &from,
                n.parse().expect("BENCH_RAW_COUNT"),
            );
        }
        return run_case(&label, Path::new(&table), &extra);
    }
    if std::env::var("KAFKA_BOOTSTRAP").is_err() || std::env::var("SCHEMA_REGISTRY_URL").is_err() {
        eprintln!("set KAFKA_BOOTSTRAP and SCHEMA_REGISTRY_URL (scripts/bench.sh does)");
        return;
    }
    let sizes: Vec<usize> = std::env::var("BENCH_SIZES")
        .unwrap_or_else(|_| "1000000,4000000,16000000".into())
        .split(',')
        .filter_map(|v| v.trim().parse().ok())
        .collect();
    let only = std::env::var("BENCH_ONLY").unwrap_or_default();
    let dir = tempfile::tempdir().expect("tempdir");
    if only.is_empty() || only.contains("perf") {
        perf_mor_cases(dir.path());
    }
    if only.is_empty() || only.contains("gen") {
        for rows in sizes {
            generated_cases(dir.path(), rows);
        }
    }
    if only.is_empty() || only.contains("change") {
        let sizes = std::env::var("BENCH_CHANGE_SIZES").unwrap_or_else(|_| "2000000,16000000".into());
        for rows in sizes.split(',').filter_map(|v| v.trim().parse().ok()) {
            change::change_cases(dir.path(), rows);
        }
    }
    if only.is_empty() || only.contains("iceberg") {
        let sizes = std::env::var("BENCH_ICEBERG_SIZES").unwrap_or_else(|_| "1000000".into());
        for rows in sizes.split(',').filter_map(|v| v.trim().parse().ok()) {
            iceberg_cases(dir.path(), rows);
        }
    }
    if only.is_empty() || only.contains("delta") {
        let sizes = std::env::var("BENCH_DELTA_SIZES").unwrap_or_else(|_| "1000000,4000000".into());
        for rows in sizes.split(',').filter_map(|v| v.trim().parse().ok()) {
            delta_cases(dir.path(), rows);
        }
    }
}

/// delta-rs tables (`scripts/gen_delta.py`): a snapshot, and the MERGE + DELETE versions as
/// changes read from change-data files (CDF on) and diffed from remove/add (CDF off).
fn delta_cases(dir: &Path, rows: usize) {
    let python = std::env::var("BENCH_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/gen_delta.py");
    let t = Instant::now();
    let out = Command::new(&python)
        .arg(&script)
        .arg(dir.join(format!("delta{rows}")))
        .arg(rows.to_string())
        .output();
    let tables: Vec<PathBuf> = match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout).lines().map(PathBuf::from).collect(),
        _ => {
            println!("(deltalake not available to {python}: Delta cases skipped; scripts/bench.sh sets BENCH_PYTHON)");
            return;
        }
    };
    println!(
        "generated two {rows}-row Delta tables with delta-rs (write, MERGE 10 % + 1 %, DELETE ~1 %) in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let (cdf, plain) = (&tables[0], &tables[1]);
    let class = "connector.class=delta\nkey.fields=id\n";
    let snapshot = format!("Delta {rows} snapshot (starting-version=earliest)");
    let extra = format!("{class}starting-version=earliest\n");
    if rows <= 1_000_000 {
        // the raw limit samples the topic back whole: only at the size the other formats use
        child_with_produce_limit(&snapshot, cdf, &extra, rows as u64);
    } else {
        child(&snapshot, cdf, &extra);
    }
    child(
        &format!("Delta {rows} MERGE + DELETE from change-data files"),
        cdf,
        &format!("{class}starting-version=1\n"),
    );
    child(
        &format!("Delta {rows} MERGE + DELETE diffed (CDF off)"),
        plain,
        &format!("{class}starting-version=1\n"),
    );
    // beyond the budget: changed keys first (narrow, the default) against key buckets (full)
    for mode in ["narrow", "full"] {
        child(
            &format!("Delta {rows} MERGE + DELETE diffed (CDF off), 32 MiB, {mode}"),
            plain,
            &format!("{class}starting-version=1\nread.memory.budget=32MiB\nread.change.detection={mode}\n"),
        );
    }
}

fn perf_mor_cases(dir: &Path) {
    let zip = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/hudi/generated/perf_mor_v8.zip");
    if !zip.exists() {
        println!(
            "(perf_mor_v8 fixture not found at {}: MOR fixture cases skipped)",
            zip.display()
        );
        return;
    }
    let ok = Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(&zip)
        .arg(dir)
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "cannot extract {}", zip.display());
    let mor = dir.join("perf_mor_v8");
    let mut names = instants(&mor);
    names.sort();
    let start = format!("read.start-commit={}\n", names[0]);
    hudi_rs("hudi-rs perf_mor_v8 read (same table)", &mor);
    child(
        "MOR perf_mor_v8 full scan (earliest)",
        &mor,
        "read.start-commit=earliest\n",
    );
    hudi_rs("hudi-rs perf_mor_v8 read (same table, again)", &mor);
    child(
        "MOR perf_mor_v8 changes, read.memory.budget=1GiB",
        &mor,
        &format!("{start}read.memory.budget=1GiB\n"),
    );
    child(
        "MOR perf_mor_v8 changes, read.memory.budget=4MiB",
        &mor,
        &format!("{start}read.memory.budget=4MiB\n"),
    );
}

fn iceberg_cases(dir: &Path, rows: usize) {
    let python = std::env::var("BENCH_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/gen_iceberg.py");
    let t = Instant::now();
    let out = Command::new(&python)
        .arg(&script)
        .arg(dir.join(format!("iceberg{rows}")))
        .arg(rows.to_string())
        .output();
    let table = match out {
        Ok(o) if o.status.success() => PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()),
        _ => {
            println!(
                "(pyiceberg not available to {python}: Iceberg cases skipped; scripts/bench.sh sets BENCH_PYTHON)"
            );
            return;
        }
    };
    println!(
        "generated {rows}-row Iceberg table with pyiceberg (append + copy-on-write delete of ~1%) in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    child_with_produce_limit(
        "Iceberg full scan (TABLE_SCAN_THEN_INCREMENTAL)",
        &table,
        "starting-strategy=TABLE_SCAN_THEN_INCREMENTAL\n",
        rows as u64,
    );
    // the copy-on-write delete beyond the budget: changed keys first (narrow, the default)
    // against key buckets (full)
    for mode in ["narrow", "full"] {
        child(
            &format!("Iceberg changes: append + CoW delete diffed, {mode}"),
            &table,
            &format!("starting-strategy=INCREMENTAL_FROM_EARLIEST_SNAPSHOT\nread.change.detection={mode}\n"),
        );
    }
}
