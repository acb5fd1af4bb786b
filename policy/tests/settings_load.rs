//! Loading settings from real files in temporary directories: scope discovery, precedence,
//! broken files, and trust recorded outside the workspace.

use hanzo_policy::settings::{load, CliOverrides, IsolationMode, SettingsError, SettingsSources};
use hanzo_policy::{PermissionMode, TrustCheck, TrustStore};
use serde_json::json;
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

struct Fixture {
    _dir: tempfile::TempDir,
    home: PathBuf,
    project: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let home = dir.path().join("home");
    let project = dir.path().join("src/repo");
    fs::create_dir_all(home.join(".config/hanzo")).expect("mkdir");
    fs::create_dir_all(project.join(".hanzo")).expect("mkdir");
    fs::create_dir_all(project.join("a/b")).expect("mkdir");
    Fixture {
        _dir: dir,
        home,
        project,
    }
}

fn env(f: &Fixture, extra: &[(&str, &str)]) -> BTreeMap<String, String> {
    let mut e: BTreeMap<String, String> = extra
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    e.insert("HOME".into(), f.home.display().to_string());
    e
}

fn write(p: &Path, text: &str) {
    fs::write(p, text).expect("write");
}

#[test]
fn scopes_env_and_cli_in_order_from_a_subdirectory() {
    let f = fixture();
    write(
        &f.home.join(".config/hanzo/settings.json"),
        r#"{"model": "user-model", "api_key": "sk-user", "input_mode": "vim"}"#,
    );
    write(
        &f.project.join(".hanzo/settings.json"),
        r#"{"model": "project-model", "custom_instructions": "be brief"}"#,
    );
    write(
        &f.project.join(".hanzo/settings.local.json"),
        r#"{"model": "local-model"}"#,
    );
    let sources = SettingsSources::resolve(
        &f.project.join("a/b"),
        env(&f, &[]),
        CliOverrides::default(),
    );
    assert_eq!(sources.project_root.as_deref(), Some(f.project.as_path()));
    let loaded = load(&sources).expect("loads");
    let c = &loaded.merged.config;
    assert_eq!(c.model, "local-model");
    assert_eq!(c.custom_instructions, "be brief");
    assert_eq!(c.api_key.as_ref().map(|(k, _)| k.expose()), Some("sk-user"));
    let canon = c.canonical_json();
    assert_eq!(canon["api_key"], json!("<redacted:user>"));
    assert!(!canon.to_string().contains("sk-user"));

    let sources = SettingsSources::resolve(
        &f.project,
        env(
            &f,
            &[("HANZO_MODEL", "env-model"), ("HANZO_API_KEY", "sk-env")],
        ),
        CliOverrides::default(),
    );
    let c = load(&sources).expect("loads").merged.config;
    assert_eq!(c.model, "env-model");
    assert_eq!(c.api_key.as_ref().map(|(k, _)| k.expose()), Some("sk-env"));

    let sources = SettingsSources::resolve(
        &f.project,
        env(&f, &[("HANZO_MODEL", "env-model")]),
        CliOverrides {
            model: Some("cli-model".into()),
            isolation: Some(IsolationMode::Strict),
            ..Default::default()
        },
    );
    let loaded = load(&sources).expect("loads");
    assert_eq!(loaded.merged.config.model, "cli-model");
    assert_eq!(loaded.merged.sources["model"].as_str(), "cli");
    assert_eq!(loaded.merged.sources["sandbox.isolation"].as_str(), "cli");
}

