//! A small Confluent-compatible Schema Registry for tests and the demo: the REST subset that
//! serializers and deserializers use, with schemas kept in a compacted Kafka topic (`_schemas`)
//! so a restart keeps ids. Not for production: one instance, no compatibility checks.
//!
//! Broker outages: a failed write recreates the producer and retries with backoff; a write
//! that still fails answers 500 and marks the in-memory store stale, so the next registration
//! first re-reads `_schemas` (the failed record may have landed: its id must not be given to
//! another schema). The producer is not idempotent: a duplicate schema record is harmless, and
//! an idempotent producer turns fatal when a restarted broker forgets its sequence numbers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use clap::Parser;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};
use serde_json::{json, Value};
use tokio::sync::Mutex;

#[derive(Parser)]
#[command(
    name = "lakestream-registry",
    about = "Minimal Confluent-compatible Schema Registry backed by a Kafka topic"
)]
struct Args {
    #[arg(long, default_value = "127.0.0.1:8081")]
    listen: String,
    #[arg(long, env = "KAFKA_BOOTSTRAP", default_value = "127.0.0.1:9092")]
    bootstrap_servers: String,
    #[arg(long, default_value = "_schemas")]
    topic: String,
    /// Require HTTP basic auth with these credentials (`user:password`).
    #[arg(long, env = "REGISTRY_BASIC_AUTH")]
    basic_auth: Option<String>,
}

#[derive(Default)]
struct Store {
    /// id -> schema
    by_id: BTreeMap<u32, String>,
    /// subject -> versions (schema ids, version = index + 1)
    subjects: BTreeMap<String, Vec<u32>>,
}

impl Store {
    fn apply(&mut self, v: &Value) {
        let (Some(subject), Some(id), Some(schema)) = (v["subject"].as_str(), v["id"].as_u64(), v["schema"].as_str())
        else {
            return;
        };
        self.by_id.insert(id as u32, schema.to_string());
        let versions = self.subjects.entry(subject.to_string()).or_default();
        if !versions.contains(&(id as u32)) {
            versions.push(id as u32);
        }
    }
}

struct App {
    store: Mutex<Store>,
    writer: Mutex<Writer>,
    bootstrap: String,
    topic: String,
}

/// The producer of `_schemas`, and whether the store may miss a record it wrote.
struct Writer {
    producer: FutureProducer,
    stale: bool,
}

fn producer(bootstrap: &str) -> anyhow::Result<FutureProducer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("message.timeout.ms", "10000")
        .create()?)
}

/// Write a schema record, recreating the producer between attempts (about 30 s in all).
async fn write(app: &App, w: &mut Writer, key: &str, payload: &str) -> Result<(), String> {
    let mut last = String::new();
    for attempt in 0..3u64 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(500 * attempt)).await;
            match producer(&app.bootstrap) {
                Ok(p) => w.producer = p,
                Err(e) => {
                    last = e.to_string();
                    continue;
                }
            }
        }
        match w
            .producer
            .send(
                FutureRecord::to(&app.topic).key(key).payload(payload),
                Duration::from_secs(10),
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err((e, _)) => {
                tracing::warn!(error = %e, attempt, "writing a schema failed; retrying with a new producer");
                last = e.to_string();
            }
        }
    }
    w.stale = true;
    Err(last)
}

type Shared = Arc<App>;

fn error(status: StatusCode, code: u32, message: impl Into<String>) -> Response {
    (status, Json(json!({"error_code": code, "message": message.into()}))).into_response()
}

/// Canonical form for comparing schemas: parsed JSON re-serialised.
fn canonical(s: &str) -> Option<String> {
    serde_json::from_str::<Value>(s).ok().map(|v| v.to_string())
}

async fn register(State(app): State<Shared>, Path(subject): Path<String>, Json(body): Json<Value>) -> Response {
    let Some(schema) = body["schema"].as_str().and_then(canonical) else {
        return error(StatusCode::UNPROCESSABLE_ENTITY, 42201, "Invalid schema");
    };
    if let Err(e) = apache_avro::Schema::parse_str(&schema) {
        return error(StatusCode::UNPROCESSABLE_ENTITY, 42201, format!("Invalid schema: {e}"));
    }
    // one registration at a time (ids are assigned in order), store re-read after a failed write
    let mut w = app.writer.lock().await;
    if w.stale {
        let (b, t) = (app.bootstrap.clone(), app.topic.clone());
        match tokio::task::spawn_blocking(move || load(&b, &t)).await {
            Ok(Ok(fresh)) => {
                *app.store.lock().await = fresh;
                w.stale = false;
            }
            Ok(Err(e)) => {
                return error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    50001,
                    format!("cannot re-read schemas: {e}"),
                )
            }
            Err(e) => {
                return error(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    50001,
                    format!("cannot re-read schemas: {e}"),
                )
            }
        }
    }
    let store = app.store.lock().await;
    if let Some(ids) = store.subjects.get(&subject) {
        if let Some(id) = ids.iter().find(|id| store.by_id.get(id) == Some(&schema)) {
            return Json(json!({"id": id})).into_response();
        }
    }
    let id = store
        .by_id
        .iter()
        .find(|(_, s)| **s == schema)
        .map(|(id, _)| *id)
        .unwrap_or_else(|| store.by_id.keys().last().copied().unwrap_or(0) + 1);
    let version = store.subjects.get(&subject).map(|v| v.len()).unwrap_or(0) + 1;
    let key = json!({"keytype": "SCHEMA", "subject": subject, "version": version, "magic": 1}).to_string();
    let value = json!({"subject": subject, "version": version, "id": id, "schema": schema, "deleted": false});
    let payload = value.to_string();
    drop(store); // readers go on while the record is written
    if let Err(e) = write(&app, &mut w, &key, &payload).await {
        return error(
            StatusCode::INTERNAL_SERVER_ERROR,
            50001,
            format!("cannot store schema: {e}"),
        );
    }
    app.store.lock().await.apply(&value);
    Json(json!({"id": id})).into_response()
}

