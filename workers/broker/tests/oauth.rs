//! OAuth in the broker against a real, strict OpenID provider (`oidc-provider`, PKCE S256
//! required, rotating refresh tokens, the device grant, dynamic registration): logins driven by
//! a test browser agent, refresh with rotation, reuse refused, the loopback listener under
//! attack, two processes refreshing at once, kill -9 while writing the store, and MCP
//! authorization with discovery, registration, `resource` and step-up.

#[path = "support/oidc.rs"]
mod oidc;
#[path = "../../model/tests/fixtures/server.rs"]
mod server;

use hanzo_broker::credentials::{read_credential_file, CredentialFile, StoredCredential};
use hanzo_broker::oauth::device::Pacer;
use hanzo_broker::oauth::mcp::McpServerAuth;
use hanzo_broker::oauth::OAuthError;
use hanzo_broker::store::{write_credential_file, StoreLock};
use hanzo_broker::{Broker, CredentialStore, Secret};
use hanzo_ipc::roles::broker::{AuthKind, LoginProgress, LoginRequest, OAuthProviderConfig};
use oidc::{Browser, OidcProvider, CODE_CLIENT, DEVICE_CLIENT};
use server::{Reply, Server};
use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// One provider for the whole binary would be cheaper, but each test's grants must be its own;
/// starting one takes about half a second.
fn provider() -> OidcProvider {
    OidcProvider::start(oidc::default_config())
}

fn broker(dir: &Path) -> Broker {
    Broker::new(CredentialStore::load(|_| None, Some(dir)))
        .expect("client")
        .with_config_dir(Some(dir.to_path_buf()))
}

fn code_config(op: &OidcProvider) -> OAuthProviderConfig {
    OAuthProviderConfig {
        issuer: Some(op.issuer.clone()),
        client_id: Some(CODE_CLIENT.into()),
        scopes: vec!["openid".into(), "offline_access".into()],
        ..Default::default()
    }
}

fn login_request(config: OAuthProviderConfig, device: bool) -> LoginRequest {
    LoginRequest {
        provider: "hanzo".into(),
        device,
        config: Some(config),
        timeout_secs: 60,
    }
}

/// Records the waits instead of sleeping (a few milliseconds each, so polls stay ordered).
#[derive(Default)]
struct RecordingPacer(Mutex<Vec<Duration>>);

impl Pacer for RecordingPacer {
    fn sleep(&self, d: Duration) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        self.0.lock().expect("pacer").push(d);
        Box::pin(tokio::time::sleep(Duration::from_millis(20)))
    }
}

/// Run a login while the browser agent answers its progress.
async fn login_with(
    broker: &Broker,
    req: &LoginRequest,
    mut browser: Browser,
) -> (
    Result<hanzo_ipc::roles::broker::LoginOutcome, OAuthError>,
    Browser,
    Option<oidc::Page>,
) {
    let (tx, mut rx) = mpsc::channel(8);
    let drive = async {
        let mut page = None;
        while let Some(p) = rx.recv().await {
            match p {
                LoginProgress::OpenBrowser { url } => {
                    page = Some(browser.open(&url).await);
                    break;
                }
                LoginProgress::DeviceCode {
                    verification_uri_complete,
                    ..
                } => {
                    let url =
                        verification_uri_complete.expect("oidc-provider sends the complete URI");
                    page = Some(browser.open(&url).await);
                    break;
                }
                LoginProgress::Waiting { .. } => {}
            }
        }
        page
    };
    let run = async {
        let r = broker.login(req, &tx).await;
        drop(tx);
        r
    };
    let (outcome, page) = tokio::join!(run, drive);
    (outcome, browser, page)
}

fn stored(dir: &Path, name: &str) -> StoredCredential {
    read_credential_file(&dir.join("credentials.json"))
        .expect("readable")
        .expect("exists")
        .get(name)
        .cloned()
        .expect("entry stored")
}

