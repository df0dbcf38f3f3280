use super::*;
use crate::config::{load_file, Loaded};

fn tables(dir: &tempfile::TempDir, extra: &str) -> Result<TablesConfig, ConfigError> {
    let p = dir.path().join("lake.properties");
    std::fs::write(
        &p,
        format!(
            "name=lake\ntable.path.prefix={}\ntopic.prefix=lake\nbootstrap.servers=k:9092\n\
             schema.registry.url=http://r:8081\nread.start-commit=earliest\nstarting-version=0\n\
             key.fields=id\ntasks.max=2\n{extra}",
            dir.path().display()
        ),
    )
    .unwrap();
    match load_file(&p, 0)? {
        Loaded::Tables(t) => Ok(*t),
        Loaded::Table(_) => panic!("a discovering file loads as one table"),
    }
}

fn found(dir: &tempfile::TempDir, kind: ConnectorKind, ns: &[&str], table: &str) -> Found {
    let path = dir.path().join(table);
    std::fs::create_dir_all(&path).unwrap();
    Found {
        kind,
        namespace: ns.iter().map(|s| s.to_string()).collect(),
        table: table.into(),
        path: Some(path),
    }
}

#[test]
fn a_member_is_the_file_its_table_would_have() {
    let dir = tempfile::tempdir().unwrap();
    let t = tables(&dir, "").unwrap();
    let hudi = t
        .member(&found(&dir, ConnectorKind::Hudi, &["sales"], "orders"))
        .unwrap();
    assert_eq!(hudi.name, "lake/sales.orders");
    assert_eq!(hudi.kafka.topic, "lake.sales.orders");
    assert_eq!(hudi.kind, ConnectorKind::Hudi);
    assert_eq!(hudi.table_path, dir.path().join("orders"));
    assert_eq!(hudi.read.start, crate::config::StartCommit::Earliest);
    assert_eq!(hudi.runtime.tasks, 2);
    assert_eq!(hudi.transactional_id(false), "lake/sales.orders-2-0");
    // the template's keys of other formats are left out of each member
    assert!(!hudi.raw.contains_key("key.fields") && !hudi.raw.contains_key("starting-version"));
    assert!(!hudi.raw.contains_key("table.path.prefix") && !hudi.raw.contains_key("topic.prefix"));
    let delta = t
        .member(&found(&dir, ConnectorKind::Delta, &["sales"], "items"))
        .unwrap();
    assert_eq!(delta.raw.get("key.fields").map(String::as_str), Some("id"));
    assert!(!delta.raw.contains_key("read.start-commit"));
}

#[test]
fn the_lists_match_whole_names_and_exclude_one_another() {
    let dir = tempfile::tempdir().unwrap();
    // a backslash is written twice in a properties file
    let t = tables(&dir, "table.include.list=sales\\\\..*, ops\\\\.audit\n").unwrap();
    assert!(t.streams("sales.orders") && t.streams("ops.audit"));
    assert!(!t.streams("ops.audit_old") && !t.streams("xsales.orders") && !t.streams("salesxorders"));
    let t = tables(&dir, "table.exclude.list=.*_tmp\n").unwrap();
    assert!(t.streams("sales.orders") && !t.streams("sales.orders_tmp"));
    let e = tables(&dir, "table.include.list=a.*\ntable.exclude.list=b.*\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("`table.exclude.list`") && e.contains("use one of the two"),
        "{e}"
    );
    let e = tables(&dir, "table.include.list=sales.(orders\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(":10: `table.include.list`: not a list of regular expressions"),
        "{e}"
    );
}

#[test]
fn one_table_keys_and_a_slash_in_the_name_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (extra, key) in [("topic=t\n", "topic"), ("table.path=/x\n", "table.path")] {
        let e = tables(&dir, extra).unwrap_err().to_string();
        assert!(
            e.contains(&format!("`{key}`: a connector that discovers its tables")),
            "{e}"
        );
    }
    let p = dir.path().join("one.properties");
    std::fs::write(
        &p,
        format!(
            "name=c\nconnector.class=hudi\ntable.path={}\ntopic=t\nbootstrap.servers=k:9092\n\
             schema.registry.url=http://r\ntopic.prefix=x\n",
            dir.path().display()
        ),
    )
    .unwrap();
    let e = load_file(&p, 0).err().unwrap().to_string();
    assert!(e.contains("`table.path`") && e.contains("names no table"), "{e}");
    let e = tables(&dir, "").map(|_| ()).and_then(|_| {
        let body = std::fs::read_to_string(dir.path().join("lake.properties"))
            .unwrap()
            .replace("name=lake", "name=a/b");
        std::fs::write(dir.path().join("lake.properties"), body).unwrap();
        load_file(&dir.path().join("lake.properties"), 0).map(|_| ())
    });
    assert!(e.unwrap_err().to_string().contains("or `/`"));
}

