//! Hooks run in the tools worker, through the tools channel, under its sandbox: the verdicts of
//! HIP-0301 §9 (allow, deny with the reason, failure denies) and a hook that tries to read outside
//! the workspace being refused by the kernel.

mod common;

use hanzo_dev::tree::Supervisor;
use hanzo_ipc::roles::tools::{Hook, HookCall, PreHookReply, Request, Response};
use std::time::Duration;

fn call(hooks: Vec<Hook>, output: Option<&str>) -> HookCall {
    HookCall {
        hooks,
        session_id: "s-1".into(),
        tool: "bash".into(),
        input_json: r#"{"command":"ls"}"#.into(),
        output_json: output.map(str::to_string),
    }
}

fn hook(command: &str) -> Hook {
    Hook {
        command: command.into(),
        tool_pattern: "bash".into(),
        timeout_ms: 5000,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hooks_run_in_the_tools_worker_with_their_verdicts() {
    let ws = tempfile::tempdir().expect("ws");
    let (cfg, _run) = common::tree_config(ws.path(), common::path_only());
    let sup = Supervisor::start(cfg).await.expect("start");
    let pre = |hooks| {
        let sup = &sup;
        async move {
            match tokio::time::timeout(
                Duration::from_secs(30),
                sup.tools.call(Request::RunPreHooks(call(hooks, None))),
            )
            .await
            .expect("hang guard")
            .expect("call")
            {
                Response::PreHooks(r) => r,
                other => panic!("unexpected {other:?}"),
            }
        }
    };

    let r = pre(vec![hook("cat >/dev/null; exit 0")]).await;
    assert!(r.allowed, "{r:?}");

    let r: PreHookReply = pre(vec![hook("echo 'no ls on Fridays' >&2; exit 2")]).await;
    assert!(!r.allowed && !r.failed, "{r:?}");
    assert_eq!(r.reason.as_deref(), Some("no ls on Fridays"));

    let r = pre(vec![hook("exit 1")]).await;
    assert!(!r.allowed && r.failed, "{r:?}");

    // The hook sees the tool call on stdin and in its environment.
    let r = pre(vec![hook(
        r#"grep -q '"command":"ls"' && [ "$HANZO_TOOL_NAME" = bash ] && [ "$HANZO_SESSION_ID" = s-1 ] || exit 2"#
    )])
    .await;
    assert!(r.allowed, "{r:?}");

    // Confinement: a hook cannot read outside the workspace (Landlock, and in tier B the host's
    // home is not even mounted), but can write inside it.
    let r = pre(vec![hook(
        "if ls /root >/dev/null 2>&1; then echo escaped >&2; exit 2; fi; echo ok > hook-was-here",
    )])
    .await;
    assert!(r.allowed, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(ws.path().join("hook-was-here")).expect("written in workspace"),
        "ok\n"
    );

    // Post hooks never block; their failures come back described.
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        sup.tools.call(Request::RunPostHooks(call(
            vec![hook("exit 3")],
            Some(r#"{"output":"x"}"#),
        ))),
    )
    .await
    .expect("hang guard")
    .expect("call");
    match r {
        Response::PostHooks { failures } => assert_eq!(failures.len(), 1, "{failures:?}"),
        other => panic!("unexpected {other:?}"),
    }

    // A hook the settings would have refused is a clear error naming it, not a crash of the
    // worker; each rule of `HookConfig::validate` holds on the channel too.
    for (bad, why) in [
        (
            Hook {
                timeout_ms: 0,
                ..hook("exit 0")
            },
            "timeout_ms",
        ),
        (
            Hook {
                timeout_ms: 600_001,
                ..hook("exit 0")
            },
            "timeout_ms",
        ),
        (hook("  "), "command is empty"),
        (
            Hook {
                tool_pattern: "bash(ls *)".into(),
                ..hook("exit 0")
            },
            "argument patterns",
        ),
    ] {
        let e = sup
            .tools
            .call(Request::RunPreHooks(call(vec![hook("exit 0"), bad], None)))
            .await
            .expect_err("an unusable hook");
        let e = e.to_string();
        assert!(e.contains("hook #1") && e.contains(why), "{e}");
    }
    // The worker still answers afterwards.
    let r = pre(vec![hook("exit 0")]).await;
    assert!(r.allowed, "{r:?}");
    sup.shutdown().await;
}
