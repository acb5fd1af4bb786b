//! Typed records of how a tool call was decided, serialised in the documented form
//! (`docs/run-events.md`: `decided_by` is `rule`, `default`, `approval:<mode>`, `hook` or
//! `agent`), so that the store, the event stream and the terminal agree without assembling
//! strings in place.

use crate::hooks::PreHookVerdict;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// Who decided whether a tool call ran.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DecidedBy {
    /// A permission rule (its reference is in the audit record).
    Rule,
    /// No rule matched; the default applied.
    Default,
    /// The approval step: a person at the terminal (`prompt`) or a non-interactive mode
    /// (`deny`, `allow-listed`, `allow`); serialised `approval:<mode>`.
    Approval(String),
    /// A pre-tool-use hook.
    Hook,
    /// The agent definition (the tool is not in the agent's list).
    Agent,
}

impl DecidedBy {
    /// The documented string.
    pub fn as_string(&self) -> String {
        match self {
            DecidedBy::Rule => "rule".into(),
            DecidedBy::Default => "default".into(),
            DecidedBy::Approval(mode) => format!("approval:{mode}"),
            DecidedBy::Hook => "hook".into(),
            DecidedBy::Agent => "agent".into(),
        }
    }

    /// Parses the documented string; `approval` alone is an approval of unknown mode.
    pub fn parse(s: &str) -> Option<DecidedBy> {
        Some(match s {
            "rule" => DecidedBy::Rule,
            "default" => DecidedBy::Default,
            "hook" => DecidedBy::Hook,
            "agent" => DecidedBy::Agent,
            "approval" => DecidedBy::Approval(String::new()),
            other => DecidedBy::Approval(other.strip_prefix("approval:")?.to_string()),
        })
    }

    /// `rule` when a rule matched, else `default`: the policy step's own answer.
    pub fn of_policy(rule_matched: bool) -> DecidedBy {
        if rule_matched {
            DecidedBy::Rule
        } else {
            DecidedBy::Default
        }
    }
}

impl fmt::Display for DecidedBy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.as_string())
    }
}

impl Serialize for DecidedBy {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.as_string())
    }
}

impl<'de> Deserialize<'de> for DecidedBy {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        DecidedBy::parse(&s).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "unknown decided_by {s:?} (expected rule, default, approval:<mode>, hook or agent)"
            ))
        })
    }
}

/// When a hook ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HookPhase {
    /// Before the call: the hook may block it.
    Pre,
    /// After the call: the hook only reports.
    Post,
}

/// One entry of a tool call's `hook_results`, as the store keeps it:
/// `{"phase", "allowed", "failed", "reason", "decided_by"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HookRecord {
    /// When it ran.
    pub phase: HookPhase,
    /// Whether the call may go on (always true after the call).
    pub allowed: bool,
    /// The hook failed (exit other than 0/2, signal, timeout, could not start) rather than denied.
    pub failed: bool,
    /// The hook's reason, when it gave one.
    pub reason: Option<String>,
    /// The command of the hook that decided, if one denied or failed.
    pub decided_by: Option<String>,
}

impl HookRecord {
    /// The record of a pre-tool-use verdict; `hook` is the deciding hook's command.
    pub fn pre(verdict: &PreHookVerdict, hook: Option<&str>) -> HookRecord {
        HookRecord {
            phase: HookPhase::Pre,
            allowed: verdict.is_allow(),
            failed: matches!(verdict, PreHookVerdict::Failed { .. }),
            reason: verdict.deny_reason().map(str::to_string),
            decided_by: hook.map(str::to_string),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decided_by_uses_the_documented_strings() {
        let all = [
            (DecidedBy::Rule, "rule"),
            (DecidedBy::Default, "default"),
            (
                DecidedBy::Approval("allow-listed".into()),
                "approval:allow-listed",
            ),
            (DecidedBy::Hook, "hook"),
            (DecidedBy::Agent, "agent"),
        ];
        for (d, s) in all {
            assert_eq!(serde_json::to_value(&d).expect("serializes"), s);
            assert_eq!(
                serde_json::from_value::<DecidedBy>(s.into()).expect("parses"),
                d
            );
            assert_eq!(d.to_string(), s);
        }
        assert_eq!(
            DecidedBy::parse("approval"),
            Some(DecidedBy::Approval(String::new()))
        );
        assert!(serde_json::from_value::<DecidedBy>("user".into()).is_err());
        assert_eq!(DecidedBy::of_policy(true), DecidedBy::Rule);
        assert_eq!(DecidedBy::of_policy(false), DecidedBy::Default);
    }

    #[test]
    fn hook_records_have_the_stored_shape() {
        let deny = PreHookVerdict::Deny {
            reason: "no pushing".into(),
        };
        let r = HookRecord::pre(&deny, Some("./check.sh"));
        assert_eq!(
            serde_json::to_value(&r).expect("serializes"),
            serde_json::json!({"phase": "pre", "allowed": false, "failed": false,
                "reason": "no pushing", "decided_by": "./check.sh"})
        );
        let failed = PreHookVerdict::Failed {
            reason: "timed out".into(),
            log: "l".into(),
        };
        assert!(HookRecord::pre(&failed, None).failed);
        let ok = HookRecord::pre(&PreHookVerdict::Allow, None);
        assert!(ok.allowed && ok.reason.is_none());
    }
}
