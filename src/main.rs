//! The `lakestream` binary: command line and logging (the allocator is set in `lakestream::alloc`).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use lakestream::config::{load_connector, ConnectorConfig};
use lakestream::generate::{self, GenerateOptions};
use lakestream::runtime::admin::show_offsets;
use lakestream::runtime::placement::{pod_of, select_tasks, Rule};
use lakestream::runtime::verify::VerifyOptions;
use lakestream::runtime::{run_connector, RunOptions};

#[derive(Parser)]
#[command(
    name = "lakestream",
    version,
    about = "Stream Hudi table changes into Kafka as Avro changelog events, exactly once"
)]
struct Cli {
    /// Log format.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "LAKESTREAM_LOG_FORMAT"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Run connectors (one per file) until stopped, or with --once until caught up.
    Run {
        /// Emit every instant committed so far, commit, and exit 0.
        #[arg(long)]
        once: bool,
        /// Pod ordinal: with --replicas R this process runs the tasks t with t % R == ordinal;
        /// without --replicas only task `ordinal`. Unset: every task of each connector.
        #[arg(long, env = "TASK_ID")]
        task_id: Option<u32>,
        /// Pods sharing the tasks (a StatefulSet's replicas).
        #[arg(long, env = "LAKESTREAM_REPLICAS")]
        replicas: Option<u32>,
        /// The replicas share every connector's tasks (one StatefulSet for many connectors): task
        /// t of connector c runs on one pod chosen by rendezvous hashing of (c, t) over the
        /// replicas, not on pod t % R. A pod left without a task serves its health endpoints
        /// and waits.
        #[arg(long, env = "LAKESTREAM_POOL", requires = "replicas")]
        pool: bool,
        /// Serve /metrics, /healthz and /ready on this port (overrides `metrics.port`).
        #[arg(long)]
        metrics_port: Option<u16>,
        /// One memory budget for every connector of the process (`512MiB`): each unit read takes
        /// a share of it (at most its connector's read.memory.budget, at most half while other
        /// tasks run) and gives it back when done. Unset: each connector its own budget.
        #[arg(long, env = "LAKESTREAM_MEMORY_BUDGET", value_parser = memory_budget)]
        memory_budget: Option<usize>,
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Check connector files, open each table (its key and columns must fit the settings) and
    /// print the resolved settings (secrets masked).
    Validate {
        /// Check the files only, without opening the tables (where they are not reachable from here).
        #[arg(long, conflicts_with = "online")]
        offline: bool,
        /// Also reach Kafka (topics, stored position) and the Schema Registry with each
        /// connector's settings and print what is there.
        #[arg(long)]
        online: bool,
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Print which pod runs each task of the connectors (`pod connector task`, one line each)
    /// under `run`'s rule for --replicas R (and --pool).
    Assign {
        #[arg(long)]
        replicas: u32,
        #[arg(long)]
        pool: bool,
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
    /// Inspect stored connector offsets.
    Offsets {
        #[command(subcommand)]
        action: OffsetsCommand,
    },
    /// Prove that the topic equals the table: replay the topic by key up to the connector's
    /// committed position and compare with the table read at that commit. Exit 0 only when equal,
    /// 3 when they differ (the report names the keys).
    Verify {
        file: PathBuf,
        /// A commit at or before the connector's position (Hudi instant, Iceberg snapshot id).
        #[arg(long)]
        at: Option<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Example keys named per kind of difference.
        #[arg(long, default_value_t = 10)]
        examples: usize,
    },
    /// Write demo/benchmark tables.
    Generate {
        #[command(subcommand)]
        format: GenerateCommand,
    },
}

#[derive(Subcommand)]
enum OffsetsCommand {
    /// Print the stored offsets of a connector as JSON.
    Show {
        file: PathBuf,
        #[arg(long, env = "TASK_ID", default_value_t = 0)]
        task_id: u32,
    },
    /// Forget the connector's position (every task, every generation): the next run applies the
    /// start strategy. Fences every task of the connector: stop it first.
    Reset {
        file: PathBuf,
        /// Required: a running task of the connector is fenced (and exits).
        #[arg(long)]
        force: bool,
    },
    /// Put every task of the connector at a completed Hudi instant or Iceberg snapshot: the next
    /// run emits what follows it. Fences every task of the connector: stop it first.
    Set {
        file: PathBuf,
        /// A completed Hudi write instant (requested time).
        #[arg(long, conflicts_with = "snapshot", required_unless_present = "snapshot")]
        instant: Option<String>,
        /// An Iceberg snapshot id.
        #[arg(long)]
        snapshot: Option<String>,
        /// Required: a running task of the connector is fenced (and exits).
        #[arg(long)]
        force: bool,
    },
}

#[derive(Subcommand)]
enum GenerateCommand {
    /// A Hudi table (table version 6): a bulk insert, then upsert/delete commits (MOR: in log
    /// files, with optional compaction).
    Hudi(GenerateOptions),
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,rdkafka=warn"));
    // colours only for a person at a terminal: a log file or collector gets plain text
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    match format {
        LogFormat::Json => b.json().init(),
        LogFormat::Text => b.init(),
    }
}

fn load_all(files: &[PathBuf], task_id: u32) -> Result<Vec<ConnectorConfig>, ExitCode> {
    let mut out = Vec::new();
    for f in files {
        match load_connector(f, task_id) {
            Ok(c) => out.push(c),
            Err(e) => {
                eprintln!("error: {e}");
                return Err(ExitCode::from(2));
            }
        }
    }
    for c in &out {
        if let Err(e) = lakestream::sink::check_settings(&c.sink()) {
            eprintln!("error: {}: {e}", c.file.display());
            return Err(ExitCode::from(2));
        }
    }
    let mut names = std::collections::HashSet::new();
    for c in &out {
        if !names.insert(c.name.clone()) {
            eprintln!(
                "error: {}: connector name `{}` is used by two files",
                c.file.display(),
                c.name
            );
            return Err(ExitCode::from(2));
        }
    }
    Ok(out)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let rt = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match cli.command {
        Command::Validate { offline, online, files } => match load_all(&files, 0) {
            Ok(cfgs) => {
                for c in cfgs {
                    if let Err(code) = validate(&rt, &c, offline, online) {
                        return code;
                    }
                }
                ExitCode::SUCCESS
            }
            Err(code) => code,
        },
        Command::Offsets {
            action: OffsetsCommand::Show { file, task_id },
        } => offsets_show(file, task_id),
        Command::Offsets {
            action: OffsetsCommand::Reset { file, force },
        } => offsets_admin(&rt, file, |c| {
            Box::pin(async move { lakestream::runtime::admin::reset(&c, force).await })
        }),
        Command::Offsets {
            action:
                OffsetsCommand::Set {
                    file,
                    instant,
                    snapshot,
                    force,
                },
        } => offsets_admin(&rt, file, |c| {
            let id = instant.or(snapshot).unwrap_or_default();
            Box::pin(async move { lakestream::runtime::admin::set(&c, &id, force).await })
        }),
        Command::Verify {
            file,
            at,
            json,
            examples,
        } => verify(&rt, file, VerifyOptions { at, examples }, json),
        Command::Generate {
            format: GenerateCommand::Hudi(opts),
        } => match generate::hudi(&opts) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(e.exit_code())
            }
        },
        Command::Run {
            once,
            task_id,
            replicas,
            pool,
            metrics_port,
            memory_budget,
            files,
        } => {
            let cfgs = match load_all(&files, 0) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let rule = Rule::of(pool);
            let mine = select_tasks(&cfgs, task_id, replicas, rule);
            if mine.is_empty() && (once || !pool) {
                eprintln!("error: no task to run: --task-id {task_id:?} with --replicas {replicas:?} selects none of the connectors' tasks");
                return ExitCode::from(2);
            }
            if mine.is_empty() {
                let tasks: u32 = cfgs.iter().map(|c| c.runtime.tasks).sum();
                tracing::info!(pod = ?task_id, ?replicas, tasks, "this pod runs none of the pool's tasks: serving health and waiting");
            }
            rt.block_on(run_all(mine, once, metrics_port, memory_budget))
        }
        Command::Assign { replicas, pool, files } => {
            let cfgs = match load_all(&files, 0) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let rule = Rule::of(pool);
            for c in &cfgs {
                for t in 0..c.runtime.tasks {
                    println!("{} {} {t}", pod_of(rule, &c.name, t, replicas), c.name);
                }
            }
            ExitCode::SUCCESS
        }
    }
}

/// `validate` of one connector: the file alone (`offline`), also the broker, registry and
/// offsets (`online`), else the file against its table (a key, its columns).
fn validate(rt: &tokio::runtime::Runtime, c: &ConnectorConfig, offline: bool, online: bool) -> Result<(), ExitCode> {
    if offline {
        println!("# {}: ok (table not opened)\n{}", c.file.display(), c.describe());
        return Ok(());
    }
    if online {
        return match rt.block_on(lakestream::runtime::admin::validate_online(c)) {
            Ok(lines) => {
                println!("# {}: ok\n{}\n{}", c.file.display(), lines.join("\n"), c.describe());
                Ok(())
            }
            Err(e) => {
                eprintln!("error: {}: {}", c.file.display(), lakestream::causes::with_causes(&e));
                Err(ExitCode::from(e.exit_code()))
            }
        };
    }
    match lakestream::source::open(&c.source()) {
        Ok(source) => {
            let info = source.info();
            println!(
                "# {}: ok (table {}, key {:?})\n{}",
                c.file.display(),
                info.name,
                info.key_fields,
                c.describe()
            );
            Ok(())
        }
        Err(e) => {
            let e = lakestream::runtime::RuntimeError::from(e);
            eprintln!("error: {}: {e}", c.file.display());
            Err(ExitCode::from(e.exit_code()))
        }
    }
}

/// `verify`: the report on stdout; exit 0 equal, 3 different, else the failure's code.
fn verify(rt: &tokio::runtime::Runtime, file: PathBuf, opts: VerifyOptions, json: bool) -> ExitCode {
    let cfg = match load_all(&[file], 0) {
        Ok(mut c) => c.remove(0),
        Err(code) => return code,
    };
    match rt.block_on(lakestream::runtime::verify::verify(&cfg, &opts)) {
        Ok(report) => {
            if json {
                println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
            } else {
                print!("{}", report.text());
            }
            ExitCode::from(if report.equal { 0 } else { 3 })
        }
        Err(e) => {
            eprintln!("error: {}: {}", cfg.file.display(), lakestream::causes::with_causes(&e));
            ExitCode::from(e.exit_code())
        }
    }
}

/// `offsets show`: the task's stored offsets, as JSON.
fn offsets_show(file: PathBuf, task_id: u32) -> ExitCode {
    let cfg = match load_all(&[file], task_id) {
        Ok(mut c) => c.remove(0),
        Err(code) => return code,
    };
    match show_offsets(&cfg) {
        Ok(o) => {
            println!("{}", serde_json::to_string_pretty(&o).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// `--memory-budget`: a size (`512MiB`, bytes).
fn memory_budget(s: &str) -> Result<usize, String> {
    lakestream::config::parse_size(s)
        .filter(|b| *b > 0)
        .ok_or_else(|| format!("`{s}` is not a size (bytes, or with KiB/MiB/GiB)"))
}

async fn run_all(cfgs: Vec<ConnectorConfig>, once: bool, metrics_port: Option<u16>, memory: Option<usize>) -> ExitCode {
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => return,
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        tracing::info!("shutdown requested: committing the open transaction");
        let _ = tx.send(true);
    });
    let health = lakestream::health::Health::new();
    if let Some(port) = metrics_port.or_else(|| cfgs.iter().find_map(|c| c.runtime.metrics_port)) {
        let health = health.clone();
        tokio::spawn(async move {
            if let Err(e) = lakestream::health::serve(port, health).await {
                tracing::error!(port, error = %e, "metrics endpoint failed");
            }
        });
    }
    let mut set = tokio::task::JoinSet::new();
    // verify.interval: one background audit per connector, beside its task 0 (dropped, and so
    // stopped, with the process's connectors)
    let mut audits = tokio::task::JoinSet::new();
    for cfg in cfgs.iter().filter(|c| c.runtime.task_id == 0 && !once) {
        if let Some(every) = cfg.runtime.verify_interval {
            audits.spawn(lakestream::runtime::verify::run_periodically(
                cfg.clone(),
                every,
                rx.clone(),
            ));
        }
    }
    let first_units = std::sync::Arc::new(lakestream::runtime::tasks::FirstUnits::default());
    let polls = std::sync::Arc::new(lakestream::runtime::polls::Polls::default());
    let instance = lakestream::runtime::state::Holder::this_process();
    let memory = lakestream::runtime::memory::MemoryShares::new(memory, cfgs.len());
    for cfg in cfgs {
        let opts = RunOptions {
            once,
            shutdown: rx.clone(),
            health: health.clone(),
            first_units: first_units.clone(),
            cluster: std::sync::Arc::new(lakestream::sink::Kafka),
            polls: polls.clone(),
            instance: instance.clone(),
            memory: memory.clone(),
        };
        set.spawn(async move {
            let name = cfg.name.clone();
            (name, run_connector(cfg, opts).await)
        });
    }
    if set.is_empty() {
        // a pool's pod without a task: up (its health endpoints answer) until asked to stop
        let mut rx = rx.clone();
        while !*rx.borrow_and_update() {
            if rx.changed().await.is_err() {
                break;
            }
        }
    }
    let mut code = 0u8;
    while let Some(res) = set.join_next().await {
        match res {
            Ok((name, Ok(()))) => tracing::info!(connector = %name, "connector stopped"),
            Ok((name, Err(e))) => {
                let e_text = lakestream::causes::with_causes(&e);
                tracing::error!(connector = %name, error = %e_text, "connector failed");
                eprintln!("error: connector {name}: {e_text}");
                code = code.max(e.exit_code());
            }
            Err(e) => {
                eprintln!("error: connector task panicked: {e}");
                code = 1;
            }
        }
    }
    ExitCode::from(code)
}

type AdminFuture =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, lakestream::runtime::RuntimeError>>>>;

/// `offsets reset|set`: load the file, run the command, print what it did.
fn offsets_admin(
    rt: &tokio::runtime::Runtime,
    file: PathBuf,
    f: impl FnOnce(lakestream::config::ConnectorConfig) -> AdminFuture,
) -> ExitCode {
    let cfg = match load_all(&[file], 0) {
        Ok(mut c) => c.remove(0),
        Err(code) => return code,
    };
    match rt.block_on(f(cfg)) {
        Ok(done) => {
            println!("{done}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", lakestream::causes::with_causes(&e));
            ExitCode::from(e.exit_code())
        }
    }
}
