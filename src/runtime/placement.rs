//! Which pod runs which task: a StatefulSet's replicas share the tasks of the connectors they
//! are given, each task on exactly one pod, decided by every pod alone from the same inputs
//! (its ordinal, the replica count, the connector files) — no coordinator, nothing stored.
//!
//! Two rules:
//! * [`Rule::Modulo`] (a StatefulSet per connector): pod k runs the tasks t with t % R == k.
//!   With R = `tasks.max` (the chart's default) pod k runs task k.
//! * [`Rule::Pool`] (one StatefulSet shares many connectors): task t of connector c runs on the
//!   pod k < R with the highest `xxh3(c, t, k)` — rendezvous hashing. A task's pod depends on its
//!   own name and number and on R only, so adding or removing a connector (or a task) moves no
//!   other task, and changing R moves only the tasks that go to added pods or came from removed
//!   ones (about 1/R of them); a rolling update with an unchanged R moves nothing. Pods share the
//!   tasks evenly on average (1,000 tasks over 5 pods: within ±15 % of 200 each; see the tests).
//!
//! xxh3 (already used for key hashing) is fixed by its specification, so every pod and every
//! version of the binary place a task the same way.

use crate::config::ConnectorConfig;

/// How a pod's ordinal selects tasks (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rule {
    Modulo,
    Pool,
}

impl Rule {
    /// `--pool`: [`Rule::Pool`], else [`Rule::Modulo`].
    pub fn of(pool: bool) -> Rule {
        if pool {
            Rule::Pool
        } else {
            Rule::Modulo
        }
    }
}

/// The pod (of `replicas`) that runs task `task` of connector `name` under `rule`.
pub fn pod_of(rule: Rule, name: &str, task: u32, replicas: u32) -> u32 {
    let replicas = replicas.max(1);
    match rule {
        Rule::Modulo => task % replicas,
        Rule::Pool => (0..replicas).max_by_key(|&k| weight(name, task, k)).unwrap_or(0),
    }
}

/// The rendezvous weight of pod `pod` for a task: the name's bytes, a 0 byte (names are
/// properties values: they hold no 0 byte), then the task and pod numbers little-endian.
fn weight(name: &str, task: u32, pod: u32) -> u64 {
    let mut bytes = Vec::with_capacity(name.len() + 9);
    bytes.extend_from_slice(name.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(&task.to_le_bytes());
    bytes.extend_from_slice(&pod.to_le_bytes());
    twox_hash::XxHash3_64::oneshot(&bytes)
}

/// The tasks a process runs: every task of each connector (no ordinal), task `ordinal` alone (no
/// replica count), or pod `ordinal`'s share under `rule`.
pub fn select_tasks(
    cfgs: &[ConnectorConfig],
    ordinal: Option<u32>,
    replicas: Option<u32>,
    rule: Rule,
) -> Vec<ConnectorConfig> {
    let mut out = Vec::new();
    for c in cfgs {
        for t in 0..c.runtime.tasks {
            let mine = match (ordinal, replicas) {
                (None, _) => true,
                (Some(k), Some(r)) if r > 0 => pod_of(rule, &c.name, t, r) == k,
                (Some(k), _) => t == k,
            };
            if mine {
                out.push(c.for_task(t));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tasks(n: usize) -> Vec<(String, u32)> {
        (0..n).map(|i| (format!("connector-{i}"), 0)).collect()
    }

    fn counts(tasks: &[(String, u32)], replicas: u32) -> Vec<usize> {
        let mut c = vec![0; replicas as usize];
        tasks
            .iter()
            .for_each(|(n, t)| c[pod_of(Rule::Pool, n, *t, replicas) as usize] += 1);
        c
    }

    #[test]
    fn a_thousand_tasks_spread_evenly_over_five_pods() {
        let c = counts(&tasks(1000), 5);
        assert_eq!(c.iter().sum::<usize>(), 1000);
        assert!(c.iter().all(|&n| (170..=230).contains(&n)), "{c:?}");
    }

    #[test]
    fn adding_a_pod_moves_only_tasks_onto_it_and_removing_it_moves_them_back() {
        for (n, t) in tasks(1000) {
            let (five, six) = (pod_of(Rule::Pool, &n, t, 5), pod_of(Rule::Pool, &n, t, 6));
            assert!(six == five || six == 5, "{n}: pod {five} of 5 became pod {six} of 6");
        }
    }

    #[test]
    fn the_modulo_rule_is_unchanged() {
        assert_eq!(
            (0..6).map(|t| pod_of(Rule::Modulo, "x", t, 4)).collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 0, 1]
        );
        assert_eq!(pod_of(Rule::Pool, "x", 3, 1), 0);
        assert_eq!(pod_of(Rule::Pool, "x", 3, 0), 0);
    }
}
