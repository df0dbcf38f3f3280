//! Iceberg's row lineage (format v3; what it is for: [`crate::source::lineage`]): a row's
//! `_row_id` is the value its file stores, else the file's `first_row_id` (inherited from its
//! manifest, see [`super::manifest`]) plus its position in the file; its
//! `_last_updated_sequence_number` is the stored value, else the file's data sequence number.
//! Writers store both when they copy a row into a new file (a copy-on-write rewrite,
//! compaction), and the row id alone when they update it.

use std::collections::HashMap;

use arrow_schema::{DataType, Field, SchemaRef};

use super::metadata::{field_id, FIELD_ID};

/// Reserved field ids of the lineage columns.
const ROW_ID: i32 = 2147483540;
const LAST_UPDATED: i32 = 2147483539;

/// `schema` with the two lineage columns at its end (matched to a file's by field id).
pub(super) fn extended(schema: &SchemaRef) -> SchemaRef {
    let column = |name: &str, id: i32| {
        Field::new(name, DataType::Int64, true).with_metadata(HashMap::from([(FIELD_ID.to_string(), id.to_string())]))
    };
    crate::source::lineage::extended(
        schema,
        column("_row_id", ROW_ID),
        column("_last_updated_sequence_number", LAST_UPDATED),
    )
}

/// Whether `schema` ends with the lineage columns (see [`extended`]).
pub(super) fn has(schema: &SchemaRef) -> bool {
    let n = schema.fields().len();
    n >= 2 && field_id(schema.field(n - 2)) == Some(ROW_ID) && field_id(schema.field(n - 1)) == Some(LAST_UPDATED)
}
