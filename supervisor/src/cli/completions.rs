//! `hanzo-dev completions bash|zsh|fish` and `hanzo-dev man [--dir DIR]`: shell completions and
//! man pages, generated from the command-line definition itself, so they can never drift from it.
//! The packages (`scripts/dist.sh`) install both.

use clap::CommandFactory;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The shells completions are generated for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shell {
    /// Source the script, or install it as `hanzo-dev` in bash-completion's directory.
    Bash,
    /// Install it as `_hanzo-dev` in a directory of `$fpath`.
    Zsh,
    /// Install it as `hanzo-dev.fish` in `~/.config/fish/completions`.
    Fish,
}

/// What `hanzo-dev completions` takes.
#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to generate completions for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// What `hanzo-dev man` takes.
#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// Write one page per command (`hanzo-dev.1`, `hanzo-dev-run.1`, …) into DIR instead of
    /// printing the main page to stdout.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// The completion script for `shell`.
pub fn completions(shell: Shell) -> Vec<u8> {
    let mut cmd = super::Cli::command();
    let mut out = Vec::new();
    let generator = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    clap_complete::generate(generator, &mut cmd, "hanzo-dev", &mut out);
    out
}

/// Prints the completion script for the shell asked; returns the exit code.
pub fn run_completions(args: &CompletionsArgs) -> anyhow::Result<i32> {
    std::io::stdout().write_all(&completions(args.shell))?;
    Ok(super::exit::OK)
}

/// The man page of the top-level command (`hanzo-dev(1)`), in roff.
pub fn man_page() -> std::io::Result<Vec<u8>> {
    let mut out = Vec::new();
    clap_mangen::Man::new(super::Cli::command()).render(&mut out)?;
    Ok(out)
}

/// Every page: `hanzo-dev.1` and one `hanzo-dev-SUB.1` per visible subcommand. Returns the files
/// written.
pub fn write_man_pages(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let cmd = super::Cli::command();
    let mut written = Vec::new();
    let mut write = |name: String, page: clap::Command| -> std::io::Result<()> {
        let path = dir.join(format!("{name}.1"));
        let mut bytes = Vec::new();
        clap_mangen::Man::new(page).render(&mut bytes)?;
        std::fs::write(&path, bytes)?;
        written.push(path);
        Ok(())
    };
    write("hanzo-dev".into(), cmd.clone())?;
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("hanzo-dev-{}", sub.get_name());
        write(name.clone(), sub.clone().display_name(name))?;
    }
    Ok(written)
}

/// Prints the main man page, or writes every page into `--dir` and prints their paths;
/// returns the exit code.
pub fn run_man(args: &ManArgs) -> anyhow::Result<i32> {
    match &args.dir {
        Some(dir) => {
            for p in write_man_pages(dir)? {
                println!("{}", p.display());
            }
        }
        None => std::io::stdout().write_all(&man_page()?)?,
    }
    Ok(super::exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_subcommand_is_completed_in_every_shell() {
        let cmd = super::super::Cli::command();
        let subs: Vec<String> = cmd
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .map(|s| s.get_name().to_string())
            .collect();
        assert!(subs.iter().any(|s| s == "run") && subs.iter().any(|s| s == "completions"));
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let text = String::from_utf8(completions(shell)).expect("utf-8");
            for sub in &subs {
                assert!(
                    text.contains(sub.as_str()),
                    "{shell:?} completion lacks {sub}"
                );
            }
        }
        // A flag of a subcommand, not only the subcommand names.
        let bash = String::from_utf8(completions(Shell::Bash)).expect("utf-8");
        assert!(bash.contains("--isolation") && bash.contains("--approval"));
    }

    #[test]
    fn man_pages_name_the_command_and_its_subcommands() {
        let page = String::from_utf8(man_page().expect("renders")).expect("utf-8");
        assert!(
            page.starts_with(".ie") || page.contains(".TH"),
            "{page:.200}"
        );
        assert!(page.contains(".TH hanzo-dev"), "{page:.300}");
        assert!(page.contains("sandbox"), "subcommands listed");
        let dir = tempfile::tempdir().expect("dir");
        let files = write_man_pages(dir.path()).expect("writes");
        let names: Vec<String> = files
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert!(names.contains(&"hanzo-dev.1".to_string()));
        assert!(names.contains(&"hanzo-dev-run.1".to_string()));
        let run = std::fs::read_to_string(dir.path().join("hanzo-dev-run.1")).expect("read");
        assert!(run.contains("\\-\\-approval"), "{run:.500}");
    }
}
