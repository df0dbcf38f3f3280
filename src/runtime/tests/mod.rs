//! The task loop end to end without a broker: an in-memory [`Cluster`] whose sinks keep
//! committed transactions in one log (fencing by transactional id, faults injected by commit
//! number, a shutdown raised at a chosen moment), a small Schema Registry on a local port, and a
//! Hudi table written by `generate`. Each test compares what its interrupted runs committed with
//! what one uninterrupted run commits, event by event per key, in order: nothing lost, nothing
//! twice, nothing reordered.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use apache_avro::types::Value as AV;
use tokio::sync::watch;

use super::{run_connector, tasks::FirstUnits, RunOptions};
use crate::config::ConnectorConfig;
use crate::health::Health;
use crate::sink::Cluster;

mod fake;
use fake::{FakeCluster, Fault, Record};

/// A registry answering registrations (ids from 1, one per distinct schema); the schemas by id.
async fn registry() -> (String, Arc<Mutex<Vec<String>>>) {
    use axum::extract::State;
    use axum::Json;
    let schemas: Arc<Mutex<Vec<String>>> = Default::default();
    async fn register(
        State(s): State<Arc<Mutex<Vec<String>>>>,
        Json(body): Json<serde_json::Value>,
    ) -> Json<serde_json::Value> {
        let schema = body["schema"].as_str().unwrap_or_default().to_string();
        let mut all = s.lock().unwrap();
        let id = match all.iter().position(|x| *x == schema) {
            Some(i) => i + 1,
            None => {
                all.push(schema);
                all.len()
            }
        };
        Json(serde_json::json!({ "id": id }))
    }
    let app = axum::Router::new()
        .route("/subjects/{subject}/versions", axum::routing::post(register))
        .with_state(schemas.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, schemas)
}

/// A partitioned copy-on-write table: a bulk insert, then upserts and deletes.
fn table(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("t");
    crate::generate::hudi(&crate::generate::GenerateOptions {
        rows: 300,
        partitions: 3,
        commits: 4,
        update_fraction: 0.2,
        delete_fraction: 0.05,
        insert_fraction: 0.1,
        seed: 7,
        ..crate::generate::GenerateOptions::defaults(crate::generate::TableType::Cow, path.clone())
    })
    .unwrap();
    path
}

/// The table's first instant: starting there emits every commit as changes.
fn first_instant(table: &Path) -> String {
    let mut commits: Vec<String> = std::fs::read_dir(table.join(".hoodie"))
        .unwrap()
        .filter_map(|e| {
            e.unwrap()
                .file_name()
                .to_str()?
                .strip_suffix(".commit")
                .map(str::to_string)
        })
        .collect();
    commits.sort();
    assert!(commits.len() > 3, "{commits:?}");
    commits.swap_remove(0)
}

/// The connector over `table` from its first instant (`extra`: more properties).
fn config(dir: &Path, table: &Path, registry: &str, extra: &str) -> ConnectorConfig {
    let extra = if extra.contains("read.start-commit") {
        extra.to_string()
    } else {
        format!("read.start-commit={}\n{extra}", first_instant(table))
    };
    let file = dir.join(format!(
        "c{:x}.properties",
        crate::source::Ownership::partition_hash(&extra)
    ));
    std::fs::write(
        &file,
        format!(
            "name=rt\nconnector.class=hudi\ntable.path={}\ntopic=rt.events\nbootstrap.servers=127.0.0.1:9\n\
             schema.registry.url={registry}\ntransaction.max.records=23\n{extra}\n",
            table.display()
        ),
    )
    .unwrap();
    crate::config::load_connector(&file, 0).unwrap()
}

/// Run `tasks` tasks of `cfg` against `cluster` until they have emitted everything (or shutdown
/// is raised): each task's result.
async fn run(cfg: &ConnectorConfig, cluster: &FakeCluster, shutdown: Option<watch::Receiver<bool>>) -> Vec<bool> {
    // (a dropped sender would read as shutdown)
    let (_keep, rx) = watch::channel(false);
    let opts = RunOptions {
        once: true,
        shutdown: shutdown.unwrap_or(rx),
        health: Health::new(),
        first_units: Arc::new(FirstUnits::default()),
        cluster: Arc::new(cluster.clone()),
        polls: Default::default(),
        instance: crate::runtime::state::Holder::this_process(),
        memory: Default::default(),
    };
    let runs = (0..cfg.runtime.tasks).map(|t| run_connector(cfg.for_task(t), opts.clone()));
    futures::future::join_all(runs)
        .await
        .into_iter()
        .map(|r| r.map_err(|e| eprintln!("task failed: {e}")).is_ok())
        .collect()
}