async fn lookup(State(app): State<Shared>, Path(subject): Path<String>, Json(body): Json<Value>) -> Response {
    let Some(schema) = body["schema"].as_str().and_then(canonical) else {
        return error(StatusCode::UNPROCESSABLE_ENTITY, 42201, "Invalid schema");
    };
    let store = app.store.lock().await;
    let Some(ids) = store.subjects.get(&subject) else {
        return error(StatusCode::NOT_FOUND, 40401, "Subject not found");
    };
    match ids.iter().position(|id| store.by_id.get(id) == Some(&schema)) {
        Some(i) => Json(json!({"subject": subject, "id": ids[i], "version": i + 1, "schema": schema})).into_response(),
        None => error(StatusCode::NOT_FOUND, 40403, "Schema not found"),
    }
}

async fn by_id(State(app): State<Shared>, Path(id): Path<u32>) -> Response {
    match app.store.lock().await.by_id.get(&id) {
        Some(s) => Json(json!({"schema": s})).into_response(),
        None => error(StatusCode::NOT_FOUND, 40403, "Schema not found"),
    }
}

async fn subjects(State(app): State<Shared>) -> Response {
    Json(app.store.lock().await.subjects.keys().cloned().collect::<Vec<_>>()).into_response()
}

async fn versions(State(app): State<Shared>, Path(subject): Path<String>) -> Response {
    match app.store.lock().await.subjects.get(&subject) {
        Some(v) => Json((1..=v.len()).collect::<Vec<_>>()).into_response(),
        None => error(StatusCode::NOT_FOUND, 40401, "Subject not found"),
    }
}

async fn version(State(app): State<Shared>, Path((subject, version)): Path<(String, String)>) -> Response {
    let store = app.store.lock().await;
    let Some(ids) = store.subjects.get(&subject) else {
        return error(StatusCode::NOT_FOUND, 40401, "Subject not found");
    };
    let idx = if version == "latest" {
        ids.len().checked_sub(1)
    } else {
        version.parse::<usize>().ok().and_then(|v| v.checked_sub(1))
    };
    match idx.and_then(|i| ids.get(i).map(|id| (i, *id))) {
        Some((i, id)) => {
            Json(json!({"subject": subject, "version": i + 1, "id": id, "schema": store.by_id[&id]})).into_response()
        }
        None => error(StatusCode::NOT_FOUND, 40402, "Version not found"),
    }
}

async fn config() -> Response {
    Json(json!({"compatibilityLevel": "NONE"})).into_response()
}

fn load(bootstrap: &str, topic: &str) -> anyhow::Result<Store> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "lakestream-registry")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .create()?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)?;
    consumer.assign(&tpl)?;
    let mut store = Store::default();
    loop {
        match consumer.poll(Duration::from_secs(10)) {
            None => anyhow::bail!("timed out reading {topic}"),
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => return Ok(store),
            Some(Err(e)) => return Err(e.into()),
            Some(Ok(m)) => {
                if let Some(v) = m.payload().and_then(|p| serde_json::from_slice::<Value>(p).ok()) {
                    store.apply(&v);
                }
            }
        }
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt().with_writer(std::io::stderr).init();
    let args = Args::parse();
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &args.bootstrap_servers)
        .create()?;
    let topic = NewTopic::new(&args.topic, 1, TopicReplication::Fixed(1)).set("cleanup.policy", "compact");
    let _ = admin.create_topics(&[topic], &AdminOptions::new()).await?;
    let (b, t) = (args.bootstrap_servers.clone(), args.topic.clone());
    let store = tokio::task::spawn_blocking(move || load(&b, &t)).await??;
    tracing::info!(schemas = store.by_id.len(), "schemas loaded");
    let writer = Writer {
        producer: producer(&args.bootstrap_servers)?,
        stale: false,
    };
    let app = Arc::new(App {
        store: Mutex::new(store),
        writer: Mutex::new(writer),
        bootstrap: args.bootstrap_servers.clone(),
        topic: args.topic.clone(),
    });
    let router = Router::new()
        .route("/subjects", get(subjects))
        .route("/subjects/{subject}", post(lookup))
        .route("/subjects/{subject}/versions", get(versions).post(register))
        .route("/subjects/{subject}/versions/{version}", get(version))
        .route("/schemas/ids/{id}", get(by_id))
        .route("/config", get(config))
        .route("/config/{subject}", get(config))
        .with_state(app);
    let router = match args.basic_auth.clone() {
        None => router,
        Some(creds) => {
            use base64::Engine;
            let want = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(creds));
            router.layer(axum::middleware::from_fn(
                move |req: axum::extract::Request, next: axum::middleware::Next| {
                    let ok = req.headers().get("authorization").and_then(|v| v.to_str().ok()) == Some(want.as_str());
                    async move {
                        if ok {
                            next.run(req).await
                        } else {
                            use axum::response::IntoResponse;
                            (
                                axum::http::StatusCode::UNAUTHORIZED,
                                axum::Json(json!({"error_code": 401, "message": "Unauthorized"})),
                            )
                                .into_response()
                        }
                    }
                },
            ))
        }
    };
    let listener = tokio::net::TcpListener::bind(&args.listen).await?;
    tracing::info!(listen = %args.listen, "schema registry listening");
    axum::serve(listener, router).await?;
    Ok(())
}
