//! `config-merge` vectors: each scope's object is serialized to text and goes through the same
//! `parse_settings` and `merge` the loader uses; the result is compared in canonical form.
//!
//! Files are named `~/.config/hanzo/settings.json`, `.hanzo/settings.json` and
//! `.hanzo/settings.local.json` in messages, so `warnings` can match on them. The CLI scope is not
//! part of the vector format (it is covered by `hanzo-policy`'s own tests).

use super::field;
use hanzo_policy::permission::Scope;
use hanzo_policy::settings::{merge, parse_settings, CliOverrides, ScopeFile};
use serde_json::Value;
use std::collections::BTreeMap;

pub const USER_FILE: &str = "~/.config/hanzo/settings.json";
pub const PROJECT_FILE: &str = ".hanzo/settings.json";
pub const LOCAL_FILE: &str = ".hanzo/settings.local.json";

pub fn run(case: &Value) -> Result<(), String> {
    let mut files = Vec::new();
    let mut warnings = Vec::new();
    for (scope, key, name) in [
        (Scope::User, "user", USER_FILE),
        (Scope::Project, "project", PROJECT_FILE),
        (Scope::Local, "local", LOCAL_FILE),
    ] {
        let Some(v) = case.get(key) else { continue };
        let text = serde_json::to_string_pretty(v).map_err(|e| e.to_string())?;
        let (settings, w) =
            parse_settings(scope, name, &text).map_err(|e| format!("settings error: {e}"))?;
        warnings.extend(w);
        files.push(ScopeFile {
            scope,
            file: name.to_string(),
            settings,
        });
    }
    let env: BTreeMap<String, String> = match case.get("env") {
        None => BTreeMap::new(),
        Some(v) => v
            .as_object()
            .ok_or("malformed case: \"env\" must be an object")?
            .iter()
            .map(|(k, v)| {
                v.as_str()
                    .map(|s| (k.clone(), s.to_string()))
                    .ok_or_else(|| format!("malformed case: env {k:?} must be a string"))
            })
            .collect::<Result<_, String>>()?,
    };
    let trusted = match case.get("trusted") {
        None => false,
        Some(v) => v
            .as_bool()
            .ok_or("malformed case: \"trusted\" must be a boolean")?,
    };
    let merged = merge(&files, &env, &CliOverrides::default(), trusted)
        .map_err(|e| format!("settings error: {e}"))?;
    warnings.extend(merged.warnings.iter().cloned());
    let actual = merged.config.canonical_json();
    let expect = field(case, "expect")?;
    if let Some(diff) = first_difference(expect, &actual, "") {
        return Err(diff);
    }
    if let Some(wanted) = case.get("warnings") {
        let wanted = wanted
            .as_array()
            .ok_or("malformed case: \"warnings\" must be an array")?;
        let texts: Vec<String> = warnings.iter().map(ToString::to_string).collect();
        for w in wanted {
            let w = w
                .as_str()
                .ok_or("malformed case: warnings must be strings")?;
            if !texts.iter().any(|t| t.contains(w)) {
                return Err(format!(
                    "no warning contains {w:?}; warnings were {texts:?}"
                ));
            }
        }
    }
    Ok(())
}

/// The first place two JSON values differ, as `path: expected X, got Y`.
fn first_difference(expected: &Value, actual: &Value, path: &str) -> Option<String> {
    let here = if path.is_empty() { "(root)" } else { path };
    match (expected, actual) {
        (Value::Object(e), Value::Object(a)) => {
            for (k, ev) in e {
                let p = format!("{path}.{k}");
                match a.get(k) {
                    None => return Some(format!("{p}: expected {ev}, key missing")),
                    Some(av) => {
                        if let Some(d) = first_difference(ev, av, &p) {
                            return Some(d);
                        }
                    }
                }
            }
            a.iter()
                .find(|(k, _)| !e.contains_key(*k))
                .map(|(k, v)| format!("{path}.{k}: unexpected key with value {v}"))
        }
        (Value::Array(e), Value::Array(a)) if e.len() == a.len() => e
            .iter()
            .zip(a)
            .enumerate()
            .find_map(|(i, (ev, av))| first_difference(ev, av, &format!("{path}[{i}]"))),
        _ if expected == actual => None,
        _ => Some(format!("{here}: expected {expected}, got {actual}")),
    }
}
