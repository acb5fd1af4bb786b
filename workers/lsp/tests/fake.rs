//! The client against a scripted server (tests/fixtures/fake_lsp.py): the server-to-client
//! requests, each diagnostics mode, position encodings, and every way a server can misbehave.

mod common;

use common::*;
use hanzo_lsp::{Freshness, LspError, Position, ServerEvent, ServerState, Severity};
use serde_json::{json, Value};
use std::time::Duration;

fn hover_text(h: Option<hanzo_lsp::HoverInfo>) -> String {
    h.expect("a hover").text
}

#[tokio::test]
async fn server_requests_are_answered_as_the_protocol_says() {
    let ws = workspace();
    let events = Events::default();
    let mut config = fake_config(ws.path(), "server-requests", 0);
    config.registry = fake_registry("server-requests", 0, Some(json!({"fake": {"opt": 7}})));
    let servers = start(config, &events);
    let file = write(ws.path(), "a.fake", "hello\n");
    let cfg = write(ws.path(), "conf/x.cfg", "k=v\n");
    servers.touch(&file).await.expect("touch");
    // The fake asks its questions after `initialized` and reports progress last: once that
    // arrived, every answer is on its way, ahead of anything sent later.
    eventually("the fake's requests", || {
        events
            .logs
            .lock()
            .expect("logs")
            .iter()
            .any(|l| l.message.contains("Indexing"))
    })
    .await;
    servers
        .file_changed(&cfg)
        .await
        .expect("a file the server watches");
    servers
        .file_changed(&cfg)
        .await
        .expect("the same file again");
    let answers: Value = serde_json::from_str(&hover_text(
        servers
            .hover(&file, Position::new(1, 1))
            .await
            .expect("hover"),
    ))
    .expect("the fake's answers are JSON");

    let root = std::fs::canonicalize(ws.path()).expect("root");
    let root_uri = format!("file://{}", root.display());
    let init = &answers["initialize.params"];
    assert_eq!(init["rootUri"], json!(root_uri));
    assert_eq!(init["processId"], Value::Null);
    assert_eq!(init["workspaceFolders"][0]["uri"], json!(root_uri));
    assert_eq!(
        init["capabilities"]["workspace"]["configuration"],
        json!(true)
    );
    assert_eq!(
        answers["didChangeConfiguration"],
        json!({"settings": {"fake": {"opt": 7}}})
    );
    assert_eq!(
        answers["workspace/configuration"],
        json!([7, null, {"fake": {"opt": 7}}])
    );
    assert_eq!(answers["client/registerCapability"], Value::Null);
    assert_eq!(answers["client/unregisterCapability"], Value::Null);
    assert_eq!(answers["window/workDoneProgress/create"], Value::Null);
    assert_eq!(
        answers["window/showMessageRequest"],
        json!({"title": "First"})
    );
    assert_eq!(
        answers["workspace/workspaceFolders"],
        json!([{"uri": root_uri, "name": root.file_name().expect("name").to_string_lossy()}])
    );
    assert_eq!(
        answers["custom/unknownRequest"]["error"]["code"],
        json!(-32601)
    );
    assert_eq!(
        answers["opened"],
        json!([[format!("{root_uri}/a.fake"), "fake", 1]])
    );
    // The watcher registered for **/*.cfg heard of the file: created the first time, changed after.
    let cfg_uri = format!("{root_uri}/conf/x.cfg");
    assert_eq!(
        answers["watched"],
        json!([{"uri": cfg_uri, "type": 1}, {"uri": cfg_uri, "type": 2}])
    );

    let client = servers.client("fake").expect("running");
    assert_eq!(
        client.registered_methods(),
        vec!["workspace/didChangeWatchedFiles"]
    );
    let logs = events.logs.lock().expect("logs").clone();
    assert!(
        logs.iter().any(|l| l.message == "log  [31mline"),
        "logs are sanitised: {logs:?}"
    );
    assert!(logs
        .iter()
        .any(|l| l.kind == hanzo_lsp::LogKind::Progress && l.message.contains("Indexing")));
}

