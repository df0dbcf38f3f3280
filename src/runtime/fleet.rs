//! A discovering connector at run time (issue 61): every table its prefix or catalog holds
//! streams as a member — a connector of its own in all but the file
//! (`config::TablesConfig::member`), run by the same task loop — and tables are looked for again
//! every `table.discovery.interval`: a
//! table that appears starts streaming (its start strategy applies), a table that is gone stops
//! its stream (its offsets kept: were it to come back, it resumes where it stood).
//!
//! A member that cannot be streamed for what it is — its format or its key unsupported, its
//! settings not fitting it (the failure's kind is `Unsupported` or `Config`) — is skipped, named
//! and counted, never fatal to the others. Any other failure stops that member loudly (its status
//! `FAILED`, the error logged) while the others go on, and the process's exit code says it when
//! it ends: never 0 over a table that was not read.
//!
//! Each pod runs the members' tasks that the rendezvous placement gives it, decided from the
//! member's own name (as for connectors of their own files in a pool; with or without `--pool`:
//! under the modulo rule every table's task 0 would land on pod 0).

use std::collections::BTreeMap;

use tokio::sync::watch;
use tokio::task::JoinSet;

use super::placement::{select_tasks, Rule};
use super::{run_connector, RunOptions, RuntimeError};
use crate::config::{ConnectorConfig, Found, TablesConfig, View};
use crate::error::ErrorKind;
use crate::metrics::{self, SearchOutcome, TableState};
use crate::source::discover::Searcher;
use crate::storage::Storage;

/// Which tasks this process runs (the `run` flags).
#[derive(Debug, Clone, Copy)]
pub struct Placement {
    pub ordinal: Option<u32>,
    pub replicas: Option<u32>,
}

/// How a member's task ended: the member's name and the task's result.
type MemberEnd = (String, Result<(), RuntimeError>);

/// A member streaming here: its config (task 0), the stop of its tasks and how many still run.
struct Streaming {
    cfg: ConnectorConfig,
    stop: watch::Sender<bool>,
    tasks: usize,
    /// Dropped from the view: its tasks were asked to stop.
    dropped: bool,
}

/// The search's storage handle (a prefix's listings, a catalog's signing credentials), its
/// requests counted under the connector's name.
pub fn storage_of(t: &TablesConfig) -> Storage {
    let name = t.name.clone();
    let requests = crate::storage::requests::Requests::new(move |op| {
        metrics::STORAGE_REQUESTS.with_label_values(&[name.as_str(), op.label()])
    });
    Storage::with_requests(t.storage.clone(), requests)
}

/// One search, and what it means against the members streaming (`None`: the first).
pub fn search(
    t: &TablesConfig,
    storage: &Storage,
    searcher: &mut Searcher,
    running: Option<&[ConnectorConfig]>,
) -> Result<(Vec<Found>, View), RuntimeError> {
    let found = searcher.search(&t.discovery, storage);
    let outcome = if found.is_ok() {
        SearchOutcome::Ok
    } else {
        SearchOutcome::Error
    };
    metrics::DISCOVERIES
        .with_label_values(&[&t.name, outcome.label()])
        .inc();
    let found = found?;
    let view = t.view(&found, running)?;
    Ok((found, view))
}

/// A discovering connector and what its first search found (at start, before anything runs: a
/// collision, or a prefix or catalog that cannot be listed, stops the start).
pub struct Discovered {
    pub tables: TablesConfig,
    pub view: View,
    found: Vec<Found>,
    searcher: Searcher,
}

impl Discovered {
    /// Not searched (`validate --offline`): no table.
    pub fn unsearched(tables: TablesConfig) -> Self {
        Discovered {
            tables,
            view: View::default(),
            found: Vec::new(),
            searcher: Searcher::default(),
        }
    }

    pub fn first(tables: TablesConfig) -> Result<Self, RuntimeError> {
        let mut searcher = Searcher::default();
        let (found, view) = search(&tables, &storage_of(&tables), &mut searcher, None)?;
        Ok(Discovered {
            tables,
            view,
            found,
            searcher,
        })
    }
}

