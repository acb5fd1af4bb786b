//! The store reads and writes the local agents API (`hanzo-dev serve`) adds: updating an agent,
//! one agent's runs, and a run's events after a given event row (SSE resumption).

use hanzo_store::{AgentDef, NewRun, RunId, RunStore, StoreError, DEFAULT_ORG};
use serde_json::json;

fn agent(name: &str, model: &str) -> AgentDef {
    AgentDef {
        name: name.into(),
        model: model.into(),
        system_prompt: "You review code.".into(),
        tools: vec!["read_file".into()],
    }
}

fn run_of(store: &mut RunStore, agent: &str) -> RunId {
    store
        .begin_run(&NewRun {
            agent: Some(agent.into()),
            input: "task".into(),
            model: "m".into(),
            isolation: hanzo_policy::Tier::A,
        })
        .expect("begin run")
}

#[test]
fn update_agent_replaces_the_definition_and_reports_a_missing_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = RunStore::open(dir.path(), DEFAULT_ORG).expect("open");
    let created = store.create_agent(&agent("rev", "m1")).expect("create");
    let mut changed = agent("rev", "m2");
    changed.tools = vec!["grep".into(), "glob".into()];
    let updated = store
        .update_agent(&changed)
        .expect("update")
        .expect("exists");
    assert_eq!(updated.def, changed);
    assert_eq!(updated.created_ms, created.created_ms);
    assert_eq!(
        store.get_agent("rev").expect("get").expect("some").def,
        changed
    );
    assert!(store
        .update_agent(&agent("nobody", "m"))
        .expect("update")
        .is_none());
    assert!(store.get_agent("nobody").expect("get").is_none());
}

#[test]
fn update_agent_refuses_a_known_secret() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = RunStore::open(dir.path(), DEFAULT_ORG).expect("open");
    store.create_agent(&agent("rev", "m1")).expect("create");
    store.set_known_secrets(["sk-canary-0123456789abcdef"]);
    let mut leaky = agent("rev", "m1");
    leaky.system_prompt = "use sk-canary-0123456789abcdef".into();
    assert!(matches!(
        store.update_agent(&leaky),
        Err(StoreError::SecretInRecord { .. })
    ));
    assert_eq!(
        store
            .get_agent("rev")
            .expect("get")
            .expect("some")
            .def
            .system_prompt,
        "You review code."
    );
}

#[test]
fn runs_of_one_agent_newest_first_and_limited() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = RunStore::open(dir.path(), DEFAULT_ORG).expect("open");
    let a1 = run_of(&mut store, "a");
    let _b = run_of(&mut store, "b");
    let a2 = run_of(&mut store, "a");
    let ids: Vec<RunId> = store
        .list_runs_of_agent("a", 10)
        .expect("list")
        .iter()
        .map(|r| r.id)
        .collect();
    assert_eq!(ids, vec![a2, a1]);
    assert_eq!(store.list_runs_of_agent("a", 1).expect("list").len(), 1);
    assert!(store
        .list_runs_of_agent("nobody", 10)
        .expect("list")
        .is_empty());
}

#[test]
fn events_after_resumes_from_a_row_id_and_only_for_that_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = RunStore::open(dir.path(), DEFAULT_ORG).expect("open");
    let run = run_of(&mut store, "a");
    let other = run_of(&mut store, "a");
    let e1 = store
        .record_event(run, None, "one", &json!({"n": 1}))
        .expect("event");
    let _o = store
        .record_event(other, None, "other", &json!({}))
        .expect("event");
    let e2 = store
        .record_event(run, None, "two", &json!({"n": 2}))
        .expect("event");
    let e3 = store
        .record_event(run, None, "three", &json!({"n": 3}))
        .expect("event");
    let ids = |after, limit| -> Vec<i64> {
        store
            .events_after(run, after, limit)
            .expect("events")
            .iter()
            .map(|e| e.id)
            .collect()
    };
    assert_eq!(ids(0, 100), vec![e1, e2, e3]);
    assert_eq!(ids(e1, 100), vec![e2, e3]);
    assert_eq!(ids(e1, 1), vec![e2]);
    assert!(ids(e3, 100).is_empty());
    let kinds: Vec<String> = store
        .events_after(run, e1, 10)
        .expect("events")
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, ["two", "three"]);
    assert!(matches!(
        store.events_after(RunId(999), 0, 10),
        Err(StoreError::RunNotFound(RunId(999)))
    ));
}
