//! Change cost (`BENCH_ONLY=change`): one upsert instant touching every file group of a generated
//! table (10 partitions), at 1 % (1 % updated, 0.1 % deleted, 0.1 % inserted) and 10 % (10 %,
//! 1 %, 1 %), copy-on-write and merge-on-read, at each size in `BENCH_CHANGE_SIZES` (default 2M
//! and 16M rows). Each instant is read end to end into Kafka by lakestream with the default
//! `read.change.detection=narrow` and with `full`, and by hudi-rs's own incremental query of the
//! same instant (start = the instant before, end = the instant; it reads only the changed rows
//! and emits no deletes and no before images), timed inside Python; the ratio printed is hudi-rs
//! time / lakestream time (≥ 1: lakestream as fast). The narrow path and hudi-rs's query each run
//! `BENCH_CHANGE_RUNS` times (default 3) and their medians are the ones compared (one hudi-rs run
//! varied 0.10–0.26 s on the 2M merge-on-read 1 % case across benchmark runs). Each generated
//! table is flushed to disk before the first timed read, so no reader meets its writeback.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use lakestream::generate::{self, TableType};

/// hudi-rs's incremental query of `instant` (after `prev`): (rows, seconds, peak RSS MiB).
fn hudi_rs_incremental(table: &Path, prev: &str, instant: &str) -> Option<(f64, f64, f64)> {
    let python = std::env::var("BENCH_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = "import sys, time, resource\nfrom hudi import HudiTableBuilder, HudiReadOptions, HudiQueryType\n\
        t0 = time.time()\nt = HudiTableBuilder.from_base_uri(sys.argv[1]).build()\n\
        o = HudiReadOptions().with_query_type(HudiQueryType.Incremental).with_start_timestamp(sys.argv[2]).with_end_timestamp(sys.argv[3])\n\
        rows = sum(b.num_rows for b in t.read(o))\ns = time.time() - t0\n\
        r = resource.getrusage(resource.RUSAGE_SELF)\nprint(f'{rows} {s:.3f} {r.ru_maxrss / 1024:.0f}')";
    let o = Command::new(&python)
        .arg("-c")
        .arg(script)
        .arg(table)
        .arg(prev)
        .arg(instant)
        .output()
        .ok()?;
    if !o.status.success() {
        println!(
            "(hudi-rs incremental query failed: {})",
            String::from_utf8_lossy(&o.stderr)
        );
        return None;
    }
    let f: Vec<f64> = String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    match f[..] {
        [rows, secs, rss] => Some((rows, secs, rss)),
        _ => None,
    }
}

pub fn change_cases(dir: &Path, rows: usize) {
    let m = format!("{}M", rows / 1_000_000);
    let runs: usize = std::env::var("BENCH_CHANGE_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3)
        .max(1);
    for table_type in [TableType::Cow, TableType::Mor] {
        let kind = if table_type == TableType::Cow { "COW" } else { "MOR" };
        let mut one_pct = None;
        for (pct, u, d) in [("1 %", 0.01, 0.001), ("10 %", 0.1, 0.01)] {
            let path = dir.join(format!("change_{kind}_{rows}_{}", pct.replace([' ', '%'], "")));
            let t = Instant::now();
            generate::hudi(&super::upsert_table(table_type, &path, rows, u, d)).expect("generate");
            // (the first reads must not meet the generated files' writeback; later ones never did)
            let _ = Command::new("sync").status();
            let mut names = super::instants(&path);
            names.sort();
            let (prev, instant) = (names[0].clone(), names[1].clone());
            println!(
                "generated {m} {kind} table, {pct} change instant {instant} in {:.1} s",
                t.elapsed().as_secs_f64()
            );
            let start = format!("read.start-commit={instant}\n");
            // the narrow path's time is the median of a few runs (one run on a 2-core machine
            // varied by ±30 %, enough to move the 1 % / 10 % ratio across its bound)
            let mut times: Vec<f64> = (1..=runs)
                .map(|i| {
                    let label = format!("{kind} {m} {pct} change, narrow (run {i})");
                    super::child_kept_deleted(&label, &path, &start).1 .1
                })
                .collect();
            times.sort_by(f64::total_cmp);
            let narrow = times[times.len() / 2];
            println!("  narrow median of {runs}: {narrow:.2} s");
            let (_, (_, full)) = super::child_kept_deleted(
                &format!("{kind} {m} {pct} change, full diff"),
                &path,
                &format!("{start}read.change.detection=full\n"),
            );
            let mut hudi_rs: Vec<(f64, f64, f64)> = (0..runs)
                .filter_map(|_| hudi_rs_incremental(&path, &prev, &instant))
                .collect();
            hudi_rs.sort_by(|a, b| a.1.total_cmp(&b.1));
            if let Some(&(hrows, hsecs, hrss)) = hudi_rs.get(hudi_rs.len() / 2) {
                let all: Vec<String> = hudi_rs.iter().map(|h| format!("{:.2}", h.1)).collect();
                println!(
                    "{:<58} {hrows:>9} rows (changed rows only) {hsecs:>8.2} s  peak RSS {hrss:>5.0} MiB  (median of {}: {})",
                    format!("hudi-rs {kind} {m} {pct} incremental query"),
                    hudi_rs.len(),
                    all.join(", ")
                );
                println!(
                    "  hudi-rs / lakestream: narrow {:.2}x, full {:.2}x",
                    hsecs / narrow,
                    hsecs / full
                );
            }
            let _ = std::fs::remove_dir_all(&path);
            match one_pct {
                None => one_pct = Some(narrow),
                Some(one) => println!("  {kind} {m}: 1 % change / 10 % change = {:.2}", one / narrow),
            }
        }
    }
}
