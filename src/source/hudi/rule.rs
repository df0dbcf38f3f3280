//! A table's merge rule, read from `hoodie.properties` as Hudi 1.1's file group reader reads it,
//! so a merged slice equals what Hudi's own snapshot query returns (Spark, time travel, the next
//! compaction's base files: all go through the same `HoodieFileGroupReader`).
//!
//! Where the rule comes from (Hudi 1.1.1):
//! * table version 8 and on: `hoodie.record.merge.mode` (`HoodieReaderContext.initRecordMerger`);
//!   before 8 the payload class decides (`HoodieTableConfig.inferMergingConfigsForPreV9Table`):
//!   `DefaultHoodieRecordPayload` (also when none is named) and `EventTimeAvroPayload` order by
//!   event time, `OverwriteWithLatestAvroPayload` by commit time, `AWSDmsAvroPayload` by commit
//!   time with `Op = 'D'` a delete (`HoodieTableConfig.getTableMergeProperties`);
//! * ordering fields: `hoodie.table.ordering.fields`, else `hoodie.table.precombine.field`
//!   (several fields compare as a tuple, `ArrayComparable`); none under commit-time ordering;
//! * a delete marker: `hoodie.record.merge.property.hoodie.payload.delete.field` and `.marker`
//!   (`DeleteContext`: a row whose field's text equals the marker, case-sensitive, is a delete).
//!
//! How records merge (`BufferedRecordMergerFactory`: `CommitTimeRecordMerger`,
//! `EventTimeRecordMerger`), applied by [`super::merge`]:
//! * commit time: the later record wins, deletes included; a log record beats the base row;
//! * event time: a later record wins when its ordering value is at least the earlier one's (ties
//!   to the later write), a soft delete (`_hoodie_is_deleted`, `_hoodie_operation = 'D'`, the
//!   marker) included, and so does a log record over the base row (`shouldKeepNewerRecord`); a
//!   delete-block entry loses to an earlier record only when it carries an ordering value of the
//!   same type that is lower (`deltaMergeDeleteRecord`), and a base row it does not outrank
//!   survives it;
//! * a delete without an ordering value (or Hudi's default, an `Integer` 0: what `delete`,
//!   `delete_prepped` and SQL `DELETE` write) orders by commit time: it wins over everything
//!   before it, and anything after it wins over it (`isCommitTimeOrderingDelete`).
//!
//! What is not evaluated here stops the connector at `validate` and at start (exit 2): the
//! `CUSTOM` mode (a `HoodieRecordMerger` or payload class of the user's), payloads that merge
//! column by column (`PartialUpdateAvroPayload`, `OverwriteNonDefaultsWithLatestAvroPayload`,
//! the Debezium payloads before table version 9) and `hoodie.table.partial.update.mode`.

use std::collections::HashMap;

use super::timeline::TableConfig;
use crate::source::SourceError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MergeMode {
    CommitTime,
    EventTime,
}

/// How a table merges records, from `hoodie.properties`.
#[derive(Debug, Clone)]
pub struct MergeConfig {
    pub mode: MergeMode,
    /// The ordering fields (event-time ordering only).
    pub ordering: Vec<String>,
    pub virtual_keys: bool,
    pub key_fields: Vec<String>,
    /// A row whose `.0` column's text equals `.1` is a delete.
    pub delete_marker: Option<(String, String)>,
}

const DELETE_FIELD: &str = "hoodie.record.merge.property.hoodie.payload.delete.field";
const DELETE_MARKER: &str = "hoodie.record.merge.property.hoodie.payload.delete.marker";

