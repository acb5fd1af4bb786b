//! `hanzo-dev trust` (being written).

#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: &Args) -> anyhow::Result<i32> {
    anyhow::bail!("`trust` is not available in this build yet")
}
