//! Each task's health and status, and the HTTP server that exposes them with the metrics.
//!
//! A `Health` (one per process, handed to its tasks) keeps for every task: progress (a task is
//! *stalled* when it made no progress — a poll, a chunk emitted, a commit — for longer than it
//! allows itself: `transaction.timeout.ms` plus the poll interval), connectivity (*ready* while
//! its producer is initialised and no outage is being ridden out), and its status as Kafka
//! Connect's REST API reports it: `RUNNING`, `RECOVERING` (an outage being ridden out, with the
//! error), `FAILED` (with the error), `STOPPED`; plus the issued position and the lag.
//!
//! Served on `metrics.port`: `/metrics`, `/healthz`, `/ready`, `/connectors` (names),
//! `/connectors?expand=status` and `/connectors/<name>/status` (Connect's shapes, with
//! `position` and `lag_seconds` per task). For Kubernetes probes of one connector,
//! `/connectors/<name>/status?probe=ready` answers 503 unless every task of it runs connected,
//! `?probe=live` 503 while one is stalled (the body is the status either way). Every state change
//! is also the gauge `lakestream_task_state{connector,task,state}` (1 for the current state).

use parking_lot::Mutex;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TaskState {
    Stopped,
    Running,
    Recovering,
    Failed,
}

#[derive(Default)]
pub struct Health {
    tasks: Mutex<BTreeMap<(String, u32), TaskHealth>>,
}

struct TaskHealth {
    ready: bool,
    last_progress: Instant,
    allowed: Duration,
    state: TaskState,
    last_error: Option<String>,
    position: Option<String>,
    lag_seconds: f64,
}

impl TaskHealth {
    fn live(&self) -> bool {
        matches!(self.state, TaskState::Running | TaskState::Recovering)
    }
}

/// One task as `/connectors/<name>/status` shows it.
#[derive(Debug, Serialize)]
pub struct TaskStatus {
    pub id: u32,
    pub state: TaskState,
    /// The last error (a failure, or the outage being ridden out).
    pub trace: Option<String>,
    pub ready: bool,
    /// The last instant / snapshot issued and committed.
    pub position: Option<String>,
    pub lag_seconds: f64,
}

#[derive(Debug, Serialize)]
pub struct ConnectorStatus {
    pub name: String,
    /// `{state}`: the worst of its tasks (FAILED, RECOVERING, RUNNING, STOPPED).
    pub connector: serde_json::Value,
    pub tasks: Vec<TaskStatus>,
    #[serde(rename = "type")]
    pub kind: &'static str,
}

impl Health {
    pub fn new() -> Arc<Health> {
        Arc::new(Health::default())
    }

    /// Register task `task` of `connector` (running, not ready, progress now) that may go
    /// `allowed` without progress; its handle reports for it.
    pub fn task(self: &Arc<Self>, connector: &str, task: u32, allowed: Duration) -> TaskHealthHandle {
        let key = (connector.to_string(), task);
        let t = TaskHealth {
            ready: false,
            last_progress: Instant::now(),
            allowed,
            state: TaskState::Running,
            last_error: None,
            position: None,
            lag_seconds: 0.0,
        };
        self.lock().insert(key.clone(), t);
        crate::metrics::task_state(connector, task, state_label(TaskState::Running));
        TaskHealthHandle {
            health: self.clone(),
            key,
        }
    }

    fn lock(&self) -> parking_lot::MutexGuard<'_, BTreeMap<(String, u32), TaskHealth>> {
        self.tasks.lock()
    }

    /// The stalled tasks, each with how long it has not moved.
    pub fn stalled(&self) -> Vec<String> {
        self.stalled_of(None)
    }

    /// The stalled tasks of `connector` (all connectors: `None`).
    fn stalled_of(&self, connector: Option<&str>) -> Vec<String> {
        self.lock()
            .iter()
            .filter(|((c, _), t)| connector.is_none_or(|n| n == c) && t.live() && t.last_progress.elapsed() > t.allowed)
            .map(|((c, k), t)| {
                format!(
                    "{c}/{k}: no progress for {} s (allowed {} s)",
                    t.last_progress.elapsed().as_secs(),
                    t.allowed.as_secs()
                )
            })
            .collect()
    }

    /// Every running task is connected (and at least one runs).
    pub fn ready(&self) -> bool {
        let tasks = self.lock();
        let mut live = tasks.values().filter(|t| t.live()).peekable();
        live.peek().is_some() && live.all(|t| t.ready)
    }

    pub fn connectors(&self) -> Vec<String> {
        let mut names: Vec<String> = self.lock().keys().map(|(c, _)| c.clone()).collect();
        names.dedup();
        names
    }

    pub fn status(&self, connector: &str) -> Option<ConnectorStatus> {
        let all = self.lock();
        let tasks: Vec<TaskStatus> = all
            .iter()
            .filter(|((c, _), _)| c == connector)
            .map(|((_, id), t)| TaskStatus {
                id: *id,
                state: t.state,
                trace: t.last_error.clone(),
                ready: t.ready,
                position: t.position.clone(),
                lag_seconds: t.lag_seconds,
            })
            .collect();
        let worst = tasks.iter().map(|t| t.state).max()?;
        Some(ConnectorStatus {
            name: connector.to_string(),
            connector: serde_json::json!({ "state": worst }),
            tasks,
            kind: "source",
        })
    }
}

