//! Permission rules (HIP-0301 §7, extended): glob patterns over tool names and, optionally, over a
//! tool's primary argument; a single first-match list and the scoped policy the product uses (one list per settings scope).
//!
//! The semantics are the `permission-policy` contract in `test-vectors.md`; the vectors in
//! `test-vectors/permission-policy.json` run through [`PermissionPolicy::evaluate`] and
//! [`ScopedPolicy::evaluate`].

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
    /// The mode as settings and records spell it (`allow`, `deny`, `prompt`).
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
    /// The user's own settings file, outside any workspace.
    User,
    /// The workspace's shared `.hanzo/settings.json`.
    Project,
    /// The workspace's `.hanzo/settings.local.json`, not meant to be committed.
    Local,
}

impl Scope {
    /// The scope as settings, records and `config show` spell it (`user`, `project`, `local`).
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
    /// The pattern the rule applies to: `name-glob` or `name-glob(arg-glob)`.
    pub tool_pattern: String,
    /// What happens to a call the pattern matches.
    pub mode: PermissionMode,
    /// Why, shown to the model and the user when the rule decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl PermissionRule {
    /// A rule for `tool_pattern` with `mode` and no reason.
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
    /// The name or argument glob is malformed.
    #[error(transparent)]
    Glob(#[from] GlobError),
    /// The pattern has a `(` but does not end with an unescaped `)`; it holds the pattern.
    #[error("pattern {0:?} opens an argument pattern with `(` but does not end with `)`")]
    UnclosedArgument(String),
    /// The pattern starts with `(` (no tool name); it holds the pattern.
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
    /// Compile `name-glob` or `name-glob(arg-glob)`; the argument glob runs from the first
    /// unescaped `(` outside a `[…]` class to the final `)`.
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

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Whether the pattern constrains the argument (`name(arg)`), not only the tool name.
    pub fn has_argument_pattern(&self) -> bool {
        self.arg.is_some()
    }

    /// `arg` is the primary argument of the call (for bash: one simple command), if any. This is
    /// the literal match of the contract: no shell normalisation (see [`PermissionPolicy`]).
    pub fn matches(&self, tool: &str, arg: Option<&str>) -> bool {
        let substituted = tool == "bash" && arg.is_some_and(shell::has_substitution);
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

    /// How this pattern matches `subject` for a rule of `mode`. Allow rules see the command as
    /// written only; deny and prompt rules also see it as the shell would run it, and a reading
    /// with parts only known at run time is a possible match.
    fn match_subject(&self, tool: &str, subject: &Subject, mode: PermissionMode) -> Match {
        if !self.name.matches(tool) {
            return Match::No;
        }
        let Some(glob) = &self.arg else {
            return Match::Definite;
        };
        let Some(raw) = &subject.raw else {
            return Match::No;
        };
        if !subject.substituted && glob.matches(raw) {
            return Match::Definite;
        }
        if mode == PermissionMode::Allow {
            return Match::No;
        }
        if subject.known.iter().any(|t| glob.matches(t)) {
            return Match::Definite;
        }
        match subject.unknown.iter().find(|(_, s)| glob.could_match(s)) {
            Some((shown, _)) => Match::Possible(shown.clone()),
            None => Match::No,
        }
    }
}

/// How a pattern matches one subject.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Match {
    No,
    Definite,
    /// Only for some values of what is unknown before the command runs (shown with `…`).
    Possible(String),
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
    /// The rule's position in its list, from 0.
    pub index: usize,
    /// The rule's pattern as written.
    pub pattern: String,
    /// What is wrong with it.
    pub error: PatternError,
}

/// An ordered list of rules; the first match wins.
#[derive(Debug, Clone, Default)]
pub struct RuleList {
    rules: Vec<CompiledRule>,
}

impl RuleList {
    /// Compile `rules` in order; the first rule that does not compile is the error.
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

    /// How many rules the list has.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether the list has no rule.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The rules as configured, in order.
    pub fn rules(&self) -> impl Iterator<Item = &PermissionRule> {
        self.rules.iter().map(|r| &r.rule)
    }

    /// The rules that match `subject`, in order, with how they match.
    fn matching<'a>(
        &'a self,
        tool: &'a str,
        subject: &'a Subject,
    ) -> impl Iterator<Item = (usize, &'a PermissionRule, Match)> + 'a {
        self.rules.iter().enumerate().filter_map(move |(i, r)| {
            match r.pattern.match_subject(tool, subject, r.rule.mode) {
                Match::No => None,
                m => Some((i, &r.rule, m)),
            }
        })
    }
}

/// Which rule decided, for the audit trail. `scope` is absent for a single, unscoped list.
///
/// Serialized as `{"tier", "index", "pattern"}`: the audit record's documented form
/// (`test-vectors/README.md`), the `rule` JSON of recorded tool calls and `runs export` keep the
/// key `tier`; `scope` is accepted when reading.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuleRef {
    /// The settings scope whose list holds the rule; `None` for an unscoped [`PermissionPolicy`].
    #[serde(rename = "tier", alias = "scope")]
    pub scope: Option<Scope>,
    /// The rule's position in its list, from 0.
    pub index: usize,
    /// The rule's pattern as written.
    pub pattern: String,
}

