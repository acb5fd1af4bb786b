//! The audit record every permission evaluation produces. This crate defines and emits it; the
//! run store persists it. Inputs are recorded only as a digest: a tool input may hold file
//! contents or secrets the model saw, which must not be copied into the record.

use crate::permission::{Decision, PermissionMode, RuleRef};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::time::{SystemTime, UNIX_EPOCH};

/// What one permission evaluation decided about one tool call, for the run's record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditRecord {
    /// Milliseconds since the Unix epoch (UTC).
    pub timestamp: u64,
    /// The run (or session) the call belongs to.
    pub session_id: String,
    /// The tool called.
    pub tool_name: String,
    /// `sha256:<hex>` of the compact JSON serialization of the tool input.
    pub input_digest: String,
    /// What the policy said: allow, deny or prompt.
    pub mode: PermissionMode,
    /// The rule that decided, with its scope and index in that scope's list; `None` = default.
    pub rule_matched: Option<RuleRef>,
    /// Why, in words (the rule, or the default that applied).
    pub reason: String,
}

impl AuditRecord {
    /// A record for `decision` taken at `timestamp` (ms since the epoch); pure, for tests.
    pub fn at(
        timestamp: u64,
        session_id: &str,
        tool_name: &str,
        input: &Value,
        decision: &Decision,
    ) -> AuditRecord {
        AuditRecord {
            timestamp,
            session_id: session_id.to_string(),
            tool_name: tool_name.to_string(),
            input_digest: input_digest(input),
            mode: decision.mode,
            rule_matched: decision.rule_matched.clone(),
            reason: decision.reason.clone(),
        }
    }

    /// A record for `decision` taken now.
    pub fn now(session_id: &str, tool_name: &str, input: &Value, decision: &Decision) -> Self {
        AuditRecord::at(now_ms(), session_id, tool_name, input, decision)
    }
}

/// Milliseconds since the Unix epoch; a clock before 1970 reads as 0 rather than failing.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// `sha256:<hex>` of `input`'s compact JSON: identifies an input without copying it.
pub fn input_digest(input: &Value) -> String {
    let bytes = serde_json::to_vec(input).expect("a serde_json::Value always serializes");
    format!("sha256:{}", hex(&Sha256::digest(bytes)))
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::permission::{PermissionPolicy, PermissionRule};
    use serde_json::json;

    #[test]
    fn record_carries_rule_and_digest_not_input() {
        let policy = PermissionPolicy::new(vec![PermissionRule {
            tool_pattern: "bash(rm *)".into(),
            mode: PermissionMode::Deny,
            reason: Some("no deleting".into()),
        }])
        .expect("valid");
        let input = json!({"command": "rm -rf secret-dir"});
        let d = policy.evaluate("bash", &input);
        let rec = AuditRecord::at(1_700_000_000_000, "s-1", "bash", &input, &d);
        assert_eq!(rec.mode, PermissionMode::Deny);
        assert_eq!(rec.reason, "no deleting");
        assert_eq!(rec.rule_matched.as_ref().map(|r| r.index), Some(0));
        let text = serde_json::to_string(&rec).expect("serializes");
        assert!(
            !text.contains("secret-dir"),
            "input must not be copied: {text}"
        );
        assert!(rec.input_digest.starts_with("sha256:"));
        assert_eq!(rec.input_digest.len(), "sha256:".len() + 64);
        let back: AuditRecord = serde_json::from_str(&text).expect("round trip");
        assert_eq!(back, rec);
        let v: Value = serde_json::from_str(&text).expect("json");
        for key in [
            "timestamp",
            "session_id",
            "tool_name",
            "input_digest",
            "mode",
            "rule_matched",
            "reason",
        ] {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        assert_eq!(v["rule_matched"]["pattern"], "bash(rm *)");
    }

    #[test]
    fn digest_is_sha256_of_compact_json() {
        // SHA-256("null")
        assert_eq!(
            input_digest(&Value::Null),
            "sha256:74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b"
        );
    }
}