#[tokio::test]
async fn versioned_push_diagnostics_follow_the_file_on_disk() {
    let ws = workspace();
    let events = Events::default();
    let servers = start(fake_config(ws.path(), "push-versioned", 200), &events);
    let file = write(ws.path(), "m.fake", "ok\n  ERR here\n");
    let d = servers.diagnostics(&file).await.expect("diagnostics");
    assert_eq!(d.freshness, Freshness::Confirmed);
    assert_eq!(d.path, "m.fake");
    assert_eq!(d.diagnostics.len(), 1);
    let e = &d.diagnostics[0];
    assert_eq!(
        (e.severity, e.code.as_deref(), e.message.as_str()),
        (Severity::Error, Some("E1"), "found ERR")
    );
    assert_eq!(
        (e.range.start, e.range.end),
        (Position::new(2, 3), Position::new(2, 6))
    );

    write(ws.path(), "m.fake", "ok\nWARN only\n");
    servers.file_changed(&file).await.expect("changed");
    let d = servers.diagnostics(&file).await.expect("diagnostics");
    assert_eq!(d.freshness, Freshness::Confirmed);
    assert_eq!(
        d.diagnostics.iter().map(|d| d.severity).collect::<Vec<_>>(),
        vec![Severity::Warning]
    );

    // Without being told, the next call still notices the file changed.
    write(ws.path(), "m.fake", "clean\n");
    let d = servers.diagnostics(&file).await.expect("diagnostics");
    assert!(d.diagnostics.is_empty(), "{d:?}");
}

#[tokio::test]
async fn a_stale_publish_with_an_old_version_is_not_taken_for_fresh() {
    let ws = workspace();
    let events = Events::default();
    let servers = start(fake_config(ws.path(), "push-stale", 300), &events);
    let file = write(ws.path(), "s.fake", "ERR\n");
    assert_eq!(
        servers
            .diagnostics(&file)
            .await
            .expect("first")
            .diagnostics
            .len(),
        1
    );
    write(ws.path(), "s.fake", "fine\n");
    servers.file_changed(&file).await.expect("changed");
    let d = servers.diagnostics(&file).await.expect("second");
    assert_eq!(d.freshness, Freshness::Confirmed);
    assert!(
        d.diagnostics.is_empty(),
        "the old version's error must not come back: {d:?}"
    );
}

#[tokio::test]
async fn unversioned_push_diagnostics_settle() {
    let ws = workspace();
    let events = Events::default();
    let servers = start(fake_config(ws.path(), "push-unversioned", 100), &events);
    let file = write(ws.path(), "u.fake", "ERR\n");
    let d = servers.diagnostics(&file).await.expect("diagnostics");
    assert_eq!((d.freshness, d.diagnostics.len()), (Freshness::Settled, 1));
    write(ws.path(), "u.fake", "fine\n");
    servers.file_changed(&file).await.expect("changed");
    let d = servers.diagnostics(&file).await.expect("diagnostics");
    assert_eq!((d.freshness, d.diagnostics.len()), (Freshness::Settled, 0));
}

#[tokio::test]
async fn a_server_that_stays_silent_after_a_change_ends_the_wait_unconfirmed() {
    let ws = workspace();
    let events = Events::default();
    let mut config = fake_config(ws.path(), "push-silent", 50);
    config.client.wait.max_wait = Duration::from_secs(3);
    let servers = start(config, &events);
    let file = write(ws.path(), "q.fake", "ERR\n");
    assert_eq!(
        servers.diagnostics(&file).await.expect("open").freshness,
        Freshness::Settled
    );
    write(ws.path(), "q.fake", "fine\n");
    assert_eq!(
        servers.diagnostics(&file).await.expect("changed").freshness,
        Freshness::Settled
    );
    // Still clean: the server publishes nothing, so nothing can confirm the (correct) result.
    write(ws.path(), "q.fake", "fine\nstill fine\n");
    let d = servers.diagnostics(&file).await.expect("silent");
    assert_eq!(
        (d.freshness, d.diagnostics.len()),
        (Freshness::Unconfirmed, 0)
    );
}

