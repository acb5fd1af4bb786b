//! Permission rules (HIP-0301 §7, extended): glob patterns over tool names and, optionally, over a
//! tool's primary argument; a single first-match list and the tiered policy the product uses.
//!
//! The semantics are the `permission-policy` contract in `test-vectors.md`; the vectors in
//! `test-vectors/permission-policy.json` run through [`PermissionPolicy::evaluate`] and
//! [`TieredPolicy::evaluate`].

use crate::glob::{Glob, GlobError};
use crate::shell;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::path::{Component, Path, PathBuf};
use std::str::FromStr;

/// What happens to a tool call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PermissionMode {
    /// Execute without asking.
    Allow,
    /// Refuse; the model gets the reason.
    Deny,
    /// Ask the user (or the CI approval policy) first.
    Prompt,
}

impl PermissionMode {
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionMode::Allow => "allow",
            PermissionMode::Deny => "deny",
            PermissionMode::Prompt => "prompt",
        }
    }

    /// Deny outranks prompt outranks allow when parts of one call disagree.
    fn severity(self) -> u8 {
        match self {
            PermissionMode::Allow => 0,
            PermissionMode::Prompt => 1,
            PermissionMode::Deny => 2,
        }
    }
}

impl fmt::Display for PermissionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A mode name that is not `allow`, `deny` or `prompt`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown permission mode {0:?} (expected \"allow\", \"deny\" or \"prompt\")")]
pub struct UnknownMode(pub String);

impl FromStr for PermissionMode {
    type Err = UnknownMode;
    fn from_str(s: &str) -> Result<Self, UnknownMode> {
        match s {
            "allow" => Ok(PermissionMode::Allow),
            "deny" => Ok(PermissionMode::Deny),
            "prompt" => Ok(PermissionMode::Prompt),
            other => Err(UnknownMode(other.to_string())),
        }
    }
}

/// The settings scope a rule (or any setting) came from: the user file, the project file, or the
/// local file. (The sandbox *tier* is [`crate::isolation::Tier`], a different idea.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    User,
    Project,
    Local,
}

