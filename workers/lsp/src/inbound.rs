//! What a server asks and tells us, and what we keep of it: the answers to its requests
//! (`workspace/configuration`, registrations, progress tokens, message requests, workspace
//! folders), the latest pushed diagnostics per file, and its log. Every collection here is
//! bounded, because all of it is filled by the server.

use crate::conn::{codes, lock, Inbound};
use crate::sanitize;
use crate::text::uri_to_path;
use globset::{GlobBuilder, GlobMatcher};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::sync::watch;

/// One line of what a server said, for the log callback.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerLog {
    /// The server's name in `lsp_servers`.
    pub server: String,
    /// What kind of message it was.
    pub kind: LogKind,
    /// One line, sanitised, at most [`MAX_LOG_LINE`] bytes.
    pub message: String,
}

/// The longest log line passed on, in bytes.
pub const MAX_LOG_LINE: usize = 1024;

/// Where a [`ServerLog`] line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogKind {
    /// `window/logMessage` or `showMessage` of type Error.
    Error,
    /// `window/logMessage` or `showMessage` of type Warning.
    Warning,
    /// `window/logMessage` or `showMessage` of type Info.
    Info,
    /// Any other `logMessage`/`showMessage`, or `$/logTrace`.
    Log,
    /// `$/progress` (begin, report, end).
    Progress,
    /// A line of the server's stderr.
    Stderr,
}

/// Where server logs go (the worker forwards them to `tracing`).
pub type LogSink = Arc<dyn Fn(&ServerLog) + Send + Sync>;

/// Bounds of what a server can make us keep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreLimits {
    /// Files with pushed diagnostics kept (the oldest goes first).
    pub max_files: usize,
    /// Diagnostics kept per file (the rest are dropped and counted).
    pub max_diagnostics_per_file: usize,
    /// Dynamic registrations and progress tokens kept.
    pub max_registrations: usize,
}

impl Default for StoreLimits {
    fn default() -> Self {
        StoreLimits {
            max_files: 4096,
            max_diagnostics_per_file: 1000,
            max_registrations: 256,
        }
    }
}

/// A diagnostic as a server sent it, parsed leniently: a malformed `codeDescription` or
/// `relatedInformation` (which we do not use) must not cost the whole publish.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RawDiagnostic {
    /// Where in the file.
    pub range: lsp_types::Range,
    /// How bad (`None`: the server did not say).
    #[serde(default)]
    pub severity: Option<lsp_types::DiagnosticSeverity>,
    /// The rule's code, a number or a string.
    #[serde(default)]
    pub code: Option<Value>,
    /// Who produced it (`Pyright`, `typescript`).
    #[serde(default)]
    pub source: Option<String>,
    /// The message, unfiltered.
    pub message: String,
}

/// The latest publish for one file.
#[derive(Debug, Clone)]
pub struct Pushed {
    /// The document version the publish named, if it named one.
    pub version: Option<i32>,
    /// The diagnostics, at most [`StoreLimits::max_diagnostics_per_file`].
    pub items: Vec<RawDiagnostic>,
    /// When the publish arrived.
    pub at: Instant,
    /// When the last few publishes for the file arrived, oldest first (`at` is the last).
    pub recent: VecDeque<Instant>,
}

const RECENT_PUBLISHES: usize = 8;

/// A watcher the server registered for `workspace/didChangeWatchedFiles`.
#[derive(Debug, Clone)]
pub struct Watcher {
    glob: GlobMatcher,
    base: Option<PathBuf>,
    /// Bit mask: 1 create, 2 change, 4 delete.
    kind: u32,
}

#[derive(Debug, Clone)]
struct Registration {
    id: String,
    method: String,
    options: Value,
    watchers: Vec<Watcher>,
}

/// The document selector of a pull-diagnostics provider, and its identifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullProvider {
    /// The provider's `identifier`, sent back in each pull request.
    pub identifier: Option<String>,
    /// The files it handles; `None`: every file.
    pub selector: Option<Vec<lsp_types::DocumentFilter>>,
}

