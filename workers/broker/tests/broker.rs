//! The broker as a library: where credentials come from, the credential file's rules, the
//! allow-list, and authenticated HTTP against a local server (credential injected, never passed
//! back).

#[path = "../../model/tests/fixtures/server.rs"]
mod server;

use hanzo_broker::credentials::{
    read_credential_file, write_credential_file, CredentialFile, StoredCredential,
};
use hanzo_broker::{AllowError, AllowList, Broker, CredentialStore, Secret};
use hanzo_ipc::roles::broker::CredentialSource;
use hanzo_ipc::roles::http::{HttpFailureKind, HttpRequest, Item, Response};
use hanzo_ipc::roles::model::ProviderId;
use server::{Reply, Server};
use std::collections::HashMap;
use std::os::unix::fs::PermissionsExt;
use tokio::sync::mpsc;

const CANARY: &str = "sk-ant-CANARY-9f8e7d6c5b4a";

fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |k| map.get(k).cloned()
}

#[test]
fn secrets_print_redacted() {
    let s = Secret::new(CANARY);
    assert_eq!(format!("{s:?}"), "[redacted]");
    assert_eq!(format!("{s}"), "[redacted]");
    assert_eq!(s.expose(), CANARY);
    let store = CredentialStore::load(env(&[("ANTHROPIC_API_KEY", CANARY)]), None);
    assert!(!format!("{store:?}").contains(CANARY));
}

#[test]
fn auto_detection_order_is_hanzo_anthropic_openai() {
    let store = CredentialStore::load(
        env(&[("OPENAI_API_KEY", "o"), ("ANTHROPIC_API_KEY", "a")]),
        None,
    );
    assert_eq!(store.detect(), Some(ProviderId::Anthropic));
    let store = CredentialStore::load(
        env(&[
            ("OPENAI_API_KEY", "o"),
            ("ANTHROPIC_API_KEY", "a"),
            ("HANZO_API_KEY", "h"),
        ]),
        None,
    );
    assert_eq!(store.detect(), Some(ProviderId::Hanzo));
    let store = CredentialStore::load(env(&[("OPENAI_API_KEY", "o")]), None);
    assert_eq!(store.detect(), Some(ProviderId::OpenAi));
    assert_eq!(CredentialStore::load(env(&[]), None).detect(), None);
}

#[test]
fn sources_env_then_user_settings_then_credential_file() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(
        dir.path().join("settings.json"),
        r#"{"model": "m", "api_key": "hz-from-settings"}"#,
    )
    .expect("write");
    let mut file = CredentialFile::new();
    file.insert("openai".into(), StoredCredential::from_api_key("sk-file"));
    file.insert(
        "anthropic".into(),
        StoredCredential::from_api_key("ant-file"),
    );
    write_credential_file(&dir.path().join("credentials.json"), &file).expect("write");
    let store = CredentialStore::load(env(&[("ANTHROPIC_API_KEY", "ant-env")]), Some(dir.path()));
    let report = store.report();
    assert_eq!(
        report.available,
        vec![
            (ProviderId::Hanzo, CredentialSource::UserSettings),
            (ProviderId::Anthropic, CredentialSource::Env),
            (ProviderId::OpenAi, CredentialSource::CredentialFile),
        ]
    );
    assert_eq!(
        store
            .get(ProviderId::Anthropic)
            .expect("held")
            .secret
            .expose(),
        "ant-env"
    );
    assert_eq!(report.detected, Some(ProviderId::Hanzo));
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
}

#[test]
fn credential_file_is_written_0600_atomically_and_read_back() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("hanzo").join("credentials.json");
    let mut file = CredentialFile::new();
    file.insert("hanzo".into(), StoredCredential::from_access_token("tok"));
    write_credential_file(&path, &file).expect("write");
    let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let dir_mode = std::fs::metadata(path.parent().expect("dir"))
        .expect("meta")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(dir_mode, 0o700);
    // Overwrite: still one file, no temporary left behind.
    file.insert("openai".into(), StoredCredential::from_api_key("k"));
    write_credential_file(&path, &file).expect("rewrite");
    let names: Vec<_> = std::fs::read_dir(path.parent().expect("dir"))
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().to_string())
        .collect();
    assert_eq!(names, vec!["credentials.json".to_string()]);
    let back = read_credential_file(&path).expect("read").expect("exists");
    assert_eq!(back.len(), 2);
    assert_eq!(back["hanzo"].access_token.as_deref(), Some("tok"));
    assert!(read_credential_file(&dir.path().join("none.json"))
        .expect("ok")
        .is_none());
}