#[tokio::test]
async fn pull_diagnostics_static_and_reused_when_unchanged() {
    let ws = workspace();
    let events = Events::default();
    let servers = start(fake_config(ws.path(), "pull", 0), &events);
    let file = write(ws.path(), "p.fake", "a ERR\nWARN\n");
    let first = servers.diagnostics(&file).await.expect("pull");
    assert_eq!(first.freshness, Freshness::Confirmed);
    assert_eq!(
        first
            .diagnostics
            .iter()
            .map(|d| d.severity)
            .collect::<Vec<_>>(),
        vec![Severity::Error, Severity::Warning]
    );
    // The second pull sends the result id and gets "unchanged": the same diagnostics.
    let second = servers.diagnostics(&file).await.expect("pull again");
    assert_eq!(second, first);
    assert!(servers
        .client("fake")
        .expect("running")
        .uses_pull_diagnostics());
}

#[tokio::test]
async fn pull_diagnostics_registered_dynamically_and_retriggered_after_a_cancel() {
    let ws = workspace();
    let events = Events::default();
    let servers = start(fake_config(ws.path(), "pull-dynamic", 0), &events);
    let file = write(ws.path(), "d.fake", "ERR\n");
    servers.touch(&file).await.expect("touch");
    let client = servers.client("fake").expect("running");
    eventually("the pull registration", || client.uses_pull_diagnostics()).await;
    let d = servers
        .diagnostics(&file)
        .await
        .expect("pull after a server cancel");
    assert_eq!(
        (d.freshness, d.diagnostics.len()),
        (Freshness::Confirmed, 1)
    );
}

#[tokio::test]
async fn columns_are_characters_whatever_the_servers_encoding() {
    for mode in ["push-versioned", "utf8"] {
        let ws = workspace();
        let events = Events::default();
        let servers = start(fake_config(ws.path(), mode, 0), &events);
        // é (2 UTF-8 bytes, 1 UTF-16 unit), 😀 (4 bytes, 2 units), a space: ERR is character 4.
        let file = write(ws.path(), "e.fake", "é😀 ERR\n");
        if mode == "utf8" {
            // This mode publishes nothing; the hover echo shows the position it received.
            let h = hover_text(
                servers
                    .hover(&file, Position::new(1, 4))
                    .await
                    .expect("hover"),
            );
            assert_eq!(h, "hover at 0:7", "UTF-8: 2 + 4 + 1 bytes");
        } else {
            let d = servers.diagnostics(&file).await.expect("diagnostics");
            assert_eq!(d.diagnostics[0].range.start, Position::new(1, 4));
            assert_eq!(d.diagnostics[0].range.end, Position::new(1, 7));
            let h = hover_text(
                servers
                    .hover(&file, Position::new(1, 4))
                    .await
                    .expect("hover"),
            );
            assert_eq!(h, "hover at 0:4", "UTF-16: 1 + 2 + 1 units");
        }
        assert!(matches!(
            servers.hover(&file, Position::new(0, 1)).await,
            Err(LspError::InvalidPosition { line: 0, column: 1 })
        ));
    }
}

async fn hover_error(
    mode: &str,
    tweak: impl FnOnce(&mut hanzo_lsp::LanguageServersConfig),
) -> (LspError, Events) {
    let ws = workspace();
    let events = Events::default();
    let mut config = fake_config(ws.path(), mode, 0);
    tweak(&mut config);
    let servers = start(config, &events);
    let file = write(ws.path(), "x.fake", "x\n");
    let err = servers
        .hover(&file, Position::new(1, 1))
        .await
        .expect_err("the server misbehaves");
    // The server is gone, and the next call would start a new one.
    let status = &servers.status()[0];
    assert!(
        matches!(status.state, ServerState::Exited(_)),
        "{mode}: {status:?}"
    );
    eventually("the exit event", || {
        events.count(|e| matches!(e, ServerEvent::Exited { .. })) == 1
    })
    .await;
    (err, events)
}

#[tokio::test]
async fn a_bad_content_length_stops_the_server_with_a_protocol_error() {
    let (err, _) = hover_error("bad-length", |_| {}).await;
    assert_eq!(
        err,
        LspError::Protocol {
            server: "fake".into(),
            detail: "Content-Length \"abc\" is not a byte count".into()
        }
    );
}

#[tokio::test]
async fn a_missing_content_length_stops_the_server() {
    let (err, _) = hover_error("missing-length", |_| {}).await;
    assert!(
        matches!(&err, LspError::Protocol { detail, .. } if detail == "a message header has no Content-Length"),
        "{err}"
    );
}