/// The stream of one discovered table, by its `namespace.table` (`--table` of `verify` and
/// `offsets`): the tables are looked for as `run` looks for them, and the table's stream is the
/// one `run` streams it as (its offsets, its transactional id).
pub fn member_named(t: TablesConfig, table: &str) -> Result<ConnectorConfig, RuntimeError> {
    let d = Discovered::first(t)?;
    let want = format!("{}/{table}", d.tables.name);
    if let Some(m) = d.view.members.iter().find(|m| m.name == want) {
        return Ok(m.clone());
    }
    let why = match d.view.skipped.iter().find(|(q, _)| q == table) {
        Some((_, why)) => format!("table `{table}` is found but not streamed: {why}"),
        None => {
            let names: Vec<&str> = d
                .view
                .members
                .iter()
                .map(|m| &m.name[d.tables.name.len() + 1..])
                .collect();
            let shown = names.iter().take(20).copied().collect::<Vec<_>>().join(", ");
            format!(
                "no table `{table}` streams in {} (the include and exclude lists apply); {} do: {shown}{}",
                d.tables.discovery.search.describe(),
                names.len(),
                if names.len() > 20 { ", ..." } else { "" }
            )
        }
    };
    Err(RuntimeError::Usage(format!("{}: {why}", d.tables.file.display())))
}

