//! Tasks and generations. `tasks.max=N` runs N tasks over one table. A row belongs to one task:
//! by key (`hash(key) % N`: every task reads every split and keeps its keys) or, where the
//! source says a row's identity cannot leave its partition, by partition (`hash(partition) % N`:
//! a task reads only its partitions' splits) — either way every event of a key comes from one
//! task, in order. Each task has its own transactional producer and offsets record. Changing N or
//! the scheme starts a new generation (epoch + 1): its tasks fence the previous generation's
//! transactional ids, then take over from the previous generation's positions — a row's events up
//! to its old owner's position are not emitted again.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::state::{read_offsets_matching, FirstUnit, Handoff, InFlight, Offsets, OldTask};
use super::RuntimeError;
use crate::config::ConnectorConfig;
use crate::error::Joined;
use crate::sink::{Cluster, ReadTo};
use crate::source::{Ownership, Position, Source};

/// A generation's shape: its `tasks.max` and how it divides the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Shape {
    tasks: u32,
    ownership: Ownership,
}

impl Shape {
    /// This task's generation shape (`ownership`: the scheme resolved at start).
    fn of(cfg: &ConnectorConfig, ownership: Ownership) -> Shape {
        Shape {
            tasks: cfg.runtime.tasks,
            ownership,
        }
    }

    /// The generation's `tasks.max` (records of older builds: 0, one task).
    pub(crate) fn tasks(&self) -> u32 {
        self.tasks
    }

    /// Task `task`'s record key in a generation of `tasks` tasks dividing by key (tests).
    #[cfg(test)]
    pub(crate) fn by_key(tasks: u32, task: u32) -> (Shape, u32) {
        (
            Shape {
                tasks,
                ownership: Ownership::Key,
            },
            task,
        )
    }
}

pub(crate) type Records = HashMap<(Shape, u32), Offsets>;

/// Every committed offsets record of this connector and table, by (shape, task).
fn read_generations(cluster: &dyn Cluster, cfg: &ConnectorConfig, to: ReadTo) -> Result<Records, RuntimeError> {
    let parse = |k: &[u8]| -> Option<(u32, u32)> {
        let v: serde_json::Value = serde_json::from_slice(k).ok()?;
        let (name, part) = (v.get(0)?.as_str()?, v.get(1)?);
        if name != cfg.name || part.get("table")?.as_str()? != cfg.table_id {
            return None;
        }
        let task = part.get("task")?.as_u64()? as u32;
        let tasks = part.get("tasks").and_then(|t| t.as_u64()).unwrap_or(1) as u32;
        Some((tasks, task))
    };
    let all = read_offsets_matching(cluster, cfg, &|k| parse(k).is_some(), to)?;
    Ok(all
        .into_iter()
        .filter_map(|(k, o)| {
            parse(&k).map(|(tasks, task)| {
                (
                    (
                        Shape {
                            tasks,
                            ownership: o.ownership,
                        },
                        task,
                    ),
                    o,
                )
            })
        })
        .collect())
}

/// The records of generation `epoch` (of `tasks` tasks), a missing task's record filled in with
/// the state it would have started from (it never committed).
fn generation(
    cfg: &ConnectorConfig,
    source: &Arc<dyn Source>,
    all: &Records,
    shape: Shape,
    epoch: u64,
) -> Result<BTreeMap<u32, Offsets>, RuntimeError> {
    let mut out = BTreeMap::new();
    for j in 0..shape.tasks {
        let o = match all.get(&(shape, j)).filter(|o| o.epoch == epoch) {
            Some(o) => o.clone(),
            None => initial(cfg, source, all, shape, j, epoch)?,
        };
        out.insert(j, o);
    }
    Ok(out)
}

/// The state task `task` of generation `epoch` starts from: fresh in the first generation, else a
/// handoff from the generation before.
fn initial(
    cfg: &ConnectorConfig,
    source: &Arc<dyn Source>,
    all: &Records,
    shape: Shape,
    task: u32,
    epoch: u64,
) -> Result<Offsets, RuntimeError> {
    let prev = all.values().map(|o| o.epoch).filter(|e| *e < epoch).max();
    match prev {
        None => Ok(Offsets {
            tasks: shape.tasks,
            ownership: shape.ownership,
            epoch,
            ..Default::default()
        }),
        Some(prev) => {
            let prev_shape = generation_shape(all, prev);
            let old = generation(cfg, source, all, prev_shape, prev)?;
            handoff_state(cfg, source, (shape, task), prev_shape, old, epoch)
        }
    }
}

