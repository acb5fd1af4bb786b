//! `hanzo-dev agents` (being written).

use crate::secrets::StartEnv;

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: &Args, _env: &StartEnv) -> anyhow::Result<i32> {
    anyhow::bail!("not yet available")
}