#[test]
fn topics_replace_what_kafka_refuses_and_collisions_are_refused_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let t = tables(&dir, "").unwrap();
    let odd = found(&dir, ConnectorKind::Delta, &["my db"], "tbl$1");
    assert_eq!(t.topic_for(&odd), "lake.my_db.tbl_1");
    let a = found(&dir, ConnectorKind::Delta, &["sales"], "a_b");
    let b = found(&dir, ConnectorKind::Delta, &["sales", "a"], "b");
    let e = t.view(&[a.clone(), b.clone()], None).unwrap_err().to_string();
    assert!(
        e.contains("`topic.prefix`") && e.contains("sales.a.b") && e.contains("sales.a_b"),
        "{e}"
    );
    // later, against what already streams: the newcomer is skipped, the stream kept
    let first = t.view(std::slice::from_ref(&a), None).unwrap();
    let later = t.view(&[a.clone(), b], Some(&first.members)).unwrap();
    assert_eq!(
        later.members.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(),
        ["lake/sales.a_b"]
    );
    assert_eq!(later.skipped.len(), 1, "{:?}", later.skipped);
    assert!(later.skipped[0].1.contains("collide"), "{:?}", later.skipped);
}

#[test]
fn a_connector_class_keeps_its_format_only_and_excluded_tables_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let t = tables(&dir, "connector.class=delta\ntable.exclude.list=ops\\..*\n");
    // read.start-commit is a Hudi key: with connector.class=delta the template refuses it
    assert!(t.unwrap_err().to_string().contains("`read.start-commit`"));
    let p = dir.path().join("lake.properties");
    let body = std::fs::read_to_string(&p)
        .unwrap()
        .replace("read.start-commit=earliest\n", "");
    std::fs::write(&p, body).unwrap();
    let t = match load_file(&p, 0).unwrap() {
        Loaded::Tables(t) => *t,
        Loaded::Table(_) => unreachable!(),
    };
    let view = t
        .view(
            &[
                found(&dir, ConnectorKind::Delta, &["sales"], "items"),
                found(&dir, ConnectorKind::Hudi, &["sales"], "orders"),
                found(&dir, ConnectorKind::Delta, &["ops"], "log"),
            ],
            None,
        )
        .unwrap();
    assert_eq!(view.members.len(), 1);
    assert_eq!(view.excluded, 1);
    assert_eq!(view.skipped.len(), 1);
    assert!(
        view.skipped[0]
            .1
            .contains("a Hudi table; this connector is connector.class=delta"),
        "{:?}",
        view.skipped
    );
}

fn in_catalog(dir: &tempfile::TempDir, catalog: &str) -> Result<TablesConfig, ConfigError> {
    let p = dir.path().join("cat.properties");
    std::fs::write(
        &p,
        format!(
            "name=lake\ntopic.prefix=lake\nbootstrap.servers=k:9092\nschema.registry.url=http://r:8081\n\
             starting-version=0\nkey.fields=id\n{catalog}"
        ),
    )
    .unwrap();
    match load_file(&p, 0)? {
        Loaded::Tables(t) => Ok(*t),
        Loaded::Table(_) => panic!("a discovering file loads as one table"),
    }
}

#[test]
fn a_catalogs_iceberg_tables_are_members_by_name_its_others_by_path() {
    let dir = tempfile::tempdir().unwrap();
    let glue = "catalog.type=glue\ncatalog.region=eu-west-1\ncatalog.uri=http://127.0.0.1:1\n";
    let t = in_catalog(&dir, glue).unwrap();
    assert!(matches!(t.discovery.search, Search::Catalog { depth: 1, .. }));
    let orders = Found {
        kind: ConnectorKind::Iceberg,
        namespace: vec!["sales".into()],
        table: "orders".into(),
        path: None,
    };
    let m = t.member(&orders).unwrap();
    assert_eq!(m.raw.get("table.identifier").map(String::as_str), Some("sales.orders"));
    assert_eq!(m.raw.get("catalog.type").map(String::as_str), Some("glue"));
    assert!(!m.raw.contains_key("table.path"));
    assert_eq!(m.kafka.topic, "lake.sales.orders");
    // a Delta table Glue names is read by its location; the catalog's keys are not its own
    let items = found(&dir, ConnectorKind::Delta, &["sales"], "items");
    let m = t.member(&items).unwrap();
    assert_eq!(m.table_path, dir.path().join("items"));
    assert!(m.raw.keys().all(|k| !k.starts_with("catalog.")), "{:?}", m.raw);
    let err = |extra: &str| in_catalog(&dir, extra).err().map(|e| e.to_string()).unwrap_or_default();
    // connector.class=hudi with Glue: the catalog's keys are not foreign to it, Delta's are
    let e = err(&format!("{glue}connector.class=hudi\n"));
    assert!(
        !e.contains("catalog.") && (e.contains("key.fields") || e.contains("starting-version")),
        "{e}"
    );
    let rest = "catalog.type=rest\ncatalog.uri=http://127.0.0.1:1\n";
    assert!(in_catalog(&dir, &format!("{rest}table.discovery.depth=2\n")).is_ok());
    let e = err(&format!("{rest}connector.class=delta\n"));
    assert!(
        e.contains("`connector.class`") && e.contains("Iceberg tables only"),
        "{e}"
    );
    let e = err(&format!("{glue}table.discovery.depth=2\n"));
    assert!(e.contains("`table.discovery.depth`"), "{e}");
    let e = err(&format!("{glue}table.path.prefix={}\n", dir.path().display()));
    assert!(e.contains("`catalog.type`") && e.contains("table.path.prefix"), "{e}");
    let e = err("catalog.type=hadoop\n");
    assert!(
        e.contains("`topic.prefix`") && e.contains("say where tables are looked for"),
        "{e}"
    );
    let e = err(&format!("{rest}table.identifier=a.b\n"));
    assert!(e.contains("`table.identifier`") && e.contains("names no table"), "{e}");
}