/// The change events of `log` per Kafka key, in order, decoded (the event time `ts_ms`, which
/// differs from run to run, left out; `tombstone` for a null value).
fn events(log: &[Record], topic: &str, schemas: &Mutex<Vec<String>>) -> HashMap<Vec<u8>, Vec<String>> {
    let schemas = schemas.lock().unwrap().clone();
    let mut out: HashMap<Vec<u8>, Vec<String>> = HashMap::new();
    for (t, k, v) in log.iter().filter(|(t, ..)| t == topic) {
        let _ = t;
        let shown = match v {
            None => "tombstone".to_string(),
            Some(v) => {
                let id = u32::from_be_bytes(v[1..5].try_into().unwrap()) as usize;
                let schema = apache_avro::Schema::parse_str(&schemas[id - 1]).unwrap();
                let value = apache_avro::reader::datum::GenericDatumReader::builder(&schema)
                    .build()
                    .and_then(|r| r.read_value(&mut &v[5..]))
                    .unwrap();
                let AV::Record(fields) = value else { panic!("{value:?}") };
                let kept: Vec<_> = fields.into_iter().filter(|(n, _)| n != "ts_ms").collect();
                format!("{kept:?}")
            }
        };
        out.entry(k.clone()).or_default().push(shown);
    }
    out
}

/// What one uninterrupted single-task run commits, per key.
async fn reference(
    dir: &Path,
    table: &Path,
    url: &str,
    schemas: &Mutex<Vec<String>>,
    extra: &str,
) -> HashMap<Vec<u8>, Vec<String>> {
    let cfg = config(dir, table, url, extra);
    let cluster = FakeCluster::default();
    assert_eq!(run(&cfg, &cluster, None).await, vec![true]);
    let ev = events(&cluster.log(), &cfg.kafka.topic, schemas);
    let n: usize = ev.values().map(Vec::len).sum();
    assert!(ev.len() > 300, "{} keys, {n} events", ev.len());
    if !extra.contains("earliest") {
        assert!(n > ev.len() * 3 / 2, "{} keys, {n} events: too few changes", ev.len());
    }
    ev
}

fn assert_same(got: &HashMap<Vec<u8>, Vec<String>>, want: &HashMap<Vec<u8>, Vec<String>>, what: &str) {
    let (mut missing, mut differ) = (0, 0);
    for (k, w) in want {
        match got.get(k) {
            None => missing += 1,
            Some(g) if g != w => {
                if differ == 0 {
                    eprintln!("{what}: first differing key's events:\n got  {g:?}\n want {w:?}");
                }
                differ += 1
            }
            _ => {}
        }
    }
    let extra = got.keys().filter(|k| !want.contains_key(*k)).count();
    assert_eq!(
        (missing, differ, extra),
        (0, 0, 0),
        "{what}: keys missing, with other events, extra"
    );
}

