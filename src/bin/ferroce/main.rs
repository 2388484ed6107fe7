//! The `ferroce` command line: parses the arguments ([`args`]), runs the
//! subcommand's body (a function of `ferroce::tools` or `ferroce::sim`),
//! prints an error and sets the exit code: 0 when the command passed, 1
//! when it ran and failed a check, 2 on an error.

mod args;

use anyhow::Result;
use args::{BenchCmd, Cli, Cmd};
use clap::Parser;
use ferroce::config::{self, Config};
use ferroce::sim::lab::experiment::LabOptions;
use ferroce::tools::bench::wire::WireOpts;
use ferroce::tools::decode::DecodeOpts;
use ferroce::tools::linktest;
use ferroce::{sim, tools};
use std::path::PathBuf;
use std::process::ExitCode;

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"))
        .format_timestamp(None)
        .format_target(false)
        .init();
    let cli = Cli::parse();
    let result = match cli.cmd {
        Cmd::Decode { files, json } => tools::decode::run(&DecodeOpts { files, json }),
        Cmd::Sim(args) => sim::cli::sim(&args.opts()),
        Cmd::Lab {
            file,
            out,
            seed,
            quiet,
            no_plots,
        } => {
            let opts = LabOptions {
                out,
                seed,
                quiet,
                plots: !no_plots,
            };
            sim::cli::lab(&file, &opts)
        }
        Cmd::Bench {
            what: BenchCmd::Wire { rounds, iters },
        } => tools::bench::wire::run(&WireOpts { rounds, iters }),
        cmd => run(cmd),
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
    use args::E2eArgs;
    match cmd {
        Cmd::Demo { config, .. }
        | Cmd::Info { config }
        | Cmd::Bench {
            what: BenchCmd::Io { config, .. },
        }
        | Cmd::Bench {
            what: BenchCmd::E2e(E2eArgs { config, .. }),
        } => {
            load(&config)?;
        }
        Cmd::Linktest {
            config,
            port,
            peer_mac,
            ..
        } => {
            let cfg = Config::load(&config)?;
            if cfg.port(&port).is_none() {
                bail!("the config has no port named {port:?}");
            }
            peer_mac.map(|m| linktest::parse_mac(&m)).transpose()?;
        }
        Cmd::Pingpong(a) => {
            a.at.config()?;
        }
        Cmd::WriteBw(_)
        | Cmd::ReadBw(_)
        | Cmd::SendBw(_)
        | Cmd::AtomicBw(_)
        | Cmd::WriteLat(_)
        | Cmd::ReadLat(_)
        | Cmd::SendLat(_) => {
            let (t, a) = cmd.perftest().expect("a perftest command");
            a.cmd(t).check()?;
            a.at.config()?;
        }
        Cmd::Decode { .. }
        | Cmd::Sim(_)
        | Cmd::Lab { .. }
        | Cmd::Bench {
            what: BenchCmd::Wire { .. },
        } => unreachable!("handled in main"),
    }
    bail!("this ferroce was built without the `dpdk` feature; rebuild with default features")
}

#[cfg(feature = "dpdk")]
fn run(cmd: Cmd) -> Result<bool> {
    use args::Role;
    use ferroce::tools::bench::io::IoOpts;
    use ferroce::tools::demo::run::DemoOpts;
    use ferroce::tools::interop;
    use ferroce::tools::linktest::LinktestOpts;
    match cmd {
        Cmd::Demo {
            config,
            count,
            payload,
            peer,
        } => {
            let opts = DemoOpts {
                count,
                payload,
                peer,
            };
            tools::demo::run::run(load(&config)?, &opts)
        }
        Cmd::Linktest {
            config,
            port,
            role,
            count,
            payload,
            window,
            timeout_ms,
            peer_ip,
            peer_mac,
        } => {
            let opts = LinktestOpts {
                port,
                send: role == Role::Send,
                count,
                payload,
                window,
                timeout_ms,
                peer_ip,
                peer_mac,
            };
            linktest::run::run(Config::load(&config)?, &opts)
        }
        Cmd::Bench {
            what:
                BenchCmd::Io {
                    config,
                    packets,
                    frame_len,
                    rounds,
                },
        } => {
            let opts = IoOpts {
                packets,
                frame_len,
                rounds,
            };
            tools::bench::io::run(&load(&config)?, &opts)
        }
        Cmd::Bench {
            what: BenchCmd::E2e(a),
        } => tools::bench::run_e2e(&load(&a.config)?, &a.cmd()),
        Cmd::Info { config } => tools::info::run(&load(&config)?),
        Cmd::Pingpong(a) => interop::pingpong(&a.at.config()?, &a.cmd()),
        Cmd::WriteBw(_)
        | Cmd::ReadBw(_)
        | Cmd::SendBw(_)
        | Cmd::AtomicBw(_)
        | Cmd::WriteLat(_)
        | Cmd::ReadLat(_)
        | Cmd::SendLat(_) => {
            let (t, a) = cmd.perftest().expect("a perftest command");
            interop::perftest(&a.at.config()?, &a.cmd(t))
        }
        Cmd::Decode { .. }
        | Cmd::Sim(_)
        | Cmd::Lab { .. }
        | Cmd::Bench {
            what: BenchCmd::Wire { .. },
        } => unreachable!("handled in main"),
    }
}
