//! `hanzo-dev login`, `logout` and `auth status` through the real binary and its real broker,
//! against a real OpenID provider (`oidc-provider`), with a test browser agent reading the URL
//! the CLI prints. The canary: the access and refresh tokens the provider issued appear in
//! `credentials.json` (and the broker's memory) only — in no process's environment or command
//! line, no other file under the config, data and run directories, no output at `-vv`, no
//! `auth status`, no error message (including a provider error that echoes the token).

mod common;
#[path = "../../workers/model/tests/fixtures/mod.rs"]
mod fixtures;
#[path = "../../workers/broker/tests/support/oidc.rs"]
mod oidc;

use common::browser::{credentials, file_texts, tree_texts, LoginRun};
use common::env::TestHome;
use fixtures::server::{Reply, Server};
use oidc::{Browser, OidcProvider, CODE_CLIENT, DEVICE_CLIENT};

/// A private user with these user settings.
fn new_home(settings: serde_json::Value) -> TestHome {
    let home = TestHome::new();
    home.settings(settings);
    home
}

fn settings(op: &OidcProvider, client: &str) -> serde_json::Value {
    serde_json::json!({
        "oauth_providers": {
            "hanzo": {
                "issuer": op.issuer,
                "client_id": client,
                "scopes": ["openid", "offline_access"],
                "device_poll_interval_secs": 1
            }
        }
    })
}

/// Run `hanzo-dev login ARGS` and act as the user on what it prints: `url_marker` is the line
/// before the URL to open. Returns (exit code, stdout, stderr).
async fn login(home: &TestHome, args: &[&str], url_marker: &str) -> (i32, String, String) {
    let run = LoginRun::start(home.command(args));
    let marker = url_marker.to_string();
    let (run, url) = tokio::task::spawn_blocking(move || {
        let url = run.url_after(&marker);
        (run, url)
    })
    .await
    .expect("join");
    let page = Browser::new().open(&url).await;
    assert_eq!(page.status, 200, "{}", page.body);
    tokio::task::spawn_blocking(move || run.finish())
        .await
        .expect("join")
}