#[tokio::test]
async fn a_huge_message_is_refused_before_it_is_read() {
    let (err, _) = hover_error("huge", |_| {}).await;
    assert!(
        matches!(&err, LspError::Protocol { detail, .. } if detail.starts_with("a message of 999999999999 bytes is over the limit")),
        "{err}"
    );
}

fn small_flood_limits(c: &mut hanzo_lsp::LanguageServersConfig) {
    c.client.conn.flood = hanzo_lsp::conn::FloodLimits {
        burst_bytes: 256 << 10,
        bytes_per_second: 16 << 10,
    };
}

#[tokio::test]
async fn a_server_flooding_stdout_is_cut_off() {
    let (err, events) = hover_error("flood", small_flood_limits).await;
    assert!(
        matches!(&err, LspError::Flooded { server, .. } if server == "fake"),
        "{err}"
    );
    // What it sent before the cut was bounded by the bucket: about 256 KiB of 4 KB lines.
    assert!(events.logs.lock().expect("logs").len() <= 80);
}

#[tokio::test]
async fn a_server_flooding_stderr_is_cut_off() {
    let (err, _) = hover_error("stderr-flood", small_flood_limits).await;
    assert!(matches!(&err, LspError::Flooded { .. }), "{err}");
}

#[tokio::test]
async fn garbage_between_messages_is_survived() {
    let ws = workspace();
    let events = Events::default();
    let servers = start(fake_config(ws.path(), "garbage", 0), &events);
    let file = write(ws.path(), "g.fake", "ERR\n");
    assert_eq!(
        hover_text(
            servers
                .hover(&file, Position::new(1, 2))
                .await
                .expect("hover")
        ),
        "hover at 0:1"
    );
    assert_eq!(
        servers
            .definition(&file, Position::new(1, 1))
            .await
            .expect("definition")
            .len(),
        1
    );
}

#[tokio::test]
async fn a_hung_request_times_out_and_a_server_that_keeps_hanging_is_replaced() {
    let ws = workspace();
    let events = Events::default();
    let mut config = fake_config(ws.path(), "never-answer", 0);
    config.client.request_timeout = Duration::from_millis(300);
    let servers = start(config, &events);
    let file = write(ws.path(), "h.fake", "x\n");
    let err = servers
        .hover(&file, Position::new(1, 1))
        .await
        .expect_err("no answer");
    assert!(
        matches!(&err, LspError::Timeout { method, .. } if method == "textDocument/hover"),
        "{err}"
    );
    // It still answers other requests, and a success resets the count of timeouts.
    assert_eq!(
        servers
            .definition(&file, Position::new(1, 1))
            .await
            .expect("definition")
            .len(),
        1
    );
    for _ in 0..3 {
        assert!(matches!(
            servers.hover(&file, Position::new(1, 1)).await,
            Err(LspError::Timeout { .. })
        ));
    }
    assert!(
        matches!(servers.status()[0].state, ServerState::Exited(_)),
        "three timeouts in a row: killed"
    );
    assert_eq!(
        servers
            .definition(&file, Position::new(1, 1))
            .await
            .expect("a new server")
            .len(),
        1
    );
    assert_eq!(servers.status()[0].starts, 2);
}

#[tokio::test]
async fn a_crashing_server_is_restarted_then_given_up_on() {
    let ws = workspace();
    let events = Events::default();
    let mut config = fake_config(ws.path(), "crash-on-hover", 0);
    config.restart.max_crashes = 2;
    let servers = start(config, &events);
    let file = write(ws.path(), "c.fake", "x\n");
    for round in 1..=3 {
        let err = servers
            .hover(&file, Position::new(1, 1))
            .await
            .expect_err("crash");
        assert!(
            matches!(&err, LspError::ServerExited { detail, .. } if detail.starts_with("exit status 3")),
            "{err}"
        );
        assert_eq!(servers.status()[0].starts, round);
    }
    let err = servers
        .hover(&file, Position::new(1, 1))
        .await
        .expect_err("given up");
    assert!(
        matches!(&err, LspError::Unavailable { reason, .. } if reason.starts_with("it ended 3 times")),
        "{err}"
    );
    assert_eq!(
        events.count(|e| matches!(e, ServerEvent::Restarting { .. })),
        2
    );
    assert_eq!(
        events.count(|e| matches!(e, ServerEvent::Unavailable { .. })),
        1
    );
}

