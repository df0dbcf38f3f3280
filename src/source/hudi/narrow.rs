//! Change units that cost what changed, not what the file groups hold: *which* record keys a
//! unit may have changed is decided from narrow columns, then both sides of the unit are merged
//! and diffed for those keys only ([`KeyFilter`] on the slice reader, see
//! [`super::selection`]).
//!
//! The candidate keys of a unit ([`HudiSource::changed_keys`]), per file group it touched:
//! * **the base file did not change** (merge-on-read, log-only instant): the keys of the
//!   instant's own log blocks (data and delete blocks). A key outside them merges to the same row
//!   on both sides, whatever the merge mode.
//! * **a new base file** (copy-on-write, inserts into a new file group, compaction, clustering,
//!   overwrite): the new slice's live keys whose `_hoodie_commit_time` is the instant (carried-over
//!   rows keep theirs, so do compaction and clustering), plus the old slice's live keys missing
//!   from the new slice. Both slices are merged on their narrow columns only (key, commit time,
//!   ordering fields, soft-delete flag).
//!
//! The set is a superset of the keys whose events the unit has, and every row of a selected key
//! is read on both sides, in every file group of the unit (a key that moved or is duplicated
//! across file groups meets all its versions). So the diff of the restricted sides is the full
//! diff restricted to those keys: the same events, in the same order, whatever the path (and a
//! resumed unit may switch paths). Without a commit-time column (virtual keys) a rewritten file
//! group cannot say which rows are new: the unit then takes the full diff, logged and counted.

use std::sync::atomic::{AtomicUsize, Ordering};

use arrow_array::{Array, StringArray};

use super::carried::OldKeys;
use super::files::base_as_of;
use super::keys::{record_keys, row_hash, KeyFilter, RECORD_KEY};
use super::merge::SliceMerge;
use super::reader::UnitRead;
use super::slice::{FileCache, InstantBlock};
use super::HudiSource;
use crate::metrics;
use crate::source::buckets::DECODED_PER_FILE_BYTE;
use crate::source::SourceError;

const COMMIT_TIME: &str = "_hoodie_commit_time";

/// A base file's name and the row hashes of all its rows, in row order (see `keys`).
type Hashed = (String, Vec<u32>);

/// What the candidate-key pass found in one file group.
enum SplitCandidates {
    /// A log-only change: the instant's keys, and the rows and decoded bytes of its records.
    Logged { keys: KeyFilter, rows: u64, bytes: u64 },
    /// A rewritten base file: its candidate keys, the rows scanned, the files' bytes, and the
    /// row hashes of base-only slices (by file name).
    Rewritten {
        keys: KeyFilter,
        rows: u64,
        bytes: u64,
        hashed: Vec<Hashed>,
    },
    /// A rewritten file group without `_hoodie_commit_time`.
    NoCommitTime(String),
}

/// What the candidate-key pass of a unit found.
pub(super) struct Candidates {
    pub keys: KeyFilter,
    /// Each split's candidate keys (how many), in split order.
    pub split_keys: Vec<u64>,
    /// Decoded bytes a selected row is estimated to take (for the in-memory or bucketed choice).
    pub row_bytes: u64,
}

