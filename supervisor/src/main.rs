//! `hanzo-dev`: the supervisor binary. It parses the command line, keeps secrets out of its own
//! environment, runs the supervision tree that owns the worker processes, and — re-executed with the
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
            Ok(opts) => worker_entry(opts.role)(opts),
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
    cli::init_logging(&cli.global, &env.vars);
    let code = match cli::run(cli, env) {
        Ok(code) => code,
        Err(e) => cli::exit::report(&e),
    };
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// Each role's worker entry, named after the role's module in the table of roles
/// ([`hanzo_ipc::with_roles!`]): a role without an entry here does not compile.
mod entry {
    pub use hanzo_broker::worker_main as broker;
    pub use hanzo_lsp::worker_main as lsp;
    pub use hanzo_mcp::worker_main as mcp;
    pub use hanzo_model::worker_main as model;
    pub use hanzo_tools::worker_main as tools;
}

macro_rules! define_worker_entry {
    ($($(#[$doc:meta])* $variant:ident($name:literal, $module:ident, $proto:ident)),* $(,)?) => {
        /// The function that becomes `role`'s worker process.
        fn worker_entry(role: hanzo_ipc::Role) -> fn(hanzo_worker::WorkerOptions) -> i32 {
            match role {
                $(hanzo_ipc::Role::$variant => entry::$module,)*
            }
        }
    };
}

hanzo_ipc::with_roles!(define_worker_entry);
