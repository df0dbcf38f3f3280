//! The `lakestream` binary: its commands (flags in `cli`) and logging (the allocator is set in
//! `lakestream::alloc`).

mod cli;
mod loading;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use cli::{Cli, Command, GenerateCommand, LogFormat, OffsetsCommand};
use lakestream::config::ConnectorConfig;
use lakestream::generate;
use lakestream::ops::show_offsets;
use lakestream::runtime::fleet::{Discovered, Placement};
use lakestream::runtime::placement::{pod_of, select_tasks, Rule};
use lakestream::runtime::verify::VerifyOptions;
use lakestream::runtime::{run_connector, RunOptions};
use loading::{load_files, load_one};

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
        Command::Validate { offline, online, files } => validate_files(&rt, &files, offline, online),
        Command::Offsets {
            action: OffsetsCommand::Show { file, table, task_id },
        } => offsets_show(load_one(&file, task_id, table.as_deref())),
        Command::Offsets {
            action: OffsetsCommand::Reset { file, table, force },
        } => offsets_admin(&rt, load_one(&file, 0, table.as_deref()), |c| {
            Box::pin(async move { lakestream::ops::reset(&c, force).await })
        }),
        Command::Offsets {
            action:
                OffsetsCommand::Set {
                    file,
                    table,
                    instant,
                    snapshot,
                    force,
                },
        } => offsets_admin(&rt, load_one(&file, 0, table.as_deref()), |c| {
            let id = instant.or(snapshot).unwrap_or_default();
            Box::pin(async move { lakestream::ops::set(&c, &id, force).await })
        }),
        Command::Verify {
            file,
            table,
            at,
            json,
            examples,
            repair,
        } => match (load_one(&file, 0, table.as_deref()), repair) {
            (Err(code), _) => code,
            (Ok(cfg), false) => verify(&rt, cfg, VerifyOptions { at, examples }, json),
            (Ok(cfg), true) => self::repair(&rt, cfg, examples, json),
        },
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
            let loaded = match load_files(&files, 0, true) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let mine = match mine(&loaded, task_id, replicas, pool, once) {
                Ok(mine) => mine,
                Err(code) => return code,
            };
            let place = Placement {
                ordinal: task_id,
                replicas,
            };
            rt.block_on(run_all(mine, loaded.fleets, once, metrics_port, memory_budget, place))
        }
        Command::Assign { replicas, pool, files } => assign(&files, replicas, pool),
    }
}

/// `validate` of every file: each connector's, then each discovering file's tables.
fn validate_files(rt: &tokio::runtime::Runtime, files: &[PathBuf], offline: bool, online: bool) -> ExitCode {
    match load_files(files, 0, !offline) {
        Ok(loaded) => {
            for c in &loaded.files {
                if let Err(code) = validate(rt, c, offline, online) {
                    return code;
                }
            }
            for d in &loaded.fleets {
                let lines = match offline {
                    true => vec![format!(
                        "# {}: ok, discovering in {} (not searched)",
                        d.tables.file.display(),
                        d.tables.discovery.search.describe()
                    )],
                    false => rt.block_on(lakestream::ops::validate_tables(d, online)),
                };
                println!("{}", lines.join("\n"));
            }
            ExitCode::SUCCESS
        }
        Err(code) => code,
    }
}

/// `assign`: the pod each task of each connector runs on.
fn assign(files: &[PathBuf], replicas: u32, pool: bool) -> ExitCode {
    let loaded = match load_files(files, 0, true) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let rule = Rule::of(pool);
    let members = loaded.fleets.iter().flat_map(|d| d.view.members.iter());
    // a discovered table's tasks are always placed by rendezvous (see runtime::fleet)
    let placed = loaded
        .files
        .iter()
        .map(|c| (c, rule))
        .chain(members.map(|c| (c, Rule::Pool)));
    for (c, rule) in placed {
        for t in 0..c.runtime.tasks {
            println!("{} {} {t}", pod_of(rule, &c.name, t, replicas), c.name);
        }
    }
    ExitCode::SUCCESS
}

/// The tasks of `loaded` this pod runs; exit 2 where it runs none and is not a pool member
/// waiting for its share.
fn mine(
    loaded: &loading::Loaded,
    task_id: Option<u32>,
    replicas: Option<u32>,
    pool: bool,
    once: bool,
) -> Result<Vec<ConnectorConfig>, ExitCode> {
    let mine = select_tasks(&loaded.files, task_id, replicas, Rule::of(pool));
    if mine.is_empty() && loaded.fleets.is_empty() && (once || !pool) {
        eprintln!("error: no task to run: --task-id {task_id:?} with --replicas {replicas:?} selects none of the connectors' tasks");
        return Err(ExitCode::from(2));
    }
    if mine.is_empty() && loaded.fleets.is_empty() {
        let tasks: u32 = loaded.files.iter().map(|c| c.runtime.tasks).sum();
        tracing::info!(pod = ?task_id, ?replicas, tasks, "this pod runs none of the pool's tasks: serving health and waiting");
    }
    Ok(mine)
}

