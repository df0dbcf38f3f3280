//! Reading a file slice for some record keys only ([`KeyFilter`]): a base file in two passes —
//! its key column (or a virtual-key table's key fields; or neither where the candidate pass kept
//! the row hashes of its rows), then every column of the selected rows only, row groups without
//! one skipped and pages too where the file has an offset index — and log records of other keys
//! dropped as they are decoded (see `merge`). The keys are a change unit's candidates (see
//! `narrow`).

use arrow::array::BooleanBufferBuilder;
use arrow::buffer::BooleanBuffer;
use arrow_array::{Array, ArrayRef, BooleanArray, RecordBatch, StringViewArray};
use arrow_schema::{ArrowError, DataType, SchemaRef};
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder, RowSelection,
};
use parquet::file::metadata::PageIndexPolicy;
use std::path::Path;
use std::sync::Arc;

use super::files::{columns_mask, with_virtual_keys, BASE_BATCH_ROWS, LAYOUT_META_COLUMNS};
use super::keys::{record_keys, KeyFilter, RECORD_KEY};
use crate::source::SourceError;
use crate::storage::Storage;

/// A base file's selected rows: its schema (layout columns left out), a reader of the rows whose
/// record key is in `keys`, and its size.
pub(super) struct SelectedBase {
    pub schema: SchemaRef,
    pub reader: SelectedRows,
    pub size: u64,
}

/// The selected rows of a base file, their record keys spliced back in from the key pass (the
/// second pass leaves the key column out: decompressing and decoding it twice was ~11 % of a
/// merge-on-read 1 % unit's CPU).
pub(super) struct SelectedRows {
    reader: ParquetRecordBatchReader,
    /// The selected rows' keys in file order, the column index they go to, and how many were
    /// handed out.
    keys: Option<(ArrayRef, usize, usize)>,
    schema: SchemaRef,
}

impl Iterator for SelectedRows {
    type Item = Result<RecordBatch, ArrowError>;
    fn next(&mut self) -> Option<Self::Item> {
        let b = self.reader.next()?;
        let Some((keys, at, done)) = &mut self.keys else {
            return Some(b);
        };
        Some(b.and_then(|b| {
            let n = b.num_rows();
            if *done + n > keys.len() {
                return Err(ArrowError::InvalidArgumentError(format!(
                    "the selected pass gave more rows than the key pass selected ({} > {})",
                    *done + n,
                    keys.len()
                )));
            }
            let mut columns = b.columns().to_vec();
            columns.insert(*at, keys.slice(*done, n));
            *done += n;
            RecordBatch::try_new(self.schema.clone(), columns)
        }))
    }
}

