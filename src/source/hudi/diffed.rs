//! Change units diffed in memory: both sides of the unit's file groups merged, then one keyed
//! diff ([`crate::source::rows::diff`]).
//!
//! Where the Kafka key carries the partition path (`key.partition-path`, or `auto` without a
//! global index), an identity never leaves its partition, so the unit is diffed **partition by
//! partition**: each group of splits alone gives exactly the events the whole-unit diff gives
//! its splits, in the same order (a key moving between file groups of one partition still meets
//! both rows). Groups are read on the reading threads while earlier ones are emitted, so
//! producing starts after the first partition rather than after the whole unit, and a unit whose
//! two sides would not fit in `read.memory.budget` stays in memory as long as a few of its
//! partitions do (before, it was diffed in key buckets on disk: each row written and read back).
//! A resumed unit skips the groups whose splits were all emitted.

use std::collections::HashSet;
use std::ops::Range;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::files::base_as_of;
use super::narrow::Candidates;
use super::reader::{one_group, UnitRead};
use super::slice::{FileCache, SliceState};
use super::{join_path, HudiSource};
use crate::source::buckets::{buckets_for, restrict, DECODED_PER_FILE_BYTE};
use crate::source::parallel;
use crate::source::rows::{conform, nullable};
use crate::source::sides::SplitSides;
use crate::source::{ChangeRow, SourceError, SplitChanges, SplitSpec, Unit};

impl HudiSource {
    /// Both sides of `splits`, read on `threads` threads, conformed to `target` (else to the
    /// newest file's schema, every column nullable).
    fn load_sides(
        &self,
        r: &UnitRead<'_>,
        splits: &[SplitSpec],
        cache: &FileCache,
        threads: usize,
        target: Option<&SchemaRef>,
    ) -> Result<SplitSides, SourceError> {
        let unit = r.unit;
        let mut raw: Vec<(usize, bool, SchemaRef, Vec<RecordBatch>)> = Vec::new();
        let mut sides = SplitSides::new(splits.len());
        // split by split (each thread with its share of the budget), kept in order
        let read_split = |s: usize| -> Result<[Option<PlannedSide>; 2], SourceError> {
            let (sp, mut reader) = (&splits[s], self.unit_reader(r, cache));
            reader.spill.budget /= self.threads.max(1);
            // (the slice's planned schema: a side whose selected keys left no rows still has one)
            let side = |inclusive: bool| -> Result<Option<PlannedSide>, SourceError> {
                let merge = self.open_slice(r, &reader, sp, inclusive)?;
                merge
                    .map(|m| {
                        let schema = m.schema().cloned();
                        m.collect().map(|st| (schema, st))
                    })
                    .transpose()
            };
            let old = if unit.snapshot { None } else { side(false)? };
            let new = if r.is_replaced(sp) { None } else { side(true)? };
            Ok([old, new])
        };
        let mut s = 0;
        parallel::ordered(splits.len(), threads, &read_split, &mut |pair| {
            for (is_new, st) in [false, true].into_iter().zip(pair) {
                let Some((schema, st)) = st else { continue };
                sides.rows_read[s] += st.rows_read;
                sides.bytes_read[s] += st.bytes_read;
                if let Some(f) = &st.file {
                    if is_new || sides.file[s].is_empty() {
                        sides.file[s] = join_path(&splits[s].partition, f);
                    }
                }
                if let Some(schema) = schema.or_else(|| st.batches.first().map(|b| b.schema())) {
                    raw.push((s, is_new, schema, st.batches));
                }
            }
            s += 1;
            Ok(())
        })?;
        // the unit's value schema: the newest file's, every column nullable
        let target = target.cloned().or_else(|| {
            raw.iter()
                .rev()
                .find(|r| r.1)
                .or(raw.last())
                .map(|r| nullable(&r.2, &[]))
        });
        // (state batches are already conformed per slice; this aligns slices of different ages)
        if let Some(target) = target {
            for (s, is_new, _, batches) in raw {
                for b in batches {
                    sides.push(s, is_new, conform(&b, &target)?);
                }
            }
        }
        Ok(sides)
    }

    /// One split diffed alone (its previous slice against its new one): (batches, change rows,
    /// newest file, rows read).
    pub(super) fn diff_split(
        &self,
        r: &UnitRead<'_>,
        sp: &SplitSpec,
        cache: &FileCache,
    ) -> Result<(Vec<RecordBatch>, Vec<ChangeRow>, String, u64), SourceError> {
        let sides = self.load_sides(r, std::slice::from_ref(sp), cache, self.threads, None)?;
        let Some(first) = sides.batches.first() else {
            return Ok((Vec::new(), Vec::new(), String::new(), 0));
        };
        let (keys, order) = self.key_columns(&first.schema())?;
        let rows = sides.diff(&keys, order)?.remove(0);
        Ok((sides.batches, rows, sides.file[0].clone(), sides.rows_read[0]))
    }

