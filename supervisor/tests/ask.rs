//! `hanzo-dev ask` end to end: the real binary, its real workers, a local provider server speaking
//! Anthropic's SSE. Records a cassette, then replays it offline; the key never appears in the
//! output, the error messages or the cassette.

#[path = "../../workers/model/tests/fixtures/mod.rs"]
mod fixtures;

use fixtures::server::{Reply, Server};
use std::process::Output;

const CANARY: &str = "sk-ant-CANARY-ask-cli-8e1f";

async fn hanzo(args: Vec<String>, key: bool) -> Output {
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_hanzo-dev"));
    cmd.args(&args)
        .env_remove("HANZO_API_KEY")
        .env_remove("OPENAI_API_KEY");
    if key {
        cmd.env("ANTHROPIC_API_KEY", CANARY);
    } else {
        cmd.env_remove("ANTHROPIC_API_KEY");
    }
    tokio::time::timeout(std::time::Duration::from_secs(60), cmd.output())
        .await
        .expect("hanzo-dev ask did not finish within the hang guard")
        .expect("run hanzo-dev")
}

fn s(x: &str) -> String {
    x.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_records_a_cassette_and_replays_it_offline() {
    let server = Server::start(vec![Reply::sse(fixtures::ANTHROPIC_TEXT, 11)]).await;
    let dir = tempfile::tempdir().expect("tmp");
    let cassette = dir.path().join("turn.jsonl");
    let live = hanzo(
        vec![
            s("ask"),
            s("--provider"),
            s("anthropic"),
            s("--base-url"),
            server.base.clone(),
            s("--record"),
            cassette.display().to_string(),
            s("hello"),
        ],
        true,
    )
    .await;
    let live_out = String::from_utf8_lossy(&live.stdout).to_string();
    let live_err = String::from_utf8_lossy(&live.stderr).to_string();
    assert!(live.status.success(), "{live_out}{live_err}");
    assert!(live_out.contains("Hello, wörld"), "{live_out}");
    // The broker sent the key to the provider; it appears nowhere we can see.
    assert_eq!(server.received()[0].header("x-api-key"), Some(CANARY));
    let recorded = std::fs::read_to_string(&cassette).expect("cassette written");
    assert!(!recorded.is_empty());
    for text in [&live_out, &live_err, &recorded] {
        assert!(!text.contains(CANARY), "the key leaked: {text}");
    }

    // Offline: no key, no server; the same text through the same parser.
    let replay = hanzo(
        vec![
            s("ask"),
            s("--replay"),
            cassette.display().to_string(),
            s("--wire"),
            s("anthropic"),
            s("hello"),
        ],
        false,
    )
    .await;
    let replay_out = String::from_utf8_lossy(&replay.stdout).to_string();
    assert!(
        replay.status.success(),
        "{replay_out}{}",
        String::from_utf8_lossy(&replay.stderr)
    );
    assert_eq!(replay_out, live_out);
    assert_eq!(
        server.received().len(),
        1,
        "replay must not call the provider"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_without_any_credential_says_what_to_set() {
    let out = hanzo(vec![s("ask"), s("hello")], false).await;
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ANTHROPIC_API_KEY"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ask_reports_a_rejected_key_without_echoing_it() {
    let server = Server::start(vec![Reply::json(
        401,
        &format!(r#"{{"type":"error","error":{{"type":"authentication_error","message":"invalid x-api-key {CANARY}"}}}}"#),
    )])
    .await;
    let out = hanzo(
        vec![
            s("ask"),
            s("--provider"),
            s("anthropic"),
            s("--base-url"),
            server.base.clone(),
            s("hello"),
        ],
        true,
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ANTHROPIC_API_KEY"), "{err}");
    assert!(!err.contains(CANARY), "{err}");
    assert!(!String::from_utf8_lossy(&out.stdout).contains(CANARY));
}
