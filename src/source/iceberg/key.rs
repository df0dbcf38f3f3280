//! The key an Iceberg connector's events carry: `key.fields`, else the table's identifier
//! fields, and the refusals (naming what to set) when it does not fit the table.

use super::metadata;
use crate::config::IcebergOptions;
use crate::source::SourceError;

/// The key the events carry: `key.fields`, else the table's identifier fields (`key.mode=none`:
/// none); a key that does not fit the table is a configuration error naming what to set.
pub(super) fn key_fields(
    opts: &IcebergOptions,
    schema: &metadata::IcebergSchema,
    file: &std::path::Path,
) -> Result<Vec<String>, SourceError> {
    let declared: Vec<String> = schema
        .identifier_field_ids
        .iter()
        .filter_map(|id| schema.fields.iter().find(|f| f.id == *id).map(|f| f.name.clone()))
        .collect();
    if !opts.key_fields.is_empty() && !declared.is_empty() && opts.key_fields != declared && !opts.key_fields_override {
        return Err(SourceError::Config {
            message: format!(
                "key.fields {:?} differs from the identifier fields {declared:?} that table {} declares: the events \
                 would be keyed by something other than the row's identity. Remove key.fields, or set \
                 key.fields.override=true if that is meant",
                opts.key_fields,
                file.display()
            ),
        });
    }
    // (`key.fields` is checked against the columns where every format's is: source::opening)
    let key_fields = match opts.key_fields.is_empty() {
        false => opts.key_fields.clone(),
        true => declared,
    };
    let key_fields = if opts.keyless { Vec::new() } else { key_fields };
    if key_fields.is_empty() && !opts.keyless {
        return Err(SourceError::Config {
            message: format!(
                "table {} declares no identifier fields, so change events would have no key; set key.fields \
                 (comma-separated columns that identify a row), or key.mode=none for a table without a key (null \
                 Kafka keys, rows compared whole)",
                file.display()
            ),
        });
    }
    Ok(key_fields)
}