/// Read a base file for `keys` only, in two passes: the key column (or a virtual-key table's key
/// fields, `virtual_keys` = (fields, partition)), then every column of the selected rows, row
/// groups without one skipped, and pages too where the file has a page index. Where `keys`
/// holds the row hashes of all the file's rows (kept by the candidate pass), they select the
/// rows and the first pass is not read.
pub(super) fn open_base_selected(
    storage: &Storage,
    path: &Path,
    keys: &KeyFilter,
    virtual_keys: Option<(&[String], &str)>,
) -> Result<SelectedBase, SourceError> {
    let perr = |source| SourceError::parquet(path)(source);
    let input = storage.open(path).map_err(SourceError::io(path))?;
    let size = parquet::file::reader::Length::len(&input);
    let builder = ParquetRecordBatchReaderBuilder::try_new(input.clone()).map_err(perr)?;
    input.plan(builder.metadata());
    let groups: Vec<usize> = builder
        .metadata()
        .row_groups()
        .iter()
        .map(|g| g.num_rows() as usize)
        .collect();
    let total: usize = groups.iter().sum();
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    // the rows' row hashes kept by the candidate pass, where they cover the file (see `keys`)
    let known = keys
        .rows_of(name)
        .filter(|h| virtual_keys.is_none() && h.len() == total);
    let (selected, spliced_keys) = match known {
        Some(h) => (BooleanBuffer::collect_bool(total, |i| keys.contains_hash(h[i])), None),
        None => key_pass(builder, &input, path, keys, virtual_keys, total)?,
    };
    // row groups with a selected row, and the selection over their rows only
    let (mut keep_groups, mut filters, mut start) = (Vec::new(), Vec::new(), 0);
    for (g, &n) in groups.iter().enumerate() {
        let part = selected.slice(start, n.min(selected.len().saturating_sub(start)));
        if part.count_set_bits() > 0 {
            keep_groups.push(g);
            filters.push(BooleanArray::new(part, None));
        }
        start += n;
    }
    // the offset index (where the file has one) lets the selection skip whole pages
    let options = ArrowReaderOptions::new().with_offset_index_policy(match keep_groups.is_empty() {
        true => PageIndexPolicy::Skip,
        false => PageIndexPolicy::Optional,
    });
    let builder = ParquetRecordBatchReaderBuilder::try_new_with_options(input, options).map_err(perr)?;
    let spliced = spliced_keys.is_some();
    let keep = |name: &str| !(LAYOUT_META_COLUMNS.contains(&name) || spliced && name == RECORD_KEY);
    // where the key column goes among the columns read
    let at = builder
        .schema()
        .fields()
        .iter()
        .take_while(|f| f.name() != RECORD_KEY)
        .filter(|f| keep(f.name()))
        .count();
    let mask = columns_mask(&builder, keep);
    let reader = builder
        .with_projection(mask)
        .with_row_groups(keep_groups)
        .with_row_selection(RowSelection::from_filters(&filters))
        .with_batch_size(BASE_BATCH_ROWS)
        .build()
        .map_err(perr)?;
    let schema = arrow_array::RecordBatchReader::schema(&reader);
    let (schema, keys) = match spliced_keys {
        Some((field, keys)) => {
            let mut fields: Vec<_> = schema.fields().iter().cloned().collect();
            fields.insert(at, Arc::new(field));
            let schema = Arc::new(arrow_schema::Schema::new_with_metadata(
                fields,
                schema.metadata().clone(),
            ));
            (schema, Some((keys, at, 0)))
        }
        None => (schema, None),
    };
    Ok(SelectedBase {
        schema: schema.clone(),
        reader: SelectedRows { reader, keys, schema },
        size,
    })
}

/// The key pass of a selected base read: which rows are selected, and, for a table with meta
/// fields, the record-key field and the selected rows' keys (in file order) to splice into the
/// second pass (see `SelectedRows`).
fn key_pass(
    builder: ParquetRecordBatchReaderBuilder<crate::storage::Input>,
    input: &crate::storage::Input,
    path: &Path,
    keys: &KeyFilter,
    virtual_keys: Option<(&[String], &str)>,
    total: usize,
) -> Result<(BooleanBuffer, Option<(arrow_schema::Field, ArrayRef)>), SourceError> {
    let perr = |source| SourceError::parquet(path)(source);
    let key_columns: Vec<String> = match virtual_keys {
        Some((fields, _)) => fields.to_vec(),
        None => vec![RECORD_KEY.to_string()],
    };
    let mask = columns_mask(&builder, |name| key_columns.iter().any(|k| k == name));
    // the key field as the rows read in the second pass have it (text, not views)
    let key_field = builder
        .schema()
        .field_with_name(RECORD_KEY)
        .ok()
        .map(|f| f.as_ref().clone())
        .filter(|_| virtual_keys.is_none());
    let builder = match virtual_keys {
        None => with_key_view(builder, input.clone()).map_err(perr)?,
        Some(_) => builder,
    };
    let pass = builder
        .with_projection(mask)
        .with_batch_size(BASE_BATCH_ROWS)
        .build()
        .map_err(perr)?;
    let mut selected = BooleanBufferBuilder::new(total);
    let mut picked: Vec<ArrayRef> = Vec::new();
    let arrow_err = |e| SourceError::arrow(format!("reading the keys of {}", path.display()))(e);
    for b in pass {
        let b = b.map_err(arrow_err)?;
        let b = match virtual_keys {
            Some((fields, partition)) => with_virtual_keys(&b, fields, partition)?,
            None => b,
        };
        let no_keys = || SourceError::Unreadable {
            why: crate::source::Unreadable::Damaged,
            message: format!("{}: no {RECORD_KEY} column to select changed rows by", path.display()),
        };
        let col = b.column_by_name(RECORD_KEY).ok_or_else(no_keys)?;
        let mask = match col.as_any().downcast_ref::<StringViewArray>() {
            Some(views) => keys.mask_view(views),
            None => keys.mask(&record_keys(&b)?.ok_or_else(no_keys)?),
        };
        if let (Some(f), true) = (&key_field, mask.true_count() > 0) {
            let picked_keys = arrow::compute::filter(col, &mask).map_err(arrow_err)?;
            picked.push(arrow::compute::cast(&picked_keys, f.data_type()).map_err(arrow_err)?);
        }
        selected.append_buffer(mask.values());
    }
    let spliced = match key_field {
        Some(field) => {
            let keys = match picked.len() {
                0 => arrow_array::new_empty_array(field.data_type()),
                1 => picked.remove(0),
                _ => {
                    let refs: Vec<&dyn Array> = picked.iter().map(|a| a.as_ref()).collect();
                    arrow::compute::concat(&refs).map_err(arrow_err)?
                }
            };
            Some((field, keys))
        }
        None => None,
    };
    Ok((selected.finish(), spliced))
}

