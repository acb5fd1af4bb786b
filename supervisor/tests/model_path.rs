//! A model turn through the real supervisor tree: the broker holds the key and speaks HTTP to a
//! local provider server; the model worker, connected to it by the fd-4 direct channel, parses the
//! stream; the key never reaches the model worker.

mod common;
#[path = "../../workers/model/tests/fixtures/mod.rs"]
mod fixtures;

use fixtures::server::{Reply, Server};
use hanzo_dev::tree::Supervisor;
use hanzo_ipc::channel::StreamPart;
use hanzo_ipc::roles::broker::{self, Endpoint};
use hanzo_ipc::roles::model::{
    self, CompletionRequest, Message, ProviderConfig, ProviderId, RetryPolicy, StreamEvent,
    WireFormat,
};
use std::time::Duration;

const CANARY: &str = "sk-ant-CANARY-through-supervisor-42";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turn_through_the_supervisor_tree() {
    let server = Server::start(vec![
        Reply::sse(fixtures::ANTHROPIC_TOOLS, 7),
        Reply::sse(fixtures::ANTHROPIC_TEXT, 7),
    ])
    .await;
    let workspace = tempfile::tempdir().expect("ws");
    let mut vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k == "PATH" || k == "HOME")
        .collect();
    vars.push(("ANTHROPIC_API_KEY".into(), CANARY.into()));
    let (cfg, _run) = common::tree_config(workspace.path(), vars);
    let sup = Supervisor::start(cfg).await.expect("start");
    tokio::time::timeout(Duration::from_secs(30), sup.wait_ready())
        .await
        .expect("hang")
        .expect("ready");
    let r = sup
        .broker
        .call(broker::Request::AllowEndpoints(vec![Endpoint {
            provider: ProviderId::Anthropic,
            base_url: server.base.clone(),
        }]))
        .await
        .expect("allow");
    assert_eq!(r, broker::Response::Configured { endpoints: 1 });
    let req = CompletionRequest {
        provider: ProviderConfig::Http {
            wire: WireFormat::AnthropicMessages,
            credential: ProviderId::Anthropic,
            base_url: server.base.clone(),
        },
        model: "m".into(),
        system: None,
        messages: vec![Message::user_text("hi")],
        tools: vec![],
        max_tokens: 100,
        retry: RetryPolicy::default(),
        record: false,
    };
    for expect_tools in [true, false] {
        let mut s = sup
            .model
            .call_stream(model::Request::Complete(req.clone()))
            .await
            .expect("stream");
        let mut events = Vec::new();
        let done = loop {
            match tokio::time::timeout(Duration::from_secs(30), s.next())
                .await
                .expect("hang")
            {
                Some(Ok(StreamPart::Item(model::Item::Event(e)))) => events.push(e),
                Some(Ok(StreamPart::Item(_))) => {}
                Some(Ok(StreamPart::Done(d))) => break d,
                other => panic!("{other:?}"),
            }
        };
        assert!(matches!(done, model::Response::Completed(_)), "{done:?}");
        assert_eq!(
            events
                .iter()
                .any(|e| matches!(e, StreamEvent::ToolUse { .. })),
            expect_tools,
            "{events:?}"
        );
    }
    assert_eq!(server.received()[0].header("x-api-key"), Some(CANARY));
    let model_pid = sup.model.info().expect("model").pid;
    let env = std::fs::read(format!("/proc/{model_pid}/environ")).unwrap_or_default();
    assert!(!String::from_utf8_lossy(&env).contains(CANARY));
    sup.shutdown().await;
}

/// A crash of the model worker leaves the broker running: the restarted model worker's direct
/// channel is a fresh pair whose other end the broker adopts, and a turn goes through it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_model_worker_reaches_the_same_broker_through_a_new_pair() {
    let server = Server::start(vec![
        Reply::sse(fixtures::ANTHROPIC_TEXT, 7),
        Reply::sse(fixtures::ANTHROPIC_TEXT, 7),
    ])
    .await;
    let workspace = tempfile::tempdir().expect("ws");
    let mut vars: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k == "PATH" || k == "HOME")
        .collect();
    vars.push(("ANTHROPIC_API_KEY".into(), CANARY.into()));
    let (mut cfg, _run) = common::tree_config(workspace.path(), vars);
    cfg.roles = Some(vec![hanzo_ipc::Role::Broker, hanzo_ipc::Role::Model]);
    let sup = Supervisor::start(cfg).await.expect("start");
    tokio::time::timeout(Duration::from_secs(30), sup.wait_ready())
        .await
        .expect("hang")
        .expect("ready");
    sup.broker
        .call(broker::Request::AllowEndpoints(vec![Endpoint {
            provider: ProviderId::Anthropic,
            base_url: server.base.clone(),
        }]))
        .await
        .expect("allow");
    let req = CompletionRequest {
        provider: ProviderConfig::Http {
            wire: WireFormat::AnthropicMessages,
            credential: ProviderId::Anthropic,
            base_url: server.base.clone(),
        },
        model: "m".into(),
        system: None,
        messages: vec![Message::user_text("hi")],
        tools: vec![],
        max_tokens: 100,
        retry: RetryPolicy::default(),
        record: false,
    };
    let turn = || async {
        let mut s = sup
            .model
            .call_stream(model::Request::Complete(req.clone()))
            .await
            .expect("stream");
        loop {
            match tokio::time::timeout(Duration::from_secs(30), s.next())
                .await
                .expect("hang")
            {
                Some(Ok(StreamPart::Done(d))) => return d,
                Some(Ok(StreamPart::Item(_))) => {}
                other => panic!("{other:?}"),
            }
        }
    };
    assert!(matches!(turn().await, model::Response::Completed(_)));
    let before = sup.model.info().expect("model");
    let model_pid = before.pid;
    let broker = sup.broker.info().expect("broker");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(model_pid).expect("pid")),
        nix::sys::signal::SIGKILL,
    )
    .expect("kill the model worker");
    let again = tokio::time::timeout(
        Duration::from_secs(30),
        sup.model
            .next_ready(sup.model.info().map_or(0, |i| i.generation)),
    )
    .await
    .expect("hang")
    .expect("restarted");
    assert_ne!(again.pid, model_pid);
    let done = turn().await;
    assert!(matches!(done, model::Response::Completed(_)), "{done:?}");
    let now = sup.broker.info().expect("broker");
    assert_eq!(
        (now.pid, now.generation),
        (broker.pid, broker.generation),
        "the broker was restarted"
    );
    assert_eq!(server.received().len(), 2);
    sup.shutdown().await;
}