impl HudiSource {
    /// The candidate keys of a change unit (see the module doc); `None` where the unit must take
    /// the full diff (`read.change.detection=full`, or a rewritten file group without commit
    /// times).
    pub(super) fn changed_keys(&self, r: &UnitRead<'_>) -> Result<Option<Candidates>, SourceError> {
        if !self.read.narrow_changes || r.unit.snapshot {
            return Ok(None);
        }
        let instant = r.unit.position.version.as_str();
        let mut keys = KeyFilter::default();
        let (mut rows, mut bytes, mut sample) = (0u64, 0u64, (0u64, 0u64));
        let (mut no_commit_time, mut too_many) = (None, false);
        let mut split_keys = Vec::with_capacity(r.unit.splits.len());
        // the keys may take a quarter of the budget; beyond it the unit takes the full diff,
        // which spills to key buckets (bounded whatever the change)
        let limit = self.budget.get() / 4;
        // the row hashes of base-only slices (see `keys`) may take an eighth, taken as they are
        // made; the files beyond it take their key pass
        let room = AtomicUsize::new(self.budget.get() / 8);
        // file groups on several threads; their keys merged in split order
        let per_split = |s: usize| self.split_candidates(r, &r.unit.splits[s], &room);
        crate::source::parallel::ordered(r.unit.splits.len(), self.threads, &per_split, &mut |found| {
            let k = match found {
                SplitCandidates::Logged {
                    keys: k,
                    rows: n,
                    bytes: b,
                } => {
                    sample = (sample.0 + n, sample.1 + b);
                    k
                }
                SplitCandidates::Rewritten {
                    keys: k,
                    rows: n,
                    bytes: b,
                    hashed: h,
                } => {
                    rows += n;
                    bytes += b;
                    for (file, h) in h {
                        keys.keep_rows(file, h);
                    }
                    k
                }
                SplitCandidates::NoCommitTime(id) => {
                    no_commit_time.get_or_insert(id);
                    return Ok(());
                }
            };
            split_keys.push(k.len() as u64);
            too_many |= keys.bytes() + k.bytes() > limit;
            if !too_many && no_commit_time.is_none() {
                keys.extend(&k);
            }
            Ok(())
        })?;
        if self.takes_full_diff(instant, no_commit_time, too_many, limit) {
            return Ok(None);
        }
        let row_bytes = match sample {
            (n, b) if n > 0 => b / n,
            _ => (bytes * DECODED_PER_FILE_BYTE).checked_div(rows).unwrap_or(1024),
        };
        let row_bytes = row_bytes.max(64);
        tracing::debug!(connector = %self.connector, instant, keys = keys.len(), key_rows = rows, row_bytes, "change unit: candidate keys");
        Ok(Some(Candidates {
            keys,
            split_keys,
            row_bytes,
        }))
    }

    /// Whether the unit takes the full diff after all (logged and counted by reason): a file group
    /// without commit times, or changed keys beyond `limit` bytes.
    fn takes_full_diff(&self, instant: &str, no_commit_time: Option<String>, too_many: bool, limit: usize) -> bool {
        let (reason, why) = match (no_commit_time, too_many) {
            (Some(id), _) => (
                metrics::FullDiffReason::NoCommitTime,
                format!("file group {id} has no _hoodie_commit_time to tell new rows from carried-over ones"),
            ),
            (None, true) => (
                metrics::FullDiffReason::TooManyKeys,
                format!("its changed keys would take more than a quarter of read.memory.budget ({limit} bytes)"),
            ),
            (None, false) => return false,
        };
        tracing::info!(connector = %self.connector, instant, reason = reason.label(), "change unit: {why}; diffing whole file groups");
        metrics::FULL_DIFF_UNITS
            .with_label_values(&[&self.connector, reason.label()])
            .inc();
        true
    }

    /// One file group's candidate keys (see the module doc).
    fn split_candidates(
        &self,
        r: &UnitRead<'_>,
        sp: &crate::source::SplitSpec,
        room: &AtomicUsize,
    ) -> Result<SplitCandidates, SourceError> {
        let (instant, at) = (r.unit.position.version.as_str(), r.unit.position.order_key());
        let files = r.listings.partition(&sp.partition)?;
        let (base, logs) = files.group(&sp.reads);
        let replaced = r.is_replaced(sp);
        let old_base = base_as_of(base, r.tl, at, false).map(|b| &b.name);
        if replaced || old_base != base_as_of(base, r.tl, at, true).map(|b| &b.name) {
            let mut keys = KeyFilter::default();
            return Ok(
                match self.rewritten_keys(r, sp, replaced, !logs.is_empty(), instant, &mut keys, room)? {
                    Some((rows, bytes, hashed)) => SplitCandidates::Rewritten {
                        keys,
                        rows,
                        bytes,
                        hashed,
                    },
                    None => SplitCandidates::NoCommitTime(sp.id.clone()),
                },
            );
        }
        // log-only: the keys of this instant's blocks
        let cache = FileCache::default();
        let reader = self.slice_reader(r.tl, &cache);
        let (mut keys, mut rows, mut bytes) = (KeyFilter::default(), 0, 0);
        for block in reader.instant_blocks(&sp.partition, base, logs, at, instant)? {
            match block {
                InstantBlock::Data(batches) => {
                    for b in &batches {
                        rows += b.num_rows() as u64;
                        bytes += b.get_array_memory_size() as u64;
                        for k in record_keys(b)?.iter().flatten().flatten() {
                            keys.insert(k);
                        }
                    }
                }
                InstantBlock::Delete(deleted) => deleted.iter().for_each(|d| keys.insert(&d.record_key)),
            }
        }
        Ok(SplitCandidates::Logged { keys, rows, bytes })
    }