/// The shape of a generation (records of older builds have tasks 0: one task, by key).
fn generation_shape(all: &Records, epoch: u64) -> Shape {
    let of = all
        .iter()
        .filter(|(_, o)| o.epoch == epoch)
        .map(|((s, _), _)| *s)
        .max_by_key(|s| s.tasks);
    of.map(|s| Shape {
        tasks: s.tasks.max(1),
        ..s
    })
    .unwrap_or(Shape {
        tasks: 1,
        ownership: Ownership::Key,
    })
}

fn handoff_state(
    cfg: &ConnectorConfig,
    source: &Arc<dyn Source>,
    (new, task): (Shape, u32),
    shape: Shape,
    old: BTreeMap<u32, Offsets>,
    epoch: u64,
) -> Result<Offsets, RuntimeError> {
    let (tasks, new_tasks) = (shape.tasks, new.tasks);
    let stuck = |why: &str, undo: String, until: &str| stuck_change(&cfg.name, (shape, new), why, &undo, until);
    // no old task got anywhere: nothing to hand over
    if old.values().all(Offsets::is_fresh) {
        return Ok(Offsets {
            tasks: new_tasks,
            ownership: new.ownership,
            epoch,
            ..Default::default()
        });
    }
    // the unit an old task half emitted would be cut into other splits now: its progress could
    // not be matched row by row
    let half_emitted = old
        .values()
        .filter_map(|o| o.in_flight.as_ref())
        .find(|f| !f.splits.is_empty());
    if let (true, Some(f)) = (
        shape.ownership != new.ownership && source.splits_follow_ownership(),
        half_emitted,
    ) {
        let why = format!(
            "a task of the old generation had unit {} half emitted (its splits are cut by the scheme)",
            f.unit.version
        );
        let undo = format!("tasks.ownership={}", shape.ownership.name());
        return Err(stuck(&why, undo, "that unit is emitted"));
    }
    let first = first_unit(&old).map_err(|()| {
        let undo = format!("tasks.max={tasks} tasks.ownership={}", shape.ownership.name());
        stuck(
            "its tasks started from different first units",
            undo,
            "its first unit is emitted",
        )
    })?;
    let start = match first {
        Some(_) => None,
        None => earliest_issued(source.as_ref(), &old)?,
    };
    // the key the published events carry goes with the position: the new generation is checked against it
    let key = old
        .values()
        .map(|o| o.key.clone())
        .find(|k| !k.is_empty())
        .unwrap_or_default();
    let old_tasks = old.into_iter().map(|(j, o)| (j, OldTask::of(o, &start))).collect();
    tracing::info!(connector = %cfg.name, task, from_tasks = tasks, to_tasks = new_tasks, epoch,
        start = %start.as_ref().map_or("none", |p| p.version.as_str()), first = %first.as_ref().map_or("none", |f| f.unit.version.as_str()),
        from_ownership = %shape.ownership.name(), to_ownership = %new.ownership.name(),
        "tasks.max or ownership changed: taking over from the previous generation");
    Ok(Offsets {
        issued: start,
        in_flight: first.as_ref().map(|f| InFlight::new(f.unit.clone(), f.snapshot)),
        tasks: new_tasks,
        ownership: new.ownership,
        epoch,
        handoff: Some(Handoff {
            tasks,
            ownership: shape.ownership,
            old: old_tasks,
        }),
        first,
        key,
        ..Default::default()
    })
}

/// A task change the stored positions cannot follow yet: why, and what to run until when.
fn stuck_change(connector: &str, (from, to): (Shape, Shape), why: &str, undo: &str, until: &str) -> RuntimeError {
    RuntimeError::Position(format!(
        "connector {connector}: the tasks changed (tasks.max {} → {}, divided by {} → by {}), but {why}; run it with \
         {undo} until {until}, then make the change",
        from.tasks,
        to.tasks,
        from.ownership.name(),
        to.ownership.name()
    ))
}