/// The latest offsets record's in-flight unit (whether the stop left a unit half emitted).
fn stopped_mid_unit(cluster: &FakeCluster, cfg: &ConnectorConfig) -> bool {
    let all = cluster
        .read_offsets(&cfg.sink(), &|_| true, crate::sink::ReadTo::Settled)
        .unwrap();
    all.values().any(|r| {
        serde_json::from_slice::<super::state::Offsets>(&r.value)
            .unwrap()
            .in_flight
            .is_some_and(|f| f.splits.values().any(|s| s.consumed > 0))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_mid_split_resumes_without_loss_or_duplicates() {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path());
    let (url, schemas) = registry().await;
    for start in ["", "read.start-commit=earliest"] {
        let want = reference(dir.path(), &table, &url, &schemas, start).await;
        let cfg = config(dir.path(), &table, &url, start);
        let total: usize = want.values().map(Vec::len).sum();
        let mut mid_unit = 0;
        for stop_at in [1, total / 10, total / 2, total * 9 / 10].map(|n| n as u64) {
            let cluster = FakeCluster::default();
            let (tx, rx) = watch::channel(false);
            cluster.lock().stop_after_sends = Some((stop_at, tx));
            assert_eq!(run(&cfg, &cluster, Some(rx)).await, vec![true]);
            let n = events(&cluster.log(), &cfg.kafka.topic, &schemas)
                .values()
                .map(Vec::len)
                .sum::<usize>();
            assert!(
                n < total,
                "{start}: stop after {stop_at} sends: the run did not stop early"
            );
            mid_unit += stopped_mid_unit(&cluster, &cfg) as usize;
            assert_eq!(run(&cfg, &cluster, None).await, vec![true]);
            assert_same(
                &events(&cluster.log(), &cfg.kafka.topic, &schemas),
                &want,
                &format!("{start}: shutdown after {stop_at} records"),
            );
        }
        assert!(mid_unit >= 2, "{start}: only {mid_unit} stops left a unit half emitted");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aborted_and_ambiguous_commits_are_replayed_from_the_committed_position() {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path());
    let (url, schemas) = registry().await;
    let want = reference(dir.path(), &table, &url, &schemas, "").await;
    let cfg = config(dir.path(), &table, &url, "");
    let cluster = FakeCluster::default();
    cluster.lock().faults = [
        (2, Fault::Abort),
        (5, Fault::Ambiguous),
        (6, Fault::Abort),
        (11, Fault::Ambiguous),
    ]
    .into_iter()
    .collect();
    assert_eq!(run(&cfg, &cluster, None).await, vec![true]);
    assert!(cluster.lock().attempts > 11, "every fault was met");
    assert_same(
        &events(&cluster.log(), &cfg.kafka.topic, &schemas),
        &want,
        "after faults",
    );
}

/// A commit whose answer is lost, by a broker that landed its change records without its position
/// record: resuming from the older position would publish those changes again. The task stops
/// (a position error, not ridden out), naming both, and publishes nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_transaction_of_unknown_outcome_stops_the_task_instead_of_publishing_twice() {
    let (cluster, text) = stops_on(&[(4, Fault::Torn)], "torn").await;
    assert!(text.contains("committed") && text.contains("aborted"), "{text}");
    assert_eq!(
        cluster.lock().attempts,
        4,
        "nothing committed after the torn transaction"
    );
    assert!(!cluster.log().is_empty());
}

/// Run the connector against a broker with `faults` (by commit attempt): it must stop with a
/// position error (not ridden out) whose message `says` and names a change-topic offset.
/// Brokers that let a failed transaction's records through: found by fingerprint (none was
/// acknowledged) before anything is published again (`Leaky`), or once republished beside their
/// copies (`Kept`: noida-db's aborted-epoch batches, committed with the next transaction).
async fn stops_on(faults: &[(usize, Fault)], says: &str) -> (FakeCluster, String) {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path());
    let (url, _schemas) = registry().await;
    let cfg = config(dir.path(), &table, &url, "");
    let cluster = FakeCluster::default();
    cluster.lock().faults = faults.iter().copied().collect();
    let (_keep, rx) = watch::channel(false);
    let opts = RunOptions {
        once: true,
        shutdown: rx,
        health: Health::new(),
        first_units: Arc::new(FirstUnits::default()),
        cluster: Arc::new(cluster.clone()),
        polls: Default::default(),
        instance: crate::runtime::state::Holder::this_process(),
        memory: Default::default(),
    };
    let err = run_connector(cfg.clone(), opts)
        .await
        .expect_err("a broker that broke a transaction must stop the task");
    assert_eq!(err.kind(), crate::error::ErrorKind::Position, "{err}");
    let text = err.to_string();
    assert!(
        text.contains(says) && text.contains(&format!("{}/0@", cfg.kafka.topic)),
        "{text}"
    );
    (cluster, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_an_aborted_transaction_made_visible_stop_the_task_before_republishing() {
    let (cluster, _) = stops_on(&[(4, Fault::Leaky)], "visible read_committed").await;
    assert_eq!(
        cluster.lock().attempts,
        4,
        "nothing committed after the aborted transaction"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_an_aborted_transaction_committed_later_stop_the_task_once_seen_twice() {
    let (cluster, _) = stops_on(&[(4, Fault::Kept)], "holds them twice").await;
    assert!(cluster.lock().attempts > 4, "republished before the broker showed them");
}

/// The same, with the run that republishes failing once more before its watch was due: the next
/// run watches on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_outlives_a_second_failure() {
    let (cluster, _) = stops_on(&[(4, Fault::Kept), (5, Fault::Abort)], "holds them twice").await;
    assert!(cluster.lock().attempts > 5, "republished before the broker showed them");
}

/// A connector stopped mid-unit under one `tasks.max` and resumed under another: the new
/// generation fences the old one and takes over from its positions.
async fn handoff(ownership: &str, from: u32, to: u32) {
    let dir = tempfile::tempdir().unwrap();
    let table = table(dir.path());
    let (url, schemas) = registry().await;
    let want = reference(dir.path(), &table, &url, &schemas, "").await;
    let before = config(
        dir.path(),
        &table,
        &url,
        &format!("tasks.ownership={ownership}\ntasks.max={from}"),
    );
    let after = config(
        dir.path(),
        &table,
        &url,
        &format!("tasks.ownership={ownership}\ntasks.max={to}\n"),
    );
    for stop_at in [40, 250] {
        let cluster = FakeCluster::default();
        let (tx, rx) = watch::channel(false);
        cluster.lock().stop_after_sends = Some((stop_at, tx));
        assert!(run(&before, &cluster, Some(rx)).await.iter().all(|ok| *ok));
        assert!(
            stopped_mid_unit(&cluster, &before),
            "stop after {stop_at}: no unit half emitted"
        );
        assert!(run(&after, &cluster, None).await.iter().all(|ok| *ok));
        assert_same(
            &events(&cluster.log(), &after.kafka.topic, &schemas),
            &want,
            &format!("{ownership}: {from} -> {to} tasks, stopped after {stop_at} records"),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoff_to_more_tasks_by_key() {
    handoff("key", 1, 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handoff_to_fewer_tasks_by_partition() {
    handoff("partition", 2, 1).await;
}