#[test]
fn group_readable_credential_file_is_refused() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("credentials.json");
    std::fs::write(
        &path,
        format!(r#"{{"anthropic": {{"api_key": "{CANARY}"}}}}"#),
    )
    .expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).expect("chmod");
    let err = read_credential_file(&path)
        .expect_err("refused")
        .to_string();
    assert!(err.contains("chmod 600"), "{err}");
    assert!(err.contains("640"), "{err}");
    assert!(!err.contains(CANARY));
    let store = CredentialStore::load(env(&[]), Some(dir.path()));
    assert!(store.get(ProviderId::Anthropic).is_none());
    assert_eq!(store.warnings().len(), 1);
    assert!(!store.warnings()[0].contains(CANARY));
}

#[test]
fn corrupt_credential_file_is_refused_without_showing_its_content() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("credentials.json");
    // Wrong structure: serde's own message would quote the string.
    for content in [
        format!(r#"{{"anthropic": "{CANARY}"}}"#),
        format!("{{\"anthropic\": {{\"api_key\": \"{CANARY}\""),
    ] {
        std::fs::write(&path, &content).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let err = read_credential_file(&path)
            .expect_err("refused")
            .to_string();
        assert!(err.contains("credentials.json:1:"), "{err}");
        assert!(err.contains("not a valid credential file"), "{err}");
        assert!(!err.contains(CANARY), "{err}");
    }
}

#[test]
fn allow_list_checks_scheme_host_and_port() {
    let mut allow = AllowList::default();
    assert!(allow
        .check(
            ProviderId::Anthropic,
            "https://api.anthropic.com/v1/messages"
        )
        .is_ok());
    assert!(allow
        .check(
            ProviderId::OpenAi,
            "https://api.openai.com/v1/chat/completions"
        )
        .is_ok());
    assert!(matches!(
        allow.check(
            ProviderId::Anthropic,
            "https://api.openai.com/v1/chat/completions"
        ),
        Err(AllowError::NotAllowed {
            provider: ProviderId::Anthropic,
            ..
        })
    ));
    assert!(matches!(
        allow.check(
            ProviderId::Anthropic,
            "https://api.anthropic.com:8443/v1/messages"
        ),
        Err(AllowError::NotAllowed { .. })
    ));
    assert!(matches!(
        allow.check(
            ProviderId::Anthropic,
            "http://api.anthropic.com/v1/messages"
        ),
        Err(AllowError::Insecure { .. })
    ));
    assert!(matches!(
        allow.check(
            ProviderId::Anthropic,
            "https://user:pw@api.anthropic.com/v1/messages"
        ),
        Err(AllowError::UserInfo { .. })
    ));
    // Local servers: only when configured, and plain http only to loopback.
    assert!(allow
        .check(
            ProviderId::OpenAi,
            "http://127.0.0.1:11434/v1/chat/completions"
        )
        .is_err());
    allow
        .allow(ProviderId::OpenAi, "http://127.0.0.1:11434/v1")
        .expect("loopback");
    assert!(allow
        .check(
            ProviderId::OpenAi,
            "http://127.0.0.1:11434/v1/chat/completions"
        )
        .is_ok());
    assert!(allow
        .check(
            ProviderId::OpenAi,
            "http://127.0.0.1:11435/v1/chat/completions"
        )
        .is_err());
    assert!(allow
        .check(ProviderId::Anthropic, "http://127.0.0.1:11434/v1/messages")
        .is_err());
    assert!(matches!(
        allow.allow(ProviderId::OpenAi, "http://10.0.0.5:8000/v1"),
        Err(AllowError::Insecure { .. })
    ));
    allow
        .allow(ProviderId::Hanzo, "https://gateway.example.com/v1")
        .expect("https");
    assert!(allow
        .check(
            ProviderId::Hanzo,
            "https://gateway.example.com/v1/chat/completions"
        )
        .is_ok());
}

async fn fetch(broker: &Broker, req: HttpRequest) -> (Response, Vec<Item>) {
    let (tx, mut rx) = mpsc::channel(1024);
    let resp = broker.fetch(req, &tx).await;
    drop(tx);
    let mut items = Vec::new();
    while let Some(i) = rx.recv().await {
        items.push(i);
    }
    (resp, items)
}

fn request(credential: ProviderId, url: String) -> HttpRequest {
    HttpRequest {
        credential,
        method: "POST".into(),
        url,
        headers: vec![
            ("content-type".into(), "application/json".into()),
            // A compromised model worker trying to choose the credential itself.
            ("Authorization".into(), "Bearer attacker".into()),
            ("x-api-key".into(), "attacker".into()),
        ],
        body: b"{}".to_vec(),
    }
}

