//! Session summaries (`/compact`) against real SQLite files: the next turn's context starts
//! from the newest summary, a summary must cover a turn of its own session, and the secret
//! guard refuses one that holds a known secret value, storing nothing.

use hanzo_store::{
    NewRun, NewSession, NewSessionSummary, RunId, RunStatus, RunStore, SessionId, StepEnd,
    StoreError, TokenUsage, DEFAULT_ORG,
};

fn open(dir: &std::path::Path) -> RunStore {
    RunStore::open(dir, DEFAULT_ORG).expect("open store")
}

fn new_session(store: &mut RunStore) -> SessionId {
    store
        .create_session(&NewSession {
            agent: "code".into(),
            workspace: "/w".into(),
            title: None,
        })
        .expect("session")
        .id
}

fn turn(store: &mut RunStore, s: SessionId, input: &str, answer: &str) -> RunId {
    let run = store
        .begin_session_run(
            s,
            &NewRun {
                agent: Some("code".into()),
                input: input.into(),
                model: "m".into(),
                isolation: hanzo_policy::Tier::B,
            },
        )
        .expect("begin");
    let step = store.begin_step(run).expect("step");
    store
        .finish_step(
            step,
            &StepEnd {
                text: Some(answer.into()),
                usage: TokenUsage::default(),
            },
        )
        .expect("step end");
    store
        .finish_run(run, RunStatus::Succeeded, Some("ok"), TokenUsage::default())
        .expect("finish");
    run
}

fn summary(s: SessionId, through: RunId, text: &str) -> NewSessionSummary {
    NewSessionSummary {
        session: s,
        through_run: through,
        summary: text.into(),
        turns: 2,
        tokens_before: 900,
        tokens_after: 120,
    }
}

#[test]
fn the_context_starts_from_the_newest_summary_and_the_turns_after_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = open(dir.path());
    let s = new_session(&mut store);
    let r1 = turn(&mut store, s, "one", "answer one");
    let r2 = turn(&mut store, s, "two", "answer two");
    let ctx = store.session_context(s).expect("context");
    assert_eq!(ctx.summary, None);
    assert_eq!(
        ctx.turns.iter().map(|t| t.run).collect::<Vec<_>>(),
        [r1, r2]
    );

    let first = store
        .record_session_summary(&summary(s, r2, "they said one and two"))
        .expect("summary");
    assert_eq!(
        (first.through_run, first.tokens_before, first.tokens_after),
        (r2, 900, 120)
    );
    let ctx = store.session_context(s).expect("context");
    assert_eq!(ctx.summary.as_ref().map(|x| x.id), Some(first.id));
    assert!(ctx.turns.is_empty(), "{:?}", ctx.turns);

    let r3 = turn(&mut store, s, "three", "answer three");
    let r4 = turn(&mut store, s, "four", "answer four");
    let ctx = store.session_context(s).expect("context");
    assert_eq!(
        ctx.turns.iter().map(|t| t.run).collect::<Vec<_>>(),
        [r3, r4]
    );
    assert_eq!(ctx.turns[0].user, "three");

    let second = store
        .record_session_summary(&summary(s, r3, "one, two, three"))
        .expect("second summary");
    let ctx = store.session_context(s).expect("context");
    assert_eq!(
        ctx.summary.as_ref().map(|x| x.summary.as_str()),
        Some("one, two, three")
    );
    assert_eq!(ctx.turns.iter().map(|t| t.run).collect::<Vec<_>>(), [r4]);
    // Every turn and every summary stays on record.
    assert_eq!(store.session_turns(s).expect("turns").len(), 4);
    let all = store.session_summaries(s).expect("summaries");
    assert_eq!(
        all.iter().map(|x| x.id).collect::<Vec<_>>(),
        [first.id, second.id]
    );
    // A summary older than the newest one would make the context go backwards.
    let err = store
        .record_session_summary(&summary(s, r1, "stale"))
        .expect_err("older than the newest");
    assert!(matches!(err, StoreError::Corrupt(_)), "{err:?}");
    assert_eq!(store.session_summaries(s).expect("summaries").len(), 2);
}

#[test]
fn a_summary_must_cover_a_turn_of_its_own_session() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = open(dir.path());
    let s = new_session(&mut store);
    let other = new_session(&mut store);
    turn(&mut store, s, "mine", "a");
    let theirs = turn(&mut store, other, "theirs", "b");
    match store.record_session_summary(&summary(s, theirs, "x")) {
        Err(StoreError::RunNotInSession { run, session }) => {
            assert_eq!((run, session), (theirs, s));
        }
        other => panic!("expected RunNotInSession, got {other:?}"),
    }
    match store.record_session_summary(&summary(s, RunId(9999), "x")) {
        Err(StoreError::RunNotFound(RunId(9999))) => {}
        other => panic!("expected RunNotFound, got {other:?}"),
    }
    let plain = store
        .begin_run(&NewRun {
            agent: None,
            input: "no session".into(),
            model: "m".into(),
            isolation: hanzo_policy::Tier::B,
        })
        .expect("run");
    assert!(matches!(
        store.record_session_summary(&summary(s, plain, "x")),
        Err(StoreError::RunNotInSession { .. })
    ));
    assert!(store.session_summaries(s).expect("summaries").is_empty());
    assert!(store.session_context(s).expect("context").summary.is_none());
}

#[test]
fn a_summary_holding_a_secret_is_refused_and_nothing_is_stored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = open(dir.path());
    store.set_known_secrets(["sk-ant-SECRET-in-summary-1234"]);
    let s = new_session(&mut store);
    turn(&mut store, s, "one", "a");
    let r2 = turn(&mut store, s, "two", "b");
    let err = store
        .record_session_summary(&summary(s, r2, "the key was sk-ant-SECRET-in-summary-1234"))
        .expect_err("a secret");
    assert!(
        matches!(
            err,
            StoreError::SecretInRecord {
                table: "session_summaries",
                field: "summary"
            }
        ),
        "{err:?}"
    );
    assert!(!err.to_string().contains("SECRET"), "{err}");
    let ctx = store.session_context(s).expect("context");
    assert!(ctx.summary.is_none());
    assert_eq!(ctx.turns.len(), 2, "the session is as it was");
}

#[test]
fn deleting_a_session_deletes_its_summaries() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().to_path_buf();
    let mut store = open(&path);
    let s = new_session(&mut store);
    turn(&mut store, s, "one", "a");
    let r2 = turn(&mut store, s, "two", "b");
    store
        .record_session_summary(&summary(s, r2, "sum"))
        .expect("summary");
    drop(store);
    let db = path.join("orgs").join(DEFAULT_ORG).join("agents.db");
    let conn = rusqlite::Connection::open(&db).expect("sqlite");
    conn.pragma_update(None, "foreign_keys", "ON").expect("fk");
    conn.execute("DELETE FROM sessions WHERE id = ?1", [s.0])
        .expect("delete");
    let left: i64 = conn
        .query_row("SELECT COUNT(*) FROM session_summaries", [], |r| r.get(0))
        .expect("count");
    assert_eq!(left, 0);
}
