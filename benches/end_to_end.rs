//! End-to-end benchmark: generate a Hudi table of `BENCH_ROWS` rows (default 1,000,000), stream it
//! into Kafka through the real pipeline (parquet → diff → Avro → registry → transactional
//! producer), and report rows/s for a full scan and for change streaming (first instant as 1M
//! inserts, then an upsert instant diffed against the previous file slices).
//!
//! Needs a broker and registry: `KAFKA_BOOTSTRAP`, `SCHEMA_REGISTRY_URL` (scripts/bench.sh starts both).

use std::path::Path;
use std::time::{Duration, Instant};

use lakestream::config::load_connector;
use lakestream::generate::{self, GenerateOptions, TableType};
use lakestream::metrics;
use lakestream::runtime::{run_connector, RunOptions};

fn events() -> u64 {
    ["r", "c", "u", "d"]
        .iter()
        .map(|op| {
            metrics::RECORDS_POLLED
                .get_metric_with_label_values(&["bench", op])
                .map(|c| c.get())
                .unwrap_or(0)
        })
        .sum()
}

fn rows_read() -> u64 {
    metrics::ROWS_READ.get_metric_with_label_values(&["bench"]).map(|c| c.get()).unwrap_or(0)
}

fn peak_rss_mb() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("VmHWM:")).map(|l| l.to_string()))
        .and_then(|l| l.split_whitespace().nth(1).and_then(|v| v.parse::<f64>().ok()))
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

fn props(dir: &Path, table: &Path, topic: &str, extra: &str) -> std::path::PathBuf {
    let p = dir.join(format!("{topic}.properties"));
    let body = format!(
        "name=bench\nconnector.class=hudi\ntable.path={}\ntopic={topic}\nbootstrap.servers={}\n\
         schema.registry.url={}\noffsets.storage.topic={topic}-offsets\nproducer.override.compression.type=lz4\n{extra}",
        table.display(),
        std::env::var("KAFKA_BOOTSTRAP").expect("KAFKA_BOOTSTRAP"),
        std::env::var("SCHEMA_REGISTRY_URL").expect("SCHEMA_REGISTRY_URL"),
    );
    std::fs::write(&p, body).expect("write properties");
    p
}

fn main() {
    if std::env::var("KAFKA_BOOTSTRAP").is_err() || std::env::var("SCHEMA_REGISTRY_URL").is_err() {
        eprintln!("set KAFKA_BOOTSTRAP and SCHEMA_REGISTRY_URL (scripts/bench.sh does)");
        return;
    }
    let rows: usize = std::env::var("BENCH_ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let table = dir.path().join("bench_table");
    let t = Instant::now();
    generate::hudi(&GenerateOptions {
        table_type: TableType::Cow,
        path: table.clone(),
        rows,
        partitions: 10,
        commits: 1,
        interval: Duration::ZERO,
        update_fraction: 0.1,
        delete_fraction: 0.01,
        insert_fraction: 0.01,
        seed: 7,
    })
    .expect("generate");
    println!("generated {rows} rows in 10 partitions + 1 upsert commit in {:.1} s", t.elapsed().as_secs_f64());
    let mut instants: Vec<String> = std::fs::read_dir(table.join(".hoodie"))
        .expect("timeline")
        .filter_map(|e| e.ok()?.file_name().to_str()?.strip_suffix(".commit").map(String::from))
        .collect();
    instants.sort();
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let run = |label: &str, topic: &str, extra: String| {
        let cfg = load_connector(&props(dir.path(), &table, topic, &extra), 0).expect("config");
        let (_tx, rx) = tokio::sync::watch::channel(false);
        let (e0, r0) = (events(), rows_read());
        let t = Instant::now();
        rt.block_on(run_connector(cfg, RunOptions { once: true, shutdown: rx })).expect("run");
        let secs = t.elapsed().as_secs_f64();
        let (e, r) = (events() - e0, rows_read() - r0);
        println!(
            "{label:<44} {e:>9} events {r:>9} rows read {secs:>7.2} s {:>10.0} events/s {:>10.0} rows read/s  peak RSS {:.0} MiB",
            e as f64 / secs,
            r as f64 / secs,
            peak_rss_mb()
        );
    };
    let suffix = std::process::id();
    run("full scan (read.start-commit=earliest)", &format!("bench-scan-{suffix}"), "read.start-commit=earliest\n".into());
    run(
        "changes: bulk insert + upsert instants",
        &format!("bench-changes-{suffix}"),
        format!("read.start-commit={}\n", instants[0]),
    );
}
