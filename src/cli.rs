//! The command line: `lakestream`'s commands and their flags (clap).

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};
use lakestream::generate::GenerateOptions;

#[derive(Parser)]
#[command(
    name = "lakestream",
    version,
    about = "Stream Hudi, Iceberg and Delta Lake table changes into Kafka as Avro changelog events, exactly once"
)]
pub struct Cli {
    /// Log format.
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "LAKESTREAM_LOG_FORMAT"
    )]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
pub enum Command {
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
        /// A table of a connector that discovers its tables: its `namespace.table`.
        #[arg(long)]
        table: Option<String>,
        /// A commit at or before the connector's position (Hudi instant, Iceberg snapshot id).
        #[arg(long)]
        at: Option<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
        /// Example keys named per kind of difference.
        #[arg(long, default_value_t = 10)]
        examples: usize,
        /// Where the topic differs, publish exactly the changes that make it equal the table at
        /// the connector's position, then compare again (stop the connector first: the repair
        /// takes its transactional id).
        #[arg(long, conflicts_with = "at")]
        repair: bool,
    },
    /// Write demo/benchmark tables.
    Generate {
        #[command(subcommand)]
        format: GenerateCommand,
    },
}

#[derive(Subcommand)]
pub enum OffsetsCommand {
    /// Print the stored offsets of a connector as JSON.
    Show {
        file: PathBuf,
        /// A table of a connector that discovers its tables: its `namespace.table`.
        #[arg(long)]
        table: Option<String>,
        #[arg(long, env = "TASK_ID", default_value_t = 0)]
        task_id: u32,
    },
    /// Forget the connector's position (every task, every generation): the next run applies the
    /// start strategy. Fences every task of the connector: stop it first.
    Reset {
        file: PathBuf,
        /// A table of a connector that discovers its tables: its `namespace.table`.
        #[arg(long)]
        table: Option<String>,
        /// Required: a running task of the connector is fenced (and exits).
        #[arg(long)]
        force: bool,
    },
    /// Put every task of the connector at a completed Hudi instant or Iceberg snapshot: the next
    /// run emits what follows it. Fences every task of the connector: stop it first.
    Set {
        file: PathBuf,
        /// A table of a connector that discovers its tables: its `namespace.table`.
        #[arg(long)]
        table: Option<String>,
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
pub enum GenerateCommand {
    /// A Hudi table (table version 6): a bulk insert, then upsert/delete commits (MOR: in log
    /// files, with optional compaction).
    Hudi(GenerateOptions),
}

/// `--memory-budget`: a size (`512MiB`, bytes).
fn memory_budget(s: &str) -> Result<usize, String> {
    lakestream::config::parse_size(s)
        .filter(|b| *b > 0)
        .ok_or_else(|| format!("`{s}` is not a size (bytes, or with KiB/MiB/GiB)"))
}