#[tokio::test]
async fn a_server_that_cannot_start_says_why_and_becomes_unavailable() {
    let ws = workspace();
    let events = Events::default();
    let servers = start(fake_config(ws.path(), "exit-early", 0), &events);
    let file = write(ws.path(), "e.fake", "x\n");
    for _ in 0..2 {
        let err = servers.diagnostics(&file).await.expect_err("no start");
        assert!(
            matches!(&err, LspError::ServerExited { detail, .. } if detail.contains("exit status 1") && detail.contains("cannot start: the runtime is missing")),
            "{err}"
        );
    }
    let err = servers.diagnostics(&file).await.expect_err("unavailable");
    assert!(
        matches!(&err, LspError::Unavailable { reason, .. } if reason.contains("failed to start 2 times")),
        "{err}"
    );
    assert_eq!(
        events.count(|e| matches!(e, ServerEvent::Unavailable { .. })),
        1
    );
}

#[tokio::test]
async fn a_missing_server_is_reported_once_with_how_to_install_it() {
    let ws = workspace();
    let events = Events::default();
    let mut config = fake_config(ws.path(), "push-versioned", 0);
    let mut entries = std::collections::BTreeMap::new();
    entries.insert(
        "ghost".to_string(),
        hanzo_lsp::LspServerEntry {
            command: Some("hanzo-no-such-language-server".into()),
            files: Some(vec!["**/*.ghost".into()]),
            install_hint: Some("install it with `apt install ghost-ls`".into()),
            ..Default::default()
        },
    );
    config.registry = hanzo_lsp::Registry::with_settings(&entries).expect("registry");
    let servers = start(config, &events);
    let file = write(ws.path(), "a.ghost", "boo\n");
    let first = servers.diagnostics(&file).await.expect_err("missing");
    assert_eq!(
        first.to_string(),
        "language server ghost is not installed (hanzo-no-such-language-server not found); install it with `apt install ghost-ls`"
    );
    for _ in 0..2 {
        let later = servers
            .hover(&file, Position::new(1, 1))
            .await
            .expect_err("unavailable");
        assert!(
            matches!(&later, LspError::Unavailable { reason, .. } if reason.contains("apt install ghost-ls")),
            "{later}"
        );
    }
    assert_eq!(
        events.list(),
        vec![ServerEvent::Missing {
            server: "ghost".into(),
            program: "hanzo-no-such-language-server".into(),
            hint: "install it with `apt install ghost-ls`".into()
        }]
    );
    assert_eq!(
        servers
            .status()
            .iter()
            .find(|s| s.name == "ghost")
            .map(|s| s.starts),
        Some(0)
    );
}

