//! `permission-policy` vectors: single rule lists through `PermissionPolicy::evaluate`, scoped
//! cases (one list per settings scope) through `ScopedPolicy::evaluate` — the same evaluators the
//! agent loop uses.
//!
//! The contract spells the scoped case's lists `"tiers"`; `"scopes"` is read the same way.
//! Extension (documented in `test-vectors/README.md`): a scoped case may give
//! `"matched": {"tier": "user"|"project"|"local", "index": n} | null` (or `"scope"` for `"tier"`),
//! which other runners ignore.

use super::{field, str_field};
use hanzo_policy::permission::{
    PermissionMode, PermissionPolicy, PermissionRule, RuleList, RuleRef, ScopedPolicy,
};
use serde_json::Value;

pub fn run(case: &Value) -> Result<(), String> {
    let tool = str_field(case, "tool")?;
    let input = case.get("input").cloned().unwrap_or(Value::Null);
    let expect: PermissionMode = str_field(case, "expect")?
        .parse()
        .map_err(|e| format!("malformed case: \"expect\": {e}"))?;
    let scopes = match (case.get("tiers"), case.get("scopes")) {
        (Some(_), Some(_)) => {
            return Err("malformed case: give \"tiers\" or \"scopes\", not both".into())
        }
        (t, s) => t.or(s),
    };
    let decision = match scopes {
        Some(scopes) => {
            let trusted = field(case, "trusted")?
                .as_bool()
                .ok_or("malformed case: \"trusted\" must be a boolean")?;
            let list = |scope: &str| -> Result<RuleList, String> {
                let rules = match scopes.get(scope) {
                    Some(v) => parse_rules(v)?,
                    None => Vec::new(),
                };
                RuleList::new(rules).map_err(|e| format!("{scope} rules: {e}"))
            };
            ScopedPolicy::new(list("user")?, list("project")?, list("local")?, trusted)
                .evaluate(tool, &input)
        }
        None => PermissionPolicy::new(parse_rules(field(case, "rules")?)?)
            .map_err(|e| e.to_string())?
            .evaluate(tool, &input),
    };
    if decision.mode != expect {
        return Err(format!(
            "expected {expect}, got {} ({})",
            decision.mode, decision.reason
        ));
    }
    let scoped = scopes.is_some();
    let key = if scoped { "matched" } else { "rule" };
    if let Some(rule) = case.get(key) {
        check_rule(rule, decision.rule_matched.as_ref(), scoped)?;
    }
    Ok(())
}

fn parse_rules(v: &Value) -> Result<Vec<PermissionRule>, String> {
    v.as_array()
        .ok_or("malformed case: a rule list must be an array")?
        .iter()
        .map(|r| {
            serde_json::from_value::<PermissionRule>(r.clone())
                .map_err(|e| format!("malformed case: rule {r}: {e}"))
        })
        .collect()
}

/// Compares with the key the case uses for the scope: `"tier"` (the documented form) or
/// `"scope"`.
fn check_rule(expected: &Value, actual: Option<&RuleRef>, scoped: bool) -> Result<(), String> {
    let scope_key = if expected.get("scope").is_some() {
        "scope"
    } else {
        "tier"
    };
    let actual_json = match actual {
        None => Value::Null,
        Some(r) if scoped => serde_json::json!({scope_key: r.scope, "index": r.index}),
        Some(r) => Value::from(r.index),
    };
    if *expected == actual_json {
        Ok(())
    } else {
        Err(format!("expected rule {expected}, got {actual_json}"))
    }
}