/// The outcome of one evaluation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// What happens to the call.
    pub mode: PermissionMode,
    /// The rule that decided; `None` when no rule matched (the default, prompt).
    pub rule_matched: Option<RuleRef>,
    /// Human-readable reason: the rule's own reason, or a generated one.
    pub reason: String,
    /// For a compound shell command: the simple command that decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deciding_part: Option<String>,
}

/// The argument a `name(arg-glob)` pattern looks at: `command` for `bash`, `subcommand` for
/// `git`; for every other tool its `path`, made relative to the workspace and lexically
/// normalized so that `./src/x` and `src/../src/x` are judged like `src/x`.
pub fn primary_argument(tool: &str, input: &Value, workspace: Option<&Path>) -> Option<String> {
    match tool {
        "bash" => return input.get("command")?.as_str().map(str::to_string),
        "git" => return input.get("subcommand")?.as_str().map(str::to_string),
        _ => {}
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

/// What one call is judged on: for bash each simple command (and each command those run),
/// otherwise the call itself.
#[derive(Debug, Clone)]
struct Subject {
    /// The primary argument as written (bash: one simple command).
    raw: Option<String>,
    /// bash: the raw text holds a substitution, so no argument pattern matches it as written.
    substituted: bool,
    /// Fully known normalised readings that differ from `raw` (bash only).
    known: Vec<String>,
    /// Readings with run-time parts: for messages, and as characters with holes (`None`).
    unknown: Vec<(String, Vec<Option<char>>)>,
    /// The command that runs this one (`sh -c '…'`, `$(…)`), if it is nested: a nested subject
    /// can make the call stricter (deny, prompt), never needs an allow of its own.
    run_by: Option<String>,
}

impl Subject {
    fn plain(raw: Option<String>) -> Subject {
        Subject {
            raw,
            substituted: false,
            known: Vec::new(),
            unknown: Vec::new(),
            run_by: None,
        }
    }

    fn bash(part: &str, analysis: shell::Analysis, run_by: Option<&str>) -> Subject {
        let mut known = Vec::new();
        let mut unknown = Vec::new();
        for r in analysis.readings {
            match r.text() {
                Some(t) if t == part => {}
                Some(t) => known.push(t.to_string()),
                None => {
                    let chars = r
                        .pieces()
                        .iter()
                        .flat_map(|p| match p {
                            shell::Piece::Text(t) => t.chars().map(Some).collect::<Vec<_>>(),
                            shell::Piece::Hole => vec![None],
                        })
                        .collect();
                    unknown.push((r.display(), chars));
                }
            }
        }
        Subject {
            raw: Some(part.to_string()),
            substituted: shell::has_substitution(part),
            known,
            unknown,
            run_by: run_by.map(str::to_string),
        }
    }
}

/// How many commands of one call (nested ones included) are judged; the rest count as unknown.
const MAX_SUBJECTS: usize = 256;

fn bash_subjects(script: &str, run_by: Option<&str>, depth: usize, out: &mut Vec<Subject>) {
    for part in shell::split_simple_commands(script) {
        if out.len() >= MAX_SUBJECTS || depth > shell::MAX_DEPTH {
            // Too much to follow: whatever it runs is unknown.
            let mut s = Subject::plain(Some(part.to_string()));
            s.unknown.push(("…".to_string(), vec![None]));
            s.run_by = run_by.map(str::to_string);
            out.push(s);
            return;
        }
        let analysis = shell::analyze(part);
        let scripts = analysis.scripts.clone();
        out.push(Subject::bash(part, analysis, run_by));
        for inner in scripts {
            bash_subjects(&inner, Some(part), depth + 1, out);
        }
    }
}

/// The subjects one call is judged on.
fn subjects(tool: &str, input: &Value, workspace: Option<&Path>) -> Vec<Subject> {
    let arg = primary_argument(tool, input, workspace);
    match (tool, arg) {
        ("bash", Some(command)) => {
            let mut out = Vec::new();
            bash_subjects(&command, None, 0, &mut out);
            out
        }
        (_, arg) => vec![Subject::plain(arg)],
    }
}

struct PartVerdict {
    mode: PermissionMode,
    rule: Option<(RuleRef, Option<String>)>,
    /// Said after the reason: an allow rule that matched but did not count (untrusted).
    note: Option<String>,
    /// The deny or prompt rule (of this mode) matched only a reading with run-time parts (shown).
    possible: Option<(String, PermissionMode)>,
}

impl PartVerdict {
    fn rule(
        mode: PermissionMode,
        scope: Option<Scope>,
        index: usize,
        rule: &PermissionRule,
    ) -> Self {
        PartVerdict {
            mode,
            rule: Some((
                RuleRef {
                    scope,
                    index,
                    pattern: rule.tool_pattern.clone(),
                },
                rule.reason.clone(),
            )),
            note: None,
            possible: None,
        }
    }

    fn default_prompt(note: Option<String>) -> Self {
        PartVerdict {
            mode: PermissionMode::Prompt,
            rule: None,
            note,
            possible: None,
        }
    }

    /// A rule of `mode` matched `m`: a possible match of a deny rule prompts.
    fn matched(
        m: &Match,
        mode: PermissionMode,
        scope: Option<Scope>,
        index: usize,
        rule: &PermissionRule,
    ) -> Self {
        match m {
            Match::Possible(shown) => PartVerdict {
                possible: Some((shown.clone(), mode)),
                ..PartVerdict::rule(PermissionMode::Prompt, scope, index, rule)
            },
            _ => PartVerdict::rule(mode, scope, index, rule),
        }
    }

    /// A nested command that nothing denies or prompts for adds nothing to the decision.
    fn nested(self) -> Self {
        let objects = self.mode == PermissionMode::Deny
            || (self.mode == PermissionMode::Prompt && self.rule.is_some());
        if objects {
            self
        } else {
            PartVerdict {
                mode: PermissionMode::Allow,
                rule: None,
                note: None,
                possible: None,
            }
        }
    }
}

/// Combines the parts' verdicts: the most severe wins, the earliest among equals.
fn combine(tool: &str, parts: Vec<(Subject, PartVerdict)>) -> Decision {
    let several = parts.iter().filter(|(s, _)| s.run_by.is_none()).count() > 1;
    let (subject, verdict) = parts
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
    let scope_of = |r: &RuleRef| {
        r.scope
            .map(|t| format!(" ({t} settings)"))
            .unwrap_or_default()
    };
    let reason = match (&verdict.possible, &rule_matched) {
        (Some((shown, mode)), Some(r)) => {
            let own = rule_reason.map(|x| format!(" ({x})")).unwrap_or_default();
            format!(
                "the {mode} rule `{}`{}{own} could match `{shown}`, whose `…` is only known when \
                 the command runs; asking instead of allowing",
                r.pattern,
                scope_of(r),
            )
        }
        _ => rule_reason.unwrap_or_else(|| match &rule_matched {
            Some(r) => format!("{} by rule `{}`{}", verdict.mode, r.pattern, scope_of(r)),
            None => format!("no rule matches `{tool}`; the default is to prompt"),
        }),
    };
    let reason = match verdict.note {
        Some(note) => format!("{reason}; {note}"),
        None => reason,
    };
    let part = subject.raw.clone();
    let reason = match (&part, &subject.run_by, several) {
        (Some(p), Some(by), _) => format!("{reason} [for `{p}`, which `{by}` runs]"),
        (Some(p), None, true) => format!("{reason} [for the part `{p}` of a compound command]"),
        _ => reason,
    };
    let nested = subject.run_by.is_some();
    Decision {
        mode: verdict.mode,
        rule_matched,
        reason,
        deciding_part: if several || nested { part } else { None },
    }
}

/// HIP-0301 §7: one list, first match wins, no match → prompt.
#[derive(Debug, Clone, Default)]
pub struct PermissionPolicy {
    rules: RuleList,
    workspace: Option<PathBuf>,
}

impl PermissionPolicy {
    /// A policy over `rules` in order; fails on the first rule that does not compile.
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

    /// First match wins. For `bash`, each simple command is judged on its own (see
    /// [`crate::shell`]): allow rules see it as written; deny and prompt rules also see it as the
    /// shell would run it, and a deny rule that could match a part only known at run time makes
    /// the call prompt.
    pub fn evaluate(&self, tool: &str, input: &Value) -> Decision {
        let parts = subjects(tool, input, self.workspace.as_deref())
            .into_iter()
            .map(|subject| {
                let verdict = match self.rules.matching(tool, &subject).next() {
                    Some((index, rule, m)) => {
                        PartVerdict::matched(&m, rule.mode, None, index, rule)
                    }
                    None => PartVerdict::default_prompt(None),
                };
                let verdict = if subject.run_by.is_some() {
                    verdict.nested()
                } else {
                    verdict
                };
                (subject, verdict)
            })
            .collect();
        combine(tool, parts)
    }
}

/// The product's policy: user, project and local lists. A matching deny in any scope
/// wins; otherwise the first match scanning local, project, user; allow rules from project and local
/// count only when the workspace is trusted. Deny and prompt rules always count.
#[derive(Debug, Clone, Default)]
pub struct ScopedPolicy {
    user: RuleList,
    project: RuleList,
    local: RuleList,
    trusted: bool,
    workspace: Option<PathBuf>,
}

impl ScopedPolicy {
    /// The product's policy over the three scopes' lists; `trusted` says whether the workspace's
    /// allow rules count.
    pub fn new(user: RuleList, project: RuleList, local: RuleList, trusted: bool) -> Self {
        ScopedPolicy {
            user,
            project,
            local,
            trusted,
            workspace: None,
        }
    }

    /// Absolute `path` arguments under `root` are judged relative to it.
    pub fn with_workspace(mut self, root: impl Into<PathBuf>) -> Self {
        self.workspace = Some(root.into());
        self
    }

    /// Whether the project and local allow rules count (the workspace is trusted).
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

    fn judge(&self, tool: &str, subject: &Subject) -> PartVerdict {
        let matched: Vec<(Scope, usize, &PermissionRule, Match)> = self
            .scan_order()
            .into_iter()
            .flat_map(|(scope, list)| {
                list.matching(tool, subject)
                    .map(move |(index, rule, m)| (scope, index, rule, m))
            })
            .collect();
        let deny = |definite: bool| {
            matched.iter().find(|(_, _, r, m)| {
                r.mode == PermissionMode::Deny && (*m == Match::Definite) == definite
            })
        };
        // A deny anywhere wins; one that could match what is unknown until run time prompts.
        if let Some((scope, index, rule, m)) = deny(true).or_else(|| deny(false)) {
            return PartVerdict::matched(m, rule.mode, Some(*scope), *index, rule);
        }
        let mut skipped: Option<String> = None;
        for (scope, index, rule, m) in &matched {
            let gated = rule.mode == PermissionMode::Allow && scope.is_workspace() && !self.trusted;
            if gated {
                skipped.get_or_insert_with(|| {
                    format!(
                        "the allow rule `{}` in {scope} settings does not count until the workspace is trusted (`hanzo-dev trust`)",
                        rule.tool_pattern
                    )
                });
                continue;
            }
            let mut v = PartVerdict::matched(m, rule.mode, Some(*scope), *index, rule);
            v.note = skipped;
            return v;
        }
        PartVerdict::default_prompt(skipped)
    }

    /// A matching deny in any scope wins (one that could match a part of a shell command only
    /// known at run time prompts); otherwise the first match scanning local, project, user.
    pub fn evaluate(&self, tool: &str, input: &Value) -> Decision {
        let parts = subjects(tool, input, self.workspace.as_deref())
            .into_iter()
            .map(|subject| {
                let v = self.judge(tool, &subject);
                let v = if subject.run_by.is_some() {
                    v.nested()
                } else {
                    v
                };
                (subject, v)
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
        // The substitution runs `rm -rf /`, which is judged too.
        assert_eq!(eval("git status $(rm -rf /)"), Deny);
        assert_eq!(eval("git status $(curl x)"), Prompt);
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
    fn scopes_deny_wins_and_trust_gates_workspace_allows() {
        let t = |trusted| {
            ScopedPolicy::new(
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
                scope: Some(Scope::Local),
                index: 0,
                pattern: "bash".into()
            })
        );
    }

    /// The audit record's documented form names the scope `tier`; reading takes either key.
    #[test]
    fn a_rule_ref_is_written_with_the_key_tier_and_read_from_tier_or_scope() {
        let r = RuleRef {
            scope: Some(Scope::Project),
            index: 2,
            pattern: "bash(curl *)".into(),
        };
        let v = serde_json::to_value(&r).expect("serializes");
        assert_eq!(
            v,
            json!({"tier": "project", "index": 2, "pattern": "bash(curl *)"})
        );
        for key in ["tier", "scope"] {
            let back: RuleRef = serde_json::from_value(
                json!({key: "project", "index": 2, "pattern": "bash(curl *)"}),
            )
            .expect("deserializes");
            assert_eq!(back, r, "{key}");
        }
        let unscoped: RuleRef =
            serde_json::from_value(json!({"tier": null, "index": 0, "pattern": "x"}))
                .expect("null");
        assert_eq!(unscoped.scope, None);
    }
}
