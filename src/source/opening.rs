//! The table-opening pipeline every format shares: a format reads its metadata and describes the
//! table ([`Described`]: name, namespace, columns, key, partitioning); the common step checks the
//! key against the columns, takes the required columns (`schema.nullability=table`), decides how
//! tasks divide the table and logs it once. So a fourth format describes, and inherits the rest.

use super::{Ownership, SourceError, TableInfo};
use crate::config::SourceSettings;

/// A top-level column as the table's metadata declares it.
pub struct Column {
    pub name: String,
    /// Declared non-null.
    pub required: bool,
}

/// What a format's metadata says of its table at open.
pub struct Described {
    /// `source.connector` of the events.
    pub connector: &'static str,
    pub name: String,
    /// The namespace (`source.db`); empty where the table has none.
    pub db: String,
    /// What messages call the table (`table s3://…/t (metadata v3)`).
    pub what: String,
    /// The columns; `None` where the format does not read them at open (Hudi: its data files
    /// are checked against the key when read).
    pub columns: Option<Vec<Column>>,
    /// The key the events carry (`key.fields` or the table's own); empty: keyless.
    pub key_fields: Vec<String>,
    /// Whether `key_fields` came from `key.fields` (checked against the columns) rather than
    /// from the table's own metadata.
    pub key_configured: bool,
    pub partitioned: bool,
    /// `Ok` where a key cannot leave its partition; else why it can.
    pub stays_in_partition: Result<(), String>,
}

/// The description checked and turned into what the rest of the connector reads of the table.
pub fn opened(cfg: &SourceSettings, d: Described) -> Result<(TableInfo, Ownership), SourceError> {
    if let (true, Some(columns)) = (d.key_configured, &d.columns) {
        if let Some(k) = d.key_fields.iter().find(|k| !columns.iter().any(|c| &c.name == *k)) {
            let names: Vec<&str> = columns.iter().map(|c| c.name.as_str()).collect();
            return Err(SourceError::Config {
                message: format!(
                    "key.fields: `{k}` is not a column of {} (columns: {})",
                    d.what,
                    names.join(", ")
                ),
            });
        }
    }
    let required = match (cfg.required_columns, &d.columns) {
        (true, Some(columns)) => columns.iter().filter(|c| c.required).map(|c| c.name.clone()).collect(),
        _ => Vec::new(),
    };
    let ownership = Ownership::decide(cfg, &d.name, d.partitioned, d.stays_in_partition);
    tracing::info!(connector = d.connector, table = %d.name, at = %d.what, keys = %d.key_fields.join(","),
        ownership = %ownership.name(), "opened table");
    let info = TableInfo {
        name: d.name,
        key_fields: d.key_fields,
        connector: d.connector,
        db: d.db,
        required,
    };
    Ok((info, ownership))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn described(key: &[&str], configured: bool) -> Described {
        Described {
            connector: "delta",
            name: "t".into(),
            db: String::new(),
            what: "the Delta table at version 3".into(),
            columns: Some(vec![
                Column {
                    name: "id".into(),
                    required: true,
                },
                Column {
                    name: "v".into(),
                    required: false,
                },
            ]),
            key_fields: key.iter().map(|k| k.to_string()).collect(),
            key_configured: configured,
            partitioned: false,
            stays_in_partition: Ok(()),
        }
    }

    fn settings(required: bool) -> SourceSettings {
        let dir = tempfile::tempdir().expect("temp dir");
        let file = dir.path().join("c.properties");
        let props = format!(
            "name=m\nconnector.class=delta\ntable.path={}\nkey.fields=id\ntopic=m\nbootstrap.servers=127.0.0.1:9\n\
             schema.registry.url=http://127.0.0.1:9\n",
            dir.path().display()
        );
        std::fs::write(&file, props).expect("written");
        let mut s = crate::config::load_connector(&file, 0).expect("loads").source();
        s.required_columns = required;
        s
    }

    #[test]
    fn a_configured_key_must_be_a_column() {
        let err = opened(&settings(false), described(&["id", "nope"], true))
            .err()
            .map(|e| e.to_string());
        let err = err.unwrap_or_default();
        assert!(
            err.contains("`nope` is not a column of the Delta table at version 3 (columns: id, v)"),
            "{err}"
        );
        assert!(opened(&settings(false), described(&["id"], true)).is_ok());
    }

    #[test]
    fn required_columns_only_when_asked() {
        let (info, own) = opened(&settings(true), described(&["id"], true)).expect("opens");
        assert_eq!(info.required, vec!["id".to_string()]);
        assert_eq!(own, Ownership::Key);
        let (info, _) = opened(&settings(false), described(&["id"], true)).expect("opens");
        assert!(info.required.is_empty());
    }
}