fn assert_absent(tokens: &[&str], haystack: &str, what: &str) {
    for t in tokens {
        assert!(!haystack.contains(t), "a token appears in {what}");
        // Not even a prefix.
        assert!(
            !haystack.contains(&t[..12.min(t.len())]),
            "a token prefix appears in {what}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn code_login_status_refresh_and_logout_keep_the_tokens_in_the_broker() {
    let op = OidcProvider::start(oidc::default_config());
    let home = new_home(settings(&op, CODE_CLIENT));
    let (code, out, err) = login(
        &home,
        &["-vv", "login", "--provider", "hanzo"],
        "this URL in a browser",
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Logged in to hanzo (OAuth"), "{out}");
    let creds = credentials(&home);
    let at = creds["hanzo"]["access_token"]
        .as_str()
        .expect("access")
        .to_string();
    let rt = creds["hanzo"]["refresh_token"]
        .as_str()
        .expect("refresh")
        .to_string();
    let mode = std::fs::metadata(home.path("config").join("hanzo/credentials.json"))
        .expect("meta")
        .permissions();
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(mode.mode() & 0o777, 0o600);
    // The provider got S256 and never `plain`.
    let urls = op.request_urls();
    assert!(urls
        .iter()
        .any(|u| u.starts_with("/auth?") && u.contains("code_challenge_method=S256")));
    assert!(!urls
        .iter()
        .any(|u| u.contains("code_challenge_method=plain")));
    let mut seen = vec![(String::from("login output at -vv"), format!("{out}{err}"))];

    // auth status, both forms: kind, source, expiry, scopes; no token.
    let (code, text, e) = home.run(&["-vv", "auth", "status"]);
    assert_eq!(code, 0, "{e}");
    assert!(
        text.contains("hanzo") && text.contains("oauth") && text.contains("credentials.json"),
        "{text}"
    );
    assert!(
        text.contains("expires in") && text.contains("renews itself"),
        "{text}"
    );
    seen.push(("auth status".into(), format!("{text}{e}")));
    let (code, json, e) = home.run(&["auth", "status", "--json"]);
    assert_eq!(code, 0, "{e}");
    let v: serde_json::Value = serde_json::from_str(&json).expect("JSON");
    assert_eq!(v["detected"], "hanzo");
    let c = &v["credentials"][0];
    assert_eq!(c["provider"], "hanzo");
    assert_eq!(c["kind"], "oauth");
    assert_eq!(c["source"], "credential_file");
    assert_eq!(c["refreshable"], true);
    assert!(c["expires_at"].as_i64().is_some());
    assert!(c["scopes"]
        .as_array()
        .is_some_and(|s| s.iter().any(|x| x == "openid")));
    seen.push(("auth status --json".into(), json.clone()));

    // A model request with the OAuth token: the API says 401, the broker refreshes once and
    // retries; the retry fails (400) with a body echoing the (now replaced) token, so the user's
    // error message is built from a body that holds it. It must not show it.
    let echo = format!(
        r#"{{"error":{{"type":"invalid_request_error","message":"token {at} is not valid"}}}}"#
    );
    let api = Server::start(vec![Reply::json(401, &echo), Reply::json(400, &echo)]).await;
    let (code, aout, aerr) = home.run(&[
        "-vv",
        "ask",
        "--provider",
        "hanzo",
        "--base-url",
        &api.base,
        "--model",
        "m",
        "hi",
    ]);
    assert_ne!(code, 0);
    let got = api.received();
    assert_eq!(got.len(), 2, "one refresh, one retry");
    assert_eq!(
        got[0].header("authorization"),
        Some(&*format!("Bearer {at}"))
    );
    let creds = credentials(&home);
    let at2 = creds["hanzo"]["access_token"]
        .as_str()
        .expect("access")
        .to_string();
    let rt2 = creds["hanzo"]["refresh_token"]
        .as_str()
        .expect("refresh")
        .to_string();
    assert_ne!(at2, at);
    assert_ne!(rt2, rt, "the refresh rotated the refresh token");
    assert_eq!(
        got[1].header("authorization"),
        Some(&*format!("Bearer {at2}"))
    );
    assert!(
        aerr.contains("[redacted]"),
        "the echoed body reached the user, scrubbed: {aerr}"
    );
    seen.push(("ask output and errors".into(), format!("{aout}{aerr}")));

    // Every hanzo process while the whole tree runs: no token in its environ or command line.
    seen.extend(tree_texts(&home));

    // Every file under the config, data and run directories but credentials.json.
    seen.extend(file_texts(&[
        home.path("config"),
        home.path("data"),
        home.path("home"),
        home.path("tmp"),
    ]));
    for (what, text) in &seen {
        assert_absent(&[&at, &rt, &at2, &rt2], text, what);
    }

    // Logout removes it; status then shows nothing.
    let (code, out, _) = home.run(&["logout", "--provider", "hanzo"]);
    assert_eq!(code, 0);
    assert!(out.contains("Logged out of hanzo"), "{out}");
    let (_, text, _) = home.run(&["auth", "status"]);
    assert!(text.contains("No credentials"), "{text}");
    assert!(credentials(&home).get("hanzo").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn device_login_through_the_binary_prints_the_code_and_polls() {
    let op = OidcProvider::start(oidc::default_config());
    let home = new_home(settings(&op, DEVICE_CLIENT));
    let (code, out, err) = login(
        &home,
        &["login", "--provider", "hanzo", "--device"],
        "Or open this URL",
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("and enter the code"), "{err}");
    assert!(out.contains("Logged in to hanzo"), "{out}");
    let creds = credentials(&home);
    assert_eq!(creds["hanzo"]["client_id"], DEVICE_CLIENT);
    assert!(creds["hanzo"]["refresh_token"].is_string());
    assert!(!op.events("grant.success").is_empty());
}

#[test]
fn login_without_a_configured_provider_says_what_to_configure() {
    let home = new_home(serde_json::json!({}));
    let (code, out, err) = home.run(&["login", "--provider", "anthropic", "--timeout", "5"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("oauth_providers.anthropic"), "{err}");
    assert!(err.contains("ANTHROPIC_API_KEY"), "{err}");
    // A project's settings cannot supply one.
    let project = home.path("home").join(".hanzo");
    std::fs::create_dir_all(&project).expect("mkdir");
    std::fs::write(
        project.join("settings.json"),
        r#"{"oauth_providers": {"anthropic": {"issuer": "https://evil.example.com", "client_id": "x"}}}"#,
    )
    .expect("write");
    let (code, _, err) = home.run(&["login", "--provider", "anthropic", "--timeout", "5"]);
    assert_eq!(code, 1);
    assert!(!err.contains("evil.example.com"), "{err}");
}
