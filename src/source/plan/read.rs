//! The one driver that reads a planned unit of a file-based format (see the parent module):
//! rows as they are, a split per list of files, read in parallel in chunks of a bounded size and
//! handed on in order; a diff part by part, the whole unit with one bucket count, a keyless
//! table's part keyed by row id where every row has one (its rewrites narrowed to the rows they
//! changed, see [`changed_positions`]).

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;

use super::{DiffPart, File, Part, PieceReader, PlanFile, PlanKind, VersionPlan};
use crate::source::buckets::DECODED_PER_FILE_BYTE;
use crate::source::lineage::{Lineage, LINEAGE_ROW_BYTES};
use crate::source::sides::{diff_split, plan_diff, DiffJob};
use crate::source::{parallel, Op, Resume, SourceError, SplitChanges, SplitSpec, Unit};

/// Read `unit` as `plan` says, this task's splits only (those in `unit.splits`), skipping the
/// ones `resume` says were emitted.
pub fn read_unit<R: PieceReader>(
    r: &R,
    plan: &R::Plan,
    unit: &Unit,
    resume: &Resume,
    emit: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>,
) -> Result<(), SourceError> {
    if unit.splits.is_empty() {
        return Ok(());
    }
    match plan.kind() {
        PlanKind::Nothing(_) => Ok(()),
        PlanKind::Rows { op, splits } => read_rows(r, plan, (*op, splits), unit, resume, emit),
        PlanKind::Diff(parts) => read_diff(r, plan, parts, unit, resume, emit),
    }
}

/// The key's columns in `schema`; a keyless table's rows are keyed whole.
pub fn key_columns(info: &crate::source::TableInfo, schema: &SchemaRef, unit: &str) -> Result<Vec<usize>, SourceError> {
    if info.keyless() {
        return Ok((0..schema.fields().len()).collect());
    }
    info.key_fields
        .iter()
        .map(|k| {
            schema.index_of(k).map_err(|_| SourceError::Unreadable {
                why: crate::source::Unreadable::Damaged,
                message: format!("{unit}: key column `{k}` is not in its schema"),
            })
        })
        .collect()
}

fn read_diff<R: PieceReader>(
    r: &R,
    plan: &R::Plan,
    parts: &[Part<R>],
    unit: &Unit,
    resume: &Resume,
    emit: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>,
) -> Result<(), SourceError> {
    let env = r.env();
    // one bucket count for the whole unit, whichever parts this task reads: it is part of every
    // part's row order and stored once per unit
    let estimated = parts.iter().map(DiffPart::bytes).sum::<u64>() * DECODED_PER_FILE_BYTE;
    let (buckets, narrow) = plan_diff(resume.buckets, estimated, env.budget.get(), env.narrow);
    for split in unit.splits.iter().filter(|s| !resume.done.contains(&s.id)) {
        let part = parts
            .iter()
            .find(|p| p.partition == split.partition || (split.id == "diff" && parts.len() == 1))
            .ok_or_else(|| SourceError::Unreadable {
                why: crate::source::Unreadable::Internal,
                message: format!("{}: no diff part for split {}", plan.label(), split.id),
            })?;
        // a keyless table whose rows all have a row id: keyed by it (see `lineage`)
        let lineage = env.info.keyless() && plan.lineage_on() && part.has_lineage();
        let (schema, keys, keyless) = match lineage {
            true => {
                let schema = r.with_lineage(plan.schema());
                let row_id = schema.fields().len() - 2;
                (schema, vec![row_id], false)
            }
            false => (
                plan.schema().clone(),
                key_columns(&env.info, plan.schema(), &plan.label())?,
                env.info.keyless(),
            ),
        };
        let job = DiffJob {
            schema: schema.clone(),
            keys,
            keyless,
            threads: env.threads,
            budget: env.budget.get(),
            // keyed by row id, the lineage pass below is the narrow path; where it declines (its
            // columns beyond half the budget) deciding changed row ids by hashing whole rows first
            // read everything twice: 7.7 s and 415 MiB against 4.1 s and 254 MiB in key buckets
            // (4M-row Spark Delta table, a 10 % UPDATE rewriting 2M rows)
            narrow: narrow && !lineage,
            spill_dir: &env.spill_dir,
            connector: &env.connector,
            unit: plan.label(),
        };
        // a keyless rewrite with row lineage reads only the rows it changed
        let positions = match lineage && env.narrow {
            true => changed_positions(r, plan, part)?,
            false => None,
        };
        let read = |i: usize| {
            let piece = part.piece(i).ok_or_else(|| SourceError::Unreadable {
                why: crate::source::Unreadable::Internal,
                message: format!("{}: no piece {i} in its diff", plan.label()),
            })?;
            let at = positions.as_ref().and_then(|p| p.get(i)).map(Vec::as_slice);
            r.read_piece(plan, &schema, piece, at)
        };
        match lineage {
            true => crate::source::lineage::diff_split(&job, split, buckets, part.len(), &read, emit)?,
            false => diff_split(&job, split, buckets, part.len(), &read, emit)?,
        }
    }
    Ok(())
}

/// Per old file, then new file, of a part: the file positions of the live rows to read.
pub type Positions = Vec<Vec<u64>>;

