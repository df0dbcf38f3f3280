//! Unit tests of `timeline`.

use super::*;

#[test]
fn parses_both_layouts() {
    assert!(matches!(
        parse_name("20240418173213674.commit", 1),
        Some(Parsed::Completed { .. })
    ));
    assert!(matches!(
        parse_name("20240418173213674.inflight", 1),
        Some(Parsed::Pending { .. })
    ));
    assert!(matches!(
        parse_name("20240418173213674.commit.requested", 1),
        Some(Parsed::Pending { .. })
    ));
    match parse_name("20260307162434124_20260307162438653.replacecommit", 2) {
        Some(Parsed::Completed {
            requested,
            completed,
            action,
        }) => {
            assert_eq!(requested, "20260307162434124");
            assert_eq!(completed.as_deref(), Some("20260307162438653"));
            assert_eq!(action, Action::ReplaceCommit);
        }
        _ => panic!("not parsed"),
    }
    assert!(matches!(
        parse_name("20260307162454799.clustering.requested", 2),
        Some(Parsed::Pending { .. })
    ));
    assert!(parse_name("hoodie.properties", 1).is_none());
    assert!(parse_name("archived", 1).is_none());
}

#[test]
fn global_index_from_the_table_config() {
    let with = |k: &str, v: &str| TableConfig {
        path: PathBuf::new(),
        name: "t".into(),
        version: 8,
        layout: 2,
        table_type: TableType::CopyOnWrite,
        key_fields: vec!["id".into()],
        timeline_dir: PathBuf::new(),
        props: HashMap::from([(k.to_string(), v.to_string())]),
        storage: Default::default(),
    };
    assert!(with("hoodie.index.type", "GLOBAL_BLOOM").global_index().is_some());
    assert!(with("hoodie.index.type", "record_index").global_index().is_some());
    assert!(with("hoodie.index.type", "SIMPLE").global_index().is_none());
    assert!(with("hoodie.table.metadata.partitions", "files,record_index")
        .global_index()
        .is_some());
    assert!(with("hoodie.table.metadata.partitions", "files,column_stats")
        .global_index()
        .is_none());
}

#[test]
fn instant_times() {
    assert_eq!(instant_millis("20240101000000000"), Some(1704067200000));
    assert_eq!(instant_millis("20240101000001"), Some(1704067201000));
}

/// A layout-1 table whose timeline holds `instants` (requested time, action, partitions written).
fn table_with(dir: &Path, instants: &[(&str, &str, &[&str])]) -> TableConfig {
    for (t, action, parts) in instants {
        let stats: serde_json::Map<String, serde_json::Value> = parts
            .iter()
            .map(|p| {
                (
                    p.to_string(),
                    serde_json::json!([{"fileId": "f1", "path": format!("{p}/f1.parquet")}]),
                )
            })
            .collect();
        let md = serde_json::json!({"partitionToWriteStats": stats, "operationType": "UPSERT"});
        std::fs::write(dir.join(format!("{t}.{action}")), md.to_string()).unwrap();
    }
    TableConfig {
        path: dir.to_path_buf(),
        name: "t".into(),
        version: 6,
        layout: 1,
        table_type: TableType::MergeOnRead,
        key_fields: vec!["id".into()],
        timeline_dir: dir.to_path_buf(),
        props: HashMap::new(),
        storage: Default::default(),
    }
}

#[test]
fn a_gap_names_the_partitions_its_writes_touched_or_none() {
    let at = |t: &str| crate::source::Position {
        version: t.into(),
        completed: None,
    };
    let dir = tempfile::tempdir().unwrap();
    let table = table_with(
        dir.path(),
        &[
            ("20260101000001000", "deltacommit", &["p=a", "p=b"]),
            ("20260101000002000", "deltacommit", &["p=c"]),
            ("20260101000003000", "clean", &[]),
            ("20260101000004000", "commit", &["p=d"]),
            ("20260101000005000", "deltacommit", &["p=a"]),
        ],
    );
    let tl = Timeline::load(&table).unwrap();
    let got = |a: &str, b: &str| {
        partitions_written(&table.storage, &tl, &at(a), &at(b))
            .unwrap()
            .map(|s| s.into_iter().collect::<Vec<_>>())
    };
    // the writes after the position up to the target, the clean ignored, the position's own not
    assert_eq!(
        got("20260101000001000", "20260101000004000"),
        Some(vec!["p=c".into(), "p=d".into()])
    );
    assert_eq!(got("20260101000004000", "20260101000005000"), Some(vec!["p=a".into()]));
    // a position no longer on the timeline, a target not after it: every partition
    assert_eq!(got("20251231000000000", "20260101000005000"), None);
    assert_eq!(got("20260101000005000", "20260101000005000"), None);
    // a rollback in between may have undone an emitted write
    let dir2 = tempfile::tempdir().unwrap();
    let table2 = table_with(
        dir2.path(),
        &[
            ("20260101000001000", "deltacommit", &["p=a"]),
            ("20260101000002000", "rollback", &[]),
            ("20260101000003000", "deltacommit", &["p=b"]),
        ],
    );
    let tl2 = Timeline::load(&table2).unwrap();
    assert_eq!(
        partitions_written(
            &table2.storage,
            &tl2,
            &at("20260101000001000"),
            &at("20260101000003000")
        )
        .unwrap(),
        None
    );
}
