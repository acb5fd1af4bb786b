//! The client against real pyright (test-deps/lsp): diagnostics before and after a fix on disk,
//! definition across files, references, hover, and a server killed mid-request.

mod common;

use common::*;
use hanzo_lsp::{Freshness, LspError, Position, ServerEvent, Severity};
use std::path::Path;

const TYPE_ERROR: &str = "def f(x: int) -> int:\n    return x\n\n\ny: int = f(\"no\")\n";
const FIXED: &str = "def f(x: int) -> int:\n    return x\n\n\ny: int = f(3)\n";

#[tokio::test]
async fn a_type_error_is_diagnosed_and_gone_once_fixed_on_disk() {
    let ws = workspace();
    let events = Events::default();
    let servers = real_servers(ws.path(), &events);
    let app = write(ws.path(), "app.py", TYPE_ERROR);

    let d = servers
        .diagnostics(Path::new("app.py"))
        .await
        .expect("diagnostics");
    assert_eq!((d.server.as_str(), d.path.as_str()), ("pyright", "app.py"));
    assert_eq!(d.freshness, Freshness::Confirmed);
    let errors: Vec<_> = d
        .diagnostics
        .iter()
        .filter(|d| d.severity == Severity::Error)
        .collect();
    assert_eq!(errors.len(), 1, "{d:?}");
    let e = errors[0];
    assert_eq!(e.code.as_deref(), Some("reportArgumentType"));
    assert_eq!(e.source.as_deref(), Some("Pyright"));
    assert_eq!(
        (e.range.start, e.range.end),
        (Position::new(5, 12), Position::new(5, 16))
    );
    assert!(
        e.message.starts_with("Argument of type \"Literal['no']\" cannot be assigned to parameter \"x\" of type \"int\""),
        "{}",
        e.message
    );
    assert!(!e.message.contains('\n'), "one line: {}", e.message);

    std::fs::write(&app, FIXED).expect("fix");
    servers.file_changed(&app).await.expect("changed");
    let d = servers
        .diagnostics(&app)
        .await
        .expect("diagnostics after the fix");
    assert_eq!(d.freshness, Freshness::Confirmed);
    assert!(
        d.diagnostics.iter().all(|d| d.severity != Severity::Error),
        "{d:?}"
    );

    let client = servers.client("pyright").expect("running");
    // pyright registers pull diagnostics when the client offers them; file watchers too.
    assert!(client.uses_pull_diagnostics());
    assert!(client
        .registered_methods()
        .iter()
        .any(|m| m == "workspace/didChangeWatchedFiles"));
    assert_eq!(
        events.count(|e| matches!(e, ServerEvent::Started { .. })),
        1
    );
}

fn two_files(root: &Path) {
    write(
        root,
        "lib.py",
        "import os\n\n\ndef helper(a: int) -> str:\n    return str(a) + os.sep\n",
    );
    write(
        root,
        "main.py",
        "from lib import helper\n\nprint(helper(1))\nvalue = helper(2)\n",
    );
}

#[tokio::test]
async fn definition_across_files_lands_on_the_definition() {
    let ws = workspace();
    let events = Events::default();
    let servers = real_servers(ws.path(), &events);
    two_files(ws.path());
    // `helper` in `print(helper(1))`, line 3, column 7.
    let defs = servers
        .definition(Path::new("main.py"), Position::new(3, 7))
        .await
        .expect("definition");
    assert_eq!(defs.len(), 1, "{defs:?}");
    assert_eq!(defs[0].path, "lib.py");
    assert_eq!(
        (defs[0].range.start, defs[0].range.end),
        (Position::new(4, 5), Position::new(4, 11))
    );
}

#[tokio::test]
async fn references_find_every_use() {
    let ws = workspace();
    let events = Events::default();
    let servers = real_servers(ws.path(), &events);
    two_files(ws.path());
    servers
        .touch(Path::new("main.py"))
        .await
        .expect("open the user");
    let refs = servers
        .references(Path::new("lib.py"), Position::new(4, 5), true)
        .await
        .expect("references");
    let found: Vec<(&str, u32, u32)> = refs
        .iter()
        .map(|l| (l.path.as_str(), l.range.start.line, l.range.start.column))
        .collect();
    assert_eq!(
        found,
        vec![
            ("lib.py", 4, 5),
            ("main.py", 1, 17),
            ("main.py", 3, 7),
            ("main.py", 4, 9)
        ]
    );
    let without = servers
        .references(Path::new("lib.py"), Position::new(4, 5), false)
        .await
        .expect("references");
    assert_eq!(without.len(), 3);
}

#[tokio::test]
async fn hover_shows_the_type() {
    let ws = workspace();
    let events = Events::default();
    let servers = real_servers(ws.path(), &events);
    two_files(ws.path());
    let h = servers
        .hover(Path::new("main.py"), Position::new(4, 1))
        .await
        .expect("hover")
        .expect("something to show");
    assert!(h.text.contains("value: str"), "{}", h.text);
    let r = h.range.expect("range");
    assert_eq!((r.start, r.end), (Position::new(4, 1), Position::new(4, 6)));
}

#[tokio::test]
async fn a_server_killed_mid_request_fails_it_and_the_next_request_gets_a_new_server() {
    use nix::sys::signal::Signal;
    let ws = workspace();
    let events = Events::default();
    let servers = std::sync::Arc::new(real_servers(ws.path(), &events));
    two_files(ws.path());
    let main = Path::new("main.py");
    servers
        .hover(main, Position::new(4, 1))
        .await
        .expect("warm hover");
    let first = servers
        .status()
        .into_iter()
        .find(|s| s.name == "pyright")
        .expect("status");
    let pid = first.pid.expect("pid");

    // Stopped, the server cannot answer: the request is certainly in flight when it is killed.
    signal(pid, Signal::SIGSTOP);
    let s = servers.clone();
    let request =
        tokio::spawn(async move { s.hover(Path::new("main.py"), Position::new(3, 7)).await });
    eventually("the hover is in flight", || {
        servers
            .status()
            .iter()
            .any(|s| s.name == "pyright" && s.pending_requests > 0)
    })
    .await;
    signal(pid, Signal::SIGKILL);
    let err = request.await.expect("task").expect_err("the server died");
    assert!(
        matches!(&err, LspError::ServerExited { server, detail } if server == "pyright" && detail.contains("signal 9")),
        "{err}"
    );
    assert!(err.ended_server());

    let h = servers
        .hover(main, Position::new(4, 1))
        .await
        .expect("a new server answers")
        .expect("hover");
    assert!(h.text.contains("value: str"), "{}", h.text);
    let now = servers
        .status()
        .into_iter()
        .find(|s| s.name == "pyright")
        .expect("status");
    assert_eq!(now.starts, 2);
    assert_ne!(now.pid, Some(pid));
    assert!(!process_exists(pid));
    let list = events.list();
    assert!(
        list.iter()
            .any(|e| matches!(e, ServerEvent::Exited { server, .. } if server == "pyright")),
        "{list:?}"
    );
    assert!(
        list.iter()
            .any(|e| matches!(e, ServerEvent::Restarting { attempt: 1, .. })),
        "{list:?}"
    );
}