/// One task's reports to its process's `Health`.
#[derive(Clone)]
pub struct TaskHealthHandle {
    health: Arc<Health>,
    key: (String, u32),
}

impl TaskHealthHandle {
    fn with(&self, f: impl FnOnce(&mut TaskHealth)) {
        if let Some(t) = self.health.lock().get_mut(&self.key) {
            let before = t.state;
            f(t);
            if t.state != before {
                crate::metrics::task_state(&self.key.0, self.key.1, state_label(t.state));
            }
        }
    }

    /// The task moved forward now (a poll answered, rows arrived, a transaction committed).
    pub fn progress(&self) {
        self.with(|t| t.last_progress = Instant::now());
    }

    /// The task is connected (its producer initialised, transactions committing) or not (a
    /// transaction call timing out, an outage being ridden out). Not progress by itself.
    /// Connected again after an outage, it is running again.
    pub fn set_ready(&self, ready: bool) {
        self.with(|t| {
            t.ready = ready;
            if ready && t.state == TaskState::Recovering {
                t.state = TaskState::Running;
            }
        });
    }

    /// An outage is being ridden out (`error` is what showed it).
    pub fn recovering(&self, error: &str) {
        self.with(|t| {
            t.state = TaskState::Recovering;
            t.ready = false;
            t.last_error = Some(error.to_string());
        });
    }

    /// The issued position the last commit recorded, and the lag.
    pub fn position(&self, position: Option<&str>, lag_seconds: f64) {
        self.with(|t| {
            t.position = position.map(str::to_string);
            t.lag_seconds = lag_seconds;
        });
    }

    /// The task ended: `error` when it failed. It no longer counts for health or readiness,
    /// and its status stays (FAILED with the error, or STOPPED).
    pub fn stopped(&self, error: Option<&str>) {
        self.with(|t| {
            t.ready = false;
            t.state = if error.is_some() {
                TaskState::Failed
            } else {
                TaskState::Stopped
            };
            if let Some(e) = error {
                t.last_error = Some(e.to_string());
            }
        });
    }
}

fn state_label(s: TaskState) -> crate::metrics::TaskStateLabel {
    use crate::metrics::TaskStateLabel as L;
    match s {
        TaskState::Stopped => L::Stopped,
        TaskState::Running => L::Running,
        TaskState::Recovering => L::Recovering,
        TaskState::Failed => L::Failed,
    }
}

/// `?probe=ready`: every task of the connector runs, connected; `?probe=live`: none is stalled.
fn probe_passes(health: &Health, status: &ConnectorStatus, probe: &str) -> bool {
    match probe {
        "ready" => status.tasks.iter().all(|t| t.state == TaskState::Running && t.ready),
        _ => health.stalled_of(Some(&status.name)).is_empty(),
    }
}