    /// The candidate keys of a file group whose base file the unit rewrote (or replaced): the new
    /// slice's keys written by `instant`, and the old slice's keys gone from the new one. Returns
    /// (rows scanned, bytes of the files, the row hashes of base-only slices), or `None` without
    /// a commit-time column. `has_logs`: the file group has log files (its slices have something
    /// to merge); `room`: what row hashes may still take.
    #[allow(clippy::too_many_arguments)]
    fn rewritten_keys(
        &self,
        r: &UnitRead<'_>,
        sp: &crate::source::SplitSpec,
        replaced: bool,
        has_logs: bool,
        instant: &str,
        out: &mut KeyFilter,
        room: &AtomicUsize,
    ) -> Result<Option<(u64, u64, Vec<Hashed>)>, SourceError> {
        let columns = self.narrow_columns(has_logs);
        let room = (!has_logs && !self.merge.virtual_keys).then_some(room);
        // the old slice's commit times decide nothing
        let old_columns: Vec<String> = columns.iter().filter(|c| *c != COMMIT_TIME).cloned().collect();
        // the old slice is read on a thread of its own, its keys handed over a few batches at a
        // time as the walk needs them (see `carried`)
        let (tx, rx) = std::sync::mpsc::sync_channel::<StringArray>(2);
        std::thread::scope(|scope| {
            let old_side = scope.spawn(move || -> Result<(u64, u64, Option<Hashed>), SourceError> {
                let old_cache = FileCache::streaming(Some(old_columns.clone()));
                let old_reader = self.slice_reader(r.tl, &old_cache);
                let Some(mut m) = self.open_slice(r, &old_reader, sp, false)? else {
                    return Ok((0, 0, None));
                };
                m.narrow(&old_columns);
                let (bytes, mut hung_up) = (m.bytes_read, false);
                let mut hashes = RowHashes::of(&m, room);
                let rows = m.run(&mut |b| match record_keys(&b)? {
                    Some(k) => {
                        hashes.add(&k);
                        tx.send(k).map_err(|_| {
                            // the walk failed and stopped listening (its error is the one returned)
                            hung_up = true;
                            SourceError::Stopped
                        })
                    }
                    None => Ok(()),
                });
                match rows {
                    Ok(rows) => Ok((rows, bytes, hashes.done())),
                    Err(SourceError::Stopped) if hung_up => Ok((0, bytes, None)),
                    Err(e) => Err(e),
                }
            });
            let mut old = OldKeys::new(rx.iter());
            let new_side = match replaced {
                true => Ok(Some((0, 0, None))),
                false => self.walk_new_slice(r, sp, &columns, instant, room, &mut old, out),
            };
            let new_side = match new_side {
                Ok(Some(found)) => {
                    if old.gave_up() {
                        tracing::debug!(connector = %self.connector, file_group = %sp.id, "rewritten file group not in its old order: deleted keys found by hash");
                    }
                    old.unmatched(out);
                    Some(found)
                }
                // the old side's thread stops at its next batch
                other => {
                    drop(old);
                    other?
                }
            };
            let (old_rows, old_bytes, old_hashes) = old_side.join().map_err(|_| SourceError::Unreadable {
                why: crate::source::Unreadable::Internal,
                message: format!("reading the old slice of file group {} panicked", sp.id),
            })??;
            Ok(new_side.map(|(rows, bytes, new_hashes)| {
                let hashed = old_hashes.into_iter().chain(new_hashes).collect();
                (rows + old_rows, bytes + old_bytes, hashed)
            }))
        })
    }

