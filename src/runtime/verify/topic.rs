//! The topic side of a verify: the topic read whole (read_committed), each event decoded and
//! kept when its lake commit is at or before the verified position (a task may have published
//! later commits since), and spilled by key as a replay step. A tombstone follows its delete's
//! fate: one whose `d` came after the position is left out with it.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use tokio::runtime::Handle;

use super::runs::{Partitions, Rec, RunWriter, NO_PAYLOAD};
use super::VerifyError;
use crate::changelog::decode::{Columns, EventDecoder, Key};
use crate::config::ConnectorConfig;
use crate::metrics;
use crate::source::Position;

/// Whether a commit is at or before the position (`None`: the table no longer knows it, an
/// expired snapshot: counted, and kept, as it can only be older than what the table holds).
pub type OrderOf<'a> = dyn Fn(&Position) -> Option<bool> + 'a;

/// Whether this task owns an event, by its framed key (empty: keyless) and its table partition
/// (a resync of one task of several: see `RowOwner`).
pub type Mine<'a> = dyn Fn(&[u8], &str) -> bool + 'a;

/// [`Mine`] shared across threads.
pub type SharedMine = std::sync::Arc<dyn Fn(&[u8], &str) -> bool + Send + Sync>;

#[derive(Debug, Default)]
pub struct TopicSide {
    pub records: u64,
    /// Bytes of the records read (keys and values).
    pub bytes: u64,
    /// Events (and tombstones) replayed.
    pub applied: u64,
    /// Events of commits after the position, left out.
    pub after_position: u64,
    /// Commits of events the table no longer knows (expired snapshots).
    pub unknown_commits: Vec<String>,
    pub partitions: Partitions,
    pub paths: Vec<std::path::PathBuf>,
}

pub struct TopicReader<'a> {
    pub cfg: &'a ConnectorConfig,
    pub decoder: EventDecoder,
    pub handle: Handle,
    pub keyless: bool,
    pub at_or_before: &'a OrderOf<'a>,
    /// The table's image columns at the commit (from the table side; closed unsent: an empty
    /// table), which the digests are taken over, less `skip`.
    pub columns: std::sync::mpsc::Receiver<Vec<String>>,
    pub skip: std::collections::HashSet<String>,
    /// Where each partition's read ends: its watermarks taken after the position was read.
    pub ends: HashMap<i32, (i64, i64)>,
    /// Only the events this task owns (`None`: all).
    pub mine: Option<&'a Mine<'a>>,
}

struct State<'a> {
    /// The digests' columns are set (before the first image is digested).
    columns_set: bool,
    /// Keep/skip by commit (`commit_digest`).
    commits: HashMap<u128, bool>,
    skipped_deletes: HashSet<(i32, u128)>,
    side: TopicSide,
    out: RunWriter,
    reader: TopicReader<'a>,
}