/// Kinds of file change for `workspace/didChangeWatchedFiles`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileChange {
    /// The file was created.
    Created = 1,
    /// The file changed.
    Changed = 2,
    /// The file was deleted.
    Deleted = 3,
}

/// The server-facing state of one client; the connection's reader calls into it.
pub struct Inbox {
    /// The server's name in `lsp_servers`.
    pub name: String,
    /// The workspace root the server was started for.
    pub root: PathBuf,
    /// The root's `file://` URI.
    pub root_uri: String,
    settings: Value,
    log: LogSink,
    limits: StoreLimits,
    registrations: Mutex<Vec<Registration>>,
    progress: Mutex<HashSet<String>>,
    pushed: Mutex<HashMap<PathBuf, Pushed>>,
    /// Bumped on every publish, so waiters wake.
    pub push_seq: watch::Sender<u64>,
    /// Bumped on every registration and unregistration.
    pub registrations_seq: watch::Sender<u64>,
    /// Bumped on every `workspace/diagnostic/refresh`.
    pub refreshes: watch::Sender<u64>,
}

impl Inbox {
    /// The state for server `name` at `root`, answering `workspace/configuration` from `settings`
    /// and passing log lines to `log`.
    pub fn new(
        name: String,
        root: PathBuf,
        root_uri: String,
        settings: Option<Value>,
        log: LogSink,
        limits: StoreLimits,
    ) -> Self {
        Inbox {
            name,
            root,
            root_uri,
            settings: settings.unwrap_or(Value::Null),
            log,
            limits,
            registrations: Mutex::new(Vec::new()),
            progress: Mutex::new(HashSet::new()),
            pushed: Mutex::new(HashMap::new()),
            push_seq: watch::channel(0).0,
            registrations_seq: watch::channel(0).0,
            refreshes: watch::channel(0).0,
        }
    }

    /// Pass one line to the log callback (made one line, bounded, sanitised; empty lines dropped).
    pub fn log(&self, kind: LogKind, message: &str) {
        let message = sanitize::bounded(sanitize::one_line(message), MAX_LOG_LINE, "…");
        if message.is_empty() {
            return;
        }
        (self.log)(&ServerLog {
            server: self.name.clone(),
            kind,
            message,
        });
    }

    /// The latest publish for `path`.
    pub fn pushed(&self, path: &Path) -> Option<Pushed> {
        lock(&self.pushed).get(path).cloned()
    }

    /// Drop the pushed diagnostics of `path` (its document was closed).
    pub fn forget(&self, path: &Path) {
        lock(&self.pushed).remove(path);
    }

    /// Pull providers registered dynamically.
    pub fn dynamic_pull_providers(&self) -> Vec<PullProvider> {
        lock(&self.registrations)
            .iter()
            .filter(|r| r.method == "textDocument/diagnostic")
            .map(|r| PullProvider {
                identifier: r
                    .options
                    .get("identifier")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                selector: r
                    .options
                    .get("documentSelector")
                    .and_then(|s| serde_json::from_value(s.clone()).ok()),
            })
            .collect()
    }

    /// The registered methods, in registration order (for status and tests).
    pub fn registered_methods(&self) -> Vec<String> {
        lock(&self.registrations)
            .iter()
            .map(|r| r.method.clone())
            .collect()
    }

    /// Whether a registered watcher wants to hear about this change.
    pub fn watches(&self, path: &Path, change: FileChange) -> bool {
        let bit = match change {
            FileChange::Created => 1,
            FileChange::Changed => 2,
            FileChange::Deleted => 4,
        };
        let relative = path.strip_prefix(&self.root).ok();
        lock(&self.registrations)
            .iter()
            .flat_map(|r| r.watchers.iter())
            .any(|w| {
                if w.kind & bit == 0 {
                    return false;
                }
                match &w.base {
                    Some(base) => path
                        .strip_prefix(base)
                        .is_ok_and(|rel| w.glob.is_match(rel)),
                    None => {
                        w.glob.is_match(path) || relative.is_some_and(|rel| w.glob.is_match(rel))
                    }
                }
            })
    }

