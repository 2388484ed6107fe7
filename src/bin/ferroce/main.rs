//! The `ferroce` command line: parses the arguments ([`args`]), runs the
//! subcommand's body (a function of `ferroce::tools` or `ferroce::sim`),
//! prints an error and sets the exit code: 0 when the command passed, 1
//! when it ran and failed a check, 2 on an error.

mod args;

use anyhow::Result;
use args::{BenchCmd, Cli, Cmd};
use clap::Parser;
use ferroce::config::{self, Config};
use ferroce::{sim, tools};
use std::path::PathBuf;
use std::process::ExitCode;

/// The heap, counted (stats_alloc): `ferroce bench e2e` reports the memory
/// each QP costs the engine from these counts.
#[global_allocator]
static ALLOC: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp(None)
        .format_target(false)
        .init();
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Decode(opts) => tools::decode::run(&opts),
        Cmd::Explain(opts) => tools::explain::run(&opts),
        Cmd::Sim(opts) => sim::cli::sim(&opts),
        Cmd::Lab { file, opts } => sim::cli::lab(&file, &opts),
        Cmd::Bench {
            what: BenchCmd::Wire(opts),
        } => tools::bench::wire::run(&opts),
        Cmd::Pingpong(a) => a.opts().and_then(|opts| {
            a.at.config()
                .and_then(|cfg| tools::interop::pingpong(&cfg, &a, &opts))
        }),
        Cmd::Rping(r) => r.opts().and_then(|o| tools::interop::rping(&r, &o)),
        Cmd::UdPingpong(u) => u.opts().and_then(|opts| {
            u.at.config()
                .and_then(|cfg| tools::interop::pingpong(&cfg, &u.as_pingpong(), &opts))
        }),
        cmd => match cmd.perftest() {
            Some((t, a)) => a
                .check(t)
                .and_then(|()| a.at.config())
                .and_then(|cfg| tools::interop::perftest(&cfg, t, a)),
            None => run(cmd),
        },
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("ferroce: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn load(path: &Option<PathBuf>) -> Result<Config> {
    Ok(match path {
        Some(p) => Config::load(p)?,
        None => Config::parse(config::DEMO, "built-in demo config")?,
    })
}

/// Without DPDK the arguments and configs are still checked, then refused.
#[cfg(not(feature = "dpdk"))]
fn run(cmd: Cmd) -> Result<bool> {
    use anyhow::bail;
    use ferroce::tools::linktest;
    match cmd {
        Cmd::Demo { config, .. }
        | Cmd::Info { config }
        | Cmd::Bench {
            what: BenchCmd::Io { config, .. },
        }
        | Cmd::Bench {
            what: BenchCmd::E2e { config, .. },
        } => {
            load(&config)?;
        }
        Cmd::Linktest { config, opts } => {
            let cfg = Config::load(&config)?;
            if cfg.port(&opts.port).is_none() {
                bail!("the config has no port named {:?}", opts.port);
            }
            opts.peer_mac.map(|m| linktest::parse_mac(&m)).transpose()?;
        }
        _ => unreachable!("handled in main"),
    }
    bail!(tools::NO_DPDK)
}

#[cfg(feature = "dpdk")]
fn run(cmd: Cmd) -> Result<bool> {
    match cmd {
        Cmd::Demo { config, opts } => tools::demo::run::run(load(&config)?, &opts),
        Cmd::Linktest { config, opts } => tools::linktest::run::run(Config::load(&config)?, &opts),
        Cmd::Bench {
            what: BenchCmd::Io { config, opts },
        } => tools::bench::io::run(&load(&config)?, &opts),
        Cmd::Bench {
            what: BenchCmd::E2e { config, cmd },
        } => tools::bench::run_e2e(&load(&config)?, &cmd),
        Cmd::Info { config } => tools::info::run(&load(&config)?),
        _ => unreachable!("handled in main"),
    }
}