/// The positions of the rows a keyless part's removed and added files changed, told by row
/// lineage alone: pass one reads the two lineage columns of every old and new file (two longs a
/// row instead of the row; the version is the one that last changed a row), and
/// [`crate::source::lineage::uncarried`] tells the carried-over rows (same row id and version
/// on both sides); pass two (the caller's) reads only the other rows. `None` keeps the whole
/// read: nothing both removed and added, the format declines ([`PieceReader::may_narrow`]), a
/// row id twice on one side, or lineage beyond half of the budget (held during pass one only).
pub fn changed_positions<R: PieceReader>(
    r: &R,
    plan: &R::Plan,
    part: &Part<R>,
) -> Result<Option<Positions>, SourceError> {
    let env = r.env();
    if part.old.is_empty() || part.new.is_empty() || !r.may_narrow(plan, part) {
        return Ok(None);
    }
    let files: Vec<&File<R>> = part.old.iter().chain(&part.new).collect();
    let limit = env.budget.get() / 2 / LINEAGE_ROW_BYTES;
    let (mut lineages, mut rows, mut over) = (Vec::with_capacity(files.len()), 0usize, false);
    let read = |i: usize| r.lineage_of(plan, files[i]);
    let pass = parallel::ordered(files.len(), env.threads, &read, &mut |l: Lineage| {
        rows += l.len();
        lineages.push(l);
        over = rows > limit;
        match over {
            // stops the pass (told apart from a failed read by `over`)
            true => Err(SourceError::Stopped),
            false => Ok(()),
        }
    });
    match pass {
        Err(_) if over => {
            tracing::debug!(connector = %env.connector, unit = %plan.label(), rows,
                "row lineage of the rewritten files would take more than half of read.memory.budget: reading them whole");
            return Ok(None);
        }
        p => p?,
    }
    let written: Vec<i64> = part.new.iter().map(|f| r.written(plan, f)).collect();
    Ok(crate::source::lineage::uncarried(
        &env.connector,
        &plan.label(),
        &lineages,
        part.old.len(),
        &written,
    ))
}

/// Rows as they are (a full scan, an append): this task's splits, read in parallel, each in
/// chunks of a bounded size, handed on in order.
fn read_rows<R: PieceReader>(
    r: &R,
    plan: &R::Plan,
    (op, splits): (Op, &[Vec<File<R>>]),
    unit: &Unit,
    resume: &Resume,
    emit: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>,
) -> Result<(), SourceError> {
    let env = r.env();
    // the unit's splits (this task's share of the plan's) by their plan index
    let index: HashMap<String, usize> = (0..splits.len())
        .map(|i| (r.rows_split(plan, i, &splits[i]).id, i))
        .collect();
    let todo: Vec<(&SplitSpec, &[File<R>])> = unit
        .splits
        .iter()
        .filter(|s| !resume.done.contains(&s.id))
        .map(|s| {
            index
                .get(&s.id)
                .map(|&i| (s, splits[i].as_slice()))
                .ok_or_else(|| SourceError::Unreadable {
                    why: crate::source::Unreadable::Internal,
                    message: format!("{}: split {} is not in its plan", plan.label(), s.id),
                })
        })
        .collect::<Result<_, _>>()?;
    // held at once: about (threads × (queue depth + 1) + 1) chunks, half the budget
    let chunk_bytes = (env.budget.get() / (env.threads * 8).max(1)).clamp(1 << 20, 64 << 20);
    let produce = |k: usize, send: &mut dyn FnMut(SplitChanges) -> Result<(), SourceError>| {
        let (split, files) = todo[k];
        // where every file has row lineage, each row's id rides along (`source.row_id`)
        let lineage = plan.lineage_on() && files.iter().all(PlanFile::has_lineage);
        let schema = match lineage {
            true => r.with_lineage(plan.schema()),
            false => plan.schema().clone(),
        };
        let file = files.first().map(|f| f.path().to_string()).unwrap_or_default();
        let chunk = |batches: Vec<(RecordBatch, Option<(String, String)>)>, first_row: u64, last: bool, bytes: u64| {
            let (batches, labels): (Vec<_>, Vec<_>) = batches.into_iter().unzip();
            let rows = crate::source::rows_as(op, &batches);
            let changes = SplitChanges {
                split: split.clone(),
                first_row,
                last,
                buckets: 1,
                file: file.clone(),
                rows_read: rows.len() as u64,
                rows,
                row_ids: None,
                batches: Arc::new(batches),
                batch_files: labels.into_iter().flatten().collect(),
                bytes_read: bytes,
            };
            match lineage {
                true => crate::source::lineage::strip(changes),
                false => Ok(changes),
            }
        };
        let (mut batches, mut held, mut first_row) = (Vec::new(), 0usize, 0u64);
        let bytes = r.read_files(plan, &schema, files, &mut |b, label| {
            held += b.get_array_memory_size();
            batches.push((b, label));
            if held >= chunk_bytes {
                let out = std::mem::take(&mut batches);
                let n: u64 = out.iter().map(|(b, _)| b.num_rows() as u64).sum();
                send(chunk(out, first_row, false, 0)?)?;
                first_row += n;
                held = 0;
            }
            Ok(())
        })?;
        send(chunk(batches, first_row, true, bytes)?)
    };
    parallel::ordered_streams(todo.len(), env.threads, 2, &produce, emit)
}