    /// Active work-done progress tokens (the server said it is busy).
    pub fn busy(&self) -> bool {
        !lock(&self.progress).is_empty()
    }

    fn configuration(&self, params: &Value) -> Result<Value, (i64, String)> {
        let items = params.get("items").and_then(Value::as_array).ok_or((
            codes::INVALID_PARAMS,
            "configuration params need items".to_string(),
        ))?;
        let answers = items
            .iter()
            .map(|item| match item.get("section").and_then(Value::as_str) {
                None | Some("") => self.settings.clone(),
                Some(section) => lookup_section(&self.settings, section),
            })
            .collect();
        Ok(Value::Array(answers))
    }

    fn register(&self, params: &Value) -> Result<Value, (i64, String)> {
        let regs = params
            .get("registrations")
            .and_then(Value::as_array)
            .ok_or((
                codes::INVALID_PARAMS,
                "registerCapability needs registrations".to_string(),
            ))?;
        let mut all = lock(&self.registrations);
        if all.len() + regs.len() > self.limits.max_registrations {
            return Err((
                codes::INVALID_PARAMS,
                format!("more than {} registrations", self.limits.max_registrations),
            ));
        }
        for r in regs {
            let (Some(id), Some(method)) = (
                r.get("id").and_then(Value::as_str),
                r.get("method").and_then(Value::as_str),
            ) else {
                return Err((
                    codes::INVALID_PARAMS,
                    "a registration needs id and method".to_string(),
                ));
            };
            let options = r.get("registerOptions").cloned().unwrap_or(Value::Null);
            let watchers = if method == "workspace/didChangeWatchedFiles" {
                self.compile_watchers(&options)
            } else {
                Vec::new()
            };
            all.retain(|x| x.id != id);
            all.push(Registration {
                id: id.to_string(),
                method: method.to_string(),
                options,
                watchers,
            });
        }
        drop(all);
        self.registrations_seq.send_modify(|s| *s += 1);
        Ok(Value::Null)
    }

