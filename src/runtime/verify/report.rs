//! What a verify found, as text for a person or JSON for a machine: per table partition the rows
//! in the table and replayed from the topic, the keys missing, extra and differing, with example
//! keys of each; `equal` only when every count of a difference is zero.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::compare::{Counts, Examples, Tally};
use super::topic::TopicSide;
use super::Target;
use crate::config::ConnectorConfig;
use crate::source::{Source, Unit};

#[derive(Debug, Clone, Serialize)]
pub struct PartitionCounts {
    pub partition: String,
    #[serde(flatten)]
    pub counts: Counts,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub connector: String,
    pub table: String,
    pub format: &'static str,
    pub topic: String,
    /// The commit compared (Hudi instant, Iceberg snapshot id).
    pub position: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position_completed: Option<String>,
    pub tasks: u32,
    /// The stream's first unit, and whether it was a snapshot (else the topic holds only the
    /// rows changed since it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_unit: Option<String>,
    pub began_with_snapshot: bool,
    pub keyless: bool,
    pub equal: bool,
    pub total: Counts,
    pub partitions: Vec<PartitionCounts>,
    pub examples: Examples,
    pub topic_records: u64,
    pub events_replayed: u64,
    pub events_after_position: u64,
    /// Commits of events the table's history no longer names (expired snapshots), replayed.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub unknown_commits: Vec<String>,
    /// Columns renamed or re-added in the table's history, left out of the comparison.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub columns_not_compared: Vec<String>,
    pub buckets: u32,
    pub seconds: f64,
}

impl Report {
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        cfg: &ConnectorConfig,
        source: &Arc<dyn Source>,
        target: &Target,
        unit: &Unit,
        tally: Tally,
        topic: &TopicSide,
        buckets: u32,
        took: Duration,
    ) -> Self {
        let total = tally.total();
        let mut unknown = topic.unknown_commits.clone();
        unknown.sort();
        unknown.dedup();
        Report {
            connector: cfg.name.clone(),
            table: source.info().qualified_name(),
            format: source.info().connector,
            topic: cfg.kafka.topic.clone(),
            position: unit.position.version.clone(),
            position_completed: unit.position.completed.clone(),
            tasks: target.tasks,
            first_unit: target.first.as_ref().map(|f| f.unit.version.clone()),
            began_with_snapshot: target.first.as_ref().is_none_or(|f| f.snapshot),
            keyless: source.info().keyless(),
            equal: total.mismatched() == 0,
            partitions: tally
                .by_partition
                .into_iter()
                .map(|(partition, counts)| PartitionCounts { partition, counts })
                .collect(),
            total,
            examples: tally.examples,
            topic_records: topic.records,
            events_replayed: topic.applied,
            events_after_position: topic.after_position,
            unknown_commits: unknown,
            columns_not_compared: Vec::new(),
            buckets,
            seconds: took.as_secs_f64(),
        }
    }

    /// The report for a person.
    pub fn text(&self) -> String {
        let mut out = format!(
            "verify {} ({} table {}, topic {}) at {}{}\n",
            self.connector,
            self.format,
            self.table,
            self.topic,
            self.position,
            self.position_completed
                .as_ref()
                .map_or(String::new(), |c| format!(" (completed {c})"))
        );
        if !self.began_with_snapshot {
            out.push_str(&format!(
                "note: the stream began with commit {}, not with a snapshot: rows the table held before it and \
                 not changed since are not in the topic (they count as missing)\n",
                self.first_unit.as_deref().unwrap_or("?")
            ));
        }
        if !self.columns_not_compared.is_empty() {
            out.push_str(&format!(
                "note: columns renamed or re-added in the table's history are not compared: {}\n",
                self.columns_not_compared.join(", ")
            ));
        }
        let w = self
            .partitions
            .iter()
            .map(|p| p.partition.len())
            .max()
            .unwrap_or(0)
            .max(13);
        out.push_str(&format!(
            "{:<w$} {:>12} {:>12} {:>9} {:>9} {:>9}\n",
            "partition", "table rows", "replayed", "missing", "extra", "differing"
        ));
        let line = |name: &str, c: &Counts| {
            format!(
                "{name:<w$} {:>12} {:>12} {:>9} {:>9} {:>9}\n",
                c.table_rows, c.replayed_rows, c.missing, c.extra, c.differing
            )
        };
        for p in &self.partitions {
            let name = if p.partition.is_empty() { "(none)" } else { &p.partition };
            out.push_str(&line(name, &p.counts));
        }
        out.push_str(&line("total", &self.total));
        if self.total.duplicated_events > 0 {
            out.push_str(&format!(
                "events published twice: {} keys\n",
                self.total.duplicated_events
            ));
        }
        if self.total.duplicate_keys > 0 {
            out.push_str(&format!("keys the table holds twice: {}\n", self.total.duplicate_keys));
        }
        let ex = &self.examples;
        for (what, keys) in [
            ("missing", &ex.missing),
            ("extra", &ex.extra),
            ("differing", &ex.differing),
            ("duplicate in the table", &ex.duplicate_keys),
            ("events published twice", &ex.duplicated_events),
        ] {
            if !keys.is_empty() {
                out.push_str(&format!("{what}: {}\n", keys.join(", ")));
            }
        }
        out.push_str(&format!(
            "{} records read, {} replayed, {} after the position; {} buckets; {:.1} s\n",
            self.topic_records, self.events_replayed, self.events_after_position, self.buckets, self.seconds
        ));
        out.push_str(if self.equal {
            "EQUAL: replaying the topic by key gives the table\n"
        } else {
            "DIFFERENT: the topic does not replay to the table\n"
        });
        out
    }
}
