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
            assert_eq!(action, "replacecommit");
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
        table_type: "COPY_ON_WRITE".into(),
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
