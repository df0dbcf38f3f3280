use super::*;
use std::io::Write;

fn write(dir: &tempfile::TempDir, body: &str) -> PathBuf {
    let p = dir.path().join("c.properties");
    let mut f = std::fs::File::create(&p).unwrap();
    f.write_all(body.as_bytes()).unwrap();
    p
}

fn base(dir: &tempfile::TempDir) -> String {
    format!(
        "name=c1\nconnector.class=hudi\ntable.path={}\ntopic=t\nbootstrap.servers=localhost:9092\n\
         value.converter=io.confluent.connect.avro.AvroConverter\nvalue.converter.schemas.enable=true\n\
         value.converter.schema.registry.url=http://localhost:8081\n",
        dir.path().display()
    )
}

#[test]
fn parses_connect_style_file_with_converter_keys_kept() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        &dir,
        &(base(&dir) + "read.start-commit=earliest\nproducer.override.linger.ms=5\n"),
    );
    let c = load_connector(&p, 0).unwrap();
    assert_eq!(c.registry.url, "http://localhost:8081");
    assert_eq!(c.read.start, StartCommit::Earliest);
    assert_eq!(
        c.kafka.producer_overrides.get("linger.ms").map(String::as_str),
        Some("5")
    );
    assert_eq!(
        c.raw.get("value.converter.schemas.enable").map(String::as_str),
        Some("true")
    );
    assert_eq!(c.read.check_interval, Duration::from_secs(60));
    assert_eq!(c.transactional_id(false), "c1-0");
}

#[test]
fn unknown_key_names_file_line_and_suggestion() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, &(base(&dir) + "read.start-comit=earliest\n"));
    let e = load_connector(&p, 0).unwrap_err().to_string();
    assert!(e.contains(":9: unknown key `read.start-comit`"), "{e}");
    assert!(e.contains("did you mean `read.start-commit`"), "{e}");
}

#[test]
fn malformed_values_are_rejected_with_allowed_values() {
    let dir = tempfile::tempdir().unwrap();
    for (line, want) in [
        ("tombstones.on.delete=yes", "not one of: true, false"),
        ("read.start-commit=yesterday", "`earliest`, `latest`"),
        ("transaction.boundary=sometimes", "instant, interval"),
        ("read.streaming.check-interval=soon", "not a duration"),
    ] {
        let p = write(&dir, &(base(&dir) + line + "\n"));
        let e = load_connector(&p, 0).unwrap_err().to_string();
        assert!(e.contains(want), "{line}: {e}");
    }
}

#[test]
fn env_placeholders_resolve_and_secrets_are_masked() {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_var("LAKESTREAM_TEST_SECRET", "hunter2");
    let p = write(
        &dir,
        &(base(&dir) + "producer.override.sasl.password=${env:LAKESTREAM_TEST_SECRET}\n"),
    );
    let c = load_connector(&p, 0).unwrap();
    assert_eq!(c.kafka.producer_overrides["sasl.password"], "hunter2");
    let shown = c.describe();
    assert!(
        !shown.contains("hunter2") && shown.contains("sasl.password = ********"),
        "{shown}"
    );
    let p = write(&dir, &(base(&dir) + "topic=${env:LAKESTREAM_TEST_UNSET_VAR}\n"));
    let e = load_connector(&p, 0).unwrap_err().to_string();
    assert!(e.contains("LAKESTREAM_TEST_UNSET_VAR"), "{e}");
}

#[test]
fn missing_required_key() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, "name=x\nconnector.class=hudi\n");
    let e = load_connector(&p, 0).unwrap_err().to_string();
    assert!(e.contains("missing required key"), "{e}");
}

#[test]
fn durations() {
    assert_eq!(parse_duration("5"), Some(Duration::from_secs(5)));
    assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
    assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
    assert_eq!(parse_duration("x"), None);
    assert_eq!(parse_size("64MiB"), Some(64 << 20));
    assert_eq!(parse_size("512k"), Some(512 << 10));
    assert_eq!(parse_size("12 parsecs"), None);
}

#[test]
fn settings_that_cannot_be_divided_among_tasks_need_one_task() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, &(base(&dir) + "tasks.max=2\nprovide.transaction.metadata=true\n"));
    let e = load_connector(&p, 0).unwrap_err().to_string();
    assert!(e.contains("`provide.transaction.metadata`: needs tasks.max=1"), "{e}");
    let iceberg = base(&dir).replace("connector.class=hudi", "connector.class=iceberg");
    let p = write(&dir, &(iceberg + "tasks.max=2\nkey.mode=none\n"));
    let e = load_connector(&p, 0).unwrap_err().to_string();
    assert!(
        e.contains("`key.mode`: `none`: the rows of a keyless table cannot be divided among tasks"),
        "{e}"
    );
}