    fn compile_watchers(&self, options: &Value) -> Vec<Watcher> {
        let mut out = Vec::new();
        for w in options
            .get("watchers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .take(256)
        {
            let kind = w
                .get("kind")
                .and_then(Value::as_u64)
                .map_or(7, |k| (k & 7) as u32);
            let (pattern, base) = match w.get("globPattern") {
                Some(Value::String(p)) => (p.as_str(), None),
                Some(rel @ Value::Object(_)) => {
                    let base = rel
                        .get("baseUri")
                        .and_then(|b| b.as_str().or_else(|| b.get("uri").and_then(Value::as_str)))
                        .and_then(uri_to_path);
                    match (rel.get("pattern").and_then(Value::as_str), base) {
                        (Some(p), Some(b)) => (p, Some(b)),
                        _ => continue,
                    }
                }
                _ => continue,
            };
            match GlobBuilder::new(pattern).literal_separator(true).build() {
                Ok(g) => out.push(Watcher {
                    glob: g.compile_matcher(),
                    base,
                    kind,
                }),
                Err(_) => self.log(
                    LogKind::Warning,
                    &format!("ignored a file watcher with an invalid glob {pattern:?}"),
                ),
            }
        }
        out
    }

    fn unregister(&self, params: &Value) -> Result<Value, (i64, String)> {
        // The specification keeps the historical misspelling `unregisterations`.
        let list = params
            .get("unregisterations")
            .or_else(|| params.get("unregistrations"))
            .and_then(Value::as_array)
            .ok_or((
                codes::INVALID_PARAMS,
                "unregisterCapability needs unregisterations".to_string(),
            ))?;
        let ids: HashSet<&str> = list
            .iter()
            .filter_map(|u| u.get("id").and_then(Value::as_str))
            .collect();
        lock(&self.registrations).retain(|r| !ids.contains(r.id.as_str()));
        self.registrations_seq.send_modify(|s| *s += 1);
        Ok(Value::Null)
    }

    fn create_progress(&self, params: &Value) -> Result<Value, (i64, String)> {
        let token = progress_token(params).ok_or((
            codes::INVALID_PARAMS,
            "a progress token is needed".to_string(),
        ))?;
        let mut tokens = lock(&self.progress);
        if tokens.len() >= self.limits.max_registrations {
            return Err((
                codes::INVALID_PARAMS,
                format!(
                    "more than {} progress tokens",
                    self.limits.max_registrations
                ),
            ));
        }
        tokens.insert(token);
        Ok(Value::Null)
    }

    fn progress(&self, params: &Value) {
        let Some(token) = progress_token(params) else {
            return;
        };
        let value = params.get("value").cloned().unwrap_or(Value::Null);
        let kind = value.get("kind").and_then(Value::as_str).unwrap_or("");
        let text = [value.get("title"), value.get("message")]
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join(": ");
        let percent = value
            .get("percentage")
            .and_then(Value::as_u64)
            .map(|p| format!(" ({p}%)"))
            .unwrap_or_default();
        match kind {
            "begin" => {
                let mut tokens = lock(&self.progress);
                if tokens.len() < self.limits.max_registrations {
                    tokens.insert(token);
                }
            }
            "end" => {
                lock(&self.progress).remove(&token);
            }
            _ => {}
        }
        self.log(LogKind::Progress, &format!("{kind} {text}{percent}"));
    }

    fn publish(&self, params: Value) {
        #[derive(Deserialize)]
        struct Publish {
            uri: String,
            #[serde(default)]
            version: Option<i32>,
            diagnostics: Vec<Value>,
        }
        let Ok(p) = serde_json::from_value::<Publish>(params) else {
            self.log(LogKind::Warning, "skipped a malformed publishDiagnostics");
            return;
        };
        let Some(path) = uri_to_path(&p.uri) else {
            return;
        };
        let total = p.diagnostics.len();
        let items: Vec<RawDiagnostic> = p
            .diagnostics
            .into_iter()
            .take(self.limits.max_diagnostics_per_file)
            .filter_map(|d| serde_json::from_value(d).ok())
            .collect();
        if total > self.limits.max_diagnostics_per_file {
            self.log(
                LogKind::Warning,
                &format!(
                    "kept {} of {total} diagnostics for {}",
                    items.len(),
                    path.display()
                ),
            );
        }
        {
            let mut pushed = lock(&self.pushed);
            if !pushed.contains_key(&path) && pushed.len() >= self.limits.max_files {
                if let Some(oldest) = pushed
                    .iter()
                    .min_by_key(|(_, v)| v.at)
                    .map(|(k, _)| k.clone())
                {
                    pushed.remove(&oldest);
                }
            }
            let now = Instant::now();
            let mut recent = pushed.remove(&path).map(|p| p.recent).unwrap_or_default();
            if recent.len() == RECENT_PUBLISHES {
                recent.pop_front();
            }
            recent.push_back(now);
            pushed.insert(
                path,
                Pushed {
                    version: p.version,
                    items,
                    at: now,
                    recent,
                },
            );
        }
        self.push_seq.send_modify(|s| *s += 1);
    }
}

fn progress_token(params: &Value) -> Option<String> {
    match params.get("token")? {
        Value::String(s) => Some(format!("s:{s}")),
        Value::Number(n) => Some(format!("n:{n}")),
        _ => None,
    }
}

/// `python.analysis` in `{"python": {"analysis": {...}}}`, or a literal `"python.analysis"` key;
/// `null` when absent.
fn lookup_section(settings: &Value, section: &str) -> Value {
    if let Some(v) = settings.get(section) {
        return v.clone();
    }
    let mut cur = settings;
    for part in section.split('.') {
        match cur.get(part) {
            Some(v) => cur = v,
            None => return Value::Null,
        }
    }
    cur.clone()
}

impl Inbound for Inbox {
    fn request(&self, method: &str, params: Value) -> Result<Value, (i64, String)> {
        match method {
            "workspace/configuration" => self.configuration(&params),
            "client/registerCapability" => self.register(&params),
            "client/unregisterCapability" => self.unregister(&params),
            "window/workDoneProgress/create" => self.create_progress(&params),
            "window/showMessageRequest" => {
                if let Some(m) = params.get("message").and_then(Value::as_str) {
                    self.log(LogKind::Info, m);
                }
                Ok(params
                    .get("actions")
                    .and_then(Value::as_array)
                    .and_then(|a| a.first().cloned())
                    .unwrap_or(Value::Null))
            }
            "workspace/workspaceFolders" => {
                Ok(json!([{"uri": self.root_uri, "name": folder_name(&self.root)}]))
            }
            // We pull diagnostics afresh on every call, so a refresh needs no work: it is noted.
            "workspace/diagnostic/refresh" => {
                self.refreshes.send_modify(|s| *s += 1);
                Ok(Value::Null)
            }
            other => Err((
                codes::METHOD_NOT_FOUND,
                format!(
                    "{} is not supported by this client",
                    sanitize::one_line(other)
                ),
            )),
        }
    }

