//! The log phase of a slice merge: the log records' merge columns ([`MergeColumns`]: key,
//! ordering fields, soft-delete flag) read in commit order ([`LogRecords`]), and the merge index
//! built from them ([`LogColumns::index`]): one 12-byte slot per key of a file group's log (where
//! its text is, the winning record, flags), in a hash table keyed by the key text without
//! storing it.

use std::hash::BuildHasher;

use arrow::row::Rows;
use arrow_array::{Array, BooleanArray, RecordBatch, StringArray};
use arrow_schema::SchemaRef;
use hashbrown::hash_table::Entry;

use super::super::log;
use super::super::slice::{MergeMode, SliceReader};
use crate::source::rows::RowKeys;
use crate::source::SourceError;

/// A log record: (decoded batch, row).
pub(super) type Pos = (u32, u32);

/// Log-phase merge state of a key (see [`SliceMerge::run`]), 12 bytes: the merge index holds
/// one per key of the log, so a 1.6M-row file group with 190k log records holds 3 MiB of them
/// (a `HashMap<&str, _>` of 33-byte slots held 8.6 MiB).
#[derive(Clone, Copy)]
pub(super) struct Slot {
    /// Where the key's text is: a log record ([`KeyTexts::pos`]), or with [`DELETED_KEY`] set,
    /// the n-th key of the delete blocks.
    pub(super) key: u32,
    /// The winning log record, or [`HARD_DELETED`].
    pub(super) cur: u32,
    pub(super) flags: u8,
}

pub(super) const DELETED_KEY: u32 = 1 << 31;
pub(super) const HARD_DELETED: u32 = u32::MAX;
/// The winner is a delete with an ordering value (a soft delete, or a delete-block entry that
/// carries one): it keeps that value for later comparisons, the base row's included.
pub(super) const SOFT: u8 = 1;
/// The base row outranked the log winner.
pub(super) const BASE_WON: u8 = 4;

/// Where the text of a [`Slot::key`] is.
pub(super) struct KeyTexts<'k> {
    keys: &'k [StringArray],
    deleted_keys: Vec<&'k str>,
    /// Global number of each batch's first record.
    starts: Vec<u32>,
}

impl<'k> KeyTexts<'k> {
    pub(super) fn pos(&self, id: u32) -> Pos {
        let b = self.starts.partition_point(|&s| s <= id) - 1;
        (b as u32, id - self.starts[b])
    }

    pub(super) fn text(&self, key: u32) -> &'k str {
        if key & DELETED_KEY != 0 {
            self.deleted_keys[(key & !DELETED_KEY) as usize]
        } else {
            let (b, r) = self.pos(key);
            self.keys[b as usize].value(r as usize)
        }
    }
}

/// The merge index of a slice's log records: a hash table of [`Slot`]s whose key text stays in
/// the decoded merge columns (compared on lookup, never copied).
pub(super) struct LogIndex<'k> {
    pub(super) texts: KeyTexts<'k>,
    pub(super) table: hashbrown::HashTable<Slot>,
    /// foldhash (hashbrown's default): std's SipHash was 3 % of a copy-on-write unit's CPU.
    hasher: hashbrown::DefaultHashBuilder,
}

impl<'k> LogIndex<'k> {
    pub(super) fn new(keys: &'k [StringArray], deleted_keys: Vec<&'k str>) -> Result<Self, SourceError> {
        let mut starts = Vec::with_capacity(keys.len());
        let mut n = 0u64;
        for k in keys {
            starts.push(n as u32);
            n += k.len() as u64;
        }
        if n + deleted_keys.len() as u64 >= DELETED_KEY as u64 {
            return Err(SourceError::Unsupported {
                message: format!("a file slice with {n} log records (at most 2^31 are merged)"),
            });
        }
        let table = hashbrown::HashTable::with_capacity(n as usize + deleted_keys.len());
        Ok(Self {
            texts: KeyTexts {
                keys,
                deleted_keys,
                starts,
            },
            table,
            hasher: hashbrown::DefaultHashBuilder::default(),
        })
    }

    pub(super) fn id(&self, (b, r): Pos) -> u32 {
        self.texts.starts[b as usize] + r
    }

    /// The key's slot, found or vacant, from one hash and one probe; with the key texts, to
    /// compare ordering values while the slot is held.
    pub(super) fn entry(&mut self, k: &str) -> (Entry<'_, Slot>, &KeyTexts<'k>) {
        let h = self.hasher.hash_one(k);
        let (texts, hasher) = (&self.texts, &self.hasher);
        (
            self.table
                .entry(h, |s| texts.text(s.key) == k, |s| hasher.hash_one(texts.text(s.key))),
            texts,
        )
    }