/// A task that has not finished its first unit: the new task redoes that unit (the same one
/// every old task started with) for the keys it had not emitted. `Err` when the old tasks
/// started from different first units.
fn first_unit(old: &BTreeMap<u32, Offsets>) -> Result<Option<FirstUnit>, ()> {
    if !old.values().any(|o| o.issued.is_none()) {
        return Ok(None);
    }
    let mut firsts: Vec<FirstUnit> = Vec::new();
    let in_flight_firsts = old.values().filter(|o| o.issued.is_none()).filter_map(|o| {
        o.in_flight.as_ref().map(|f| FirstUnit {
            unit: f.unit.clone(),
            snapshot: f.snapshot,
        })
    });
    for f in old.values().filter_map(|o| o.first.clone()).chain(in_flight_firsts) {
        if !firsts.contains(&f) {
            firsts.push(f);
        }
    }
    match firsts.as_slice() {
        [f] => Ok(Some(f.clone())),
        [] => Ok(None),
        _ => Err(()),
    }
}

/// The earliest position an old task issued, in the table's order: the new generation starts
/// there, and the old tasks further on hand over their progress.
fn earliest_issued(source: &dyn Source, old: &BTreeMap<u32, Offsets>) -> Result<Option<Position>, RuntimeError> {
    let mut start: Option<(crate::source::HistoryOrder, Position)> = None;
    for p in old.values().filter_map(|o| o.issued.as_ref()) {
        let k = source.order(p)?;
        if start.as_ref().is_none_or(|(sk, _)| k < *sk) {
            start = Some((k, p.clone()));
        }
    }
    Ok(start.map(|s| s.1))
}

/// The scheme a task runs under, given the scheme of the connector's newest stored generation:
/// the source's, but where the source divides by partition only because the `auto` Kafka key
/// carries the partition path, a connector already dividing by key hash keeps dividing by key
/// hash (a scheme change nobody asked for would start a new generation).
pub fn kept_ownership(source: &dyn Source, newest: Option<Ownership>) -> Ownership {
    match newest {
        Some(Ownership::Key) if source.partition_ownership_from_key() => Ownership::Key,
        _ => source.ownership(),
    }
}

/// [`kept_ownership`], the newest generation read from the offsets topic (only where the rule
/// can apply).
pub(crate) async fn effective_ownership(
    cluster: &Arc<dyn Cluster>,
    cfg: &ConnectorConfig,
    source: &Arc<dyn Source>,
    stable: Option<&Records>,
) -> Result<Ownership, RuntimeError> {
    if !source.partition_ownership_from_key() {
        return Ok(source.ownership());
    }
    let read;
    let all = match stable {
        Some(all) => all,
        None => {
            read = read_offsets(cluster, cfg, ReadTo::Stable).await?;
            &read
        }
    };
    let kept = kept_ownership(
        source.as_ref(),
        all.values().max_by_key(|o| o.epoch).map(|o| o.ownership),
    );
    if kept != source.ownership() {
        tracing::info!(connector = %cfg.name, "tasks keep dividing the table by key hash, as this connector already does \
            (a fresh connector with this key divides by partition)");
    }
    Ok(kept)
}

/// [`read_generations`] on a blocking thread.
pub(crate) async fn read_offsets(
    cluster: &Arc<dyn Cluster>,
    cfg: &ConnectorConfig,
    to: ReadTo,
) -> Result<Records, RuntimeError> {
    let (cl, c) = (cluster.clone(), cfg.clone());
    let t = std::time::Instant::now();
    let r = tokio::task::spawn_blocking(move || read_generations(cl.as_ref(), &c, to))
        .await
        .joined();
    tracing::debug!(ms = t.elapsed().as_millis() as u64, ?to, "offsets read");
    r
}