    /// The groups of splits a change unit is diffed in (see the module doc): runs of one
    /// partition where the Kafka key carries the partition path and each partition's splits are
    /// adjacent, else the whole unit.
    pub(super) fn diff_groups(&self, unit: &Unit) -> Vec<Range<usize>> {
        let n = unit.splits.len();
        if !self.keyed_by_partition() || n < 2 {
            return one_group(n);
        }
        let mut groups: Vec<Range<usize>> = Vec::new();
        let mut seen = HashSet::new();
        for (s, sp) in unit.splits.iter().enumerate() {
            match groups.last_mut() {
                Some(g) if unit.splits[g.start].partition == sp.partition => g.end = s + 1,
                _ if !seen.insert(sp.partition.as_str()) => return one_group(n),
                _ => groups.push(s..s + 1),
            }
        }
        groups
    }

    /// Whether the unit's groups each fit in memory with a few read ahead (else the whole unit
    /// is diffed in key buckets on disk): decoded sides estimated from the candidate keys, or
    /// from the files' sizes.
    pub(super) fn groups_fit(
        &self,
        r: &UnitRead<'_>,
        groups: &[Range<usize>],
        candidates: Option<&Candidates>,
    ) -> Result<bool, SourceError> {
        if groups.len() < 2 {
            return Ok(false);
        }
        let mut largest = 0u64;
        for g in groups {
            let mut bytes = 0;
            for s in g.clone() {
                bytes += match candidates {
                    Some(c) => 2 * c.split_keys[s] * c.row_bytes,
                    None => self.split_file_bytes(r, &r.unit.splits[s])? * DECODED_PER_FILE_BYTE,
                };
            }
            largest = largest.max(bytes);
        }
        // one group per reading thread and one being emitted, each with the diff's indexes
        Ok(buckets_for((self.threads as u64 + 1) * largest, self.budget.get()) == 1)
    }

    /// The bytes of a split's files on both sides of the unit (from the listing: no request).
    pub(super) fn split_file_bytes(&self, r: &UnitRead<'_>, sp: &SplitSpec) -> Result<u64, SourceError> {
        let at = r.unit.position.order_key();
        let files = r.listings.partition(&sp.partition)?;
        let (base, logs) = files.group(&sp.reads);
        let mut bytes = 2 * logs.iter().map(|l| l.size).sum::<u64>();
        for inclusive in [false, true] {
            bytes += base_as_of(base, r.tl, at, inclusive).map_or(0, |b| b.size);
        }
        Ok(bytes)
    }

    /// A change unit diffed in memory, group by group ([`Self::diff_groups`]); a group's
    /// splits are emitted in order, every one not `done` (with no rows where nothing changed).
    pub(super) fn read_diffed(
        &self,
        r: &UnitRead<'_>,
        groups: &[Range<usize>],
        done: &HashSet<String>,
        emit: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>,
    ) -> Result<(), SourceError> {
        let unit = r.unit;
        // a group whose splits were all emitted before is not read again
        let todo: Vec<Range<usize>> = groups
            .iter()
            .filter(|g| unit.splits[(*g).clone()].iter().any(|sp| !done.contains(&sp.id)))
            .cloned()
            .collect();
        if todo.is_empty() {
            return Ok(());
        }
        // groups share the unit's schema, so their events do too
        let target = match groups.len() {
            1 => None,
            _ => self.unit_schema(r)?.map(|s| nullable(&s, &[])),
        };
        let inner = if todo.len() > 1 { 1 } else { self.threads };
        if groups.len() > 1 {
            tracing::debug!(connector = %self.connector, instant = %unit.position.version, groups = groups.len(),
                to_read = todo.len(), "change unit diffed partition by partition");
        }
        let read_group = |i: usize| -> Result<Vec<SplitChanges>, SourceError> {
            let g = todo[i].clone();
            let splits = &unit.splits[g];
            let sides = self.load_sides(r, splits, &FileCache::default(), inner, target.as_ref())?;
            let Some(first) = sides.batches.first() else {
                return Ok(match groups.len() {
                    1 => Vec::new(),
                    _ => splits
                        .iter()
                        .filter(|sp| !done.contains(&sp.id))
                        .map(|sp| SplitChanges::whole(sp.clone(), String::new(), Vec::new(), Vec::new()))
                        .collect(),
                });
            };
            let (keys, order) = self.key_columns(&first.schema())?;
            let per_split = sides.diff(&keys, order)?;
            let mut out = Vec::new();
            for (s, rows) in per_split.into_iter().enumerate() {
                let sp = &splits[s];
                if done.contains(&sp.id) {
                    continue;
                }
                let (batches, rows) = restrict(&sides.batches, rows);
                let mut sc = SplitChanges::whole(sp.clone(), sides.file[s].clone(), batches, rows);
                sc.rows_read = sides.rows_read[s];
                sc.bytes_read = sides.bytes_read[s];
                out.push(sc);
            }
            Ok(out)
        };
        parallel::ordered_window(todo.len(), self.threads, self.threads, &read_group, &mut |scs| {
            scs.into_iter().try_for_each(&mut *emit)
        })
    }
}

/// One side of a split: the slice's planned schema and its merged rows.
type PlannedSide = (Option<SchemaRef>, SliceState);