impl State<'_> {
    /// Whether the event's commit is kept (looked up once per commit, by the digest of its
    /// strings, so a hit allocates nothing).
    fn keep(&mut self, instant: &str, completed: Option<&str>) -> bool {
        let k = commit_digest(instant, completed);
        if let Some(k) = self.commits.get(&k) {
            return *k;
        }
        let p = Position {
            version: instant.to_string(),
            completed: completed.map(str::to_string),
        };
        let keep = match (self.reader.at_or_before)(&p) {
            Some(b) => b,
            None => {
                self.side.unknown_commits.push(instant.to_string());
                true
            }
        };
        self.commits.insert(k, keep);
        keep
    }

    fn record(&mut self, partition: i32, key: Option<&[u8]>, value: Option<&[u8]>) -> Result<(), VerifyError> {
        self.side.records += 1;
        self.side.bytes += (key.map_or(0, <[u8]>::len) + value.map_or(0, <[u8]>::len)) as u64;
        let key_bytes = key;
        let key = match (key, self.reader.keyless) {
            (_, true) => None,
            (Some(k), false) => {
                self.reader.decoder.load_for(k, &self.reader.handle)?;
                Some(self.reader.decoder.key(k)?)
            }
            (None, false) => return Err(VerifyError::Topic("a record without a key in a keyed topic".into())),
        };
        let Some(value) = value else {
            return self.tombstone(partition, key);
        };
        self.reader.decoder.load_for(value, &self.reader.handle)?;
        if !self.columns_set {
            let keep = self.reader.columns.recv().ok().map(|c| c.into_iter().collect());
            let skip = self.reader.skip.clone();
            self.reader.decoder.set_columns(Columns { keep, skip });
            self.columns_set = true;
        }
        let e = self.reader.decoder.value(value)?;
        if let Some(mine) = self.reader.mine {
            if !mine(key_bytes.unwrap_or_default(), &e.partition) {
                return Ok(());
            }
        }
        if !self.keep(&e.instant, e.completed.as_deref()) {
            self.side.after_position += 1;
            if let (Some(k), "d") = (&key, e.op.as_str()) {
                if self.reader.cfg.events.tombstones_on_delete {
                    self.skipped_deletes.insert((partition, k.digest));
                }
            }
            return Ok(());
        }
        self.side.applied += 1;
        let partition = self.side.partitions.id(&e.partition);
        let commit = (crate::changelog::decode::digest(e.instant.as_bytes()) as u64).max(1);
        let op = e.op.as_bytes().first().copied().unwrap_or(0);
        let step = |key: u128, image: u128, delta: i8, text: String| Rec {
            key,
            image,
            delta,
            commit,
            op,
            partition,
            text,
            loc: NO_PAYLOAD,
        };
        // (an image's payload: the framed key and envelope it was read from)
        let payload = [key_bytes.unwrap_or_default(), value];
        match key {
            Some(k) => match (op, e.after) {
                (b'd', _) | (_, None) => self.push(step(k.digest, 0, 0, k.text)),
                (_, Some(after)) => self.push_image(step(k.digest, after, 1, k.text), &payload),
            },
            None => {
                if let Some(b) = e.before {
                    self.push(step(b, 0, -1, String::new()))?;
                }
                match e.after {
                    Some(a) => self.push_image(step(a, 0, 1, String::new()), &payload),
                    None => Ok(()),
                }
            }
        }
    }

    /// A tombstone of `key` (none in a keyless table's topic): one of a delete read past the
    /// position is skipped with it.
    fn tombstone(&mut self, partition: i32, key: Option<Key>) -> Result<(), VerifyError> {
        let Some(key) = key else {
            return Ok(());
        };
        if self.skipped_deletes.remove(&(partition, key.digest)) {
            self.side.after_position += 1;
            return Ok(());
        }
        self.side.applied += 1;
        let p = self.side.partitions.id("");
        self.push(Rec {
            key: key.digest,
            image: 0,
            delta: 0,
            commit: 0,
            op: 0,
            partition: p,
            text: key.text,
            loc: NO_PAYLOAD,
        })
    }

    fn push(&mut self, r: Rec) -> Result<(), VerifyError> {
        self.out.push(&r).map_err(VerifyError::spill)
    }

    /// A record with an image, its payload kept where the writer keeps them.
    fn push_image(&mut self, mut r: Rec, payload: &[&[u8]]) -> Result<(), VerifyError> {
        if self.out.keeps_payloads() {
            self.out.payload(&mut r, payload).map_err(VerifyError::spill)?;
        }
        self.push(r)
    }
}

/// A commit's identity in the keep/skip cache: its instant and completion time.
fn commit_digest(instant: &str, completed: Option<&str>) -> u128 {
    use crate::changelog::decode::digest;
    let c = completed.map_or(0, |c| digest(c.as_bytes()).rotate_left(1) | 1);
    digest(instant.as_bytes()) ^ c
}

/// Read the whole topic into `out` (blocking).
pub fn read(mut reader: TopicReader<'_>, out: RunWriter) -> Result<TopicSide, VerifyError> {
    let (cfg, topic, ends) = (
        reader.cfg,
        reader.cfg.kafka.topic.clone(),
        std::mem::take(&mut reader.ends),
    );
    let mut st = State {
        columns_set: false,
        commits: HashMap::new(),
        skipped_deletes: HashSet::new(),
        side: TopicSide::default(),
        out,
        reader,
    };
    let started = Instant::now();
    let gauge = metrics::VERIFY_PROGRESS.with_label_values(&[&cfg.name, metrics::VerifySide::Topic.label()]);
    let mut f = |r: crate::sink::scan::TopicRecord<'_>| {
        st.record(r.partition, r.key, r.value).map_err(|e| match e {
            VerifyError::Topic(m) => {
                VerifyError::Topic(format!("{topic} partition {} offset {}: {m}", r.partition, r.offset))
            }
            VerifyError::Changelog(c) => {
                VerifyError::Topic(format!("{topic} partition {} offset {}: {c}", r.partition, r.offset))
            }
            e => e,
        })
    };
    let read = crate::sink::scan::read_to_end(&cfg.sink(), &cfg.kafka.topic, &ends, &mut f, &mut |n| {
        gauge.set(n as f64);
        tracing::info!(connector = %cfg.name, records = n, seconds = started.elapsed().as_secs(), "verify: reading the topic");
    })?;
    gauge.set(read.records() as f64);
    let mut side = st.side;
    side.paths = st.out.finish().map_err(VerifyError::spill)?;
    tracing::info!(connector = %cfg.name, records = side.records, bytes = side.bytes, applied = side.applied, after_position = side.after_position,
        seconds = started.elapsed().as_secs_f64(), "verify: topic read");
    Ok(side)
}