impl MergeConfig {
    /// The columns that say whether a record is a delete (read by every pass that merges, the
    /// narrow ones included; a table lacking one simply has none).
    pub fn delete_columns(&self) -> impl Iterator<Item = String> + '_ {
        ["_hoodie_is_deleted", "_hoodie_operation"]
            .into_iter()
            .map(String::from)
            .chain(self.delete_marker.iter().map(|(f, _)| f.clone()))
    }

    /// The table's rule, or a configuration error naming what this build does not evaluate.
    pub fn from_table(t: &TableConfig) -> Result<Self, SourceError> {
        let (mode, mut delete_marker) = mode_of(t.version, &t.props).map_err(|why| SourceError::Config {
            message: format!(
                "Hudi table {}: {why}; lakestream merges records exactly as Hudi does only for \
                 COMMIT_TIME_ORDERING and EVENT_TIME_ORDERING (and the payloads that are one of them), \
                 so it does not read this table rather than emit what Hudi would not return",
                t.path.display()
            ),
        })?;
        let p = |k: &str| prop(&t.props, k);
        if let Some(m) = p("hoodie.table.partial.update.mode").filter(|m| !m.eq_ignore_ascii_case("NONE")) {
            return Err(SourceError::Config {
                message: format!(
                    "Hudi table {}: hoodie.table.partial.update.mode={m} (column-wise partial updates) is not \
                     evaluated by this build",
                    t.path.display()
                ),
            });
        }
        match (p(DELETE_FIELD), p(DELETE_MARKER)) {
            (Some(f), Some(m)) => delete_marker = Some((f.to_string(), m.to_string())),
            (None, None) => {}
            _ => {
                return Err(SourceError::Config {
                    message: format!(
                        "Hudi table {}: {DELETE_FIELD} and {DELETE_MARKER} must be set together (Hudi refuses \
                         the table too)",
                        t.path.display()
                    ),
                })
            }
        }
        let ordering = match mode {
            MergeMode::CommitTime => Vec::new(),
            MergeMode::EventTime => ordering_fields(&t.props)
                .map(|s| {
                    s.split(',')
                        .map(|f| f.trim().to_string())
                        .filter(|f| !f.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
        };
        Ok(Self {
            // event time without an ordering field is commit time (every value Hudi's default)
            mode: if ordering.is_empty() {
                MergeMode::CommitTime
            } else {
                mode
            },
            ordering,
            virtual_keys: p("hoodie.populate.meta.fields") == Some("false"),
            key_fields: t.key_fields.clone(),
            delete_marker,
        })
    }
}

/// The merge mode a table of `version` with `props` declares, and a delete marker its payload
/// implies; `Err`: why it is not evaluated here.
fn mode_of(version: u32, props: &HashMap<String, String>) -> Result<(MergeMode, Option<(String, String)>), String> {
    let p = |k: &str| prop(props, k);
    let payload = p("hoodie.compaction.payload.class")
        .or(p("hoodie.table.payload.class"))
        .or(p("hoodie.datasource.write.payload.class"));
    let declared = if version >= 8 {
        p("hoodie.record.merge.mode")
    } else {
        None
    };
    match declared {
        Some("EVENT_TIME_ORDERING") => Ok((MergeMode::EventTime, None)),
        Some("COMMIT_TIME_ORDERING") => Ok((MergeMode::CommitTime, None)),
        Some("CUSTOM") => Err(format!(
            "hoodie.record.merge.mode=CUSTOM (merger {}, payload {}, strategy {})",
            p("hoodie.record.merge.custom.implementation.classes").unwrap_or("not named"),
            payload.unwrap_or("not named"),
            p("hoodie.record.merge.strategy.id").unwrap_or("not named"),
        )),
        Some(other) => Err(format!(
            "hoodie.record.merge.mode={other} is not a merge mode Hudi 1.1 knows"
        )),
        None if version >= 8 && payload.is_none() => Ok((
            if ordering_fields(props).is_some() {
                MergeMode::EventTime
            } else {
                MergeMode::CommitTime
            },
            None,
        )),
        None => of_payload(payload.unwrap_or("org.apache.hudi.common.model.DefaultHoodieRecordPayload")),
    }
}

/// A table property, trimmed; `None` where it is absent or empty.
fn prop<'p>(props: &'p HashMap<String, String>, key: &str) -> Option<&'p str> {
    props.get(key).map(|v| v.trim()).filter(|v| !v.is_empty())
}

/// The ordering fields as the table names them (`hoodie.table.ordering.fields`, before it
/// `hoodie.table.precombine.field`), comma-separated.
fn ordering_fields(props: &HashMap<String, String>) -> Option<&str> {
    prop(props, "hoodie.table.ordering.fields").or(prop(props, "hoodie.table.precombine.field"))
}

/// The mode a (pre-version-8) payload class stands for.
fn of_payload(class: &str) -> Result<(MergeMode, Option<(String, String)>), String> {
    let class = class.replace("com.uber.hoodie", "org.apache.hudi");
    match class.rsplit('.').next().unwrap_or_default() {
        "DefaultHoodieRecordPayload" | "EventTimeAvroPayload" => Ok((MergeMode::EventTime, None)),
        "OverwriteWithLatestAvroPayload" => Ok((MergeMode::CommitTime, None)),
        "AWSDmsAvroPayload" => Ok((MergeMode::CommitTime, Some(("Op".into(), "D".into())))),
        _ => Err(format!(
            "payload class {class} (hoodie.compaction.payload.class) merges in its own way (Hudi 1.1 reads it \
             through the payload's combineAndGetUpdateValue)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(version: u32, kv: &[(&str, &str)]) -> Result<(MergeMode, Option<(String, String)>), String> {
        mode_of(
            version,
            &kv.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        )
    }

    #[test]
    fn the_mode_is_hudis_for_each_version_and_payload() {
        use MergeMode::*;
        assert_eq!(
            mode(9, &[("hoodie.record.merge.mode", "EVENT_TIME_ORDERING")])
                .unwrap()
                .0,
            EventTime
        );
        assert_eq!(
            mode(8, &[("hoodie.record.merge.mode", "COMMIT_TIME_ORDERING")])
                .unwrap()
                .0,
            CommitTime
        );
        // before version 8 the payload decides, DefaultHoodieRecordPayload where none is named
        assert_eq!(mode(6, &[]).unwrap().0, EventTime);
        let ow = "org.apache.hudi.common.model.OverwriteWithLatestAvroPayload";
        assert_eq!(
            mode(6, &[("hoodie.compaction.payload.class", ow)]).unwrap().0,
            CommitTime
        );
        let dms = "org.apache.hudi.common.model.AWSDmsAvroPayload";
        assert_eq!(
            mode(6, &[("hoodie.compaction.payload.class", dms)]).unwrap(),
            (CommitTime, Some(("Op".into(), "D".into())))
        );
        let e = mode(6, &[("hoodie.compaction.payload.class", "com.acme.MyPayload")]).unwrap_err();
        assert!(e.contains("com.acme.MyPayload"), "{e}");
        let e = mode(
            9,
            &[
                ("hoodie.record.merge.mode", "CUSTOM"),
                ("hoodie.record.merge.custom.implementation.classes", "com.acme.Merger"),
            ],
        )
        .unwrap_err();
        assert!(e.contains("com.acme.Merger"), "{e}");
        let partial = "org.apache.hudi.common.model.PartialUpdateAvroPayload";
        assert!(mode(6, &[("hoodie.compaction.payload.class", partial)]).is_err());
    }
}
