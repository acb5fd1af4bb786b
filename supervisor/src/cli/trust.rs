//! `hanzo-dev trust [--revoke] [--list]`: show what this workspace's `.hanzo/` files would be
//! trusted to do and record its SHA-256 in the user's data directory; revoke it; list records.

use super::exit;
use hanzo_policy::settings::{load, CliOverrides, SettingsSources};
use hanzo_policy::{TrustCheck, TrustStore};

/// What `hanzo-dev trust` takes.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Forget this workspace's trust record.
    #[arg(long, conflicts_with = "list")]
    pub revoke: bool,
    /// List every trusted workspace.
    #[arg(long)]
    pub list: bool,
}

/// Runs `hanzo-dev trust`; returns the exit code.
pub fn run(args: &Args) -> anyhow::Result<i32> {
    let sources = SettingsSources::from_process(CliOverrides::default())?;
    Ok(run_with_sources(args, &sources, &mut std::io::stdout()))
}

/// The command against explicit sources (tests use temporary directories). Errors go to stderr.
pub fn run_with_sources(
    args: &Args,
    sources: &SettingsSources,
    out: &mut dyn std::io::Write,
) -> i32 {
    match execute(args, sources, out) {
        Ok(code) => code,
        Err(msg) => {
            eprintln!("error: {msg}");
            exit::USAGE
        }
    }
}

fn execute(
    args: &Args,
    sources: &SettingsSources,
    out: &mut dyn std::io::Write,
) -> Result<i32, String> {
    let store_path = sources
        .trust_store
        .clone()
        .ok_or("no data directory to keep trust records in: set XDG_DATA_HOME or HOME")?;
    let store = TrustStore::new(store_path);
    let w =
        |out: &mut dyn std::io::Write, s: String| writeln!(out, "{s}").map_err(|e| e.to_string());
    if args.list {
        let entries = store.list().map_err(|e| e.to_string())?;
        if entries.is_empty() {
            w(out, "no trusted workspaces".into())?;
        }
        for (path, e) in entries {
            w(
                out,
                format!(
                    "{path}  sha256:{}  trusted {}",
                    &e.sha256[..16.min(e.sha256.len())],
                    format_utc(e.trusted_at)
                ),
            )?;
        }
        return Ok(exit::OK);
    }
    let root = sources.project_root.clone().ok_or(
        "no workspace here: no directory with .hanzo/ or .git above the current directory",
    )?;
    let root = std::fs::canonicalize(&root).unwrap_or(root);
    if args.revoke {
        let had = store.revoke(&root).map_err(|e| e.to_string())?;
        w(
            out,
            if had {
                format!("revoked trust for {}", root.display())
            } else {
                format!("{} was not trusted", root.display())
            },
        )?;
        return Ok(exit::OK);
    }
    let loaded = load(sources).map_err(|e| e.to_string())?;
    let content = &loaded.trust_content;
    if content.is_empty() {
        w(out, format!("nothing in {}/.hanzo needs trust (no hooks, MCP server commands, allow rules or sandbox widenings)", root.display()))?;
        return Ok(exit::OK);
    }
    if let TrustCheck::Changed { changes } = &loaded.trust_check {
        w(out, "changed since last trusted:".into())?;
        for c in changes {
            w(out, format!("  {c}"))?;
        }
    }
    if loaded.trust_check == TrustCheck::Trusted {
        w(
            out,
            format!(
                "{} is already trusted with this exact content",
                root.display()
            ),
        )?;
        return Ok(exit::OK);
    }
    w(out, format!("trusting {} to:", root.display()))?;
    for line in content.describe() {
        w(out, format!("  {line}"))?;
    }
    let entry = store.trust(&root, content).map_err(|e| e.to_string())?;
    w(
        out,
        format!(
        "recorded sha256:{} in {}; any change to these entries makes the workspace untrusted again",
        entry.sha256,
        store.path().display()
    ),
    )?;
    Ok(exit::OK)
}

/// `YYYY-MM-DD HH:MM UTC` from milliseconds since the epoch (proleptic Gregorian calendar).
fn format_utc(ms: u64) -> String {
    let secs = ms / 1000;
    // u64::MAX ms is under 2^38 days: `days` always fits.
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX);
    let rem = secs % 86_400;
    // Civil-from-days (H. Hinnant's algorithm), days counted from 1970-01-01.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn utc_formatting() {
        assert_eq!(format_utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(format_utc(951_782_400_000), "2000-02-29 00:00 UTC");
        assert_eq!(format_utc(1_700_000_000_000), "2023-11-14 22:13 UTC");
    }

    #[test]
    fn trust_list_revoke_cycle_in_temp_dirs() {
        let dir = tempfile::tempdir().expect("tempdir");
        let home = dir.path().join("home");
        let ws = dir.path().join("ws");
        std::fs::create_dir_all(ws.join(".hanzo")).expect("mkdir");
        std::fs::create_dir_all(&home).expect("mkdir");
        std::fs::write(
            ws.join(".hanzo/settings.json"),
            r#"{"permissions": {"bash(cargo *)": "allow"}}"#,
        )
        .expect("write");
        let mut env = BTreeMap::new();
        env.insert("HOME".to_string(), home.display().to_string());
        let sources = SettingsSources::resolve(&ws, env, CliOverrides::default());
        let args = |revoke, list| Args { revoke, list };
        let mut out = Vec::new();
        assert_eq!(run_with_sources(&args(false, false), &sources, &mut out), 0);
        let text = String::from_utf8(out).expect("utf-8");
        assert!(text.contains("allow rule `bash(cargo *)`"), "{text}");
        assert!(text.contains("recorded sha256:"), "{text}");
        let loaded = load(&sources).expect("loads");
        assert_eq!(loaded.trust_check, TrustCheck::Trusted);
        let mut out = Vec::new();
        assert_eq!(run_with_sources(&args(false, true), &sources, &mut out), 0);
        let text = String::from_utf8(out).expect("utf-8");
        assert!(
            text.contains(ws.canonicalize().expect("canon").to_str().expect("utf-8")),
            "{text}"
        );
        let mut out = Vec::new();
        assert_eq!(run_with_sources(&args(true, false), &sources, &mut out), 0);
        assert_eq!(
            load(&sources).expect("loads").trust_check,
            TrustCheck::NeverTrusted
        );
        // A broken settings file: exit 2, no panic.
        std::fs::write(ws.join(".hanzo/settings.json"), "{").expect("write");
        assert_eq!(
            run_with_sources(&args(false, false), &sources, &mut Vec::new()),
            2
        );
    }
}
