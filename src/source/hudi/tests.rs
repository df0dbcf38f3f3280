//! A unit's read executes the plan its poll made: the timeline and the commit's metadata are
//! read once per unit, at poll time (issue 62).

use std::collections::BTreeMap;
use std::path::Path;

use crate::metrics::STORAGE_REQUESTS;
use crate::source::{Position, Resume, Source, Unit};

fn open(root: &Path, name: &str) -> std::sync::Arc<dyn Source> {
    let file = root.with_file_name(format!("{name}.properties"));
    std::fs::write(
        &file,
        format!(
            "name={name}\nconnector.class=hudi\ntable.path={}\ntopic=t\nbootstrap.servers=127.0.0.1:9\n\
             schema.registry.url=http://127.0.0.1:9\nread.start-commit=earliest\n",
            root.display()
        ),
    )
    .unwrap();
    let cfg = crate::config::load_connector(&file, 0).unwrap();
    crate::source::open(&cfg.source()).unwrap()
}

fn requests(name: &str) -> u64 {
    ["list", "get", "ranged_get", "head"]
        .iter()
        .map(|op| STORAGE_REQUESTS.with_label_values(&[name, op]).get())
        .sum()
}

/// The unit's events as (op, split, row count) and their total, to compare two reads by.
fn read(src: &dyn Source, unit: &Unit) -> (BTreeMap<(String, String), usize>, usize) {
    let mut by = BTreeMap::new();
    let mut n = 0;
    src.read_unit(unit, &Resume::default(), &mut |sc| {
        for row in &sc.rows {
            *by.entry((row.op.code().to_string(), sc.split.id.clone())).or_default() += 1;
            n += 1;
        }
        Ok(())
    })
    .unwrap();
    (by, n)
}

#[test]
fn a_polled_unit_is_read_without_the_timeline() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("t");
    crate::generate::hudi(&crate::generate::GenerateOptions {
        rows: 300,
        partitions: 2,
        commits: 2,
        ..crate::generate::GenerateOptions::defaults(crate::generate::TableType::Mor, root.clone())
    })
    .unwrap();
    let src = open(&root, "plan-once");
    // the bulk insert's instant (table version 6: `.hoodie/<instant>.deltacommit`)
    let mut written: Vec<String> = std::fs::read_dir(root.join(".hoodie"))
        .unwrap()
        .filter_map(|e| e.unwrap().file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".deltacommit").map(str::to_string))
        .collect();
    written.sort();
    let after = Position {
        version: written[0].clone(),
        completed: None,
    };
    let units = src.poll(Some(&after)).unwrap();
    assert_eq!(units.len(), 2, "{units:?}");
    // the timeline is gone from under the polled units: their reads must not need it
    let hoodie = root.join(".hoodie");
    let away = root.join(".hoodie-away");
    std::fs::rename(&hoodie, &away).unwrap();
    let before = requests("plan-once");
    let warm: Vec<_> = units.iter().map(|u| read(src.as_ref(), u)).collect();
    let warm_requests = requests("plan-once") - before;
    std::fs::rename(&away, &hoodie).unwrap();
    assert!(warm.iter().all(|(_, n)| *n > 0), "{warm:?}");
    // a source that did not poll them plans them again: the timeline listed, the commit read
    let cold_src = open(&root, "plan-again");
    let before = requests("plan-again");
    let cold: Vec<_> = units.iter().map(|u| read(cold_src.as_ref(), u)).collect();
    let cold_requests = requests("plan-again") - before;
    eprintln!(
        "storage requests of {} change units: {warm_requests} from the poll's plans, {cold_requests} planned again",
        units.len()
    );
    assert_eq!(warm, cold, "a unit reads the same from its kept plan as planned again");
    assert!(
        cold_requests >= warm_requests + 2 * units.len() as u64,
        "planned again: {cold_requests} requests; from the poll's plan: {warm_requests}"
    );
}