    /// The new slice of a rewritten file group met in file order by the walk over the old one:
    /// its keys written by `instant` into `out`. Returns (rows scanned, bytes of the files, its
    /// row hashes where it is base-only and they fit in `room`), or `None` without a commit-time
    /// column.
    #[allow(clippy::too_many_arguments)]
    fn walk_new_slice(
        &self,
        r: &UnitRead<'_>,
        sp: &crate::source::SplitSpec,
        columns: &[String],
        instant: &str,
        room: Option<&AtomicUsize>,
        old: &mut OldKeys<'_>,
        out: &mut KeyFilter,
    ) -> Result<Option<(u64, u64, Option<Hashed>)>, SourceError> {
        let cache = FileCache::streaming(Some(columns.to_vec()));
        let reader = self.slice_reader(r.tl, &cache);
        let Some(mut m) = self.open_slice(r, &reader, sp, true)? else {
            return Ok(Some((0, 0, None)));
        };
        m.narrow(columns);
        if m.schema().is_some_and(|s| s.index_of(COMMIT_TIME).is_err()) {
            return Ok(None);
        }
        let bytes = m.bytes_read;
        let mut missing_time = false;
        let mut hashes = RowHashes::of(&m, room);
        let rows = m.run(&mut |b| {
            let (Some(k), Some(t)) = (record_keys(&b)?, super::string_column(&b, COMMIT_TIME)) else {
                missing_time = true;
                return Ok(());
            };
            hashes.add(&k);
            for i in (0..b.num_rows()).filter(|&i| k.is_valid(i)) {
                let key = k.value(i);
                let written = !t.is_valid(i) || t.value(i) == instant;
                old.meet(key, written);
                if written {
                    out.insert(key);
                }
            }
            Ok(())
        })?;
        Ok((!missing_time).then(|| (rows, bytes, hashes.done())))
    }

    /// The columns that decide whether a row changed: record key (a virtual-key table's key
    /// fields), commit time, soft-delete flag, and where the file group has log files to merge
    /// the ordering fields and the rest of the delete columns (a base file alone needs neither:
    /// on a 2M-row copy-on-write table the ordering fields were a third of the candidate pass's
    /// decoding).
    fn narrow_columns(&self, has_logs: bool) -> Vec<String> {
        let mut c: Vec<String> = vec![RECORD_KEY.into(), COMMIT_TIME.into()];
        if has_logs {
            c.extend(self.merge.ordering.iter().cloned());
            c.extend(self.merge.delete_columns());
        } else {
            c.push("_hoodie_is_deleted".into());
        }
        if self.merge.virtual_keys {
            c.extend(self.merge.key_fields.iter().cloned());
        }
        c
    }
}

impl Candidates {
    /// A unit's restricted sides, held in memory, are about `2 × keys × row_bytes`.
    pub(super) fn restricted_bytes(&self) -> u64 {
        2 * self.keys.len() as u64 * self.row_bytes
    }
}

/// The row hashes of a base-only slice as the candidate pass meets its rows (see `keys`): kept
/// only while every row of the base file comes through in file order (no log to merge, no row
/// without a key) and while the unit's room for them lasts (taken as they grow, given back when
/// they are dropped); the selected read checks that they number the file's rows.
struct RowHashes<'a> {
    file: Option<String>,
    hashes: Vec<u32>,
    room: Option<&'a AtomicUsize>,
}

impl<'a> RowHashes<'a> {
    fn of(m: &SliceMerge<'_>, room: Option<&'a AtomicUsize>) -> Self {
        let base_only = m.blocks.is_empty() && m.cached.is_empty() && m.base.is_some();
        Self {
            file: m.file.clone().filter(|_| room.is_some() && base_only),
            hashes: Vec::new(),
            room,
        }
    }

    fn add(&mut self, keys: &StringArray) {
        let (Some(room), Some(_)) = (self.room, &self.file) else {
            return;
        };
        let need = keys.len() * std::mem::size_of::<u32>();
        // a row without a key is not selected by position: no room is taken for it
        if keys.null_count() > 0
            || room
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |r| r.checked_sub(need))
                .is_err()
        {
            self.drop_hashes();
            return;
        }
        self.hashes.extend((0..keys.len()).map(|i| row_hash(keys.value(i))));
    }

    fn drop_hashes(&mut self) {
        if let Some(room) = self.room {
            room.fetch_add(self.hashes.len() * std::mem::size_of::<u32>(), Ordering::Relaxed);
        }
        (self.file, self.hashes) = (None, Vec::new());
    }

    fn done(self) -> Option<Hashed> {
        self.file.map(|f| (f, self.hashes))
    }
}