    /// No log record to merge with.
    pub(super) fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The key's slot, if the log has the key (the index is not changed).
    pub(super) fn find_mut(&mut self, k: &str) -> (Option<&mut Slot>, &KeyTexts<'k>) {
        if self.table.is_empty() {
            // a slice without log records (copy-on-write, or a base file alone): no key to hash
            return (None, &self.texts);
        }
        let h = self.hasher.hash_one(k);
        let texts = &self.texts;
        (self.table.find_mut(h, |s| texts.text(s.key) == k), texts)
    }
}

/// Where a row's merge columns are in the slice's schema, and their order in a projected batch:
/// the record key, then the ordering fields (event-time ordering only), then the soft-delete
/// flag when the table has one.
pub(super) struct MergeColumns {
    pub(super) idx: Vec<usize>,
    /// How many ordering fields follow the key.
    pub(super) ordering: usize,
    pub(super) soft_delete: bool,
    /// The ordering field is `_event_seq`, projected as its two numbers (see
    /// [`MergeConfig::binlog_seq`](super::super::rule::MergeConfig::binlog_seq)).
    seq: bool,
}

impl MergeColumns {
    pub(super) fn of(target: &SchemaRef, reader: &SliceReader<'_>, partition: &str) -> Result<Self, SourceError> {
        let key = target
            .index_of("_hoodie_record_key")
            .map_err(|_| SourceError::Unreadable {
                why: crate::source::Unreadable::Damaged,
                message: format!(
                    "{}: file group in `{partition}` has no _hoodie_record_key column",
                    reader.table.path.display(),
                ),
            })?;
        let mut idx = vec![key];
        if reader.merge.mode == MergeMode::EventTime {
            idx.extend(reader.merge.ordering.iter().filter_map(|f| target.index_of(f).ok()));
        }
        let seq = reader.merge.binlog_seq && idx.len() == 2;
        let ordering = if seq { 2 } else { idx.len() - 1 };
        let soft_delete = target.index_of("_hoodie_is_deleted").ok();
        idx.extend(soft_delete);
        Ok(Self {
            idx,
            ordering,
            soft_delete: soft_delete.is_some(),
            seq,
        })
    }

    /// The merge columns of a batch of the slice's schema.
    pub(super) fn project(&self, b: &RecordBatch) -> Result<RecordBatch, SourceError> {
        let p = b.project(&self.idx).map_err(SourceError::arrow("merge columns"))?;
        if self.seq {
            binlog_seq(&p)
        } else {
            Ok(p)
        }
    }

    /// The schema of [`Self::project`]'s batches.
    pub(super) fn schema(&self, target: &SchemaRef) -> Result<SchemaRef, SourceError> {
        Ok(self.project(&RecordBatch::new_empty(target.clone()))?.schema())
    }

    /// The record keys of a projected batch.
    pub(super) fn key(&self, b: &RecordBatch) -> Result<StringArray, SourceError> {
        b.column(0)
            .as_any()
            .downcast_ref::<StringArray>()
            .cloned()
            .ok_or_else(|| SourceError::Unreadable {
                why: crate::source::Unreadable::Damaged,
                message: "_hoodie_record_key is not a string column".into(),
            })
    }

    /// The soft-delete flags of a projected batch (`None`: the table has none).
    pub(super) fn deleted(&self, b: &RecordBatch) -> Option<BooleanArray> {
        self.soft_delete
            .then(|| {
                b.column(b.num_columns() - 1)
                    .as_any()
                    .downcast_ref::<BooleanArray>()
                    .cloned()
            })
            .flatten()
    }
}