#[test]
fn tri_state_hudi_keys_are_auto_true_or_false() {
    let dir = tempfile::tempdir().unwrap();
    let c = load_connector(&write(&dir, &base(&dir)), 0).unwrap();
    assert_eq!((c.read.key_partition_path, c.read.cdc_from_log), (None, None));
    let p = write(
        &dir,
        &(base(&dir) + "key.partition-path=false\nread.cdc.from-log=true\n"),
    );
    let c = load_connector(&p, 0).unwrap();
    assert_eq!(
        (c.read.key_partition_path, c.read.cdc_from_log),
        (Some(false), Some(true))
    );
    let e = load_connector(&write(&dir, &(base(&dir) + "read.cdc.from-log=yes\n")), 0)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("read.cdc.from-log") && e.contains("auto, true, false"),
        "{e}"
    );
}

/// What a loaded connector's settings come to, its resolved key list (`raw`, which holds every
/// key set) left out: two files that mean the same load to the same fingerprint.
fn fingerprint(c: &ConnectorConfig) -> String {
    format!(
        "{:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {}",
        c.kind, c.iceberg, c.delta, c.registry, c.storage, c.read, c.events, c.kafka, c.runtime, c.table_id
    )
}

/// Every key of the reference (`keys.rs`) whose default is a plain value: set to that value, the
/// connector loads exactly as without it. A default the doc states and the loader does not apply
/// fails here naming the key.
#[test]
fn the_documented_defaults_are_the_loaders() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("_delta_log")).unwrap();
    let mut checked = 0;
    let mut differ = Vec::new();
    for kind in ConnectorKind::ALL {
        let class = kind.name();
        let mut base = base(&dir).replace("connector.class=hudi", &format!("connector.class={class}"));
        if kind == ConnectorKind::Delta {
            base.push_str("key.fields=id\n"); // Delta tables declare no key
        }
        let plain = load_connector(&write(&dir, &base), 0).unwrap_or_else(|e| panic!("{class}: {e}"));
        let plain = fingerprint(&plain);
        for (key, default, _, formats) in super::keys::KEYS {
            let is_value = !default.is_empty() && !default.starts_with('(') && !default.contains(' ');
            // table discovery's keys belong to a discovering file (checked below)
            if !formats.accepts(kind) || !is_value || key.contains('<') || key.starts_with("table.discovery.") {
                continue;
            }
            let body = format!("{base}{key}={default}\n");
            match load_connector(&write(&dir, &body), 0) {
                Ok(c) if fingerprint(&c) == plain => checked += 1,
                Ok(_) => differ.push(format!("{class}: {key}={default} loads otherwise than leaving it out")),
                Err(e) => differ.push(format!(
                    "{class}: {key}={default} (the documented default) is refused: {e}"
                )),
            }
        }
    }
    assert!(
        differ.is_empty(),
        "documented defaults the loader does not apply:\n{}",
        differ.join("\n")
    );
    assert!(checked > 60, "only {checked} defaults checked");
    // a discovering file: its own keys' defaults
    let template = format!(
        "name=lake\ntable.path.prefix={}\ntopic.prefix=lake\nbootstrap.servers=k:9092\nschema.registry.url=http://r\n",
        dir.path().display()
    );
    let discovery = |body: &str| match super::load_file(&write(&dir, body), 0) {
        Ok(super::Loaded::Tables(t)) => format!("{:?}", t.discovery),
        Ok(_) => panic!("not a discovering file"),
        Err(e) => panic!("{e}"),
    };
    assert_eq!(
        discovery(&template),
        discovery(&(template.clone() + "table.discovery.interval=60s\n"))
    );
    assert_ne!(
        discovery(&template),
        discovery(&(template.clone() + "table.discovery.interval=61s\n"))
    );
    // the check can fail: a value other than the default changes the fingerprint
    let other = load_connector(&write(&dir, &(base(&dir) + "transaction.max.records=5\n")), 0).unwrap();
    let plain = load_connector(&write(&dir, &base(&dir)), 0).unwrap();
    assert_ne!(fingerprint(&other), fingerprint(&plain));
}

#[test]
fn every_class_is_in_its_place() {
    for (i, k) in ConnectorKind::ALL.iter().enumerate() {
        assert_eq!(k.index() as usize, i, "{k:?}");
        assert!(keys::ANY.accepts(*k));
    }
    assert_eq!(keys::ICEBERG_DELTA.names(), "Iceberg, Delta");
    assert_eq!(keys::ANY.names(), "all");
}
