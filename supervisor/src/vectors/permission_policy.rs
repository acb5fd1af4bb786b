//! `permission-policy` vectors: single rule lists through `PermissionPolicy::evaluate`, tiered
//! cases through `TieredPolicy::evaluate` — the same evaluators the agent loop uses.
//!
//! Extension (documented in `test-vectors/README.md`): a tiered case may give
//! `"matched": {"tier": "user"|"project"|"local", "index": n} | null`, which other runners ignore.

use super::{field, str_field};
use hanzo_policy::permission::{
    PermissionMode, PermissionPolicy, PermissionRule, RuleList, RuleRef, TieredPolicy,
};
use serde_json::Value;

pub fn run(case: &Value) -> Result<(), String> {
    let tool = str_field(case, "tool")?;
    let input = case.get("input").cloned().unwrap_or(Value::Null);
    let expect: PermissionMode = str_field(case, "expect")?
        .parse()
        .map_err(|e| format!("malformed case: \"expect\": {e}"))?;
    let decision = match case.get("tiers") {
        Some(tiers) => {
            let trusted = field(case, "trusted")?
                .as_bool()
                .ok_or("malformed case: \"trusted\" must be a boolean")?;
            let list = |tier: &str| -> Result<RuleList, String> {
                let rules = match tiers.get(tier) {
                    Some(v) => parse_rules(v)?,
                    None => Vec::new(),
                };
                RuleList::new(rules).map_err(|e| format!("{tier} rules: {e}"))
            };
            TieredPolicy::new(list("user")?, list("project")?, list("local")?, trusted)
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
    let tiered = case.get("tiers").is_some();
    let key = if tiered { "matched" } else { "rule" };
    if let Some(rule) = case.get(key) {
        check_rule(rule, decision.rule_matched.as_ref(), tiered)?;
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

fn check_rule(expected: &Value, actual: Option<&RuleRef>, tiered: bool) -> Result<(), String> {
    let actual_json = match actual {
        None => Value::Null,
        Some(r) if tiered => serde_json::json!({"tier": r.tier, "index": r.index}),
        Some(r) => Value::from(r.index),
    };
    if *expected == actual_json {
        Ok(())
    } else {
        Err(format!("expected rule {expected}, got {actual_json}"))
    }
}