#[tokio::test]
async fn code_login_with_pkce_stores_rotating_tokens_0600() {
    let op = provider();
    let dir = tempfile::tempdir().expect("dir");
    let b = broker(dir.path());
    let (outcome, _browser, page) =
        login_with(&b, &login_request(code_config(&op), false), Browser::new()).await;
    let outcome = outcome.expect("logged in");
    assert_eq!(outcome.provider, "hanzo");
    assert_eq!(outcome.kind, AuthKind::OAuth);
    assert!(outcome.expires_at.is_some());
    assert!(
        outcome.scopes.contains(&"openid".to_string()),
        "{:?}",
        outcome.scopes
    );
    let page = page.expect("the browser came back");
    assert_eq!(page.status, 200);
    assert!(page.body.contains("You are logged in"), "{}", page.body);

    let path = dir.path().join("credentials.json");
    let mode = std::fs::metadata(&path).expect("file").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let e = stored(dir.path(), "hanzo");
    assert!(e.access_token.as_deref().is_some_and(|t| !t.is_empty()));
    assert!(e.refresh_token.as_deref().is_some_and(|t| !t.is_empty()));
    assert_eq!(e.client_id.as_deref(), Some(CODE_CLIENT));
    assert_eq!(
        e.token_endpoint.as_deref(),
        Some(&*format!("{}/token", op.issuer))
    );

    // What the provider received: an S256 challenge, never `plain`, never the verifier.
    let auth: Vec<String> = op
        .request_urls()
        .into_iter()
        .filter(|u| u.starts_with("/auth?"))
        .collect();
    assert_eq!(auth.len(), 1, "{auth:?}");
    let q: std::collections::HashMap<String, String> =
        reqwest::Url::parse(&format!("http://x{}", auth[0]))
            .expect("url")
            .query_pairs()
            .into_owned()
            .collect();
    assert_eq!(q["code_challenge_method"], "S256");
    assert_eq!(q["code_challenge"].len(), 43);
    assert!(!op.request_urls().iter().any(|u| u.contains("plain")));
    assert_eq!(op.events("grant.success").len(), 1);
    // The broker now uses it: status shows it, never its value.
    let status = b.status();
    let entry = status
        .entries
        .iter()
        .find(|e| e.name == "hanzo")
        .expect("entry");
    assert_eq!(entry.kind, AuthKind::OAuth);
    assert!(entry.refreshable);
    let shown = format!("{status:?}");
    assert!(!shown.contains(e.access_token.as_deref().expect("token")));
}

#[tokio::test]
async fn a_wrong_state_is_refused_and_the_listener_keeps_waiting() {
    let op = provider();
    let dir = tempfile::tempdir().expect("dir");
    let b = broker(dir.path());
    let (tx, mut rx) = mpsc::channel(8);
    let req = login_request(code_config(&op), false);
    let drive = async {
        let Some(LoginProgress::OpenBrowser { url }) = rx.recv().await else {
            panic!("first progress is the URL");
        };
        let redirect = reqwest::Url::parse(&url)
            .expect("url")
            .query_pairs()
            .find(|(k, _)| k == "redirect_uri")
            .map(|(_, v)| v.into_owned())
            .expect("redirect_uri");
        let http = reqwest::Client::new();
        // A forged redirect: wrong state, a code, and markup that must not be reflected.
        let forged = http
            .get(format!(
                "{redirect}?code=forged-code&state=%3Cscript%3Ealert(1)%3C%2Fscript%3E"
            ))
            .send()
            .await
            .expect("the listener answers");
        assert_eq!(forged.status().as_u16(), 400);
        let body = forged.text().await.expect("body");
        assert!(body.contains("not for this login"), "{body}");
        assert!(!body.contains("<script>") && !body.contains("forged-code"));
        // No state at all, and another path: refused too.
        let none = http
            .get(format!("{redirect}?code=forged-code"))
            .send()
            .await
            .expect("answers");
        assert_eq!(none.status().as_u16(), 400);
        let other = http
            .get(redirect.replace("/callback", "/favicon.ico"))
            .send()
            .await
            .expect("answers");
        assert_eq!(other.status().as_u16(), 404);
        // The real browser still completes the login on the same listener.
        Browser::new().open(&url).await
    };
    let (outcome, page) = tokio::join!(b.login(&req, &tx), drive);
    outcome.expect("the real redirect still logs in");
    assert!(page.body.contains("You are logged in"));
    // The forged code never reached the token endpoint.
    assert_eq!(op.events("grant.success").len(), 1);
    assert!(op.events("grant.error").is_empty());
}

#[tokio::test]
async fn the_login_times_out_when_nobody_comes_back() {
    let op = provider();
    let dir = tempfile::tempdir().expect("dir");
    let b = broker(dir.path());
    let mut req = login_request(code_config(&op), false);
    req.timeout_secs = 1;
    let (tx, _rx) = mpsc::channel(8);
    let err = b.login(&req, &tx).await.expect_err("times out");
    assert!(matches!(err, OAuthError::Timeout { secs: 1 }), "{err}");
    assert!(!dir.path().join("credentials.json").exists());
}

