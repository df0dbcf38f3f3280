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
//! Column-wise merges ([`Partial`], applied by `merge/partial.rs`): from table version 9,
//! `hoodie.table.partial.update.mode` `IGNORE_DEFAULTS` (a null left to the other record) and
//! `FILL_UNAVAILABLE` (a string value equal to
//! `hoodie.record.merge.property.hoodie.write.partial.update.unavailable.value`, Debezium's TOAST
//! marker), the winner chosen by the mode as above (`EventTimePartialRecordMerger`,
//! `CommitTimePartialRecordMerger`, `PartialUpdateHandler`); before it the payloads Hudi 1.1 reads
//! through `HoodieAvroRecordMerger` (`combineAndGetUpdateValue`; a later delete always wins):
//! `PartialUpdateAvroPayload` (event time, nulls filled both ways, meta columns from the later
//! record), `OverwriteNonDefaultsWithLatestAvroPayload` (commit time, nulls filled from the earlier
//! record), `MySqlDebeziumAvroPayload` (no fill: ordered by `_event_seq` as two numbers, binlog
//! file then position, a tie to the later record; a delete row ordered too, a delete-block entry
//! winning).
//!
//! What is not evaluated here stops the connector at `validate` and at start (exit 2): the
//! `CUSTOM` mode (a `HoodieRecordMerger` or payload class of the user's), other payload classes
//! (`PostgresDebeziumAvroPayload` before table version 9: it fills TOAST markers in place, and
//! Hudi 1.1.1 keeps the fill only where `BaseAvroPayload.getRecord` copied the record; where the
//! Avro serializer Spark's record context caches by schema *equality* was built with the very
//! schema object the merger passes, `getRecord` hands back the same record, the merger returns
//! the unfilled `newer`; so Spark's answer depends on which schema object came first in the
//! reader, not on the table — seen: filled from an insert's base file, never from a compaction's)
//! and the other partial-update modes.

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
    /// Records merge column by column (a partial-update mode, or a payload class read through
    /// its `combineAndGetUpdateValue`): see [`Partial`].
    pub partial: Option<Partial>,
    /// The one ordering field is MySQL Debezium's `_event_seq`, `<binlog file>.<position>`,
    /// compared as two numbers (`MySqlDebeziumAvroPayload.isCurrentSeqLatest`).
    pub binlog_seq: bool,
}

/// A column-wise merge: the record that wins by the mode's ordering is the *high* one, and
/// columns it leaves [`Missing`] are taken from the other (Hudi 1.1's `PartialUpdateHandler`
/// from table version 9, the legacy payloads' `combineAndGetUpdateValue` before it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partial {
    pub missing: Missing,
    /// Before table version 9 (`HoodieAvroRecordMerger` over the payload): a later delete-block
    /// entry wins whatever its ordering value, and a later record always wins over it.
    pub deletes_win: bool,
    /// So do deletes written as rows (`_hoodie_is_deleted`, the delete marker), where the
    /// payload says a delete before it orders (not `MySqlDebeziumAvroPayload`, which compares
    /// positions first).
    pub soft_deletes_win: bool,
    /// Where the earlier record outranks the later one, the Hudi meta columns still come from
    /// the later one (`PartialUpdateAvroPayload.mergeDisorderRecordsWithMetadata`).
    pub meta_from_newer: bool,
}

/// Which of the high record's values are left to the lower one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// None: records are not filled, only ordered the payload's way.
    Nothing,
    /// A null (`IGNORE_DEFAULTS`: a nullable column's default).
    Null,
    /// A string value equal to this text (`FILL_UNAVAILABLE`, Debezium's TOAST marker; Hudi's
    /// Spark row reader never matches a bytes value).
    Unavailable(String),
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
        let refused = |why: String| SourceError::Config {
            message: format!(
                "Hudi table {}: {why}; lakestream merges records exactly as Hudi does only for \
                 COMMIT_TIME_ORDERING and EVENT_TIME_ORDERING, their partial-update modes and the payloads that \
                 are one of them, so it does not read this table rather than emit what Hudi would not return",
                t.path.display()
            ),
        };
        let mut rule = rule_of(t.version, &t.props).map_err(refused)?;
        let p = |k: &str| prop(&t.props, k);
        match (p(DELETE_FIELD), p(DELETE_MARKER)) {
            (Some(f), Some(m)) => rule.delete_marker = Some((f.to_string(), m.to_string())),
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
        let ordering = match rule.mode {
            MergeMode::CommitTime => Vec::new(),
            MergeMode::EventTime if rule.binlog_seq => vec!["_event_seq".to_string()],
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
                rule.mode
            },
            ordering,
            virtual_keys: p("hoodie.populate.meta.fields") == Some("false"),
            key_fields: t.key_fields.clone(),
            delete_marker: rule.delete_marker,
            partial: rule.partial,
            binlog_seq: rule.binlog_seq,
        })
    }
}