/// Serve `/metrics`, `/healthz` (503 naming the stalled tasks), `/ready` and the status API
/// until the process ends.
pub async fn serve(port: u16, health: Arc<Health>) -> std::io::Result<()> {
    use axum::extract::{Path, Query};
    use axum::{http::StatusCode, routing::get, Json, Router};
    let (live, ready, list, one) = (health.clone(), health.clone(), health.clone(), health);
    let app = Router::new()
        .route("/metrics", get(|| async { crate::metrics::render() }))
        .route(
            "/healthz",
            get(move || async move {
                let stalled = live.stalled();
                if stalled.is_empty() {
                    (StatusCode::OK, "ok".to_string())
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, format!("stalled: {}", stalled.join("; ")))
                }
            }),
        )
        .route(
            "/ready",
            get(move || async move {
                if ready.ready() { (StatusCode::OK, "ready") } else { (StatusCode::SERVICE_UNAVAILABLE, "not ready") }
            }),
        )
        .route(
            "/connectors",
            get(move |Query(q): Query<BTreeMap<String, String>>| async move {
                let names = list.connectors();
                if q.get("expand").is_some_and(|e| e == "status") {
                    let all: BTreeMap<String, serde_json::Value> = names
                        .iter()
                        .filter_map(|n| list.status(n).map(|s| (n.clone(), serde_json::json!({ "status": s }))))
                        .collect();
                    Json(serde_json::json!(all))
                } else {
                    Json(serde_json::json!(names))
                }
            }),
        )
        .route(
            "/connectors/{name}/status",
            get(move |Path(name): Path<String>, Query(q): Query<BTreeMap<String, String>>| async move {
                match one.status(&name) {
                    Some(s) => {
                        let ok = q.get("probe").is_none_or(|p| probe_passes(&one, &s, p));
                        (if ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE }, Json(serde_json::json!(s)))
                    }
                    None => (StatusCode::NOT_FOUND, Json(serde_json::json!({"error_code": 404, "message": format!("Connector {name} not found")}))),
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind(("0.0.0.0", port)).await?;
    tracing::info!(port, "metrics endpoint listening");
    axum::serve(listener, app).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_without_progress_for_longer_than_allowed_is_stalled() {
        let h = Health::new();
        assert!(!h.ready(), "no task: not ready");
        let (a, b) = (
            h.task("c", 0, Duration::from_secs(60)),
            h.task("c", 1, Duration::from_millis(20)),
        );
        a.set_ready(true);
        assert!(h.stalled().is_empty());
        assert!(!h.ready(), "c/1 not connected yet");
        b.set_ready(true);
        assert!(h.ready());
        std::thread::sleep(Duration::from_millis(40));
        let stalled = h.stalled();
        assert_eq!(stalled.len(), 1, "{stalled:?}");
        assert!(stalled[0].starts_with("c/1: no progress"), "{stalled:?}");
        b.progress();
        assert!(h.stalled().is_empty());
        b.set_ready(false);
        assert!(!h.ready());
        b.stopped(None);
        assert!(h.ready(), "a stopped task no longer counts");
        a.stopped(None);
        assert!(!h.ready());
    }

    #[test]
    fn probes_of_one_connector_follow_its_tasks_and_the_state_gauge_follows_them_too() {
        let h = Health::new();
        let (a, other) = (
            h.task("probe-c", 0, Duration::from_secs(60)),
            h.task("probe-d", 0, Duration::from_secs(60)),
        );
        let st = |c: &str| h.status(c).expect("known");
        assert!(!probe_passes(&h, &st("probe-c"), "ready"), "not connected yet");
        assert!(probe_passes(&h, &st("probe-c"), "live"));
        a.set_ready(true);
        other.stopped(Some("boom"));
        assert!(
            probe_passes(&h, &st("probe-c"), "ready"),
            "another connector's failure is not this one's"
        );
        assert!(!probe_passes(&h, &st("probe-d"), "ready"));
        a.recovering("sink: broker down");
        assert!(!probe_passes(&h, &st("probe-c"), "ready"));
        let text = crate::metrics::render();
        for (c, state) in [("probe-c", "recovering"), ("probe-d", "failed")] {
            let line = format!("lakestream_task_state{{connector=\"{c}\",state=\"{state}\",task=\"0\"}} 1");
            assert!(text.contains(&line), "{line} missing");
        }
        assert!(text.contains("lakestream_task_state{connector=\"probe-c\",state=\"running\",task=\"0\"} 0"));
    }

    #[test]
    fn status_follows_outages_and_failures_worst_task_first() {
        let h = Health::new();
        let (a, b) = (
            h.task("c", 0, Duration::from_secs(60)),
            h.task("c", 1, Duration::from_secs(60)),
        );
        a.set_ready(true);
        b.set_ready(true);
        a.position(Some("20261201000000000"), 0.0);
        let s = h.status("c").expect("known");
        assert_eq!(s.connector["state"], "RUNNING");
        assert_eq!(s.tasks[0].position.as_deref(), Some("20261201000000000"));
        b.recovering("sink: broker down");
        let s = h.status("c").expect("known");
        assert_eq!(
            (s.connector["state"].as_str(), s.tasks[1].state),
            (Some("RECOVERING"), TaskState::Recovering)
        );
        assert_eq!(s.tasks[1].trace.as_deref(), Some("sink: broker down"));
        b.set_ready(true);
        assert_eq!(h.status("c").expect("known").connector["state"], "RUNNING");
        a.stopped(Some("source: file gone"));
        let s = h.status("c").expect("known");
        assert_eq!(s.connector["state"], "FAILED");
        assert_eq!(s.tasks[0].trace.as_deref(), Some("source: file gone"));
        assert!(h.status("other").is_none());
        assert_eq!(h.connectors(), vec!["c".to_string()]);
    }
}