#[tokio::test]
async fn refresh_rotates_and_a_reused_refresh_token_is_refused() {
    let op = provider();
    let dir = tempfile::tempdir().expect("dir");
    let b = broker(dir.path());
    let (outcome, ..) =
        login_with(&b, &login_request(code_config(&op), false), Browser::new()).await;
    outcome.expect("logged in");
    let first = stored(dir.path(), "hanzo");
    let cred = b
        .current_credential("hanzo")
        .await
        .expect("ok")
        .expect("held");
    let fresh = b.refresh("hanzo", &cred).await.expect("refreshed");
    let second = stored(dir.path(), "hanzo");
    assert_ne!(first.access_token, second.access_token);
    assert_ne!(first.refresh_token, second.refresh_token, "rotated");
    assert_eq!(
        fresh.secret.expose(),
        second.access_token.as_deref().expect("token")
    );

    // The old refresh token, used again, is refused by the provider…
    let old = Secret::new(first.refresh_token.clone().expect("old"));
    let reuse = hanzo_broker::oauth::token::refresh(
        b.http(),
        &format!("{}/token", op.issuer),
        Some(hanzo_broker::oauth::token::ClientAuth::public(CODE_CLIENT)),
        &old,
        None,
        &[],
    )
    .await
    .expect("the provider answers")
    .expect_err("a reused refresh token is refused");
    assert_eq!(reuse.error, "invalid_grant");
    // …and the reuse revoked the grant, so the broker's own refresh now says to log in again,
    // and the dead tokens are gone from the file.
    let cred = b
        .current_credential("hanzo")
        .await
        .expect("ok")
        .expect("held");
    let err = b.refresh("hanzo", &cred).await.expect_err("revoked");
    let msg = err.to_string();
    assert!(
        msg.contains("log in again") && msg.contains("hanzo-dev login --provider hanzo"),
        "{msg}"
    );
    for secret in [
        &first.refresh_token,
        &second.refresh_token,
        &second.access_token,
    ] {
        assert!(!msg.contains(secret.as_deref().expect("set")));
    }
    let file = read_credential_file(&dir.path().join("credentials.json"))
        .expect("ok")
        .expect("exists");
    assert!(!file.contains_key("hanzo"));
    assert!(b.status().entries.is_empty());
}

#[tokio::test]
async fn device_login_polls_until_the_user_approves() {
    let op = provider();
    let dir = tempfile::tempdir().expect("dir");
    let pacer = Arc::new(RecordingPacer::default());
    let b = broker(dir.path()).with_pacer(pacer.clone());
    let cfg = OAuthProviderConfig {
        client_id: Some(DEVICE_CLIENT.into()),
        ..code_config(&op)
    };
    let (outcome, _browser, page) = login_with(&b, &login_request(cfg, true), Browser::new()).await;
    let outcome = outcome.expect("logged in");
    assert_eq!(outcome.kind, AuthKind::OAuth);
    let page = page.expect("approved");
    assert!(
        page.body.contains("Sign-in Success") || page.status == 200,
        "{}",
        page.body
    );
    let e = stored(dir.path(), "hanzo");
    assert!(e.refresh_token.is_some());
    assert_eq!(e.client_id.as_deref(), Some(DEVICE_CLIENT));
    // oidc-provider names no interval: the RFC's 5 s default, every time.
    let waits = pacer.0.lock().expect("waits").clone();
    assert!(!waits.is_empty());
    assert!(
        waits.iter().all(|w| *w == Duration::from_secs(5)),
        "{waits:?}"
    );
    // The provider saw authorization_pending polls before the success (or none if the
    // approval beat the first poll); either way exactly one device grant succeeded.
    let successes = op.events("grant.success");
    assert_eq!(successes.len(), 1);
}

#[tokio::test]
async fn device_login_denied_by_the_user_ends_with_a_clear_message() {
    let op = provider();
    let dir = tempfile::tempdir().expect("dir");
    let b = broker(dir.path()).with_pacer(Arc::new(RecordingPacer::default()));
    let cfg = OAuthProviderConfig {
        client_id: Some(DEVICE_CLIENT.into()),
        ..code_config(&op)
    };
    let mut browser = Browser::new();
    browser.deny = true;
    let (outcome, ..) = login_with(&b, &login_request(cfg, true), browser).await;
    let err = outcome.expect_err("denied");
    assert!(matches!(err, OAuthError::Denied { .. }), "{err}");
    assert!(err.to_string().contains("denied"));
    assert!(!dir.path().join("credentials.json").exists());
}

