//! `hanzo-dev`: the supervisor binary. It parses the command line, keeps secrets out of its own
//! environment, runs the actor tree that owns the worker processes, and — re-executed with the
//! hidden `__worker` entry — becomes each of those workers.
#![deny(unsafe_code)]

use clap::Parser;
use hanzo_dev::{cli, secrets, WORKER_ENTRY};
use std::process::ExitCode;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    // A worker must confine itself before any thread starts, so this check comes before
    // everything else: no logging set-up, no runtime, no argument parser.
    if args.get(1).map(String::as_str) == Some(WORKER_ENTRY) {
        let code = match hanzo_worker::WorkerOptions::parse(&args[2..]) {
            Ok(opts) => match opts.role {
                hanzo_ipc::Role::Model => hanzo_model::worker_main(opts),
                hanzo_ipc::Role::Broker => hanzo_broker::worker_main(opts),
                hanzo_ipc::Role::Tools => hanzo_tools::worker_main(opts),
                _ => hanzo_worker::run(opts),
            },
            Err(e) => {
                eprintln!("hanzo-dev worker: {e}");
                hanzo_worker::exit::USAGE
            }
        };
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    // Still single-threaded: take the secrets out of our environment before anything can copy it.
    let env = secrets::scrub_own_environment(&[]);
    let cli = cli::Cli::parse();
    cli::init_logging(&cli.global);
    let code = match cli::run(cli, env) {
        Ok(code) => code,
        Err(e) => cli::exit::report(&e),
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