/// Where this task starts (and whether that state is new, to be committed at once): its own
/// record, a fresh start, or a handoff from the previous generation, whose transactional ids are
/// fenced first so none of its tasks can still commit. `stable`: a [`ReadTo::Stable`] read taken after
/// this task's producer was initialised, when the caller has one.
pub(crate) async fn resume_state(
    cluster: &Arc<dyn Cluster>,
    cfg: &ConnectorConfig,
    ownership: Ownership,
    source: &Arc<dyn Source>,
    stable: Option<Records>,
) -> Result<(Offsets, bool), RuntimeError> {
    // what is committed now: enough to learn the newest generation (an older generation's
    // zombie transaction, which only fencing ends, is not waited for)
    let all = match stable {
        Some(all) => all,
        None => read_offsets(cluster, cfg, ReadTo::Stable).await?,
    };
    let newest = all.values().map(|o| o.epoch).max();
    let (shape, i) = (Shape::of(cfg, ownership), cfg.runtime.task_id);
    let epoch = match newest {
        None => {
            return Ok((
                Offsets {
                    tasks: shape.tasks,
                    ownership: shape.ownership,
                    ..Default::default()
                },
                true,
            ))
        }
        Some(e) if generation_shape(&all, e) == shape => {
            // our own record, read again once every transaction below the end is settled (our
            // producer is initialised: a commit of ours whose outcome we did not learn is in it)
            let settled = match all.get(&(shape, i)).filter(|o| o.epoch == e) {
                Some(_) => read_offsets(cluster, cfg, ReadTo::Settled).await?,
                None => all,
            };
            if let Some(own) = settled.get(&(shape, i)).filter(|o| o.epoch == e) {
                return Ok((
                    Offsets {
                        tasks: shape.tasks,
                        ..own.clone()
                    },
                    false,
                ));
            }
            e
        }
        Some(e) => {
            let old = generation_shape(&all, e);
            for j in 0..old.tasks {
                let id = cfg.transactional_id_for(old.tasks, j, old.ownership == Ownership::Partition);
                if id != cfg.transactional_id(ownership == Ownership::Partition) {
                    cluster.fence(&cfg.sink(), &id).await?;
                }
            }
            e + 1
        }
    };
    // read again: the fenced generation can no longer change its records
    let all = read_offsets(cluster, cfg, ReadTo::Settled).await?;
    let (src, cfg) = (source.clone(), cfg.clone());
    let state = tokio::task::spawn_blocking(move || initial(&cfg, &src, &all, shape, i, epoch))
        .await
        .joined()?;
    Ok((state, true))
}

/// Task 0's first unit per connector, for the other tasks of a fresh connector in the same
/// process (`None` inside: task 0 found nothing to emit yet). One per process, handed to every
/// task in [`super::RunOptions`].
#[derive(Default)]
pub struct FirstUnits {
    by_connector: parking_lot::Mutex<HashMap<String, tokio::sync::watch::Sender<Option<Option<FirstUnit>>>>>,
}

impl FirstUnits {
    fn channel(&self, cfg: &ConnectorConfig) -> tokio::sync::watch::Sender<Option<Option<FirstUnit>>> {
        let key = format!("{}\u{0}{}", cfg.name, cfg.table_id);
        self.by_connector
            .lock()
            .entry(key)
            .or_insert_with(|| tokio::sync::watch::channel(None).0)
            .clone()
    }

    /// Task 0 chose its first unit (`None`: nothing to emit yet).
    pub fn publish(&self, cfg: &ConnectorConfig, first: Option<FirstUnit>) {
        self.channel(cfg).send_replace(Some(first));
    }
}

/// Task 0's first unit: from this process when task 0 runs here, else from its offsets record.
/// Waits up to a minute; `None` when task 0 has none (the task then applies the start strategy).
pub async fn first_unit_of_task0(
    units: &FirstUnits,
    cluster: &Arc<dyn Cluster>,
    cfg: &ConnectorConfig,
    ownership: Ownership,
) -> Option<FirstUnit> {
    let mut rx = units.channel(cfg).subscribe();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Some(v) = rx.borrow().clone() {
            return v;
        }
        let (c, cl) = (cfg.clone(), cluster.clone());
        let recorded = tokio::task::spawn_blocking(move || read_generations(cl.as_ref(), &c, ReadTo::Stable))
            .await
            .ok()?
            .ok()?;
        if let Some(f) = recorded
            .get(&(Shape::of(cfg, ownership), 0))
            .and_then(|o| o.first.clone())
        {
            return Some(f);
        }
        if tokio::time::Instant::now() > deadline {
            tracing::warn!(connector = %cfg.name, task = cfg.runtime.task_id, "task 0 chose no first unit within a minute; applying the start strategy here");
            return None;
        }
        let _ = tokio::time::timeout(std::time::Duration::from_millis(500), rx.changed()).await;
    }
}