/// RFC 8628 §3.5 against a scripted token endpoint: pending keeps polling, slow_down adds 5 s,
/// the default interval is 5 s, a server interval is honoured, and the terminal errors end it.
#[tokio::test]
async fn device_polling_follows_rfc_8628() {
    let device_auth = |interval: Option<u64>| {
        let mut v = serde_json::json!({
            "device_code": "dev-code-secret", "user_code": "ABCD-EFGH",
            "verification_uri": "http://127.0.0.1:1/device", "expires_in": 600
        });
        if let Some(i) = interval {
            v["interval"] = i.into();
        }
        Reply::json(200, &v.to_string())
    };
    let err = |e: &str| Reply::json(400, &format!(r#"{{"error":"{e}"}}"#));
    let token = Reply::json(
        200,
        r#"{"access_token":"at-1","token_type":"Bearer","expires_in":3600,"refresh_token":"rt-1"}"#,
    );
    // (token endpoint's answers, the outcome, the waits in seconds)
    type Case = (Vec<Reply>, Result<(), &'static str>, Vec<u64>);
    let cases: Vec<Case> = vec![
        (
            vec![
                device_auth(None),
                err("authorization_pending"),
                err("slow_down"),
                err("authorization_pending"),
                token.clone(),
            ],
            Ok(()),
            vec![5, 5, 10, 10],
        ),
        (
            vec![device_auth(Some(2)), err("slow_down"), token.clone()],
            Ok(()),
            vec![2, 7],
        ),
        (
            vec![device_auth(None), err("access_denied")],
            Err("denied"),
            vec![5],
        ),
        (
            vec![device_auth(None), err("expired_token")],
            Err("expired"),
            vec![5],
        ),
        (
            vec![device_auth(None), err("invalid_client")],
            Err("invalid_client"),
            vec![5],
        ),
    ];
    for (replies, want, waits) in cases {
        let s = Server::start(replies).await;
        let dir = tempfile::tempdir().expect("dir");
        let pacer = Arc::new(RecordingPacer::default());
        let b = broker(dir.path()).with_pacer(pacer.clone());
        let cfg = OAuthProviderConfig {
            device_authorization_endpoint: Some(format!("{}/device/auth", s.base)),
            token_endpoint: Some(format!("{}/token", s.base)),
            authorization_endpoint: Some(format!("{}/auth", s.base)),
            client_id: Some("c".into()),
            ..Default::default()
        };
        let (tx, mut rx) = mpsc::channel(8);
        let drain = async { while rx.recv().await.is_some() {} };
        let run = async {
            let r = b.login(&login_request(cfg, true), &tx).await;
            drop(tx);
            r
        };
        let (result, ()) = tokio::join!(run, drain);
        match (want, result) {
            (Ok(()), Ok(_)) => {}
            (Err(w), Err(e)) => assert!(e.to_string().contains(w), "{e} lacks {w}"),
            (w, r) => panic!("expected {w:?}, got {:?}", r.map(|o| o.provider)),
        }
        let got: Vec<u64> = pacer
            .0
            .lock()
            .expect("w")
            .iter()
            .map(|d| d.as_secs())
            .collect();
        assert_eq!(got, waits);
        // Each poll carried the device grant and the device code.
        for r in s.received().iter().skip(1) {
            let body = String::from_utf8_lossy(&r.body);
            assert!(
                body.contains("grant_type=urn%3Aietf%3Aparams%3Aoauth%3Agrant-type%3Adevice_code"),
                "{body}"
            );
        }
    }
}

#[tokio::test]
async fn a_provider_error_that_echoes_the_token_is_scrubbed() {
    let s = Server::start(vec![Reply::json(
        400,
        r#"{"error":"invalid_grant","error_description":"refresh token rt-CANARY-4242 is not valid for access token at-CANARY-4242"}"#,
    )])
    .await;
    let dir = tempfile::tempdir().expect("dir");
    let mut file = CredentialFile::new();
    let mut e = StoredCredential::from_access_token("at-CANARY-4242");
    e.refresh_token = Some("rt-CANARY-4242".into());
    e.expires_at = Some(0.0);
    e.token_endpoint = Some(format!("{}/token", s.base));
    e.client_id = Some("c".into());
    file.insert("hanzo".into(), e);
    write_credential_file(&dir.path().join("credentials.json"), &file).expect("write");
    let b = broker(dir.path());
    let err = b
        .current_credential("hanzo")
        .await
        .expect_err("the refresh fails");
    let msg = err.to_string();
    assert!(msg.contains("log in again"), "{msg}");
    assert!(!msg.contains("CANARY"), "{msg}");
    // A non-invalid_grant error keeps the server's description, scrubbed.
    let s = Server::start(vec![Reply::json(
        400,
        r#"{"error":"invalid_request","error_description":"bad rt-CANARY-4242\u001b[2J"}"#,
    )])
    .await;
    let mut file = CredentialFile::new();
    let mut e = StoredCredential::from_access_token("at-CANARY-4242");
    e.refresh_token = Some("rt-CANARY-4242".into());
    e.expires_at = Some(0.0);
    e.token_endpoint = Some(format!("{}/token", s.base));
    file.insert("hanzo".into(), e);
    write_credential_file(&dir.path().join("credentials.json"), &file).expect("write");
    let b = broker(dir.path());
    let msg = b
        .current_credential("hanzo")
        .await
        .expect_err("fails")
        .to_string();
    assert!(
        msg.contains("invalid_request") && msg.contains("bad [redacted]"),
        "{msg}"
    );
    assert!(!msg.contains("CANARY") && !msg.contains('\u{1b}'), "{msg}");
}

#[tokio::test]
async fn model_requests_refresh_before_expiry_and_once_after_a_401() {
    use hanzo_ipc::roles::http::{HttpRequest, Item, Response};
    use hanzo_ipc::roles::model::ProviderId;
    let op = provider();
    let dir = tempfile::tempdir().expect("dir");
    let b = broker(dir.path());
    let (outcome, ..) =
        login_with(&b, &login_request(code_config(&op), false), Browser::new()).await;
    outcome.expect("logged in");
    let api = Server::start(vec![
        Reply::json(401, r#"{"error":"token expired"}"#),
        Reply::json(200, r#"{"ok":true}"#),
        Reply::json(200, r#"{"ok":true}"#),
    ])
    .await;
    b.allow(ProviderId::Hanzo, &api.base).expect("allow");
    let send = || async {
        let (tx, mut rx) = mpsc::channel(16);
        let req = HttpRequest {
            credential: ProviderId::Hanzo,
            method: "POST".into(),
            url: format!("{}/v1/chat/completions", api.base),
            headers: vec![("authorization".into(), "Bearer smuggled".into())],
            body: b"{}".to_vec(),
        };
        let resp = b.fetch(req, &tx).await;
        drop(tx);
        let mut status = 0;
        while let Some(i) = rx.recv().await {
            if let Item::Head(h) = i {
                status = h.status;
            }
        }
        (resp, status)
    };
    let before = stored(dir.path(), "hanzo");
    let (resp, status) = send().await;
    assert!(matches!(resp, Response::Done { .. }), "{resp:?}");
    assert_eq!(status, 200, "the retry after the refresh succeeded");
    let after = stored(dir.path(), "hanzo");
    let got = api.received();
    assert_eq!(got.len(), 2);
    assert_eq!(
        got[0].header("authorization"),
        Some(&*format!(
            "Bearer {}",
            before.access_token.as_deref().expect("a")
        )),
    );
    assert_eq!(
        got[1].header("authorization"),
        Some(&*format!(
            "Bearer {}",
            after.access_token.as_deref().expect("a")
        )),
    );
    assert_ne!(before.refresh_token, after.refresh_token);

    // Expiring within the margin: refreshed before the request is sent.
    let mut file = read_credential_file(&dir.path().join("credentials.json"))
        .expect("ok")
        .expect("exists");
    file.get_mut("hanzo").expect("entry").expires_at = Some(hanzo_broker::oauth::now_secs() + 10.0);
    write_credential_file(&dir.path().join("credentials.json"), &file).expect("write");
    let b = broker(dir.path());
    b.allow(ProviderId::Hanzo, &api.base).expect("allow");
    let send = || async {
        let (tx, mut rx) = mpsc::channel(16);
        let req = HttpRequest {
            credential: ProviderId::Hanzo,
            method: "POST".into(),
            url: format!("{}/v1/chat/completions", api.base),
            headers: vec![],
            body: b"{}".to_vec(),
        };
        let resp = b.fetch(req, &tx).await;
        drop(tx);
        while rx.recv().await.is_some() {}
        resp
    };
    assert!(matches!(send().await, Response::Done { .. }));
    let third = stored(dir.path(), "hanzo");
    assert_ne!(third.access_token, after.access_token);
    assert_eq!(
        api.received()[2].header("authorization"),
        Some(&*format!(
            "Bearer {}",
            third.access_token.as_deref().expect("a")
        )),
    );
    assert_eq!(op.events("grant.success").len(), 3, "login + two refreshes");
}

// ---- two processes, and kill -9 ----

const CHILD_ENV: &str = "HANZO_TEST_OAUTH_CHILD";

/// Re-run this test binary as a child doing one job (see `child_job`).
fn child(job: &str, dir: &Path) -> std::process::Command {
    let mut c = std::process::Command::new(std::env::current_exe().expect("test binary"));
    c.args(["child_job", "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, job)
        .env("HANZO_TEST_DIR", dir)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    c
}

/// Not a test of its own: the body of the child processes.
#[test]
fn child_job() {
    let Ok(job) = std::env::var(CHILD_ENV) else {
        return;
    };
    let dir = std::path::PathBuf::from(std::env::var("HANZO_TEST_DIR").expect("dir"));
    match job.as_str() {
        "refresh" => {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("rt");
            rt.block_on(async {
                let b = broker(&dir);
                let cred = b
                    .current_credential("hanzo")
                    .await
                    .expect("readable")
                    .expect("the child sees the login");
                // Both children start from the same (old) tokens and refresh at once.
                let go = dir.join("go");
                while !go.exists() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                match b.refresh("hanzo", &cred).await {
                    Ok(c) => println!("REFRESHED {}", c.secret.expose().len()),
                    Err(e) => println!("FAILED {e}"),
                }
            });
        }
        "write-loop" => {
            let path = dir.join("credentials.json");
            for i in 0u64.. {
                let mut file = CredentialFile::new();
                let v = if i % 2 == 0 { "A" } else { "B" };
                for n in 0..200 {
                    file.insert(
                        format!("p{n}"),
                        StoredCredential::from_api_key(v.repeat(500)),
                    );
                }
                let lock = StoreLock::acquire(&path).expect("lock");
                lock.write(&file).expect("write");
                drop(lock);
                if i == 0 {
                    println!("WRITING");
                }
            }
        }
        other => panic!("unknown child job {other}"),
    }
}

#[tokio::test]
async fn two_processes_refreshing_at_once_lose_no_rotated_token() {
    let op = provider();
    let dir = tempfile::tempdir().expect("dir");
    let b = broker(dir.path());
    let (outcome, ..) =
        login_with(&b, &login_request(code_config(&op), false), Browser::new()).await;
    outcome.expect("logged in");
    let before = stored(dir.path(), "hanzo");
    let children: Vec<_> = (0..2)
        .map(|_| child("refresh", dir.path()).spawn().expect("child"))
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    std::fs::write(dir.path().join("go"), "").expect("go");
    let mut outputs = Vec::new();
    for c in children {
        let out = tokio::task::spawn_blocking(move || c.wait_with_output())
            .await
            .expect("join")
            .expect("child ran");
        outputs.push(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    for o in &outputs {
        assert!(o.contains("REFRESHED"), "a child failed: {o}");
    }
    // One refresh reached the provider; the other child adopted its result. No reuse, so the
    // grant is alive: the stored refresh token still works.
    assert_eq!(
        op.events("grant.success").len(),
        2,
        "login + exactly one refresh"
    );
    assert!(op.events("grant.error").is_empty());
    let after = stored(dir.path(), "hanzo");
    assert_ne!(before.refresh_token, after.refresh_token);
    let b = broker(dir.path());
    let cred = b
        .current_credential("hanzo")
        .await
        .expect("ok")
        .expect("held");
    b.refresh("hanzo", &cred)
        .await
        .expect("the rotated token is valid");
}

#[test]
fn kill_9_while_writing_leaves_the_old_or_the_new_file_0600() {
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("credentials.json");
    let valid = |f: &CredentialFile| {
        f.len() == 200
            && ["A", "B"].iter().any(|v| {
                f.values()
                    .all(|e| e.api_key.as_deref() == Some(&*v.repeat(500)))
            })
    };
    for round in 0..40u64 {
        let mut c = child("write-loop", dir.path()).spawn().expect("child");
        let out = c.stdout.take().expect("stdout");
        use std::io::BufRead;
        let started = std::io::BufReader::new(out)
            .lines()
            .map_while(Result::ok)
            .any(|l| l.contains("WRITING"));
        assert!(started, "the child starts writing");
        // Somewhere inside a write: vary the moment from round to round.
        std::thread::sleep(Duration::from_micros(200 + (round * 397) % 3000));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(c.id()).expect("pid")),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("kill");
        let _ = c.wait();
        let file = read_credential_file(&path)
            .unwrap_or_else(|e| panic!("round {round}: {e}"))
            .expect("exists");
        assert!(
            valid(&file),
            "round {round}: neither the old nor the new file"
        );
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        for e in std::fs::read_dir(dir.path()).expect("dir").flatten() {
            let m = e.metadata().expect("meta").permissions().mode() & 0o777;
            assert_eq!(m & 0o077, 0, "{:?} is {m:o}", e.file_name());
        }
    }
    // The next write under the lock removes what killed writers left behind.
    StoreLock::acquire(&path)
        .expect("lock")
        .write(&CredentialFile::new())
        .expect("write");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn the_store_never_follows_a_planted_link() {
    let dir = tempfile::tempdir().expect("dir");
    let target = dir.path().join("elsewhere");
    std::fs::write(&target, "keep").expect("write");
    // A link where the lock file goes: opening it is refused rather than followed.
    std::os::unix::fs::symlink(&target, dir.path().join("credentials.json.lock")).expect("link");
    assert!(StoreLock::acquire(&dir.path().join("credentials.json")).is_err());
    assert_eq!(std::fs::read_to_string(&target).expect("read"), "keep");
    // A link at the file itself is replaced by the rename, not written through.
    std::fs::remove_file(dir.path().join("credentials.json.lock")).expect("rm");
    std::os::unix::fs::symlink(&target, dir.path().join("credentials.json")).expect("link");
    write_credential_file(&dir.path().join("credentials.json"), &CredentialFile::new())
        .expect("write");
    assert_eq!(std::fs::read_to_string(&target).expect("read"), "keep");
    assert!(
        !std::fs::symlink_metadata(dir.path().join("credentials.json"))
            .expect("meta")
            .file_type()
            .is_symlink()
    );
}

// ---- MCP ----

fn bearer(r: &server::Received) -> Option<String> {
    r.header("authorization")
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::to_string)
}

#[tokio::test]
async fn mcp_servers_get_discovery_registration_resource_and_step_up() {
    let op = provider();
    let dir = tempfile::tempdir().expect("dir");
    let b = broker(dir.path());
    let rs = Server::start(vec![]).await;
    let url = format!("{}/mcp", rs.base);
    let prm =
        serde_json::json!({"resource": url, "authorization_servers": [op.issuer]}).to_string();
    // 1: no token → 401 pointing at the metadata; 2: the metadata; 3: the retry, accepted.
    rs.push(Reply::json(401, "{}").header(
        "www-authenticate",
        &format!(r#"Bearer resource_metadata="{}/.well-known/oauth-protected-resource/mcp", scope="mcp:read""#, rs.base),
    ));
    rs.push(Reply::json(200, &prm));
    rs.push(Reply::json(200, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#));
    let auth = McpServerAuth {
        server: "docs".into(),
        url: url.clone(),
        client_id: None,
        scopes: vec![],
        client_metadata_url: None,
        client_env: None,
    };
    assert_eq!(mcp_call(&b, &auth).await, 200);
    let got = rs.received();
    assert_eq!(got.len(), 3);
    assert_eq!(bearer(&got[0]), None);
    let token = bearer(&got[2]).expect("the retry carries a token");
    let claims = oidc::jwt_claims(&token);
    assert_eq!(
        claims["aud"],
        serde_json::json!(url),
        "audience-bound (RFC 8707)"
    );
    assert_eq!(claims["scope"], "mcp:read");
    // The client was registered dynamically and `resource` went with the authorization request.
    assert!(op.request_urls().iter().any(|u| u == "/reg"));
    let auth_url = op
        .request_urls()
        .into_iter()
        .find(|u| u.starts_with("/auth?"))
        .expect("authorization request");
    assert!(
        auth_url.contains(&format!("resource={}", urlencode(&url))),
        "{auth_url}"
    );
    // The server lists offline_access, so it is asked for (SEP-2207) and a refresh token held.
    assert!(auth_url.contains("offline_access"), "{auth_url}");
    let e = stored(dir.path(), "mcp:docs");
    assert_eq!(e.resource.as_deref(), Some(&*url));
    assert!(e.refresh_token.is_some());

    // Step-up: the server now wants mcp:write too.
    rs.push(Reply::json(403, "{}").header(
        "www-authenticate",
        r#"Bearer error="insufficient_scope", scope="mcp:read mcp:write""#,
    ));
    // No resource_metadata in this challenge: found at the well-known path.
    rs.push(Reply::json(200, &prm));
    rs.push(Reply::json(200, r#"{"jsonrpc":"2.0","id":1,"result":{}}"#));
    assert_eq!(mcp_call(&b, &auth).await, 200);
    let got = rs.received();
    assert_eq!(
        bearer(&got[3]).as_deref(),
        Some(&*token),
        "the held token first"
    );
    assert_eq!(got[4].path, "/.well-known/oauth-protected-resource/mcp");
    let upgraded = bearer(&got[5]).expect("the retry carries the new token");
    let claims = oidc::jwt_claims(&upgraded);
    let scope = claims["scope"].as_str().expect("scope");
    assert!(
        scope.contains("mcp:read") && scope.contains("mcp:write"),
        "{scope}"
    );
    // The registered client was reused for the step-up.
    assert_eq!(op.request_urls().iter().filter(|u| *u == "/reg").count(), 1);
}

async fn mcp_call(b: &Broker, auth: &McpServerAuth) -> u16 {
    let (tx, mut rx) = mpsc::channel(8);
    let req = b
        .http()
        .post(&auth.url)
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#)
        .build()
        .expect("request");
    let drive = async {
        if let Some(LoginProgress::OpenBrowser { url }) = rx.recv().await {
            Browser::new().open(&url).await;
        }
    };
    let run = async {
        let r = b.send_mcp(auth, req, Duration::from_secs(60), &tx).await;
        drop(tx);
        r
    };
    let (resp, ()) = tokio::join!(run, drive);
    resp.expect("the MCP request goes through")
        .status()
        .as_u16()
}

fn urlencode(s: &str) -> String {
    reqwest::Url::parse_with_params("http://x/", &[("v", s)])
        .expect("url")
        .query()
        .expect("q")
        .trim_start_matches("v=")
        .to_string()
}

#[tokio::test]
async fn discovery_refuses_a_server_without_s256_a_wrong_issuer_and_insecure_endpoints() {
    let s = Server::start(vec![]).await;
    let meta = |issuer: &str, pkce: bool| {
        let mut v = serde_json::json!({"issuer": issuer, "authorization_endpoint": "x", "token_endpoint": "y"});
        if pkce {
            v["code_challenge_methods_supported"] = serde_json::json!(["plain"]);
        }
        Reply::json(200, &v.to_string())
    };
    // RFC 8414 path missing, OpenID path without S256 (only plain): refused.
    s.push(Reply::json(404, "{}"));
    s.push(meta(&s.base, true));
    let http = reqwest::Client::new();
    let err = hanzo_broker::oauth::discovery::auth_server_metadata(&http, &s.base)
        .await
        .expect_err("no S256");
    assert!(
        err.to_string()
            .contains("does not advertise PKCE with S256"),
        "{err}"
    );
    // Metadata naming another issuer: refused.
    s.push(meta("https://evil.example.com", true));
    let err = hanzo_broker::oauth::discovery::auth_server_metadata(&http, &s.base)
        .await
        .expect_err("wrong issuer");
    assert!(err.to_string().contains("names the issuer"), "{err}");
    let got: Vec<String> = s.received().iter().map(|r| r.path.clone()).collect();
    assert_eq!(
        got,
        vec![
            "/.well-known/oauth-authorization-server",
            "/.well-known/openid-configuration",
            "/.well-known/oauth-authorization-server",
        ]
    );
    // Plain http off loopback is refused before anything is sent.
    let dir = tempfile::tempdir().expect("dir");
    let b = broker(dir.path());
    let cfg = OAuthProviderConfig {
        issuer: Some("http://example.com".into()),
        client_id: Some("c".into()),
        ..Default::default()
    };
    let (tx, _rx) = mpsc::channel(8);
    let err = b
        .login(&login_request(cfg, false), &tx)
        .await
        .expect_err("plain http off loopback");
    assert!(err.to_string().contains("only https is allowed"), "{err}");
}

#[tokio::test]
async fn confidential_clients_authenticate_as_registered() {
    use hanzo_broker::oauth::token::{token_request, ClientAuth};
    let ok = r#"{"access_token":"a","token_type":"Bearer"}"#;
    let s = Server::start(vec![
        Reply::json(200, ok),
        Reply::json(200, ok),
        Reply::json(200, ok),
    ])
    .await;
    let http = reqwest::Client::new();
    let secret = Secret::new("s3cr:et");
    let url = format!("{}/token", s.base);
    for method in [
        Some("client_secret_basic"),
        Some("client_secret_post"),
        None,
    ] {
        let auth = ClientAuth::new("id 1", Some(&secret), method);
        token_request(&http, &url, &[("grant_type", "x")], Some(auth), &[], &[])
            .await
            .expect("sent")
            .expect("token");
    }
    let got = s.received();
    // client_secret_basic: id and secret form-encoded, then base64 (RFC 6749 §2.3.1).
    use base64::Engine;
    let want = base64::engine::general_purpose::STANDARD.encode("id+1:s3cr%3Aet");
    assert_eq!(
        got[0].header("authorization"),
        Some(&*format!("Basic {want}"))
    );
    assert!(!String::from_utf8_lossy(&got[0].body).contains("client_secret"));
    for r in &got[1..] {
        assert_eq!(r.header("authorization"), None);
        let body = String::from_utf8_lossy(&r.body);
        assert!(
            body.contains("client_id=id+1") && body.contains("client_secret=s3cr%3Aet"),
            "{body}"
        );
    }
}

#[tokio::test]
async fn a_redirect_naming_another_issuer_ends_the_login() {
    let op = provider();
    let dir = tempfile::tempdir().expect("dir");
    let b = broker(dir.path());
    let (tx, mut rx) = mpsc::channel(8);
    let req = login_request(code_config(&op), false);
    let drive = async {
        let Some(LoginProgress::OpenBrowser { url }) = rx.recv().await else {
            panic!("first progress is the URL");
        };
        let q: std::collections::HashMap<String, String> = reqwest::Url::parse(&url)
            .expect("url")
            .query_pairs()
            .into_owned()
            .collect();
        // The right state, but the response claims another authorization server (RFC 9207).
        let mixed = reqwest::get(format!(
            "{}?code=c&state={}&iss=https%3A%2F%2Fevil.example.com",
            q["redirect_uri"], q["state"]
        ))
        .await
        .expect("the listener answers");
        mixed.status().as_u16()
    };
    let run = async {
        let r = b.login(&req, &tx).await;
        drop(tx);
        r
    };
    let (outcome, status) = tokio::join!(run, drive);
    assert_eq!(status, 400);
    let err = outcome.expect_err("mix-up refused");
    assert!(err.to_string().contains("RFC 9207"), "{err}");
    assert!(
        op.events("grant.success").is_empty(),
        "no code was exchanged"
    );
}