    fn notification(&self, method: &str, params: Value) {
        match method {
            "textDocument/publishDiagnostics" => self.publish(params),
            "window/logMessage" | "window/showMessage" => {
                let kind = match params.get("type").and_then(Value::as_u64) {
                    Some(1) => LogKind::Error,
                    Some(2) => LogKind::Warning,
                    Some(3) => LogKind::Info,
                    _ => LogKind::Log,
                };
                if let Some(m) = params.get("message").and_then(Value::as_str) {
                    self.log(kind, m);
                }
            }
            "$/progress" => self.progress(&params),
            "$/logTrace" => {
                if let Some(m) = params.get("message").and_then(Value::as_str) {
                    self.log(LogKind::Log, m);
                }
            }
            _ => {}
        }
    }

    fn stderr_line(&self, line: &str) {
        self.log(LogKind::Stderr, line);
    }
}

/// The name of the workspace folder: the root's last component, or `workspace`.
pub fn folder_name(root: &Path) -> String {
    root.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "workspace".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(settings: Value) -> (Inbox, Arc<Mutex<Vec<ServerLog>>>) {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        let s = Inbox::new(
            "t".into(),
            PathBuf::from("/ws"),
            "file:///ws".into(),
            Some(settings),
            Arc::new(move |l: &ServerLog| sink.lock().expect("logs").push(l.clone())),
            StoreLimits {
                max_files: 2,
                max_diagnostics_per_file: 2,
                max_registrations: 3,
            },
        );
        (s, logs)
    }

    #[test]
    fn configuration_answers_sections_and_null_per_missing_item() {
        let (s, _) =
            state(json!({"python": {"analysis": {"typeCheckingMode": "strict"}}, "a.b": 1}));
        let got = s
            .request(
                "workspace/configuration",
                json!({"items": [{"section": "python.analysis"}, {"section": "pyright"}, {"section": "a.b"}, {}]}),
            )
            .expect("answer");
        assert_eq!(
            got,
            json!([{"typeCheckingMode": "strict"}, null, 1, {"python": {"analysis": {"typeCheckingMode": "strict"}}, "a.b": 1}])
        );
    }

    #[test]
    fn registrations_are_recorded_bounded_and_removed() {
        let (s, _) = state(Value::Null);
        let reg = |id: &str, method: &str| json!({"registrations": [{"id": id, "method": method, "registerOptions": {"identifier": "X", "documentSelector": null, "interFileDependencies": true, "workspaceDiagnostics": false}}]});
        assert_eq!(
            s.request(
                "client/registerCapability",
                reg("1", "textDocument/diagnostic")
            ),
            Ok(Value::Null)
        );
        assert_eq!(
            s.dynamic_pull_providers(),
            vec![PullProvider {
                identifier: Some("X".into()),
                selector: None
            }]
        );
        s.request(
            "client/registerCapability",
            json!({"registrations": [{"id": "2", "method": "workspace/didChangeWatchedFiles", "registerOptions": {"watchers": [{"globPattern": "**/*.py", "kind": 2}, {"globPattern": {"baseUri": "file:///ws/cfg", "pattern": "*.toml"}}]}}]}),
        )
        .expect("watchers");
        assert!(s.watches(Path::new("/ws/src/a.py"), FileChange::Changed));
        assert!(!s.watches(Path::new("/ws/src/a.py"), FileChange::Created));
        assert!(s.watches(Path::new("/ws/cfg/x.toml"), FileChange::Deleted));
        assert!(!s.watches(Path::new("/ws/cfg/sub/x.toml"), FileChange::Deleted));
        s.request("client/registerCapability", reg("3", "x"))
            .expect("third");
        assert!(s
            .request("client/registerCapability", reg("4", "y"))
            .is_err());
        s.request(
            "client/unregisterCapability",
            json!({"unregisterations": [{"id": "1", "method": "textDocument/diagnostic"}]}),
        )
        .expect("unregister");
        assert!(s.dynamic_pull_providers().is_empty());
        assert_eq!(
            s.registered_methods(),
            vec!["workspace/didChangeWatchedFiles", "x"]
        );
    }

    #[test]
    fn other_requests_get_their_answers_and_unknown_ones_method_not_found() {
        let (s, logs) = state(Value::Null);
        assert_eq!(
            s.request("window/showMessageRequest", json!({"type": 3, "message": "Pick\x1b[2J", "actions": [{"title": "A"}, {"title": "B"}]})),
            Ok(json!({"title": "A"}))
        );
        assert_eq!(
            s.request(
                "window/showMessageRequest",
                json!({"type": 3, "message": "m"})
            ),
            Ok(Value::Null)
        );
        assert_eq!(
            s.request("workspace/workspaceFolders", Value::Null),
            Ok(json!([{"uri": "file:///ws", "name": "ws"}]))
        );
        assert_eq!(
            s.request("window/workDoneProgress/create", json!({"token": 5})),
            Ok(Value::Null)
        );
        assert!(s.busy());
        s.notification("$/progress", json!({"token": 5, "value": {"kind": "end"}}));
        assert!(!s.busy());
        assert_eq!(
            s.request("workspace/applyEdit", json!({})).map_err(|e| e.0),
            Err(codes::METHOD_NOT_FOUND)
        );
        assert_eq!(logs.lock().expect("logs")[0].message, "Pick [2J");
    }

    #[test]
    fn publishes_are_bounded_per_file_and_in_number() {
        let (s, logs) = state(Value::Null);
        let d = json!({"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}}, "message": "m", "codeDescription": {"href": "not a uri at all"}});
        s.notification(
            "textDocument/publishDiagnostics",
            json!({"uri": "file:///ws/a.py", "version": 3, "diagnostics": [d, d, d]}),
        );
        let a = s.pushed(Path::new("/ws/a.py")).expect("a");
        assert_eq!((a.version, a.items.len()), (Some(3), 2));
        assert!(logs
            .lock()
            .expect("logs")
            .iter()
            .any(|l| l.message.contains("kept 2 of 3")));
        s.notification(
            "textDocument/publishDiagnostics",
            json!({"uri": "file:///ws/b.py", "diagnostics": []}),
        );
        s.notification(
            "textDocument/publishDiagnostics",
            json!({"uri": "file:///ws/c.py", "diagnostics": []}),
        );
        assert!(
            s.pushed(Path::new("/ws/a.py")).is_none(),
            "the oldest file goes first"
        );
        assert!(s.pushed(Path::new("/ws/c.py")).is_some());
        assert_eq!(*s.push_seq.borrow(), 3);
    }
}