#[tokio::test]
async fn fetch_injects_the_credential_and_never_passes_it_back() {
    let server = Server::start(vec![Reply::sse("data: one\n\ndata: two\n\n", 6)
        .header("set-cookie", "session=abc")
        .header("x-echo", &format!("key={CANARY}"))
        .header("request-id", "req_1")])
    .await;
    let broker = Broker::new(CredentialStore::load(
        env(&[("ANTHROPIC_API_KEY", CANARY)]),
        None,
    ))
    .expect("client");
    broker
        .allow(ProviderId::Anthropic, &server.base)
        .expect("allow");
    let (resp, items) = fetch(
        &broker,
        request(
            ProviderId::Anthropic,
            format!("{}/v1/messages", server.base),
        ),
    )
    .await;
    assert_eq!(resp, Response::Done { body_bytes: 22 });
    let got = server.received();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].header("x-api-key"), Some(CANARY));
    assert_eq!(
        got[0].header("authorization"),
        None,
        "the model's own header was dropped"
    );
    assert_eq!(got[0].body, b"{}");
    let Item::Head(head) = &items[0] else {
        panic!("head first")
    };
    assert_eq!(head.status, 200);
    assert!(head
        .headers
        .iter()
        .any(|(k, v)| k == "request-id" && v == "req_1"));
    assert!(!head
        .headers
        .iter()
        .any(|(k, _)| k == "set-cookie" || k == "x-echo"));
    let body: Vec<u8> = items[1..]
        .iter()
        .flat_map(|i| match i {
            Item::Body(b) => b.clone(),
            Item::Head(_) => panic!("one head"),
        })
        .collect();
    assert_eq!(body, b"data: one\n\ndata: two\n\n");
    assert!(!format!("{items:?}").contains(CANARY));
}

#[tokio::test]
async fn openai_style_providers_get_a_bearer_token_and_error_bodies_are_scrubbed() {
    let body = format!("{{\"error\":{{\"message\":\"Incorrect API key provided: {CANARY}.\",\"type\":\"invalid_request_error\",\"code\":\"invalid_api_key\"}}}}");
    let server = Server::start(vec![Reply::json(401, &body)]).await;
    let broker = Broker::new(CredentialStore::load(
        env(&[("OPENAI_API_KEY", CANARY)]),
        None,
    ))
    .expect("client");
    broker
        .allow(ProviderId::OpenAi, &format!("{}/v1", server.base))
        .expect("allow");
    let (resp, items) = fetch(
        &broker,
        request(
            ProviderId::OpenAi,
            format!("{}/v1/chat/completions", server.base),
        ),
    )
    .await;
    assert!(matches!(resp, Response::Done { .. }));
    assert_eq!(
        server.received()[0].header("authorization"),
        Some(format!("Bearer {CANARY}").as_str())
    );
    let text = format!("{items:?}");
    assert!(!text.contains(CANARY), "{text}");
    let Item::Body(b) = &items[1] else {
        panic!("body")
    };
    assert!(String::from_utf8_lossy(b).contains("Incorrect API key provided: [redacted]."));
}

#[tokio::test]
async fn refusals_are_typed_and_send_nothing() {
    let server = Server::start(vec![]).await;
    let broker = Broker::new(CredentialStore::load(
        env(&[("ANTHROPIC_API_KEY", CANARY)]),
        None,
    ))
    .expect("client");
    // Not configured: the local server is not on the list.
    let (resp, items) = fetch(
        &broker,
        request(
            ProviderId::Anthropic,
            format!("{}/v1/messages", server.base),
        ),
    )
    .await;
    let Response::Failed(f) = resp else {
        panic!("refused")
    };
    assert_eq!(f.kind, HttpFailureKind::NotAllowed);
    assert!(f.message.contains("127.0.0.1"), "{}", f.message);
    assert!(items.is_empty());
    // Allowed, but no credential for that provider.
    broker
        .allow(ProviderId::OpenAi, &server.base)
        .expect("allow");
    let (resp, _) = fetch(
        &broker,
        request(
            ProviderId::OpenAi,
            format!("{}/v1/chat/completions", server.base),
        ),
    )
    .await;
    let Response::Failed(f) = resp else {
        panic!("refused")
    };
    assert_eq!(f.kind, HttpFailureKind::NoCredential);
    assert!(f.message.contains("OPENAI_API_KEY"));
    assert!(server.received().is_empty(), "nothing reached the server");
}

#[tokio::test]
async fn connection_failures_are_connect_errors() {
    // Bind and drop: nothing listens on the port any more.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let base = format!("http://127.0.0.1:{port}");
    let broker = Broker::new(CredentialStore::load(
        env(&[("ANTHROPIC_API_KEY", CANARY)]),
        None,
    ))
    .expect("client");
    broker.allow(ProviderId::Anthropic, &base).expect("allow");
    let (resp, _) = fetch(
        &broker,
        request(ProviderId::Anthropic, format!("{base}/v1/messages")),
    )
    .await;
    let Response::Failed(f) = resp else {
        panic!("failed")
    };
    assert_eq!(f.kind, HttpFailureKind::Connect);
    assert!(!f.message.contains(CANARY));
}