/// A projected batch with its `_event_seq` (column 1, `<binlog file>.<position>`) as two numbers
/// (`MySqlDebeziumAvroPayload.isCurrentSeqLatest` compares `Long.parseLong` of each part); a
/// null stays null (the oldest: Hudi lets any record replace a row without one).
fn binlog_seq(p: &RecordBatch) -> Result<RecordBatch, SourceError> {
    use arrow_array::{ArrayRef, Int64Array};
    use arrow_schema::{DataType, Field, Schema};
    let text = arrow::compute::cast(p.column(1), &DataType::Utf8).map_err(SourceError::arrow("_event_seq"))?;
    let text = text
        .as_any()
        .downcast_ref::<StringArray>()
        .expect("cast to Utf8 gives a StringArray");
    let (mut file, mut pos) = (Vec::with_capacity(p.num_rows()), Vec::with_capacity(p.num_rows()));
    for v in text.iter() {
        let parsed = match v {
            None => None,
            Some(v) => {
                let mut parts = v.split('.');
                let mut num = || parts.next().and_then(|x| x.trim().parse::<i64>().ok());
                match (num(), num()) {
                    (Some(f), Some(n)) => Some((f, n)),
                    _ => {
                        return Err(SourceError::Unreadable {
                            why: crate::source::Unreadable::Damaged,
                            message: format!(
                                "_event_seq `{v}` is not `<binlog file number>.<position>` (MySqlDebeziumAvroPayload \
                                 orders records by it; Hudi fails on it too)"
                            ),
                        })
                    }
                }
            }
        };
        file.push(parsed.map(|x| x.0));
        pos.push(parsed.map(|x| x.1));
    }
    let mut fields: Vec<Field> = vec![p.schema().field(0).clone()];
    fields.push(Field::new("_event_seq.file", DataType::Int64, true));
    fields.push(Field::new("_event_seq.pos", DataType::Int64, true));
    let mut cols: Vec<ArrayRef> = vec![p.column(0).clone()];
    cols.push(std::sync::Arc::new(Int64Array::from(file)));
    cols.push(std::sync::Arc::new(Int64Array::from(pos)));
    for i in 2..p.num_columns() {
        fields.push(p.schema().field(i).clone());
        cols.push(p.column(i).clone());
    }
    RecordBatch::try_new(std::sync::Arc::new(Schema::new(fields)), cols).map_err(SourceError::arrow("_event_seq"))
}

/// Is row `r` a soft delete (`_hoodie_is_deleted` true)?
pub(super) fn soft(d: &Option<BooleanArray>, r: usize) -> bool {
    d.as_ref().is_some_and(|c| c.is_valid(r) && c.value(r))
}

/// Log records in commit order; a delete block is a marker with its keys.
pub(super) enum Step {
    /// One decoded batch of log records (an index into [`LogRecords::proj`]).
    Data(usize),
    Delete(Vec<log::DeletedKey>),
}

/// A slice's log records, read in commit order.
pub(super) struct LogRecords {
    /// The merge columns of each decoded batch.
    pub(super) proj: Vec<RecordBatch>,
    /// Which of each batch's records are deletes (`_hoodie_is_deleted`, `_hoodie_operation = 'D'`,
    /// the table's delete marker; every record of a batch made from a delete block).
    pub(super) deleted: Vec<Option<BooleanArray>>,
    /// The batches made from a delete block's entries that carry an ordering value.
    pub(super) from_delete_block: Vec<bool>,
    /// The block (an index into [`SliceMerge::blocks`]) each batch came from.
    pub(super) block_of: Vec<usize>,
    pub(super) steps: Vec<Step>,
    /// The decoded rows of every batch, while they stay small; `None` once they outgrew their
    /// share of the budget (winners are decoded again).
    pub(super) full: Option<Vec<RecordBatch>>,
}

/// The log's merge columns ready for the merge: keys, soft-delete flags, ordering values as
/// byte-comparable rows.
pub(super) struct LogColumns {
    pub(super) keys: Vec<StringArray>,
    pub(super) deleted: Vec<Option<BooleanArray>>,
    pub(super) from_delete_block: Vec<bool>,
    pub(super) ord_conv: Option<RowKeys>,
    pub(super) ord_rows: Option<Vec<Rows>>,
}

impl LogColumns {
    pub(super) fn new(log: &LogRecords, target: &SchemaRef, merge: &MergeColumns) -> Result<Self, SourceError> {
        let proj = &log.proj;
        let proj_schema = match proj.first() {
            Some(b) => b.schema(),
            None => merge.schema(target)?,
        };
        let ord_conv = match merge.ordering {
            0 => None,
            n => Some(RowKeys::new(&proj_schema, Some((1..=n).collect()))?),
        };
        let ord_rows = match &ord_conv {
            Some(c) => Some(proj.iter().map(|b| c.rows(b)).collect::<Result<Vec<_>, _>>()?),
            None => None,
        };
        Ok(Self {
            keys: proj.iter().map(|b| merge.key(b)).collect::<Result<_, _>>()?,
            deleted: log.deleted.clone(),
            from_delete_block: log.from_delete_block.clone(),
            ord_conv,
            ord_rows,
        })
    }

