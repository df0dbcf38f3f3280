//! The comparison on spilled runs: each kind of tampering shows, naming its key; an untampered
//! replay is equal; the verdict does not depend on the bucket count.

use super::compare::{self, Counts, Names, Tally};
use super::runs::{buckets_for, Partitions, Rec, RunWriter, Side};

/// A topic step or table row: (key, image, delta, commit, op).
type Step = (u128, u128, i8, u64, u8);

fn rec(s: Step, partition: u32) -> Rec {
    Rec {
        key: s.0,
        image: s.1,
        delta: s.2,
        commit: s.3,
        op: s.4,
        partition,
        text: format!("{{\"id\":{}}}", s.0),
        loc: s.0 as u64,
    }
}

fn run(topic: &[Step], table: &[Step], keyless: bool, buckets: u32) -> Tally {
    let dir = tempfile::tempdir().unwrap();
    let mut t = RunWriter::new(dir.path(), Side::Topic, buckets, 4096).unwrap();
    let mut r = RunWriter::new(dir.path(), Side::Table, buckets, 4096).unwrap();
    let mut parts = Partitions::default();
    let p = parts.id("p=1");
    topic.iter().for_each(|s| t.push(&rec(*s, p)).unwrap());
    table.iter().for_each(|s| r.push(&rec(*s, p)).unwrap());
    let (tp, rp) = (t.finish().unwrap(), r.finish().unwrap());
    let mut tally = Tally {
        limit: 3,
        duplicates: true,
        ..Default::default()
    };
    let names = Names {
        topic: &parts,
        table: &parts,
    };
    for (a, b) in tp.iter().zip(&rp) {
        if keyless {
            compare::keyless(a, b, &names, &mut tally).unwrap();
        } else {
            compare::keyed(a, b, &names, &mut tally).unwrap();
        }
    }
    tally
}

/// A history: keys 1..=50 created at commit 1, 10..20 updated at 2, 30..35 deleted at 3
/// (a `d` then a tombstone); the table after it.
fn history() -> (Vec<Step>, Vec<Step>) {
    let mut topic = Vec::new();
    for k in 1..=50u128 {
        topic.push((k, k * 100, 1, 1, b'c'));
    }
    for k in 10..20u128 {
        topic.push((k, k * 100 + 1, 1, 2, b'u'));
    }
    for k in 30..35u128 {
        topic.push((k, 0, 0, 3, b'd'));
        topic.push((k, 0, 0, 0, 0));
    }
    let table = (1..=50u128)
        .filter(|k| !(30..35).contains(k))
        .map(|k| (k, if (10..20).contains(&k) { k * 100 + 1 } else { k * 100 }, 1, 0, b'r'))
        .collect();
    (topic, table)
}

fn total(t: &Tally) -> Counts {
    t.total()
}

#[test]
fn an_untampered_replay_is_equal_whatever_the_bucket_count() {
    let (topic, table) = history();
    for buckets in [1, 3, 16] {
        let t = run(&topic, &table, false, buckets);
        let c = total(&t);
        assert_eq!(c.mismatched(), 0, "{buckets} buckets: {c:?}");
        assert_eq!((c.table_rows, c.replayed_rows), (45, 45));
    }
}

#[test]
fn each_tampering_is_found_and_named() {
    let (topic, table) = history();
    // a dropped event: key 12's update lost -> it differs
    let mut dropped = topic.clone();
    dropped.retain(|s| !(s.0 == 12 && s.3 == 2));
    let t = run(&dropped, &table, false, 4);
    assert_eq!(total(&t).differing, 1);
    assert_eq!(t.examples.differing, vec!["{\"id\":12}"]);
    // a dropped create: key 5 missing
    let mut gone = topic.clone();
    gone.retain(|s| s.0 != 5);
    let t = run(&gone, &table, false, 4);
    assert_eq!(
        (total(&t).missing, t.examples.missing.clone()),
        (1, vec!["{\"id\":5}".to_string()])
    );
    // a duplicated `c` right after the first: a duplicated event, though the replay is equal
    let mut dup = topic.clone();
    let at = dup.iter().position(|s| s.0 == 7).unwrap();
    dup.insert(at + 1, dup[at]);
    let t = run(&dup, &table, false, 4);
    assert_eq!(total(&t).duplicated_events, 1);
    assert_eq!(t.examples.duplicated_events, vec!["{\"id\":7}"]);
    // a duplicated `c` after the key's delete: the key comes back -> extra
    let mut late = topic.clone();
    late.push((31, 3100, 1, 1, b'c'));
    let t = run(&late, &table, false, 4);
    assert_eq!(
        (total(&t).extra, t.examples.extra.clone()),
        (1, vec!["{\"id\":31}".to_string()])
    );
    // an altered value
    let mut altered = topic.clone();
    altered[40].1 ^= 1;
    let t = run(&altered, &table, false, 4);
    assert_eq!(total(&t).differing, 1);
    // an extra tombstone: key 44 deleted from the replay -> missing
    let mut tomb = topic.clone();
    tomb.push((44, 0, 0, 0, 0));
    let t = run(&tomb, &table, false, 4);
    assert_eq!(t.examples.missing, vec!["{\"id\":44}"]);
    // the table changed after the position
    let mut changed = table.clone();
    changed[0].1 += 1;
    let t = run(&topic, &changed, false, 4);
    assert_eq!(total(&t).differing, 1);
    // a key twice in the table
    let mut twice = table.clone();
    twice.push(twice[3]);
    let t = run(&topic, &twice, false, 4);
    assert_eq!(total(&t).duplicate_keys, 1);
}

#[test]
fn keyless_tables_compare_as_multisets() {
    // images 1..=10 added, 3 removed, 4 added twice (two equal rows)
    let mut topic: Vec<Step> = (1..=10u128).map(|i| (i, 0, 1, 1, b'c')).collect();
    topic.push((3, 0, -1, 2, b'd'));
    topic.push((4, 0, 1, 2, b'c'));
    let mut table: Vec<Step> = (1..=10u128).filter(|i| *i != 3).map(|i| (i, 0, 1, 0, b'r')).collect();
    table.push((4, 0, 1, 0, b'r'));
    assert_eq!(total(&run(&topic, &table, true, 2)).mismatched(), 0);
    // one copy of image 4 too few in the topic
    let t = run(&topic[..11], &table, true, 2);
    assert_eq!(total(&t).missing, 1);
    // a duplicated event: one row too many
    let mut dup = topic.clone();
    dup.push((9, 0, 1, 1, b'c'));
    assert_eq!(total(&run(&dup, &table, true, 2)).extra, 1);
}

#[test]
fn buckets_follow_the_budget() {
    assert_eq!(buckets_for(0, 256 << 20), 1);
    assert_eq!(buckets_for(500_000, 256 << 20), 1);
    assert_eq!(buckets_for(4_353_241, 256 << 20), 6);
    assert!(buckets_for(100_000_000, 256 << 20) > 50);
    assert_eq!(buckets_for(u64::MAX / 2, 256 << 20), 1024);
}