/// The builder with the record-key column read as string views: the key pass then decodes no
/// key text into a buffer of its own (the views point into the decompressed pages).
fn with_key_view(
    builder: ParquetRecordBatchReaderBuilder<crate::storage::Input>,
    input: crate::storage::Input,
) -> parquet::errors::Result<ParquetRecordBatchReaderBuilder<crate::storage::Input>> {
    let schema = builder.schema().clone();
    if schema.field_with_name(RECORD_KEY).ok().map(|f| f.data_type()) != Some(&DataType::Utf8) {
        return Ok(builder);
    }
    let fields: Vec<_> = schema
        .fields()
        .iter()
        .map(|f| match f.name() == RECORD_KEY {
            true => Arc::new(f.as_ref().clone().with_data_type(DataType::Utf8View)),
            false => f.clone(),
        })
        .collect();
    let views = Arc::new(arrow_schema::Schema::new_with_metadata(
        fields,
        schema.metadata().clone(),
    ));
    let options = ArrowReaderOptions::new()
        .with_schema(views)
        .with_page_index_policy(PageIndexPolicy::Skip);
    let meta = ArrowReaderMetadata::try_new(builder.metadata().clone(), options)?;
    Ok(ParquetRecordBatchReaderBuilder::new_with_metadata(input, meta))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{Int64Array, StringArray};
    use arrow_schema::{Field, Schema};

    /// A base file of `n` rows (`k0`, `k1`, …, value = row number) in row groups of 100 rows
    /// and pages of 10.
    fn base_file(dir: &Path, n: usize) -> std::path::PathBuf {
        let schema = Arc::new(Schema::new(vec![
            Field::new(RECORD_KEY, DataType::Utf8, false),
            Field::new("_hoodie_file_name", DataType::Utf8, false),
            Field::new("v", DataType::Int64, false),
        ]));
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(StringArray::from_iter_values((0..n).map(|i| format!("k{i}")))),
                Arc::new(StringArray::from_iter_values((0..n).map(|_| "f.parquet"))),
                Arc::new(Int64Array::from_iter_values(0..n as i64)),
            ],
        )
        .unwrap();
        let props = parquet::file::properties::WriterProperties::builder()
            .set_max_row_group_row_count(Some(100))
            .set_data_page_row_count_limit(10)
            .set_write_batch_size(10)
            .build();
        let path = dir.join("f.parquet");
        let mut w =
            parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&path).unwrap(), schema, Some(props)).unwrap();
        w.write(&batch).unwrap();
        w.close().unwrap();
        path
    }

    fn values_of(b: &RecordBatch) -> &Int64Array {
        b.column_by_name("v")
            .unwrap()
            .as_any()
            .downcast_ref::<Int64Array>()
            .unwrap()
    }

    #[test]
    fn a_selected_base_read_returns_exactly_the_selected_keys_in_file_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = base_file(dir.path(), 1000);
        let mut keys = KeyFilter::default();
        // rows in the first, a middle and the last row group, one group's edges, and a key the
        // file does not hold
        for i in [3, 99, 100, 101, 550, 999, 5000] {
            keys.insert(&format!("k{i}"));
        }
        let storage = Storage::new(Default::default());
        let s = open_base_selected(&storage, &path, &keys, None).unwrap();
        assert!(
            s.schema.field_with_name("_hoodie_file_name").is_err(),
            "layout columns left out"
        );
        let batches: Vec<RecordBatch> = s.reader.collect::<Result<_, _>>().unwrap();
        let values: Vec<i64> = batches.iter().flat_map(|b| values_of(b).values().to_vec()).collect();
        assert_eq!(values, vec![3, 99, 100, 101, 550, 999]);
        // the record keys come from the key pass, in their place among the columns
        let names: Vec<_> = s.schema.fields().iter().map(|f| f.name().as_str()).collect();
        assert_eq!(names, [RECORD_KEY, "v"]);
        let keys: Vec<String> = batches
            .iter()
            .flat_map(|b| {
                assert_eq!(b.schema(), s.schema);
                let k = record_keys(b).unwrap().unwrap();
                k.iter().map(|k| k.unwrap().to_string()).collect::<Vec<_>>()
            })
            .collect();
        assert_eq!(keys, ["k3", "k99", "k100", "k101", "k550", "k999"]);
        // nothing selected: no rows, the schema still there
        let none = open_base_selected(&storage, &path, &KeyFilter::default(), None).unwrap();
        assert!(none.schema.field_with_name("v").is_ok());
        assert_eq!(none.reader.map(|b| b.unwrap().num_rows()).sum::<usize>(), 0);
    }

    #[test]
    fn spliced_keys_stay_with_their_rows_across_batches_and_row_groups() {
        let dir = tempfile::tempdir().unwrap();
        let path = base_file(dir.path(), 30_000);
        let mut keys = KeyFilter::default();
        (0..30_000)
            .filter(|i| i % 3 != 1)
            .for_each(|i| keys.insert(&format!("k{i}")));
        let s = open_base_selected(&Storage::new(Default::default()), &path, &keys, None).unwrap();
        let mut rows = 0;
        for b in s.reader {
            let b = b.unwrap();
            let k = record_keys(&b).unwrap().unwrap();
            let v = values_of(&b);
            for i in 0..b.num_rows() {
                assert_eq!(k.value(i), format!("k{}", v.value(i)));
                assert_ne!(v.value(i) % 3, 1);
            }
            rows += b.num_rows();
        }
        assert_eq!(rows, 20_000);
    }

    #[test]
    fn kept_row_hashes_select_the_same_rows_as_the_key_pass() {
        let dir = tempfile::tempdir().unwrap();
        let path = base_file(dir.path(), 1000);
        let storage = Storage::new(Default::default());
        let read = |keys: &KeyFilter| -> (Vec<i64>, Vec<String>) {
            let s = open_base_selected(&storage, &path, keys, None).unwrap();
            let batches: Vec<RecordBatch> = s.reader.collect::<Result<_, _>>().unwrap();
            let values = batches.iter().flat_map(|b| values_of(b).values().to_vec()).collect();
            let names = batches
                .iter()
                .flat_map(|b| {
                    let k = record_keys(b).unwrap().unwrap();
                    k.iter().map(|k| k.unwrap().to_string()).collect::<Vec<_>>()
                })
                .collect();
            (values, names)
        };
        let mut keys = KeyFilter::default();
        for i in [0, 99, 100, 777, 999] {
            keys.insert(&format!("k{i}"));
        }
        let by_key_pass = read(&keys);
        assert_eq!(by_key_pass.0, vec![0, 99, 100, 777, 999]);
        // the row hashes of the file's rows, as the candidate pass keeps them
        let hashes: Vec<u32> = (0..1000)
            .map(|i| super::super::keys::row_hash(&format!("k{i}")))
            .collect();
        // hashes that do not number the file's rows are not used
        keys.keep_rows("f.parquet".into(), hashes[..999].to_vec());
        assert_eq!(read(&keys), by_key_pass);
        let mut kept = KeyFilter::default();
        for i in [0, 99, 100, 777, 999] {
            kept.insert(&format!("k{i}"));
        }
        // rows 5 and 6 carry another key's hash: a row is selected by its kept hash, not its key
        let mut shifted = hashes.clone();
        shifted[5] = super::super::keys::row_hash("k777");
        kept.keep_rows("f.parquet".into(), shifted);
        let (values, names) = read(&kept);
        assert_eq!(values, vec![0, 5, 99, 100, 777, 999], "the kept hashes chose the rows");
        assert_eq!(
            names,
            ["k0", "k5", "k99", "k100", "k777", "k999"],
            "keys read from the file"
        );
    }
}
