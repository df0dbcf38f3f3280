//! End-to-end benchmark: tables streamed into Kafka through the real pipeline (Parquet / log
//! blocks → merge → diff → Avro → registry → transactional producer), each case in its own child
//! process so that its peak RSS is its own.
//!
//! * a generated 1,000,000-row copy-on-write table (`BENCH_ROWS`) + one upsert commit: full scan,
//!   and change streaming (the bulk insert as 1M `c`, then the upsert diffed);
//! * the 1M-row merge-on-read fixture `perf_mor_v8` (5 rounds of 100k upserts in log files) as
//!   changes, with a small `read.memory.budget` (spilling) and a large one;
//! * a 1,000,000-row Iceberg table written by pyiceberg (`scripts/gen_iceberg.py`, run with
//!   `BENCH_PYTHON`): one append, then a copy-on-write delete of ~1% of rows rewriting every file:
//!   full scan, and changes (1M `c`, then the rewrite diffed into ~10k `d`).
//!
//! Needs `KAFKA_BOOTSTRAP` and `SCHEMA_REGISTRY_URL` (scripts/bench.sh starts both).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lakestream::config::load_connector;
use lakestream::generate::{self, GenerateOptions, TableType};
use lakestream::metrics;
use lakestream::runtime::{run_connector, RunOptions};

fn counter_sum(c: &prometheus::IntCounterVec, ops: &[&str]) -> u64 {
    ops.iter().map(|op| c.get_metric_with_label_values(&["bench", op]).map(|c| c.get()).unwrap_or(0)).sum()
}

fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok()))
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

/// Child: stream one table with the given extra properties and print one result line.
fn run_case(label: &str, table: &Path, extra: &str) {
    let dir = tempfile::tempdir().expect("tempdir");
    let topic = format!("bench-{}-{}", std::process::id(), label.replace(|c: char| !c.is_ascii_alphanumeric(), ""));
    let p = dir.path().join("bench.properties");
    std::fs::write(
        &p,
        format!(
            "name=bench\nconnector.class={}\ntable.path={}\ntopic={topic}\nbootstrap.servers={}\n\
             schema.registry.url={}\noffsets.storage.topic={topic}-offsets\nproducer.override.compression.type=lz4\n{extra}",
            if extra.contains("starting-strategy") { "iceberg" } else { "hudi" },
            table.display(),
            std::env::var("KAFKA_BOOTSTRAP").expect("KAFKA_BOOTSTRAP"),
            std::env::var("SCHEMA_REGISTRY_URL").expect("SCHEMA_REGISTRY_URL"),
        ),
    )
    .expect("write properties");
    let cfg = load_connector(&p, 0).expect("config");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let t = Instant::now();
    rt.block_on(run_connector(cfg, RunOptions { once: true, shutdown: rx })).expect("run");
    let secs = t.elapsed().as_secs_f64();
    let events = counter_sum(&metrics::RECORDS_POLLED, &["r", "c", "u", "d"]);
    let rows = metrics::ROWS_READ.get_metric_with_label_values(&["bench"]).map(|c| c.get()).unwrap_or(0);
    let spilled = metrics::SPILLED_BYTES.get_metric_with_label_values(&["bench"]).map(|c| c.get()).unwrap_or(0);
    println!(
        "{label:<58} {events:>9} events {rows:>9} rows read {secs:>6.2} s {:>8.0} events/s {:>8.0} rows read/s  peak RSS {:>5.0} MiB  spilled {:>4} MiB",
        events as f64 / secs,
        rows as f64 / secs,
        peak_rss_mib(),
        spilled >> 20
    );
}

fn child(label: &str, table: &Path, extra: &str) {
    let status = Command::new(std::env::current_exe().expect("current exe"))
        .env("BENCH_CASE", label)
        .env("BENCH_TABLE", table)
        .env("BENCH_EXTRA", extra)
        .status()
        .expect("spawn bench case");
    assert!(status.success(), "case {label} failed");
}

