//! `hanzo-dev config show [--json] [--sources]`: the merged configuration in canonical form
//! (`test-vectors/README.md`), optionally with the scope that set each value. Secrets are redacted.

use super::exit;
use hanzo_policy::settings::{load, CliOverrides, LoadedSettings, SettingsSources, Source};
use serde_json::Value;
use std::collections::BTreeMap;

/// What `hanzo-dev config` takes.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Which `config` command to run.
    #[command(subcommand)]
    pub command: ConfigCommand,
}

/// The `config` commands.
#[derive(Debug, clap::Subcommand)]
pub enum ConfigCommand {
    /// Print the merged configuration (user < project < local < environment < flags).
    Show {
        /// Canonical JSON instead of `key = value` lines.
        #[arg(long)]
        json: bool,
        /// Also say which scope set each value.
        #[arg(long)]
        sources: bool,
    },
}

/// Reads the process environment. Secrets were scrubbed from it at start, so prefer
/// [`run_with_env`] with the start environment when it is at hand.
pub fn run(args: &Args) -> anyhow::Result<i32> {
    let env: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    run_with_env(args, &env, CliOverrides::default())
}

/// `env` is the environment as the process started (secret variables included: they only show
/// as `<redacted:env>`); `cli` carries global flags that override settings.
pub fn run_with_env(
    args: &Args,
    env: &[(String, String)],
    cli: CliOverrides,
) -> anyhow::Result<i32> {
    let ConfigCommand::Show { json, sources } = &args.command;
    let cwd = std::env::current_dir()?;
    let src = SettingsSources::resolve(&cwd, env.iter().cloned().collect(), cli);
    let loaded = match load(&src) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(exit::USAGE);
        }
    };
    for w in loaded.warnings() {
        eprintln!("warning: {w}");
    }
    // Written by hand rather than with `print!`, which panics when stdout is a closed pipe
    // (`hanzo-dev config show | head`).
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out
        .write_all(render(&loaded, *json, *sources).as_bytes())
        .and_then(|()| out.flush())
    {
        Ok(()) => Ok(exit::OK),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(exit::OK),
        Err(e) => Err(e.into()),
    }
}

/// The text `config show` prints (pure, for tests).
pub fn render(loaded: &LoadedSettings, json: bool, with_sources: bool) -> String {
    let canonical = loaded.merged.config.canonical_json();
    if json {
        let doc = if with_sources {
            serde_json::json!({ "config": canonical, "sources": loaded.merged.sources })
        } else {
            canonical
        };
        let mut s = serde_json::to_string_pretty(&doc).expect("JSON values always serialize");
        s.push('\n');
        return s;
    }
    let mut lines = Vec::new();
    flatten(&canonical, "", &mut lines);
    let mut out = String::new();
    for (path, value) in lines {
        if with_sources {
            let src = source_of(&loaded.merged.sources, &path);
            out.push_str(&format!("{path} = {value}    [{src}]\n"));
        } else {
            out.push_str(&format!("{path} = {value}\n"));
        }
    }
    if with_sources {
        for (scope, path, exists) in &loaded.files {
            let state = if *exists { "read" } else { "absent" };
            out.push_str(&format!("# {scope}: {} ({state})\n", path.display()));
        }
    }
    out
}

fn flatten(v: &Value, path: &str, out: &mut Vec<(String, String)>) {
    match v {
        Value::Object(m) if !m.is_empty() => {
            for (k, child) in m {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                flatten(child, &p, out);
            }
        }
        Value::Array(a) if !a.is_empty() => {
            for (i, child) in a.iter().enumerate() {
                flatten(child, &format!("{path}[{i}]"), out);
            }
        }
        leaf => out.push((path.to_string(), leaf.to_string())),
    }
}

/// Values `config show` prints that no settings file sets: they are computed (the workspace's
/// trust status, from the trust store), so they are labelled so rather than `[default]`.
const COMPUTED: &[(&str, &str)] = &[("trust", "computed from the trust store")];

/// The most specific recorded source for `path` or one of its prefixes.
fn source_of(sources: &BTreeMap<String, Source>, path: &str) -> &'static str {
    if let Some((_, label)) = COMPUTED.iter().find(|(k, _)| *k == path) {
        return label;
    }
    let mut p = path;
    loop {
        if let Some(s) = sources.get(p) {
            return s.as_str();
        }
        match p.rfind(['.', '[']) {
            Some(i) => p = &p[..i],
            None => return "default",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_lookup_walks_up_the_path() {
        let mut m = BTreeMap::new();
        m.insert("hooks[0]".to_string(), Source::Project);
        m.insert("mcp_servers.a.args".to_string(), Source::User);
        assert_eq!(source_of(&m, "hooks[0].command"), "project");
        assert_eq!(source_of(&m, "mcp_servers.a.args[1]"), "user");
        assert_eq!(source_of(&m, "model"), "default");
        assert_eq!(source_of(&m, "trust"), "computed from the trust store");
    }

    #[test]
    fn flatten_lists_leaves_and_empty_containers() {
        let mut out = Vec::new();
        flatten(
            &serde_json::json!({"a": {"b": 1, "c": []}, "d": ["x"]}),
            "",
            &mut out,
        );
        assert_eq!(
            out,
            vec![
                ("a.b".to_string(), "1".to_string()),
                ("a.c".to_string(), "[]".to_string()),
                ("d[0]".to_string(), "\"x\"".to_string())
            ]
        );
    }
}
