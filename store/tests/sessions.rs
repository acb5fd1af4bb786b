//! Sessions against real SQLite files: creating, listing, linking runs as turns, reading the
//! conversation back, and the secret guard.

use hanzo_store::{
    NewRun, NewSession, RunStatus, RunStore, SessionId, StepEnd, StoreError, TokenUsage,
    DEFAULT_ORG,
};

fn open(dir: &std::path::Path) -> RunStore {
    RunStore::open(dir, DEFAULT_ORG).expect("open store")
}

fn session(workspace: &str) -> NewSession {
    NewSession {
        agent: "code".into(),
        workspace: workspace.into(),
        title: None,
    }
}

fn turn_input(input: &str) -> NewRun {
    NewRun {
        agent: Some("code".into()),
        input: input.into(),
        model: "claude-sonnet".into(),
        isolation: hanzo_policy::Tier::B,
    }
}

/// A turn with one step whose text is `answer`, finished with `status`.
fn record_turn(
    store: &mut RunStore,
    s: SessionId,
    input: &str,
    answer: Option<&str>,
    status: RunStatus,
) -> hanzo_store::RunId {
    let run = store
        .begin_session_run(s, &turn_input(input))
        .expect("begin");
    let step = store.begin_step(run).expect("step");
    store
        .finish_step(
            step,
            &StepEnd {
                text: answer.map(str::to_string),
                usage: TokenUsage::default(),
            },
        )
        .expect("finish step");
    store
        .finish_run(run, status, Some("done"), TokenUsage::default())
        .expect("finish run");
    run
}

#[test]
fn a_session_is_created_listed_and_read_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = open(dir.path());
    let a = store.create_session(&session("/work/a")).expect("create");
    let b = store.create_session(&session("/work/b")).expect("create");
    assert_ne!(a.id, b.id);
    assert_eq!(store.get_session(a.id).expect("get"), a);
    let all = store.list_sessions(None, 10).expect("list");
    assert_eq!(all.iter().map(|s| s.id).collect::<Vec<_>>(), [b.id, a.id]);
    let only_a = store.list_sessions(Some("/work/a"), 10).expect("list");
    assert_eq!(only_a.len(), 1);
    assert_eq!(only_a[0], a);
    store
        .set_session_title(a.id, "fix the pager")
        .expect("title");
    assert_eq!(
        store.get_session(a.id).expect("get").title.as_deref(),
        Some("fix the pager")
    );
    match store.get_session(SessionId(999)) {
        Err(StoreError::SessionNotFound(SessionId(999))) => {}
        other => panic!("expected SessionNotFound, got {other:?}"),
    }
}

#[test]
fn turns_are_runs_of_the_session_and_its_conversation_reads_back() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = open(dir.path());
    let s = store.create_session(&session("/w")).expect("create").id;
    let other = store.create_session(&session("/w")).expect("create").id;
    let plain = store
        .begin_run(&turn_input("not in a session"))
        .expect("run");
    let r1 = record_turn(
        &mut store,
        s,
        "what does pages.py do?",
        Some("It splits."),
        RunStatus::Succeeded,
    );
    record_turn(
        &mut store,
        other,
        "elsewhere",
        Some("x"),
        RunStatus::Succeeded,
    );
    let r2 = record_turn(&mut store, s, "run the tests", None, RunStatus::Cancelled);
    let runs = store.list_session_runs(s).expect("runs");
    assert_eq!(runs.iter().map(|r| r.id).collect::<Vec<_>>(), [r1, r2]);
    assert_eq!(store.run_session(r1).expect("link"), Some(s));
    assert_eq!(store.run_session(plain).expect("link"), None);
    let turns = store.session_turns(s).expect("turns");
    assert_eq!(turns.len(), 2);
    assert_eq!(turns[0].user, "what does pages.py do?");
    assert_eq!(turns[0].answer.as_deref(), Some("It splits."));
    assert_eq!(turns[0].status, RunStatus::Succeeded);
    assert_eq!(turns[1].answer, None);
    assert_eq!(turns[1].status, RunStatus::Cancelled);
    // The session moved on when its turns began.
    let got = store.get_session(s).expect("get");
    assert!(got.updated_ms >= got.created_ms);
    assert_eq!(store.list_sessions(None, 1).expect("list")[0].id, s);
}

#[test]
fn a_run_cannot_join_a_missing_session() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = open(dir.path());
    match store.begin_session_run(SessionId(42), &turn_input("x")) {
        Err(StoreError::SessionNotFound(SessionId(42))) => {}
        other => panic!("expected SessionNotFound, got {other:?}"),
    }
    assert!(
        store.list_runs(10).expect("list").is_empty(),
        "a run was left behind"
    );
    assert!(matches!(
        store.list_session_runs(SessionId(42)),
        Err(StoreError::SessionNotFound(_))
    ));
}

#[test]
fn a_secret_never_reaches_a_session_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = open(dir.path());
    let secret = "sk-ant-canary-0123456789abcdef";
    store.set_known_secrets([secret]);
    let bad = NewSession {
        title: Some(format!("use {secret}")),
        ..session("/w")
    };
    assert!(matches!(
        store.create_session(&bad),
        Err(StoreError::SecretInRecord {
            table: "sessions",
            field: "title"
        })
    ));
    let s = store.create_session(&session("/w")).expect("create").id;
    assert!(matches!(
        store.set_session_title(s, secret),
        Err(StoreError::SecretInRecord { .. })
    ));
    assert!(matches!(
        store.begin_session_run(s, &turn_input(secret)),
        Err(StoreError::SecretInRecord { table: "runs", .. })
    ));
}

#[test]
fn titles_are_the_first_line_cut_short() {
    assert_eq!(
        hanzo_store::title_from("\n  fix it \nmore"),
        Some("fix it".into())
    );
    assert_eq!(hanzo_store::title_from("   \n "), None);
    let long = "x".repeat(200);
    assert_eq!(
        hanzo_store::title_from(&long).map(|t| t.chars().count()),
        Some(hanzo_store::TITLE_MAX_CHARS)
    );
}