impl Scope {
    pub fn as_str(self) -> &'static str {
        match self {
            Scope::User => "user",
            Scope::Project => "project",
            Scope::Local => "local",
        }
    }

    /// Project and local files live in the workspace, which may be someone else's repository.
    pub fn is_workspace(self) -> bool {
        !matches!(self, Scope::User)
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One rule as configured.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PermissionRule {
    pub tool_pattern: String,
    pub mode: PermissionMode,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl PermissionRule {
    pub fn new(tool_pattern: impl Into<String>, mode: PermissionMode) -> Self {
        PermissionRule {
            tool_pattern: tool_pattern.into(),
            mode,
            reason: None,
        }
    }
}

/// Why a tool pattern cannot be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error(transparent)]
    Glob(#[from] GlobError),
    #[error("pattern {0:?} opens an argument pattern with `(` but does not end with `)`")]
    UnclosedArgument(String),
    #[error("pattern {0:?} has an empty tool name before `(`")]
    EmptyName(String),
}

/// A compiled `name-glob` or `name-glob(arg-glob)`.
#[derive(Debug, Clone)]
pub struct ToolPattern {
    source: String,
    name: Glob,
    arg: Option<Glob>,
}

impl ToolPattern {
    pub fn parse(pattern: &str) -> Result<ToolPattern, PatternError> {
        let (name, arg) = match find_argument_open(pattern) {
            None => (pattern, None),
            Some(open) => {
                // The argument pattern runs to the final `)`, which must be unescaped.
                let inner = &pattern[open + 1..];
                if !inner.ends_with(')') || ends_with_escape(&inner[..inner.len() - 1]) {
                    return Err(PatternError::UnclosedArgument(pattern.to_string()));
                }
                (&pattern[..open], Some(&inner[..inner.len() - 1]))
            }
        };
        if arg.is_some() && name.is_empty() {
            return Err(PatternError::EmptyName(pattern.to_string()));
        }
        Ok(ToolPattern {
            source: pattern.to_string(),
            name: Glob::new(name)?,
            arg: arg.map(Glob::new).transpose()?,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    pub fn has_argument_pattern(&self) -> bool {
        self.arg.is_some()
    }

    /// Does the tool name match, ignoring any argument pattern?
    pub fn matches_name(&self, tool: &str) -> bool {
        self.name.matches(tool)
    }

    /// `arg` is the primary argument of the call (for bash: one simple command), if any.
    pub fn matches(&self, tool: &str, arg: Option<&str>) -> bool {
        let substituted = tool == "bash" && arg.is_some_and(shell::has_substitution);
        self.matches_prepared(tool, arg, substituted)
    }

    /// [`ToolPattern::matches`] with the substitution check done once by the caller.
    fn matches_prepared(&self, tool: &str, arg: Option<&str>, substituted: bool) -> bool {
        if !self.name.matches(tool) {
            return false;
        }
        match (&self.arg, arg) {
            (None, _) => true,
            (Some(_), None) => false,
            // A substitution's output is invisible to the glob, so it never earns a match.
            (Some(_), Some(_)) if substituted => false,
            (Some(glob), Some(arg)) => glob.matches(arg),
        }
    }
}

/// Byte offset of the first `(` that is not escaped and not inside a `[…]` class.
fn find_argument_open(pattern: &str) -> Option<usize> {
    let mut escaped = false;
    let mut in_class = false;
    let mut class_len = 0usize;
    for (i, c) in pattern.char_indices() {
        if escaped {
            escaped = false;
            class_len += 1;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '[' if !in_class => {
                in_class = true;
                class_len = 0;
                continue;
            }
            ']' if in_class && class_len > 0 => in_class = false,
            '!' if in_class && class_len == 0 => continue,
            '(' if !in_class => return Some(i),
            _ => {}
        }
        if in_class {
            class_len += 1;
        }
    }
    None
}

fn ends_with_escape(s: &str) -> bool {
    s.chars().rev().take_while(|c| *c == '\\').count() % 2 == 1
}

/// A compiled rule together with where it came from.
#[derive(Debug, Clone)]
struct CompiledRule {
    rule: PermissionRule,
    pattern: ToolPattern,
}

/// A rule that failed to compile, with its position in its list.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("permission rule #{index} ({pattern:?}): {error}")]
pub struct RuleError {
    pub index: usize,
    pub pattern: String,
    pub error: PatternError,
}

/// An ordered list of rules; the first match wins.
#[derive(Debug, Clone, Default)]
pub struct RuleList {
    rules: Vec<CompiledRule>,
}

impl RuleList {
    pub fn new(rules: Vec<PermissionRule>) -> Result<RuleList, RuleError> {
        let rules = rules
            .into_iter()
            .enumerate()
            .map(|(index, rule)| {
                let pattern =
                    ToolPattern::parse(&rule.tool_pattern).map_err(|error| RuleError {
                        index,
                        pattern: rule.tool_pattern.clone(),
                        error,
                    })?;
                Ok(CompiledRule { rule, pattern })
            })
            .collect::<Result<Vec<_>, RuleError>>()?;
        Ok(RuleList { rules })
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn rules(&self) -> impl Iterator<Item = &PermissionRule> {
        self.rules.iter().map(|r| &r.rule)
    }

    fn matching<'a>(
        &'a self,
        tool: &'a str,
        arg: Option<&'a str>,
    ) -> impl Iterator<Item = (usize, &'a PermissionRule)> + 'a {
        let substituted = tool == "bash" && arg.is_some_and(shell::has_substitution);
        self.rules
            .iter()
            .enumerate()
            .filter(move |(_, r)| r.pattern.matches_prepared(tool, arg, substituted))
            .map(|(i, r)| (i, &r.rule))
    }
}

/// Which rule decided, for the audit trail. `tier` is absent for a single, untiered list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleRef {
    pub tier: Option<Scope>,
    pub index: usize,
    pub pattern: String,
}

/// The outcome of one evaluation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub mode: PermissionMode,
    /// The rule that decided; `None` when no rule matched (the default, prompt).
    pub rule_matched: Option<RuleRef>,
    /// Human-readable reason: the rule's own reason, or a generated one.
    pub reason: String,
    /// For a compound shell command: the simple command that decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deciding_part: Option<String>,
}

/// The argument a `name(arg-glob)` pattern looks at: `command` for `bash`; for every other tool
/// its `path`, made relative to the workspace and lexically normalized so that `./src/x` and
/// `src/../src/x` are judged like `src/x`.
pub fn primary_argument(tool: &str, input: &Value, workspace: Option<&Path>) -> Option<String> {
    if tool == "bash" {
        return input.get("command")?.as_str().map(str::to_string);
    }
    let path = input.get("path")?.as_str()?;
    Some(normalize_workspace_path(path, workspace))
}

/// Lexical normalization (no file system access): drops `.` and empty components, folds `..`
/// into its parent where there is one, strips the workspace prefix from absolute paths inside it.
/// An absolute path outside the workspace stays absolute; a relative path that climbs out keeps
/// its leading `..`, so neither can match a glob meant for the workspace such as `src/**`.
pub fn normalize_workspace_path(path: &str, workspace: Option<&Path>) -> String {
    let mut p = PathBuf::from(path);
    if let Some(root) = workspace {
        if let Ok(rest) = Path::new(path).strip_prefix(root) {
            p = rest.to_path_buf();
        }
    }
    let absolute = p.is_absolute();
    let mut parts: Vec<String> = Vec::new();
    for comp in p.components() {
        match comp {
            Component::Normal(s) => parts.push(s.to_string_lossy().into_owned()),
            Component::ParentDir => {
                if parts.last().is_some_and(|l| l != "..") {
                    parts.pop();
                } else if !absolute {
                    parts.push("..".to_string());
                }
            }
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    let joined = parts.join("/");
    match (absolute, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_string(),
        (false, false) => joined,
    }
}

/// The subjects one call is judged on: for bash each simple command, otherwise the call itself.
fn subjects(tool: &str, input: &Value, workspace: Option<&Path>) -> Vec<Option<String>> {
    let arg = primary_argument(tool, input, workspace);
    match (tool, arg) {
        ("bash", Some(command)) => shell::split_simple_commands(&command)
            .into_iter()
            .map(|s| Some(s.to_string()))
            .collect(),
        (_, arg) => vec![arg],
    }
}

struct PartVerdict {
    mode: PermissionMode,
    rule: Option<(RuleRef, Option<String>)>,
    /// Said after the reason: an allow rule that matched but did not count (untrusted).
    note: Option<String>,
}

/// Combines the parts' verdicts: the most severe wins, the earliest among equals.
fn combine(tool: &str, parts: Vec<(Option<String>, PartVerdict)>) -> Decision {
    let several = parts.len() > 1;
    let (part, verdict) = parts
        .into_iter()
        .reduce(|best, next| {
            if next.1.mode.severity() > best.1.mode.severity() {
                next
            } else {
                best
            }
        })
        .expect("subjects() never returns an empty list");
    let (rule_matched, rule_reason) = match verdict.rule {
        Some((r, reason)) => (Some(r), reason),
        None => (None, None),
    };
    let reason = rule_reason.unwrap_or_else(|| match &rule_matched {
        Some(r) => {
            let tier = r
                .tier
                .map(|t| format!(" ({t} settings)"))
                .unwrap_or_default();
            format!("{} by rule `{}`{tier}", verdict.mode, r.pattern)
        }
        None => format!("no rule matches `{tool}`; the default is to prompt"),
    });
    let reason = match verdict.note {
        Some(note) => format!("{reason}; {note}"),
        None => reason,
    };
    let reason = match (&part, several) {
        (Some(p), true) => format!("{reason} [for the part `{p}` of a compound command]"),
        _ => reason,
    };
    Decision {
        mode: verdict.mode,
        rule_matched,
        reason,
        deciding_part: if several { part } else { None },
    }
}

/// HIP-0301 §7: one list, first match wins, no match → prompt.
#[derive(Debug, Clone, Default)]
pub struct PermissionPolicy {
    rules: RuleList,
    workspace: Option<PathBuf>,
}

impl PermissionPolicy {
    pub fn new(rules: Vec<PermissionRule>) -> Result<PermissionPolicy, RuleError> {
        Ok(PermissionPolicy {
            rules: RuleList::new(rules)?,
            workspace: None,
        })
    }

    /// Absolute `path` arguments under `root` are judged relative to it.
    pub fn with_workspace(mut self, root: impl Into<PathBuf>) -> Self {
        self.workspace = Some(root.into());
        self
    }

    /// The mode for a tool name alone, as in HIP-0301 (argument patterns never match).
    pub fn evaluate_name(&self, tool: &str) -> PermissionMode {
        self.evaluate(tool, &Value::Null).mode
    }

    pub fn evaluate(&self, tool: &str, input: &Value) -> Decision {
        let parts = subjects(tool, input, self.workspace.as_deref())
            .into_iter()
            .map(|arg| {
                let verdict = match self.rules.matching(tool, arg.as_deref()).next() {
                    Some((index, rule)) => PartVerdict {
                        mode: rule.mode,
                        rule: Some((
                            RuleRef {
                                tier: None,
                                index,
                                pattern: rule.tool_pattern.clone(),
                            },
                            rule.reason.clone(),
                        )),
                        note: None,
                    },
                    None => PartVerdict {
                        mode: PermissionMode::Prompt,
                        rule: None,
                        note: None,
                    },
                };
                (arg, verdict)
            })
            .collect();
        combine(tool, parts)
    }
}

/// The product's policy: user, project and local lists. A matching deny in any tier wins;
/// otherwise the first match scanning local, project, user; allow rules from project and local
/// count only when the workspace is trusted. Deny and prompt rules always count.
#[derive(Debug, Clone, Default)]
pub struct TieredPolicy {
    user: RuleList,
    project: RuleList,
    local: RuleList,
    trusted: bool,
    workspace: Option<PathBuf>,
}

impl TieredPolicy {
    pub fn new(user: RuleList, project: RuleList, local: RuleList, trusted: bool) -> Self {
        TieredPolicy {
            user,
            project,
            local,
            trusted,
            workspace: None,
        }
    }

    pub fn with_workspace(mut self, root: impl Into<PathBuf>) -> Self {
        self.workspace = Some(root.into());
        self
    }

    pub fn is_trusted(&self) -> bool {
        self.trusted
    }

    fn scan_order(&self) -> [(Scope, &RuleList); 3] {
        [
            (Scope::Local, &self.local),
            (Scope::Project, &self.project),
            (Scope::User, &self.user),
        ]
    }

    fn judge(&self, tool: &str, arg: Option<&str>) -> PartVerdict {
        let verdict = |tier: Scope, index: usize, rule: &PermissionRule| PartVerdict {
            mode: rule.mode,
            rule: Some((
                RuleRef {
                    tier: Some(tier),
                    index,
                    pattern: rule.tool_pattern.clone(),
                },
                rule.reason.clone(),
            )),
            note: None,
        };
        for (tier, list) in self.scan_order() {
            if let Some((index, rule)) = list
                .matching(tool, arg)
                .find(|(_, r)| r.mode == PermissionMode::Deny)
            {
                return verdict(tier, index, rule);
            }
        }
        let mut skipped: Option<String> = None;
        for (tier, list) in self.scan_order() {
            for (index, rule) in list.matching(tool, arg) {
                let gated =
                    rule.mode == PermissionMode::Allow && tier.is_workspace() && !self.trusted;
                if gated {
                    skipped.get_or_insert_with(|| {
                        format!(
                            "the allow rule `{}` in {tier} settings does not count until the workspace is trusted (`hanzo-dev trust`)",
                            rule.tool_pattern
                        )
                    });
                    continue;
                }
                let mut v = verdict(tier, index, rule);
                v.note = skipped;
                return v;
            }
        }
        PartVerdict {
            mode: PermissionMode::Prompt,
            rule: None,
            note: skipped,
        }
    }

    pub fn evaluate(&self, tool: &str, input: &Value) -> Decision {
        let parts = subjects(tool, input, self.workspace.as_deref())
            .into_iter()
            .map(|arg| {
                let v = self.judge(tool, arg.as_deref());
                (arg, v)
            })
            .collect();
        combine(tool, parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use PermissionMode::*;

    fn rules(list: &[(&str, PermissionMode)]) -> Vec<PermissionRule> {
        list.iter()
            .map(|(p, m)| PermissionRule::new(*p, *m))
            .collect()
    }

    #[test]
    fn pattern_parsing_splits_name_and_argument() {
        let p = ToolPattern::parse("bash(git status*)").expect("valid");
        assert!(p.has_argument_pattern());
        assert!(p.matches("bash", Some("git status --short")));
        assert!(!p.matches("bash", Some("git push")));
        assert!(!p.matches("bash", None));
        let p = ToolPattern::parse("bash(echo (hi))").expect("nested parens");
        assert!(p.matches("bash", Some("echo (hi)")));
        let p = ToolPattern::parse("a\\(b").expect("escaped paren is literal");
        assert!(p.matches("a(b", None));
        assert!(!p.has_argument_pattern());
    }

    #[test]
    fn pattern_errors_are_typed() {
        assert!(matches!(
            ToolPattern::parse("bash(git"),
            Err(PatternError::UnclosedArgument(_))
        ));
        assert!(matches!(
            ToolPattern::parse("bash(git\\)"),
            Err(PatternError::UnclosedArgument(_))
        ));
        assert!(matches!(
            ToolPattern::parse("(x)"),
            Err(PatternError::EmptyName(_))
        ));
        assert!(matches!(
            ToolPattern::parse("bash([a)"),
            Err(PatternError::Glob(_))
        ));
        let err = RuleList::new(rules(&[("ok", Allow), ("bad[", Deny)])).expect_err("bad");
        assert_eq!(err.index, 1);
        assert!(err.to_string().contains("bad["));
    }

    #[test]
    fn single_list_first_match_wins_and_default_prompt() {
        let p = PermissionPolicy::new(rules(&[("read_*", Allow), ("*", Deny)])).expect("valid");
        let d = p.evaluate("read_file", &json!({"path": "a"}));
        assert_eq!(d.mode, Allow);
        assert_eq!(d.rule_matched.as_ref().map(|r| r.index), Some(0));
        assert_eq!(p.evaluate_name("bash"), Deny);
        let empty = PermissionPolicy::new(vec![]).expect("valid");
        let d = empty.evaluate("x", &Value::Null);
        assert_eq!(d.mode, Prompt);
        assert_eq!(d.rule_matched, None);
    }

    #[test]
    fn compound_commands_need_every_part() {
        let p = PermissionPolicy::new(rules(&[
            ("bash(git status*)", Allow),
            ("bash(ls*)", Allow),
            ("bash(rm *)", Deny),
        ]))
        .expect("valid");
        let eval = |c: &str| p.evaluate("bash", &json!({ "command": c })).mode;
        assert_eq!(eval("git status && ls -la"), Allow);
        assert_eq!(eval("git status && curl x"), Prompt);
        assert_eq!(eval("ls; rm -rf /"), Deny);
        assert_eq!(eval("git status $(rm -rf /)"), Prompt);
        let d = p.evaluate("bash", &json!({"command": "ls; rm -rf /; curl"}));
        assert_eq!(d.deciding_part.as_deref(), Some("rm -rf /"));
        assert_eq!(d.rule_matched.map(|r| r.index), Some(2));
    }

    #[test]
    fn file_paths_are_normalized_before_matching() {
        assert_eq!(normalize_workspace_path("./src/a.rs", None), "src/a.rs");
        assert_eq!(
            normalize_workspace_path("src/../.git/config", None),
            ".git/config"
        );
        assert_eq!(normalize_workspace_path("../x", None), "../x");
        assert_eq!(normalize_workspace_path("src/../../x", None), "../x");
        assert_eq!(
            normalize_workspace_path("/etc/../etc/passwd", None),
            "/etc/passwd"
        );
        assert_eq!(
            normalize_workspace_path("/ws/src/a.rs", Some(Path::new("/ws"))),
            "src/a.rs"
        );
        assert_eq!(
            normalize_workspace_path("/wsx/a", Some(Path::new("/ws"))),
            "/wsx/a"
        );
        assert_eq!(normalize_workspace_path(".", None), ".");
        let p = PermissionPolicy::new(rules(&[("write_file(src/**)", Allow)]))
            .expect("valid")
            .with_workspace("/ws");
        assert_eq!(
            p.evaluate("write_file", &json!({"path": "/ws/src/x"})).mode,
            Allow
        );
        assert_eq!(
            p.evaluate("write_file", &json!({"path": "src/../../etc/passwd"}))
                .mode,
            Prompt
        );
    }

    #[test]
    fn tiers_deny_wins_and_trust_gates_workspace_allows() {
        let t = |trusted| {
            TieredPolicy::new(
                RuleList::new(rules(&[("bash", Allow), ("web_fetch", Deny)])).expect("valid"),
                RuleList::new(rules(&[("web_fetch", Allow), ("write_file", Allow)]))
                    .expect("valid"),
                RuleList::new(rules(&[("bash", Prompt)])).expect("valid"),
                trusted,
            )
        };
        assert_eq!(t(true).evaluate("web_fetch", &Value::Null).mode, Deny);
        assert_eq!(t(true).evaluate("write_file", &Value::Null).mode, Allow);
        let d = t(false).evaluate("write_file", &Value::Null);
        assert_eq!(d.mode, Prompt);
        assert!(
            d.reason
                .contains("does not count until the workspace is trusted"),
            "{}",
            d.reason
        );
        let d = t(false).evaluate("bash", &json!({"command": "ls"}));
        assert_eq!(d.mode, Prompt);
        assert_eq!(
            d.rule_matched,
            Some(RuleRef {
                tier: Some(Scope::Local),
                index: 0,
                pattern: "bash".into()
            })
        );
    }
}
