//! Runs `test-vectors/session-compaction.json` through the supervisor's runner module for this
//! domain, compiled here by path, so the vectors and the runner are checked in this crate before
//! the supervisor registers the domain. The helpers below mirror `supervisor/src/vectors/mod.rs`.

// The runner's `super::` is this file's root, which provides the helpers it uses.
#[path = "../../../supervisor/src/vectors/session_compaction.rs"]
mod session_compaction;

mod helpers {
    use serde_json::Value;

    pub(crate) fn field<'a>(case: &'a Value, key: &str) -> Result<&'a Value, String> {
        case.get(key)
            .ok_or_else(|| format!("malformed case: missing key {key:?}"))
    }

    pub(crate) fn str_field<'a>(case: &'a Value, key: &str) -> Result<&'a str, String> {
        field(case, key)?
            .as_str()
            .ok_or_else(|| format!("malformed case: {key:?} must be a string"))
    }

    pub(crate) fn u64_field(case: &Value, key: &str) -> Result<u64, String> {
        field(case, key)?
            .as_u64()
            .ok_or_else(|| format!("malformed case: {key:?} must be a non-negative integer"))
    }
}

use helpers::{field, str_field, u64_field};
use serde_json::Value;

fn load() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../test-vectors/session-compaction.json"
    );
    let text = std::fs::read_to_string(path).expect("vector file present");
    serde_json::from_str(&text).expect("vector file is JSON")
}

#[test]
fn every_session_compaction_vector_passes() {
    let doc = load();
    assert_eq!(doc["domain"], "session-compaction");
    assert_eq!(doc["version"], 1);
    let cases = doc["cases"].as_array().expect("cases");
    assert!(cases.len() >= 20, "only {} cases", cases.len());
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|c| {
            session_compaction::run(c)
                .err()
                .map(|e| format!("{}: {e}", c["name"]))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_runner_detects_a_wrong_expectation() {
    let doc = load();
    let mut case = doc["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .find(|c| c["expect"]["compacted_count"].as_u64() > Some(0))
        .expect("a compacting case")
        .clone();
    case["expect"]["tokens_saved"] = Value::from(123_456_789u64);
    let err = session_compaction::run(&case).expect_err("must fail");
    assert!(err.contains("tokens_saved"), "{err}");
    case["summarizer"] = Value::from("maybe");
    let err = session_compaction::run(&case).expect_err("malformed");
    assert!(err.starts_with("malformed case"), "{err}");
}