#[test]
fn xdg_config_home_wins_over_home() {
    let f = fixture();
    let xdg = f.home.join("xdg");
    fs::create_dir_all(xdg.join("hanzo")).expect("mkdir");
    write(&xdg.join("hanzo/settings.json"), r#"{"model": "xdg"}"#);
    write(
        &f.home.join(".config/hanzo/settings.json"),
        r#"{"model": "home"}"#,
    );
    let e = env(&f, &[("XDG_CONFIG_HOME", xdg.to_str().expect("utf-8"))]);
    let sources = SettingsSources::resolve(&f.project, e, CliOverrides::default());
    assert_eq!(load(&sources).expect("loads").merged.config.model, "xdg");
}

#[test]
fn a_broken_file_is_an_error_never_defaults() {
    let f = fixture();
    let p = f.project.join(".hanzo/settings.local.json");
    write(&p, "{\n  \"model\": \"x\"\n  \"hooks\": []\n}\n");
    let sources = SettingsSources::resolve(&f.project, env(&f, &[]), CliOverrides::default());
    let err = load(&sources).expect_err("broken");
    assert!(
        matches!(err, SettingsError::Syntax { line: 3, .. }),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with(&format!("{}:3:", p.display())),
        "{err}"
    );

    write(&p, "{\"hooks\": {\"event\": \"pre_tool_use\"}}");
    let err = load(&sources).expect_err("wrong type");
    assert!(
        matches!(&err, SettingsError::Type { key_path, .. } if key_path == "hooks"),
        "{err:?}"
    );

    write(&p, "{}");
    fs::write(f.project.join(".hanzo/settings.json"), [0xff, 0xfe]).expect("write");
    assert!(load(&sources).is_err(), "non-UTF-8 file must not load");
}

#[test]
fn workspace_privileges_need_trust_recorded_outside_the_workspace() {
    let f = fixture();
    let data = f.home.join(".local/share");
    write(
        &f.project.join(".hanzo/settings.json"),
        r#"{"permissions": {"bash(git *)": "allow", "bash(rm *)": "deny"},
            "hooks": [{"event": "pre_tool_use", "command": "./check.sh", "tool_pattern": "bash"}],
            "mcp_servers": {"local": {"command": "./server"}}}"#,
    );
    let sources = SettingsSources::resolve(&f.project, env(&f, &[]), CliOverrides::default());
    assert_eq!(
        sources.trust_store.as_deref(),
        Some(data.join("hanzo/trust.json").as_path())
    );
    let loaded = load(&sources).expect("loads");
    assert_eq!(loaded.trust_check, TrustCheck::NeverTrusted);
    let c = &loaded.merged.config;
    assert!(c.hooks.is_empty());
    assert!(c.mcp_servers.is_empty());
    let policy = c.permission_policy().expect("valid");
    assert_eq!(
        policy
            .evaluate("bash", &json!({"command": "git status"}))
            .mode,
        PermissionMode::Prompt
    );
    assert_eq!(
        policy
            .evaluate("bash", &json!({"command": "rm -rf x"}))
            .mode,
        PermissionMode::Deny
    );
    assert!(loaded
        .warnings()
        .iter()
        .any(|w| w.to_string().contains("run `hanzo-dev trust`")));

    let store = TrustStore::new(sources.trust_store.clone().expect("store path"));
    let root = loaded.project_root.clone().expect("root");
    store.trust(&root, &loaded.trust_content).expect("trust");
    assert!(
        !store.path().starts_with(&f.project),
        "trust is recorded outside the workspace"
    );
    let loaded = load(&sources).expect("loads");
    assert_eq!(loaded.trust_check, TrustCheck::Trusted);
    let c = &loaded.merged.config;
    assert_eq!(c.hooks.len(), 1);
    assert!(c.mcp_servers.contains_key("local"));
    let policy = c.permission_policy().expect("valid");
    assert_eq!(
        policy
            .evaluate("bash", &json!({"command": "git status"}))
            .mode,
        PermissionMode::Allow
    );

    // Any change to the privileged content revokes the effect, with a message saying what changed.
    write(
        &f.project.join(".hanzo/settings.json"),
        r#"{"permissions": {"bash(git *)": "allow", "bash(rm *)": "deny", "bash(curl *)": "allow"},
            "hooks": [{"event": "pre_tool_use", "command": "./check.sh", "tool_pattern": "bash"}],
            "mcp_servers": {"local": {"command": "./server"}}}"#,
    );
    let loaded = load(&sources).expect("loads");
    assert!(matches!(loaded.trust_check, TrustCheck::Changed { .. }));
    let msg = loaded
        .warnings()
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        msg.contains("added: .hanzo/settings.json: allow rule `bash(curl *)`"),
        "{msg}"
    );
    assert!(msg.contains("hanzo-dev trust"), "{msg}");
    assert!(loaded.merged.config.hooks.is_empty());
}

#[test]
fn project_root_walk_stops_at_repository_root_and_home() {
    let f = fixture();
    let nested = f.project.join("sub");
    fs::create_dir_all(nested.join(".git")).expect("mkdir");
    assert_eq!(
        hanzo_policy::settings::find_project_root(&nested, Some(&f.home)),
        Some(nested.clone())
    );
    fs::create_dir_all(f.home.join(".hanzo")).expect("mkdir");
    fs::create_dir_all(f.home.join("work/x")).expect("mkdir");
    assert_eq!(
        hanzo_policy::settings::find_project_root(&f.home.join("work/x"), Some(&f.home)),
        None
    );
}

#[test]
fn bad_environment_values_are_errors() {
    let f = fixture();
    let sources = SettingsSources::resolve(
        &f.project,
        env(&f, &[("HANZO_INPUT_MODE", "vi")]),
        CliOverrides::default(),
    );
    let err = load(&sources).expect_err("bad env");
    assert!(
        err.to_string()
            .starts_with("environment variable HANZO_INPUT_MODE"),
        "{err}"
    );
}