/// What a table's settings say of its merge (before the delete-marker properties and the
/// ordering fields are read).
#[derive(Debug, PartialEq)]
struct Rule {
    mode: MergeMode,
    delete_marker: Option<(String, String)>,
    partial: Option<Partial>,
    binlog_seq: bool,
}

impl Rule {
    fn of(mode: MergeMode) -> Self {
        Rule {
            mode,
            delete_marker: None,
            partial: None,
            binlog_seq: false,
        }
    }
}

const UNAVAILABLE: &str = "hoodie.record.merge.property.hoodie.write.partial.update.unavailable.value";
const DEBEZIUM_UNAVAILABLE: &str = "__debezium_unavailable_value";

/// The rule a table of `version` with `props` declares; `Err`: why it is not evaluated here.
fn rule_of(version: u32, props: &HashMap<String, String>) -> Result<Rule, String> {
    let p = |k: &str| prop(props, k);
    let payload = p("hoodie.compaction.payload.class")
        .or(p("hoodie.table.payload.class"))
        .or(p("hoodie.datasource.write.payload.class"));
    let declared = if version >= 8 {
        p("hoodie.record.merge.mode")
    } else {
        None
    };
    let mut rule = match declared {
        Some("EVENT_TIME_ORDERING") => Rule::of(MergeMode::EventTime),
        Some("COMMIT_TIME_ORDERING") => Rule::of(MergeMode::CommitTime),
        Some("CUSTOM") => {
            return Err(format!(
                "hoodie.record.merge.mode=CUSTOM (merger {}, payload {}, strategy {})",
                p("hoodie.record.merge.custom.implementation.classes").unwrap_or("not named"),
                payload.unwrap_or("not named"),
                p("hoodie.record.merge.strategy.id").unwrap_or("not named"),
            ))
        }
        Some(other) => {
            return Err(format!(
                "hoodie.record.merge.mode={other} is not a merge mode Hudi 1.1 knows"
            ))
        }
        None if version >= 8 && payload.is_none() => Rule::of(if ordering_fields(props).is_some() {
            MergeMode::EventTime
        } else {
            MergeMode::CommitTime
        }),
        None => of_payload(payload.unwrap_or("org.apache.hudi.common.model.DefaultHoodieRecordPayload"))?,
    };
    // the partial-update mode is read from table version 9 on (`getPartialUpdateMode`)
    let partial = if version >= 9 {
        p("hoodie.table.partial.update.mode")
    } else {
        None
    };
    let missing = match partial.map(str::to_ascii_uppercase).as_deref() {
        None | Some("NONE") => None,
        Some("IGNORE_DEFAULTS") => Some(Missing::Null),
        Some("FILL_UNAVAILABLE") => Some(Missing::Unavailable(
            p(UNAVAILABLE).unwrap_or(DEBEZIUM_UNAVAILABLE).to_string(),
        )),
        Some(other) => {
            return Err(format!(
                "hoodie.table.partial.update.mode={other} is not evaluated by this build (IGNORE_DEFAULTS and \
                 FILL_UNAVAILABLE are)"
            ))
        }
    };
    if let Some(missing) = missing {
        rule.partial = Some(Partial {
            missing,
            deletes_win: false,
            soft_deletes_win: false,
            meta_from_newer: false,
        });
    }
    Ok(rule)
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

/// The rule a (pre-version-8) payload class stands for: the payloads Hudi 1.1 reads through its
/// own mergers, and those it reads through `HoodieAvroRecordMerger` and the payload's
/// `combineAndGetUpdateValue` (a later delete-block entry always wins there;
/// `getTableMergeProperties` adds the DMS and Debezium delete markers).
fn of_payload(class: &str) -> Result<Rule, String> {
    let class = class.replace("com.uber.hoodie", "org.apache.hudi");
    let by_payload = |mode, missing, meta_from_newer| Rule {
        partial: Some(Partial {
            soft_deletes_win: missing != Missing::Nothing,
            missing,
            deletes_win: true,
            meta_from_newer,
        }),
        ..Rule::of(mode)
    };
    Ok(match class.rsplit('.').next().unwrap_or_default() {
        "DefaultHoodieRecordPayload" | "EventTimeAvroPayload" => Rule::of(MergeMode::EventTime),
        "OverwriteWithLatestAvroPayload" => Rule::of(MergeMode::CommitTime),
        "AWSDmsAvroPayload" => Rule {
            delete_marker: Some(("Op".into(), "D".into())),
            ..Rule::of(MergeMode::CommitTime)
        },
        "PartialUpdateAvroPayload" => by_payload(MergeMode::EventTime, Missing::Null, true),
        "OverwriteNonDefaultsWithLatestAvroPayload" => by_payload(MergeMode::CommitTime, Missing::Null, false),
        "MySqlDebeziumAvroPayload" => Rule {
            delete_marker: Some(("_change_operation_type".into(), "d".into())),
            binlog_seq: true,
            ..by_payload(MergeMode::EventTime, Missing::Nothing, false)
        },
        _ => {
            return Err(format!(
                "payload class {class} (hoodie.compaction.payload.class) merges in its own way (Hudi 1.1 reads it \
                 through the payload's combineAndGetUpdateValue)"
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(version: u32, kv: &[(&str, &str)]) -> Result<(MergeMode, Option<(String, String)>), String> {
        rule(version, kv).map(|r| (r.mode, r.delete_marker))
    }

    fn rule(version: u32, kv: &[(&str, &str)]) -> Result<Rule, String> {
        rule_of(
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
        let mysql = rule(
            6,
            &[(
                "hoodie.compaction.payload.class",
                "org.apache.hudi.common.model.debezium.MySqlDebeziumAvroPayload",
            )],
        )
        .unwrap();
        assert!(
            mysql.binlog_seq
                && mysql
                    .partial
                    .is_some_and(|p| p.missing == Missing::Nothing && !p.soft_deletes_win)
        );
    }

    #[test]
    fn column_wise_merges_are_read_from_the_payload_or_the_partial_update_mode() {
        let partial = |kv: &[(&str, &str)], v| rule(v, kv).unwrap().partial;
        let pu = "org.apache.hudi.common.model.PartialUpdateAvroPayload";
        let p = partial(&[("hoodie.compaction.payload.class", pu)], 6).unwrap();
        assert_eq!(
            (p.missing, p.deletes_win, p.meta_from_newer),
            (Missing::Null, true, true)
        );
        let e = mode(
            6,
            &[(
                "hoodie.compaction.payload.class",
                "org.apache.hudi.common.model.debezium.PostgresDebeziumAvroPayload",
            )],
        )
        .unwrap_err();
        assert!(e.contains("PostgresDebeziumAvroPayload"), "{e}");
        // from table version 9 the mode and the partial-update mode say it
        let v9 = [
            ("hoodie.record.merge.mode", "EVENT_TIME_ORDERING"),
            ("hoodie.table.partial.update.mode", "FILL_UNAVAILABLE"),
        ];
        let p = partial(&v9, 9).unwrap();
        assert_eq!(p.missing, Missing::Unavailable("__debezium_unavailable_value".into()));
        assert!(!p.deletes_win);
        // table version 8 does not read the partial-update mode
        assert_eq!(partial(&v9, 8), None);
        let e = rule(
            9,
            &[
                ("hoodie.record.merge.mode", "EVENT_TIME_ORDERING"),
                ("hoodie.table.partial.update.mode", "KEEP_VALUES"),
            ],
        )
        .unwrap_err();
        assert!(e.contains("KEEP_VALUES"), "{e}");
    }
}