/// `validate` of one connector: the file alone (`offline`), also the broker, registry and
/// offsets (`online`), else the file against its table (a key, its columns).
fn validate(rt: &tokio::runtime::Runtime, c: &ConnectorConfig, offline: bool, online: bool) -> Result<(), ExitCode> {
    if offline {
        println!("# {}: ok (table not opened)\n{}", c.file.display(), c.describe());
        return Ok(());
    }
    if online {
        return match rt.block_on(lakestream::ops::validate_online(c)) {
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
fn verify(rt: &tokio::runtime::Runtime, cfg: ConnectorConfig, opts: VerifyOptions, json: bool) -> ExitCode {
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

/// `verify --repair`: the report before and, after a repair, the one after; exit 0 when the topic
/// replays to the table (events published twice stay in its log: counted, harmless to the
/// replay), 3 when it does not.
fn repair(rt: &tokio::runtime::Runtime, cfg: ConnectorConfig, examples: usize, json: bool) -> ExitCode {
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let opts = RunOptions {
        once: true,
        shutdown: rx,
        health: lakestream::health::Health::new(),
        first_units: std::sync::Arc::new(lakestream::runtime::tasks::FirstUnits::default()),
        cluster: std::sync::Arc::new(lakestream::sink::Kafka),
        polls: std::sync::Arc::new(lakestream::runtime::polls::Polls::default()),
        instance: lakestream::runtime::state::Holder::this_process(),
        memory: lakestream::runtime::memory::MemoryShares::new(None, 1),
    };
    match rt.block_on(lakestream::runtime::resync::repair(&cfg, opts, examples)) {
        Ok((before, after)) => {
            let reports: Vec<_> = [Some(&before), after.as_ref()].into_iter().flatten().collect();
            if json {
                println!("{}", serde_json::to_string_pretty(&reports).unwrap_or_default());
            } else {
                print!("{}", before.text());
                if let Some(a) = &after {
                    println!("repaired: the changes that make the topic equal the table were published; again:");
                    print!("{}", a.text());
                }
            }
            let t = &after.as_ref().unwrap_or(&before).total;
            let replays_equal = t.missing + t.extra + t.differing + t.duplicate_keys == 0;
            if replays_equal && t.duplicated_events > 0 {
                eprintln!(
                    "note: {} events published twice stay in the topic's log (a replay by key is not affected)",
                    t.duplicated_events
                );
            }
            ExitCode::from(if replays_equal { 0 } else { 3 })
        }
        Err(e) => {
            eprintln!("error: {}: {}", cfg.file.display(), lakestream::causes::with_causes(&e));
            ExitCode::from(e.exit_code())
        }
    }
}

/// `offsets show`: the task's stored offsets, as JSON.
fn offsets_show(cfg: Result<ConnectorConfig, ExitCode>) -> ExitCode {
    let cfg = match cfg {
        Ok(c) => c,
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

async fn run_all(
    cfgs: Vec<ConnectorConfig>,
    fleets: Vec<Discovered>,
    once: bool,
    metrics_port: Option<u16>,
    memory: Option<usize>,
    place: Placement,
) -> ExitCode {
    let rx = shutdown_on_signal();
    let health = lakestream::health::Health::new();
    let fleet_port = fleets.iter().find_map(|d| d.tables.metrics_port);
    if let Some(port) = metrics_port.or_else(|| cfgs.iter().find_map(|c| c.runtime.metrics_port).or(fleet_port)) {
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
    // a discovering connector's tables come and go: its process shares the budget as one of many
    let members: usize = fleets.iter().map(|d| d.view.members.len().max(2)).sum();
    let memory = lakestream::runtime::memory::MemoryShares::new(memory, cfgs.len() + members);
    let opts_of = |shutdown: tokio::sync::watch::Receiver<bool>| RunOptions {
        once,
        shutdown,
        health: health.clone(),
        first_units: first_units.clone(),
        cluster: std::sync::Arc::new(lakestream::sink::Kafka),
        polls: polls.clone(),
        instance: instance.clone(),
        memory: memory.clone(),
    };
    for d in fleets {
        let opts = opts_of(rx.clone());
        set.spawn(async move {
            let name = d.tables.name.clone();
            (name, lakestream::runtime::fleet::run_tables(d, opts, place).await)
        });
    }
    for cfg in cfgs {
        let opts = opts_of(rx.clone());
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
    joined(set).await
}

/// A receiver that turns true on SIGTERM or Ctrl-C (the connectors commit and stop).
fn shutdown_on_signal() -> tokio::sync::watch::Receiver<bool> {
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
    rx
}

/// Waits for every connector of the process; the exit code is the worst of their errors'.
async fn joined(mut set: tokio::task::JoinSet<(String, Result<(), lakestream::runtime::RuntimeError>)>) -> ExitCode {
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
    cfg: Result<ConnectorConfig, ExitCode>,
    f: impl FnOnce(lakestream::config::ConnectorConfig) -> AdminFuture,
) -> ExitCode {
    let cfg = match cfg {
        Ok(c) => c,
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