    /// The log records among themselves, from an unknown base: each key's winning record, or
    /// its delete (a delete without an ordering value: [`HARD_DELETED`]).
    pub(super) fn index<'k>(&'k self, steps: &'k [Step]) -> Result<LogIndex<'k>, SourceError> {
        let deleted_keys: Vec<&str> = steps
            .iter()
            .filter_map(|s| match s {
                Step::Delete(d) => Some(d.iter().map(|k| k.record_key.as_str())),
                Step::Data(_) => None,
            })
            .flatten()
            .collect();
        let mut index = LogIndex::new(&self.keys, deleted_keys)?;
        let mut next_deleted = DELETED_KEY;
        for step in steps {
            match step {
                Step::Data(b) => self.index_batch(&mut index, *b),
                Step::Delete(keys_deleted) => {
                    for d in keys_deleted {
                        let key = next_deleted;
                        next_deleted += 1;
                        match index.entry(d.record_key.as_str()).0 {
                            // a delete without an ordering value wins over every record before it
                            Entry::Occupied(mut o) => {
                                let st = o.get_mut();
                                st.cur = HARD_DELETED;
                                st.flags = 0;
                            }
                            // the key may be in the base file: it is deleted there too
                            Entry::Vacant(v) => {
                                v.insert(Slot {
                                    key,
                                    cur: HARD_DELETED,
                                    flags: 0,
                                });
                            }
                        }
                    }
                }
            }
        }
        Ok(index)
    }

    /// Batch `b`'s records into the index: a record wins over its key's current one when it
    /// outranks it, or follows a delete without an ordering value. A delete-block entry with
    /// an ordering value after one without changes nothing (`deltaMergeDeleteRecord` keeps the
    /// earlier: both delete, and a later record outranks only the earlier).
    pub(super) fn index_batch(&self, index: &mut LogIndex<'_>, b: usize) {
        let keys = &self.keys[b];
        let block_delete = self.from_delete_block[b];
        for r in 0..keys.len() {
            if !keys.is_valid(r) {
                continue;
            }
            let at = (b as u32, r as u32);
            let id = index.id(at);
            let flags = if soft(&self.deleted[b], r) { SOFT } else { 0 };
            match index.entry(keys.value(r)) {
                (Entry::Vacant(v), _) => {
                    v.insert(Slot {
                        key: id,
                        cur: id,
                        flags,
                    });
                }
                (Entry::Occupied(mut o), texts) => {
                    let st = o.get_mut();
                    let wins = match st.cur {
                        HARD_DELETED => !block_delete,
                        cur => self.outranks(at, cur, texts),
                    };
                    if wins {
                        st.cur = id;
                        st.flags = flags;
                    }
                }
            }
        }
    }

    /// Does log record `new` outrank `old` (a later write with an equal or greater ordering
    /// value; always, under commit-time ordering)?
    pub(super) fn outranks(&self, new: Pos, old: u32, texts: &KeyTexts<'_>) -> bool {
        self.ord_ge(new, texts.pos(old))
    }

    /// Is log record `a`'s ordering value at least `b`'s (always, under commit-time ordering)?
    pub(super) fn ord_ge(&self, a: Pos, b: Pos) -> bool {
        match &self.ord_rows {
            Some(ord) => ord[a.0 as usize].row(a.1 as usize) >= ord[b.0 as usize].row(b.1 as usize),
            None => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow_array::{Int64Array, RecordBatch, StringArray};

    use super::binlog_seq;

    #[test]
    fn binlog_seq_orders_by_file_then_position_as_numbers() {
        let seq = StringArray::from(vec![Some("10.1050"), Some("9.1049"), None]);
        let key = StringArray::from(vec!["a", "b", "c"]);
        let p = RecordBatch::try_from_iter([
            ("_hoodie_record_key", Arc::new(key) as _),
            ("_event_seq", Arc::new(seq) as _),
        ])
        .unwrap();
        let out = binlog_seq(&p).unwrap();
        let col = |i: usize| out.column(i).as_any().downcast_ref::<Int64Array>().unwrap().clone();
        assert_eq!(col(1), Int64Array::from(vec![Some(10), Some(9), None]));
        assert_eq!(col(2), Int64Array::from(vec![Some(1050), Some(1049), None]));
        let bad = RecordBatch::try_from_iter([
            ("_hoodie_record_key", Arc::new(StringArray::from(vec!["a"])) as _),
            ("_event_seq", Arc::new(StringArray::from(vec!["mysql-bin"])) as _),
        ])
        .unwrap();
        assert!(binlog_seq(&bad).unwrap_err().to_string().contains("mysql-bin"));
    }
}