fn first_instant(table: &Path) -> String {
    let mut names: Vec<String> = ["", "timeline"]
        .iter()
        .filter_map(|d| std::fs::read_dir(table.join(".hoodie").join(d)).ok())
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str().map(String::from))
        .filter(|n| n.ends_with(".commit") || n.ends_with(".deltacommit"))
        .collect();
    names.sort();
    names[0].split(['_', '.']).next().expect("instant").to_string()
}

fn main() {
    if let (Ok(label), Ok(table)) = (std::env::var("BENCH_CASE"), std::env::var("BENCH_TABLE")) {
        return run_case(&label, Path::new(&table), &std::env::var("BENCH_EXTRA").unwrap_or_default());
    }
    if std::env::var("KAFKA_BOOTSTRAP").is_err() || std::env::var("SCHEMA_REGISTRY_URL").is_err() {
        eprintln!("set KAFKA_BOOTSTRAP and SCHEMA_REGISTRY_URL (scripts/bench.sh does)");
        return;
    }
    let rows: usize = std::env::var("BENCH_ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let cow = dir.path().join("bench_cow");
    let t = Instant::now();
    generate::hudi(&GenerateOptions {
        table_type: TableType::Cow,
        path: cow.clone(),
        rows,
        partitions: 10,
        commits: 1,
        interval: Duration::ZERO,
        update_fraction: 0.1,
        delete_fraction: 0.01,
        insert_fraction: 0.01,
        compact_every: 0,
        seed: 7,
        operation_field: false,
        repeat_updates: false,
    })
    .expect("generate");
    println!("generated {rows}-row COW table (10 partitions) + 1 upsert commit in {:.1} s", t.elapsed().as_secs_f64());
    child("COW full scan (earliest)", &cow, "read.start-commit=earliest\n");
    child("COW changes: bulk insert + upsert", &cow, &format!("read.start-commit={}\n", first_instant(&cow)));

    iceberg_cases(dir.path(), rows);

    let zip = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/hudi/generated/perf_mor_v8.zip");
    if !zip.exists() {
        println!("(perf_mor_v8 fixture not found at {}: MOR cases skipped)", zip.display());
        return;
    }
    let ok = Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(&zip)
        .arg(dir.path())
        .status()
        .is_ok_and(|s| s.success());
    assert!(ok, "cannot extract {}", zip.display());
    let mor = dir.path().join("perf_mor_v8");
    let start = format!("read.start-commit={}\n", first_instant(&mor));
    child("MOR perf_mor_v8 full scan (earliest), budget 256MiB", &mor, "read.start-commit=earliest\n");
    child("MOR perf_mor_v8 changes, read.memory.budget=1GiB", &mor, &format!("{start}read.memory.budget=1GiB\n"));
    child("MOR perf_mor_v8 changes, read.memory.budget=4MiB (spills)", &mor, &format!("{start}read.memory.budget=4MiB\n"));
}

fn iceberg_cases(dir: &Path, rows: usize) {
    let python = std::env::var("BENCH_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/gen_iceberg.py");
    let t = Instant::now();
    let out = Command::new(&python).arg(&script).arg(dir.join("iceberg")).arg(rows.to_string()).output();
    let table = match out {
        Ok(o) if o.status.success() => PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()),
        _ => {
            println!("(pyiceberg not available to {python}: Iceberg cases skipped; scripts/bench.sh sets BENCH_PYTHON)");
            return;
        }
    };
    println!("generated {rows}-row Iceberg table with pyiceberg (append + copy-on-write delete of ~1%) in {:.1} s", t.elapsed().as_secs_f64());
    child("Iceberg full scan (TABLE_SCAN_THEN_INCREMENTAL)", &table, "starting-strategy=TABLE_SCAN_THEN_INCREMENTAL\n");
    child("Iceberg changes: append + CoW delete diffed", &table, "starting-strategy=INCREMENTAL_FROM_EARLIEST_SNAPSHOT\n");
}