/// Stream the members of the first search's view and of every later search, until the process
/// shuts down (or, `--once`, until the first view's members caught up).
pub async fn run_tables(first: Discovered, opts: RunOptions, place: Placement) -> Result<(), RuntimeError> {
    let Discovered {
        tables: t,
        view: first,
        found,
        searcher,
    } = first;
    let storage = storage_of(&t);
    let mut fleet = Fleet {
        t: &t,
        opts: opts.clone(),
        place,
        streaming: BTreeMap::new(),
        found: BTreeMap::new(),
        set: JoinSet::new(),
        skipped: BTreeMap::new(),
        done: Default::default(),
        failed: 0,
        dropped: 0,
        worst: None,
        searcher: std::sync::Arc::new(parking_lot::Mutex::new(searcher)),
    };
    fleet.apply(first, found);
    let mut shutdown = opts.shutdown.clone();
    let mut tick = tokio::time::interval(t.discovery.interval);
    tick.tick().await;
    loop {
        fleet.gauges();
        if fleet.set.is_empty() && opts.once {
            break;
        }
        tokio::select! {
            joined = fleet.set.join_next(), if !fleet.set.is_empty() => fleet.ended(joined, &storage).await,
            _ = tick.tick(), if !opts.once => {
                let running: Vec<ConnectorConfig> = fleet.streaming.values().filter(|s| !s.dropped).map(|s| s.cfg.clone()).collect();
                let (tc, st, se) = (t.clone(), storage.clone(), fleet.searcher.clone());
                match tokio::task::spawn_blocking(move || search(&tc, &st, &mut se.lock(), Some(&running))).await {
                    Ok(Ok((found, view))) => fleet.apply(view, found),
                    Ok(Err(e)) => tracing::warn!(connector = %t.name, error = %crate::causes::with_causes(&e), "table discovery failed: the tables found before stream on; searching again at the next interval"),
                    Err(e) => tracing::error!(connector = %t.name, error = %e, "table discovery panicked"),
                }
            }
            _ = shutdown.changed() => {
                for s in fleet.streaming.values() {
                    let _ = s.stop.send(true);
                }
                while let Some(joined) = fleet.set.join_next().await {
                    fleet.ended(Some(joined), &storage).await;
                }
                break;
            }
        }
    }
    fleet.gauges();
    match fleet.worst {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

struct Fleet<'a> {
    t: &'a TablesConfig,
    opts: RunOptions,
    place: Placement,
    streaming: BTreeMap<String, Streaming>,
    /// Where each member's table was found (to tell a dropped table from a failed one).
    found: BTreeMap<String, Found>,
    set: JoinSet<MemberEnd>,
    /// Tables not streamed, by qualified name, with why (kept for the gauges and logged once).
    skipped: BTreeMap<String, String>,
    /// Members skipped or failed once they ran, by name: not started again until the process
    /// restarts.
    done: std::collections::HashSet<String>,
    failed: usize,
    dropped: usize,
    worst: Option<RuntimeError>,
    searcher: std::sync::Arc<parking_lot::Mutex<Searcher>>,
}

impl Fleet<'_> {
    /// Start the view's new members and stop those it no longer has.
    fn apply(&mut self, view: View, found: Vec<Found>) {
        for f in found {
            self.found.insert(self.t.member_name(&f), f);
        }
        for (table, why) in view.skipped {
            if self.skipped.insert(table.clone(), why.clone()).is_none() {
                tracing::warn!(connector = %self.t.name, %table, reason = %why, "table skipped");
            }
        }
        let names: std::collections::HashSet<String> = view.members.iter().map(|m| m.name.clone()).collect();
        for (name, s) in self
            .streaming
            .iter_mut()
            .filter(|(n, s)| !names.contains(*n) && !s.dropped)
        {
            tracing::warn!(connector = %self.t.name, member = %name, "table dropped or renamed: its stream stops, its offsets kept");
            s.dropped = true;
            self.dropped += 1;
            let _ = s.stop.send(true);
        }
        for m in view.members {
            if self.streaming.contains_key(&m.name) || self.done.contains(&m.name) {
                continue;
            }
            self.start(m);
        }
    }

    fn start(&mut self, m: ConnectorConfig) {
        // rendezvous whatever the rule: under modulo every table's task 0 would land on pod 0
        let mine = select_tasks(
            std::slice::from_ref(&m),
            self.place.ordinal,
            self.place.replicas,
            Rule::Pool,
        );
        if mine.is_empty() {
            return;
        }
        tracing::info!(connector = %self.t.name, member = %m.name, topic = %m.kafka.topic, tasks = mine.len(), "table streaming");
        let (stop, rx) = watch::channel(false);
        for cfg in &mine {
            let mut opts = self.opts.clone();
            opts.shutdown = rx.clone();
            let (cfg, name) = (cfg.clone(), m.name.clone());
            self.set.spawn(async move { (name, run_connector(cfg, opts).await) });
        }
        let tasks = mine.len();
        self.streaming.insert(
            m.name.clone(),
            Streaming {
                cfg: m,
                stop,
                tasks,
                dropped: false,
            },
        );
    }

    /// A member's task ended: a table gone or dropped stops quietly; one that cannot be streamed
    /// is skipped; any other failure is the member's, kept for the exit code.
    async fn ended(&mut self, joined: Option<Result<MemberEnd, tokio::task::JoinError>>, storage: &Storage) {
        let (name, res) = match joined {
            Some(Ok(x)) => x,
            // a bug: the process's own handling of a panic (exit 1) applies
            Some(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Some(Err(_)) | None => return,
        };
        let Some(s) = self.streaming.get_mut(&name) else {
            return;
        };
        s.tasks -= 1;
        let dropped = s.dropped;
        if s.tasks == 0 {
            self.streaming.remove(&name);
        }
        let e = match res {
            Err(e) if e.kind() != ErrorKind::Stopped => e,
            _ => {
                // ended of itself (its read.end-commit / end-snapshot-id / ending-version reached):
                // not started again by the next search
                if !dropped && !*self.opts.shutdown.borrow() {
                    self.done.insert(name);
                }
                return;
            }
        };
        let gone = match self.found.get(&name) {
            Some(f) => {
                let (f, st, se, d) = (
                    f.clone(),
                    storage.clone(),
                    self.searcher.clone(),
                    self.t.discovery.clone(),
                );
                !tokio::task::spawn_blocking(move || se.lock().exists(&d, &f, &st))
                    .await
                    .unwrap_or(true)
            }
            None => false,
        };
        let text = crate::causes::with_causes(&e);
        if dropped || gone {
            if !dropped {
                self.dropped += 1;
                tracing::warn!(connector = %self.t.name, member = %name, error = %text, "table dropped: its stream stops, its offsets kept");
            }
            if let Some(s) = self.streaming.get_mut(&name) {
                s.dropped = true;
                let _ = s.stop.send(true);
            }
            return;
        }
        // the member's other tasks stop too: a table is streamed whole or not at all
        if let Some(s) = self.streaming.get_mut(&name) {
            let _ = s.stop.send(true);
        }
        if self.done.insert(name.clone()) {
            let table = name
                .strip_prefix(&format!("{}/", self.t.name))
                .unwrap_or(&name)
                .to_string();
            if matches!(e.kind(), ErrorKind::Config | ErrorKind::Unsupported) {
                tracing::warn!(connector = %self.t.name, %table, reason = %text, "table skipped: it cannot be streamed as it is");
                self.skipped.insert(table, text);
            } else {
                tracing::error!(connector = %self.t.name, member = %name, error = %text, "table failed: its stream stopped");
                self.failed += 1;
                self.worst.get_or_insert(e);
            }
        }
    }

    fn gauges(&self) {
        let streaming = self.streaming.values().filter(|s| !s.dropped).count();
        for (state, n) in [
            (TableState::Streaming, streaming),
            (TableState::Skipped, self.skipped.len()),
            (TableState::Dropped, self.dropped),
            (TableState::Failed, self.failed),
        ] {
            metrics::TABLES
                .with_label_values(&[&self.t.name, state.label()])
                .set(n as f64);
        }
    }
}