#[tokio::test]
async fn typescript_without_tsserver_is_reported_missing() {
    let ws = workspace();
    let bin = workspace();
    let exe = write(
        bin.path(),
        "typescript-language-server",
        "#!/bin/sh\nexit 0\n",
    );
    std::fs::set_permissions(&exe, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let events = Events::default();
    let mut config = hanzo_lsp::LanguageServersConfig::new(ws.path());
    config.search_path = vec![bin.path().to_path_buf()];
    let servers = start(config, &events);
    let file = write(ws.path(), "a.ts", "let x = 1;\n");
    let err = servers.diagnostics(&file).await.expect_err("no tsserver");
    assert!(
        matches!(&err, LspError::ServerMissing { program, hint, .. } if program == "typescript (tsserver)" && hint.contains("npm install")),
        "{err}"
    );
}

#[tokio::test]
async fn changed_diagnostics_syncs_every_path_then_answers_each_in_order() {
    let ws = workspace();
    let outside = workspace();
    let secret = write(outside.path(), "secret.fake", "ERR\n");
    std::os::unix::fs::symlink(&secret, ws.path().join("link.fake")).expect("symlink");
    let events = Events::default();
    let servers = start(fake_config(ws.path(), "pull", 0), &events);
    let a = write(ws.path(), "a.fake", "x ERR\n");
    let b = write(ws.path(), "b.fake", "WARN\n");
    write(ws.path(), "README.md", "# hi\n");
    let paths: Vec<std::path::PathBuf> = [
        "a.fake",
        "gone.fake",
        "README.md",
        "../x.fake",
        "link.fake",
        "b.fake",
    ]
    .iter()
    .map(std::path::PathBuf::from)
    .collect();
    let answers = servers.changed_diagnostics(&paths).await;
    assert_eq!(
        answers.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>(),
        paths
    );
    let severities = |i: usize| -> Vec<Severity> {
        let d = answers[i].1.as_ref().expect("diagnostics");
        assert_eq!(d.freshness, Freshness::Confirmed);
        d.diagnostics.iter().map(|d| d.severity).collect()
    };
    assert_eq!(severities(0), vec![Severity::Error]);
    assert!(
        matches!(answers[1].1, Err(LspError::Read { .. })),
        "{:?}",
        answers[1].1
    );
    assert!(
        matches!(answers[2].1, Err(LspError::NoServer { .. })),
        "{:?}",
        answers[2].1
    );
    // Neither a path above the workspace nor a link out of it is read or given to a server.
    for i in [3, 4] {
        assert!(
            matches!(answers[i].1, Err(LspError::OutsideWorkspace { .. })),
            "{:?}",
            answers[i].1
        );
    }
    assert_eq!(severities(5), vec![Severity::Warning]);

    // After an edit, the answer describes the new content.
    write(ws.path(), "a.fake", "clean\n");
    std::fs::remove_file(&b).expect("rm");
    let answers = servers.changed_diagnostics(&[a.clone(), b.clone()]).await;
    let d = answers[0].1.as_ref().expect("diagnostics");
    assert!(d.diagnostics.is_empty(), "{d:?}");
    assert!(matches!(answers[1].1, Err(LspError::Read { .. })));
    let root = std::fs::canonicalize(ws.path()).expect("root");
    assert_eq!(
        servers
            .client("fake")
            .expect("running")
            .open_documents()
            .await,
        vec![root.join("a.fake")]
    );
}

#[tokio::test]
async fn changed_diagnostics_sends_one_did_change_per_edit_and_reopens_nothing() {
    let ws = workspace();
    let events = Events::default();
    let mut config = fake_config(ws.path(), "server-requests", 0);
    // This mode neither pushes nor is pulled: each answer ends at the quiet deadline.
    config.client.wait.max_wait = Duration::from_millis(200);
    let servers = start(config, &events);
    let file = write(ws.path(), "a.fake", "one\n");
    servers.touch(&file).await.expect("open");
    for text in ["two\n", "three\n"] {
        write(ws.path(), "a.fake", text);
        let mut answers = servers
            .changed_diagnostics(std::slice::from_ref(&file))
            .await;
        // Whether the answer counts as confirmed depends on when the server's own requests
        // arrive; what this test is about is what reaches the server, below.
        answers.pop().expect("one").1.expect("diagnostics");
    }
    // Unchanged content sends nothing.
    servers
        .changed_diagnostics(std::slice::from_ref(&file))
        .await
        .pop()
        .expect("one")
        .1
        .expect("diagnostics");
    let answers: Value = serde_json::from_str(&hover_text(
        servers
            .hover(&file, Position::new(1, 1))
            .await
            .expect("hover"),
    ))
    .expect("json");
    let root = std::fs::canonicalize(ws.path()).expect("root");
    let uri = json!(format!("file://{}/a.fake", root.display()));
    assert_eq!(answers["opened"], json!([[uri, "fake", 1]]));
    assert_eq!(answers["changed"], json!([[uri, 2], [uri, 3]]));
    assert_eq!(answers.get("closed"), None);
}

#[tokio::test]
async fn paths_outside_the_workspace_and_unknown_files_are_refused() {
    let ws = workspace();
    let outside = workspace();
    let secret = write(outside.path(), "secret.fake", "ERR\n");
    std::os::unix::fs::symlink(&secret, ws.path().join("link.fake")).expect("symlink");
    let events = Events::default();
    let servers = start(fake_config(ws.path(), "push-versioned", 0), &events);
    for p in [
        secret.clone(),
        ws.path().join("../x.fake"),
        ws.path().join("link.fake"),
    ] {
        let err = servers.diagnostics(&p).await.expect_err("outside");
        assert!(
            matches!(err, LspError::OutsideWorkspace { .. }),
            "{}: {err}",
            p.display()
        );
    }
    write(ws.path(), "README.md", "# hi\n");
    assert!(matches!(
        servers.diagnostics(std::path::Path::new("README.md")).await,
        Err(LspError::NoServer { .. })
    ));
    assert!(
        events.list().is_empty(),
        "nothing was started: {:?}",
        events.list()
    );
}

#[tokio::test]
async fn documents_are_closed_when_deleted_and_beyond_the_bound() {
    let ws = workspace();
    let events = Events::default();
    let mut config = fake_config(ws.path(), "server-requests", 0);
    config.client.max_open_documents = 2;
    let servers = start(config, &events);
    let a = write(ws.path(), "a.fake", "a\n");
    let b = write(ws.path(), "b.fake", "b\n");
    let c = write(ws.path(), "c.fake", "c\n");
    servers.touch(&a).await.expect("a");
    servers.touch(&b).await.expect("b");
    servers.touch(&c).await.expect("c: closes a");
    let client = servers.client("fake").expect("running");
    let root = std::fs::canonicalize(ws.path()).expect("root");
    assert_eq!(
        client.open_documents().await,
        vec![root.join("b.fake"), root.join("c.fake")]
    );
    std::fs::remove_file(&b).expect("rm");
    servers.file_changed(&b).await.expect("deleted");
    assert_eq!(client.open_documents().await, vec![root.join("c.fake")]);
    let answers: Value = serde_json::from_str(&hover_text(
        servers.hover(&c, Position::new(1, 1)).await.expect("hover"),
    ))
    .expect("json");
    let uri = |n: &str| json!(format!("file://{}/{n}", root.display()));
    assert_eq!(answers["closed"], json!([uri("a.fake"), uri("b.fake")]));
}

#[tokio::test]
async fn shutdown_stops_every_server_and_later_calls_are_refused() {
    let ws = workspace();
    let events = Events::default();
    let servers = start(fake_config(ws.path(), "push-versioned", 0), &events);
    let file = write(ws.path(), "z.fake", "x\n");
    servers.touch(&file).await.expect("touch");
    let pid = servers.status()[0].pid.expect("pid");
    servers.shutdown().await;
    eventually("the server process is gone", || !process_exists(pid)).await;
    assert!(matches!(
        servers.diagnostics(&file).await,
        Err(LspError::Unavailable { .. })
    ));
    assert_eq!(
        events.count(|e| matches!(e, ServerEvent::Exited { .. })),
        0,
        "a requested stop is no crash"
    );
}

#[tokio::test]
async fn check_collects_diagnostics_of_a_directory_and_sets_the_exit_code() {
    let ws = workspace();
    let events = Events::default();
    let servers = start(fake_config(ws.path(), "push-versioned", 0), &events);
    write(ws.path(), "src/a.fake", "ERR\n");
    write(ws.path(), "src/b.fake", "WARN\n");
    write(ws.path(), "src/ignored.fake", "ERR\n");
    write(ws.path(), ".gitignore", "src/ignored.fake\n");
    write(ws.path(), "notes.txt", "ERR\n");
    let report = hanzo_lsp::check(&servers, &[]).await;
    let paths: Vec<&str> = report.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["src/a.fake", "src/b.fake"]);
    assert_eq!(
        (
            report.count(Severity::Error),
            report.count(Severity::Warning)
        ),
        (1, 1)
    );
    assert_eq!(hanzo_lsp::check::exit_code(&report), 1);
    assert!(
        hanzo_lsp::check::to_text(&report).ends_with("1 errors, 1 warnings in 2 files"),
        "{}",
        hanzo_lsp::check::to_text(&report)
    );
    let clean = hanzo_lsp::check(&servers, &[ws.path().join("src/b.fake")]).await;
    assert_eq!(hanzo_lsp::check::exit_code(&clean), 0);
    let missing = hanzo_lsp::check(&servers, &[ws.path().join("notes.txt")]).await;
    assert_eq!(
        (
            hanzo_lsp::check::exit_code(&missing),
            missing.failures.len()
        ),
        (2, 1),
        "an unchecked file is not a pass"
    );
    let json = serde_json::to_value(&report).expect("json");
    assert_eq!(
        json["files"][0]["diagnostics"][0]["severity"],
        json!("error")
    );
}
