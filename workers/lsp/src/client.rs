//! One language server: the lifecycle (`initialize` with honest capabilities, `initialized`,
//! `shutdown` + `exit`), the documents it has open (read from disk, `didOpen`/`didChange` with a
//! version counter, `didClose`), its diagnostics (pulled where it offers `textDocument/diagnostic`,
//! statically or registered later, pushed otherwise, with a wait for *fresh* ones — see
//! [`DiagnosticsWait`]), and `definition`, `references` and `hover` as owned results.

use crate::conn::{codes, ConnLimits, Connection, Death, RpcError};
use crate::documents::{language_id, Documents, Snapshot};
use crate::error::LspError;
use crate::inbound::{FileChange, Inbox, LogSink, PullProvider, RawDiagnostic, StoreLimits};
use crate::sanitize;
use crate::spawn::SpawnedServer;
use crate::text::{self, path_to_uri, uri_to_path, Encoding};
use crate::types::{
    Diagnostic, FileDiagnostics, Freshness, HoverInfo, Location, Position, Range, Severity,
};
use serde_json::{json, Value};
use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long `diagnostics` waits for diagnostics that describe the current content, for servers
/// that push them (`textDocument/publishDiagnostics`). Servers that answer pull requests need no
/// rules: the answer is fresh by construction ([`Freshness::Confirmed`]). A server that registers
/// pull diagnostics while we wait (pyright does, right after `initialized`) is pulled from then on.
///
/// Every wait starts when the last `didOpen`/`didChange` for the file was sent, and ends at the
/// first of:
///
/// 1. a publish for the file carrying a `version` at least the one we sent — **confirmed**
///    (pyright without pull, rust-analyzer). Publishes for older versions are ignored;
/// 2. publishes *without* a version received after the change, the last of them followed by a
///    settle period without another — **settled**. typescript-language-server sends no versions
///    and publishes once per kind of check (syntax, then semantic, then suggestions), the semantic
///    one long after the others while it loads a project. So the settle period scales with the
///    server: it is as long as the server took from the change to its first publish, between
///    `settle_min` and `settle_max`. A publish already on its way when the change was sent is
///    indistinguishable from a fresh one; the settle period narrows that window, it cannot close it;
/// 3. the quiet deadline — **unconfirmed**, with the last diagnostics the server sent. Some
///    servers do not publish again when the result did not change (typescript-language-server
///    after an edit that keeps a file clean), so silence has to end the wait. The deadline adapts
///    to the server: three times the slowest of its last four change-to-publish latencies, at
///    least `quiet_min`; before the server has published after any change, it is `max_wait`;
/// 4. `max_wait` — **unconfirmed**, the bound for everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiagnosticsWait {
    /// The longest wait after a change, whatever the server does (rule 4).
    pub max_wait: Duration,
    /// The shortest settle period after an unversioned publish (rule 2).
    pub settle_min: Duration,
    /// The longest settle period after an unversioned publish (rule 2).
    pub settle_max: Duration,
    /// The shortest quiet deadline once the server's latency is known (rule 3).
    pub quiet_min: Duration,
}

impl Default for DiagnosticsWait {
    fn default() -> Self {
        DiagnosticsWait {
            max_wait: Duration::from_secs(20),
            settle_min: Duration::from_millis(300),
            settle_max: Duration::from_secs(5),
            quiet_min: Duration::from_secs(1),
        }
    }
}

/// Bounds and timeouts of one client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientOptions {
    /// Longest wait for one answer (a hung request fails with [`LspError::Timeout`]).
    pub request_timeout: Duration,
    /// Longest wait for the answer to `initialize`.
    pub init_timeout: Duration,
    /// How long `shutdown` and `exit` may take before the server is killed.
    pub shutdown_grace: Duration,
    /// This many timeouts in a row and the server is considered hung: it is killed (and
    /// restarted by the manager on the next call).
    pub timeouts_before_kill: u32,
    /// Bounds on the connection: frame sizes and how much output the server may flood us with.
    pub conn: ConnLimits,
    /// Bounds on what the server can make us keep (diagnostics, registrations).
    pub store: StoreLimits,
    /// How long to wait for fresh diagnostics after a change.
    pub wait: DiagnosticsWait,
    /// Larger files are not given to the server.
    pub max_document_bytes: u64,
    /// Open documents per server; the least recently used is closed beyond this.
    pub max_open_documents: usize,
    /// The longest hover text kept, in bytes.
    pub max_hover_bytes: usize,
    /// Locations returned by one definition/references call.
    pub max_locations: usize,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            request_timeout: Duration::from_secs(30),
            init_timeout: Duration::from_secs(60),
            shutdown_grace: Duration::from_secs(2),
            timeouts_before_kill: 3,
            conn: ConnLimits::default(),
            store: StoreLimits::default(),
            wait: DiagnosticsWait::default(),
            max_document_bytes: 4 << 20,
            max_open_documents: 256,
            max_hover_bytes: 16 << 10,
            max_locations: 1000,
        }
    }
}

/// What a client is started with.
#[derive(Debug, Clone, PartialEq)]
pub struct ServerSetup {
    /// The server's name in the registry.
    pub name: String,
    /// The workspace root (absolute, links resolved).
    pub root: PathBuf,
    /// The language id for every file, instead of the one by extension.
    pub language_id: Option<String>,
    /// Sent as `initializationOptions` in `initialize`.
    pub initialization_options: Option<Value>,
    /// Answers to `workspace/configuration`, by section (`{"python": {"analysis": …}}`).
    pub settings: Option<Value>,
}

/// The client capabilities we send: exactly what this client implements.
pub fn client_capabilities() -> Value {
    json!({
        "general": {
            "positionEncodings": ["utf-32", "utf-8", "utf-16"]
        },
        "textDocument": {
            "synchronization": {"dynamicRegistration": false, "willSave": false, "willSaveWaitUntil": false, "didSave": true},
            "publishDiagnostics": {"relatedInformation": false, "versionSupport": true, "codeDescriptionSupport": false, "dataSupport": false},
            "diagnostic": {"dynamicRegistration": true, "relatedDocumentSupport": false},
            "definition": {"dynamicRegistration": false, "linkSupport": true},
            "references": {"dynamicRegistration": false},
            "hover": {"dynamicRegistration": false, "contentFormat": ["plaintext", "markdown"]}
        },
        "workspace": {
            "configuration": true,
            "workspaceFolders": true,
            "didChangeWatchedFiles": {"dynamicRegistration": true, "relativePatternSupport": true},
            "diagnostics": {"refreshSupport": true}
        },
        "window": {
            "workDoneProgress": true,
            "showMessage": {"messageActionItem": {"additionalPropertiesSupport": false}}
        }
    })
}

/// The parts of the server's capabilities we act on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ServerCaps {
    encoding: Encoding,
    open_close: bool,
    /// 0 none, 1 full, 2 incremental.
    change: i32,
    save: bool,
    save_text: bool,
    hover: bool,
    definition: bool,
    references: bool,
    pull: Option<PullProvider>,
}

fn offered(v: Option<&Value>) -> bool {
    !matches!(v, None | Some(Value::Null) | Some(Value::Bool(false)))
}

/// A `TextDocumentSyncKind` (0 none, 1 full, 2 incremental) as announced; an absent or
/// out-of-range number reads as `default`.
fn sync_kind(n: Option<i64>, default: i32) -> i32 {
    n.and_then(|n| i32::try_from(n).ok()).unwrap_or(default)
}

impl ServerCaps {
    fn parse(caps: &Value) -> Self {
        let sync = caps.get("textDocumentSync");
        let (open_close, change, save, save_text) = match sync {
            Some(Value::Number(n)) => (true, sync_kind(n.as_i64(), 1), false, false),
            Some(Value::Object(o)) => {
                let save = o.get("save");
                (
                    // Absent means "do not send" in the specification; servers that leave it out
                    // still expect documents, and an extra notification is harmless.
                    o.get("openClose").and_then(Value::as_bool).unwrap_or(true),
                    sync_kind(o.get("change").and_then(Value::as_i64), 0),
                    offered(save),
                    save.and_then(|s| s.get("includeText"))
                        .and_then(Value::as_bool)
                        .unwrap_or(false),
                )
            }
            _ => (true, 1, false, false),
        };
        let pull = caps
            .get("diagnosticProvider")
            .filter(|v| offered(Some(v)))
            .map(|d| PullProvider {
                identifier: d
                    .get("identifier")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                selector: d
                    .get("documentSelector")
                    .and_then(|s| serde_json::from_value(s.clone()).ok()),
            });
        ServerCaps {
            encoding: Encoding::from_announced(
                caps.get("positionEncoding").and_then(Value::as_str),
            ),
            open_close,
            change,
            save,
            save_text,
            hover: offered(caps.get("hoverProvider")),
            definition: offered(caps.get("definitionProvider")),
            references: offered(caps.get("referencesProvider")),
            pull,
        }
    }
}

type PullCache = HashMap<(PathBuf, Option<String>), (Option<String>, Vec<RawDiagnostic>)>;

/// A running language server.
pub struct LspClient {
    name: String,
    root: PathBuf,
    conn: Connection,
    inbox: Arc<Inbox>,
    caps: ServerCaps,
    docs: tokio::sync::Mutex<Documents>,
    pull_cache: Mutex<PullCache>,
    latencies: Mutex<VecDeque<Duration>>,
    timeouts_in_a_row: AtomicU32,
    language_id: Option<String>,
    options: ClientOptions,
}

impl LspClient {
    /// Takes over a spawned server and runs the `initialize` handshake.
    pub async fn start(
        setup: ServerSetup,
        server: SpawnedServer,
        options: ClientOptions,
        log: LogSink,
    ) -> Result<Self, LspError> {
        let root_uri = path_to_uri(&setup.root);
        let inbox = Arc::new(Inbox::new(
            setup.name.clone(),
            setup.root.clone(),
            root_uri.clone(),
            setup.settings.clone(),
            log,
            options.store,
        ));
        let conn = Connection::start(server, options.conn, inbox.clone());
        let params = json!({
            // Not our pid: the server may run in another pid namespace, where it would find no
            // such process and exit. Its lifetime is the sandbox's business.
            "processId": null,
            "clientInfo": {"name": "hanzo-dev", "version": env!("CARGO_PKG_VERSION")},
            "locale": "en",
            "rootPath": setup.root.to_string_lossy(),
            "rootUri": root_uri,
            "workspaceFolders": [{"uri": root_uri, "name": crate::inbound::folder_name(&setup.root)}],
            "initializationOptions": setup.initialization_options.clone().unwrap_or(Value::Null),
            "capabilities": client_capabilities(),
            "trace": "off"
        });
        let fail = |e: RpcError| start_error(&setup.name, "initialize", e, options.init_timeout);
        let result = conn
            .request("initialize", params, options.init_timeout)
            .await
            .map_err(fail)?;
        let caps = ServerCaps::parse(result.get("capabilities").unwrap_or(&Value::Null));
        conn.notify("initialized", json!({}), options.request_timeout)
            .await
            .map_err(fail)?;
        if let Some(settings) = &setup.settings {
            conn.notify(
                "workspace/didChangeConfiguration",
                json!({"settings": settings}),
                options.request_timeout,
            )
            .await
            .map_err(fail)?;
        }
        Ok(LspClient {
            name: setup.name,
            root: setup.root,
            conn,
            inbox,
            caps,
            docs: tokio::sync::Mutex::new(Documents::default()),
            pull_cache: Mutex::new(HashMap::new()),
            latencies: Mutex::new(VecDeque::new()),
            timeouts_in_a_row: AtomicU32::new(0),
            language_id: setup.language_id,
            options,
        })
    }

    /// The server's name in `lsp_servers`.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The server process's pid while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.conn.pid()
    }

    /// Requests sent and not answered yet.
    pub fn pending_requests(&self) -> usize {
        self.conn.pending()
    }

    /// Whether the server is still running and speaking the protocol.
    pub fn is_alive(&self) -> bool {
        self.conn.death().is_none()
    }

    /// Sees the cause once the server has ended.
    pub fn death_watch(&self) -> tokio::sync::watch::Receiver<Option<Death>> {
        self.conn.death_watch()
    }

    /// Why the server ended, as the error a request would get; `None` while it runs.
    pub fn exit_error(&self) -> Option<LspError> {
        self.conn.death().map(|d| died(&self.name, d))
    }

    /// Whether diagnostics come from pull requests (statically or registered dynamically).
    pub fn uses_pull_diagnostics(&self) -> bool {
        self.caps.pull.is_some() || !self.inbox.dynamic_pull_providers().is_empty()
    }

    /// Methods the server registered dynamically and has not unregistered.
    pub fn registered_methods(&self) -> Vec<String> {
        self.inbox.registered_methods()
    }

    /// Paths of the open documents.
    pub async fn open_documents(&self) -> Vec<PathBuf> {
        let mut paths = self.docs.lock().await.paths();
        paths.sort();
        paths
    }

    /// Makes the server see the file as it is on disk: `didOpen` the first time, `didChange`
    /// (with the next version) when the content differs from what it has, nothing otherwise.
    /// A file that is gone is closed.
    pub async fn sync(&self, path: &Path) -> Result<Snapshot, LspError> {
        self.check_inside(path)?;
        let mut docs = self.docs.lock().await;
        let text = match read_document(path, self.options.max_document_bytes) {
            Ok(t) => t,
            Err(e) => {
                if !path.exists() {
                    self.close_locked(&mut docs, path).await?;
                }
                return Err(e);
            }
        };
        if let Some(mut snap) = docs.get(path) {
            if *snap.text == *text {
                return Ok(snap);
            }
            snap.version += 1;
            snap.changed_at = Instant::now();
            snap.changed = true;
            let old = std::mem::replace(&mut snap.text, Arc::from(text));
            self.send_change(&snap, &old).await?;
            docs.insert(snap.clone());
            return Ok(snap);
        }
        while docs.len() >= self.options.max_open_documents.max(1) {
            let Some(victim) = docs.least_recent() else {
                break;
            };
            self.close_locked(&mut docs, &victim).await?;
        }
        let snap = Snapshot {
            path: path.to_path_buf(),
            uri: path_to_uri(path),
            language_id: self
                .language_id
                .clone()
                .or_else(|| language_id(path).map(str::to_string))
                .unwrap_or_else(|| "plaintext".to_string()),
            version: 1,
            text: Arc::from(text),
            changed_at: Instant::now(),
            changed: false,
        };
        if self.caps.open_close {
            self.notify(
                "textDocument/didOpen",
                json!({"textDocument": {"uri": snap.uri, "languageId": snap.language_id, "version": snap.version, "text": &*snap.text}}),
            )
            .await?;
        }
        docs.insert(snap.clone());
        Ok(snap)
    }

    async fn send_change(&self, snap: &Snapshot, old: &str) -> Result<(), LspError> {
        let change = match self.caps.change {
            0 => None,
            // Incremental servers get one change that replaces the whole old text: valid for
            // them, and no diff to get wrong.
            2 => {
                let end = end_position(old, self.caps.encoding);
                Some(
                    json!({"range": {"start": {"line": 0, "character": 0}, "end": end}, "text": &*snap.text}),
                )
            }
            _ => Some(json!({"text": &*snap.text})),
        };
        if let Some(change) = change {
            self.notify(
                "textDocument/didChange",
                json!({"textDocument": {"uri": snap.uri, "version": snap.version}, "contentChanges": [change]}),
            )
            .await?;
        }
        if self.caps.save {
            // The file was written to disk by the tools worker: it is saved.
            let mut params = json!({"textDocument": {"uri": snap.uri}});
            if self.caps.save_text {
                params["text"] = Value::String(snap.text.to_string());
            }
            self.notify("textDocument/didSave", params).await?;
        }
        Ok(())
    }

    /// Closes a document (nothing if it is not open).
    pub async fn close(&self, path: &Path) -> Result<(), LspError> {
        let mut docs = self.docs.lock().await;
        self.close_locked(&mut docs, path).await
    }

    async fn close_locked(&self, docs: &mut Documents, path: &Path) -> Result<(), LspError> {
        let Some(snap) = docs.remove(path) else {
            return Ok(());
        };
        self.inbox.forget(path);
        crate::conn::lock(&self.pull_cache).retain(|(p, _), _| p != path);
        if self.caps.open_close {
            self.notify(
                "textDocument/didClose",
                json!({"textDocument": {"uri": snap.uri}}),
            )
            .await?;
        }
        Ok(())
    }

    /// A file changed on disk (written, created or deleted by a tool). An open document is
    /// synced (or closed if gone); with `open`, a closed document of this server is opened. The
    /// file watchers the server registered hear of every change but that of a document open
    /// here, whose content it gets as `didChange`. Returns the document as synced, if it was.
    pub async fn file_changed(
        &self,
        path: &Path,
        open: bool,
    ) -> Result<Option<Snapshot>, LspError> {
        let exists = path.is_file();
        let (is_open, known) = {
            let docs = self.docs.lock().await;
            (docs.peek(path).is_some(), docs.known(path))
        };
        let change = match (exists, known) {
            (false, _) => FileChange::Deleted,
            (true, true) => FileChange::Changed,
            (true, false) => FileChange::Created,
        };
        {
            let mut docs = self.docs.lock().await;
            if exists {
                docs.note_known(path);
            } else {
                docs.forget_known(path);
            }
        }
        // An open document's new content reaches the server as `didChange` (and `didSave` if it
        // asked); the watcher event would be the same news twice, and pyright re-checks its file
        // system state for it.
        if !(exists && is_open) && self.inbox.watches(path, change) {
            self.notify(
                "workspace/didChangeWatchedFiles",
                json!({"changes": [{"uri": path_to_uri(path), "type": change as i32}]}),
            )
            .await?;
        }
        if !exists {
            self.close(path).await?;
            return Ok(None);
        }
        if is_open || open {
            return self.sync(path).await.map(Some);
        }
        Ok(None)
    }

    /// The diagnostics of a file as it is now on disk (see [`DiagnosticsWait`] for what "now"
    /// can mean for a server that pushes them).
    pub async fn diagnostics(&self, path: &Path) -> Result<FileDiagnostics, LspError> {
        let snap = self.sync(path).await?;
        self.diagnostics_of_synced(snap).await
    }

    /// The diagnostics of a document as [`LspClient::sync`] (or [`LspClient::file_changed`])
    /// just sent it, without reading the file again.
    pub async fn diagnostics_of_synced(&self, snap: Snapshot) -> Result<FileDiagnostics, LspError> {
        let path = snap.path.as_path();
        let (items, freshness) = loop {
            let providers = self.pull_providers(&snap);
            if !providers.is_empty() {
                let mut items = Vec::new();
                for p in &providers {
                    items.extend(self.pull(&snap, p).await?);
                }
                // A server may push some diagnostics beside those it is pulled for; current ones count.
                if let Some(pushed) = self.inbox.pushed(path) {
                    if is_current(&pushed, &snap) {
                        items.extend(pushed.items);
                    }
                }
                dedupe(&mut items);
                break (items, Freshness::Confirmed);
            }
            if let Some(pushed) = self.wait_push(&snap).await? {
                break pushed;
            }
        };
        let mut diagnostics: Vec<Diagnostic> = items
            .iter()
            .map(|d| self.convert_diagnostic(d, &snap))
            .collect();
        diagnostics.sort_by_key(|d| (d.severity, d.range));
        Ok(FileDiagnostics {
            path: self.display(path),
            server: self.name.clone(),
            freshness,
            diagnostics,
        })
    }

    async fn pull(
        &self,
        snap: &Snapshot,
        provider: &PullProvider,
    ) -> Result<Vec<RawDiagnostic>, LspError> {
        let key = (snap.path.clone(), provider.identifier.clone());
        let mut attempt = 0u32;
        loop {
            let previous = crate::conn::lock(&self.pull_cache)
                .get(&key)
                .and_then(|(id, _)| id.clone());
            let mut params = json!({"textDocument": {"uri": snap.uri}});
            if let Some(id) = &provider.identifier {
                params["identifier"] = json!(id);
            }
            if let Some(prev) = &previous {
                params["previousResultId"] = json!(prev);
            }
            match self.raw_call("textDocument/diagnostic", params).await {
                Ok(report) => return self.take_report(key, report),
                Err(RpcError::Response { code, data, .. })
                    if attempt < 5
                        && (code == codes::CONTENT_MODIFIED
                            || (code == codes::SERVER_CANCELLED
                                && data
                                    .as_ref()
                                    .and_then(|d| d.get("retriggerRequest"))
                                    .and_then(Value::as_bool)
                                    != Some(false))) =>
                {
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(20 << attempt)).await;
                }
                Err(e) => return Err(self.rpc_error("textDocument/diagnostic", e)),
            }
        }
    }

    fn take_report(
        &self,
        key: (PathBuf, Option<String>),
        report: Value,
    ) -> Result<Vec<RawDiagnostic>, LspError> {
        let bad = |detail: &str| LspError::BadResponse {
            server: self.name.clone(),
            method: "textDocument/diagnostic".into(),
            detail: detail.to_string(),
        };
        let result_id = report
            .get("resultId")
            .and_then(Value::as_str)
            .map(str::to_string);
        let mut cache = crate::conn::lock(&self.pull_cache);
        match report.get("kind").and_then(Value::as_str) {
            Some("full") => {
                let items: Vec<RawDiagnostic> = report
                    .get("items")
                    .and_then(Value::as_array)
                    .ok_or_else(|| bad("a full report without items"))?
                    .iter()
                    .take(self.options.store.max_diagnostics_per_file)
                    .filter_map(|d| serde_json::from_value(d.clone()).ok())
                    .collect();
                cache.insert(key, (result_id, items.clone()));
                Ok(items)
            }
            Some("unchanged") => match cache.get(&key) {
                Some((_, items)) => Ok(items.clone()),
                None => Err(bad("\"unchanged\" for a result we never had")),
            },
            _ => Err(bad("a report that is neither full nor unchanged")),
        }
    }

    fn pull_providers(&self, snap: &Snapshot) -> Vec<PullProvider> {
        let mut providers: Vec<PullProvider> = self.caps.pull.iter().cloned().collect();
        providers.extend(self.inbox.dynamic_pull_providers());
        providers.retain(|p| selects(p.selector.as_deref(), snap));
        providers
    }

    /// Waits for pushed diagnostics by the rules of [`DiagnosticsWait`]; `None` when the server
    /// registered pull diagnostics for the file meanwhile.
    async fn wait_push(
        &self,
        snap: &Snapshot,
    ) -> Result<Option<(Vec<RawDiagnostic>, Freshness)>, LspError> {
        let wait = self.options.wait;
        let hard = snap.changed_at + wait.max_wait;
        let quiet = snap.changed_at + self.quiet_period();
        let mut seq = self.inbox.push_seq.subscribe();
        let mut registrations = self.inbox.registrations_seq.subscribe();
        loop {
            if !self.pull_providers(snap).is_empty() {
                return Ok(None);
            }
            let now = Instant::now();
            let pushed = self.inbox.pushed(&snap.path);
            let mut wake = hard.min(quiet);
            let mut candidate = false;
            if let Some(p) = &pushed {
                if p.version.is_some_and(|v| v >= snap.version) {
                    self.note_latency(snap, p.at);
                    return Ok(Some((p.items.clone(), Freshness::Confirmed)));
                }
                let first_after = p.recent.iter().find(|t| **t >= snap.changed_at);
                if let (None, Some(first)) = (p.version, first_after) {
                    candidate = true;
                    let settle = first
                        .duration_since(snap.changed_at)
                        .clamp(wait.settle_min, wait.settle_max.max(wait.settle_min));
                    let settled = p.at + settle;
                    if now >= settled {
                        self.note_latency(snap, *first);
                        return Ok(Some((p.items.clone(), Freshness::Settled)));
                    }
                    wake = settled.min(hard);
                }
            }
            if now >= hard || (now >= quiet && !candidate) {
                return Ok(Some((
                    pushed.map(|p| p.items).unwrap_or_default(),
                    Freshness::Unconfirmed,
                )));
            }
            tokio::select! {
                _ = seq.changed() => {}
                _ = registrations.changed() => {}
                _ = tokio::time::sleep_until(wake.into()) => {}
                death = self.conn.ended() => return Err(died(&self.name, death)),
            }
        }
    }

    fn quiet_period(&self) -> Duration {
        let wait = self.options.wait;
        let lat = crate::conn::lock(&self.latencies);
        match lat.iter().max() {
            None => wait.max_wait,
            Some(slowest) => (*slowest * 3).max(wait.quiet_min).min(wait.max_wait),
        }
    }

    fn note_latency(&self, snap: &Snapshot, at: Instant) {
        if !snap.changed || at < snap.changed_at {
            return;
        }
        let mut lat = crate::conn::lock(&self.latencies);
        if lat.len() == 4 {
            lat.pop_front();
        }
        lat.push_back(at - snap.changed_at);
    }

    /// Where the symbol at `pos` is defined.
    pub async fn definition(&self, path: &Path, pos: Position) -> Result<Vec<Location>, LspError> {
        self.require(self.caps.definition, "textDocument/definition")?;
        let snap = self.sync(path).await?;
        let params = json!({"textDocument": {"uri": snap.uri}, "position": self.position_to_server(&snap, pos)?});
        let answer = self.call("textDocument/definition", params).await?;
        Ok(self.locations(&answer).await)
    }

    /// Every use of the symbol at `pos` (with its declaration if `include_declaration`).
    pub async fn references(
        &self,
        path: &Path,
        pos: Position,
        include_declaration: bool,
    ) -> Result<Vec<Location>, LspError> {
        self.require(self.caps.references, "textDocument/references")?;
        let snap = self.sync(path).await?;
        let params = json!({
            "textDocument": {"uri": snap.uri},
            "position": self.position_to_server(&snap, pos)?,
            "context": {"includeDeclaration": include_declaration}
        });
        let answer = self.call("textDocument/references", params).await?;
        Ok(self.locations(&answer).await)
    }

    /// What the server shows on hover at `pos` (types, documentation), `None` if nothing.
    pub async fn hover(&self, path: &Path, pos: Position) -> Result<Option<HoverInfo>, LspError> {
        self.require(self.caps.hover, "textDocument/hover")?;
        let snap = self.sync(path).await?;
        let params = json!({"textDocument": {"uri": snap.uri}, "position": self.position_to_server(&snap, pos)?});
        let answer = self.call("textDocument/hover", params).await?;
        if answer.is_null() {
            return Ok(None);
        }
        let text = hover_text(answer.get("contents").unwrap_or(&Value::Null));
        let text = sanitize::bounded(
            sanitize::multi_line(text.trim()),
            self.options.max_hover_bytes,
            "\n…[cut]",
        );
        if text.is_empty() {
            return Ok(None);
        }
        let range = answer
            .get("range")
            .and_then(|r| serde_json::from_value::<lsp_types::Range>(r.clone()).ok())
            .map(|r| self.range_from_server(&r, &snap.text));
        Ok(Some(HoverInfo { text, range }))
    }

    /// Asks the server to shut down (`shutdown`, then `exit`), killing it after the grace period.
    pub async fn stop(&self) {
        if self.conn.death().is_none() {
            let grace = self.options.shutdown_grace;
            let _ = self.conn.request("shutdown", Value::Null, grace).await;
            self.conn.expect_exit();
            let _ = self.conn.notify("exit", Value::Null, grace).await;
            let _ = self.conn.exited(grace).await;
        }
        self.conn.kill(Death::Stopped);
    }

    /// Kills the server at once.
    pub fn kill(&self) {
        self.conn.kill(Death::Stopped);
    }

    fn require(&self, offered: bool, method: &str) -> Result<(), LspError> {
        if offered {
            Ok(())
        } else {
            Err(LspError::NotSupported {
                server: self.name.clone(),
                method: method.to_string(),
            })
        }
    }

    fn check_inside(&self, path: &Path) -> Result<(), LspError> {
        if path.is_absolute() && path.starts_with(&self.root) {
            Ok(())
        } else {
            Err(LspError::OutsideWorkspace {
                path: path.to_path_buf(),
            })
        }
    }

    async fn notify(&self, method: &str, params: Value) -> Result<(), LspError> {
        self.conn
            .notify(method, params, self.options.request_timeout)
            .await
            .map_err(|e| self.rpc_error(method, e))
    }

    async fn raw_call(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let answer = self
            .conn
            .request(method, params, self.options.request_timeout)
            .await;
        match &answer {
            Err(RpcError::Timeout) => {
                let n = self.timeouts_in_a_row.fetch_add(1, Ordering::Relaxed) + 1;
                if n >= self.options.timeouts_before_kill {
                    self.conn.kill(Death::Exited(format!(
                        "stopped after {n} requests in a row went unanswered"
                    )));
                }
            }
            _ => self.timeouts_in_a_row.store(0, Ordering::Relaxed),
        }
        answer
    }

    async fn call(&self, method: &str, params: Value) -> Result<Value, LspError> {
        self.raw_call(method, params)
            .await
            .map_err(|e| self.rpc_error(method, e))
    }

    fn rpc_error(&self, method: &str, e: RpcError) -> LspError {
        match e {
            RpcError::Died(d) => died(&self.name, d),
            RpcError::Timeout => LspError::Timeout {
                server: self.name.clone(),
                method: method.to_string(),
                after: self.options.request_timeout,
            },
            RpcError::Response { code, message, .. } => LspError::ServerError {
                server: self.name.clone(),
                method: method.to_string(),
                code,
                message: sanitize::bounded(sanitize::one_line(&message), 1024, "…"),
            },
        }
    }

    fn position_to_server(&self, snap: &Snapshot, pos: Position) -> Result<Value, LspError> {
        if pos.line == 0 || pos.column == 0 {
            return Err(LspError::InvalidPosition {
                line: pos.line,
                column: pos.column,
            });
        }
        let line = pos.line - 1;
        let character = text::to_server_column(
            text::line(&snap.text, line).unwrap_or(""),
            pos.column - 1,
            self.caps.encoding,
        );
        Ok(json!({"line": line, "character": character}))
    }

    fn range_from_server(&self, r: &lsp_types::Range, text: &str) -> Range {
        let conv = |p: &lsp_types::Position| {
            let col = match text::line(text, p.line) {
                Some(l) => text::from_server_column(l, p.character, self.caps.encoding),
                None => p.character,
            };
            Position::new(p.line.saturating_add(1), col.saturating_add(1))
        };
        Range {
            start: conv(&r.start),
            end: conv(&r.end),
        }
    }

    fn convert_diagnostic(&self, d: &RawDiagnostic, snap: &Snapshot) -> Diagnostic {
        let severity = match d.severity {
            Some(s) if s == lsp_types::DiagnosticSeverity::WARNING => Severity::Warning,
            Some(s) if s == lsp_types::DiagnosticSeverity::INFORMATION => Severity::Information,
            Some(s) if s == lsp_types::DiagnosticSeverity::HINT => Severity::Hint,
            // Absent is the client's call; we read it as an error, like editors do.
            _ => Severity::Error,
        };
        let code = match &d.code {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        }
        .map(|c| sanitize::bounded(sanitize::one_line(&c), 128, "…"));
        Diagnostic {
            path: self.display(&snap.path),
            range: self.range_from_server(&d.range, &snap.text),
            severity,
            code,
            source: d
                .source
                .as_deref()
                .map(|s| sanitize::bounded(sanitize::one_line(s), 128, "…")),
            message: sanitize::bounded(sanitize::one_line(&d.message), 4096, "…"),
        }
    }

    async fn locations(&self, answer: &Value) -> Vec<Location> {
        let raw: Vec<(String, lsp_types::Range)> = match answer {
            Value::Array(items) => items.iter().filter_map(raw_location).collect(),
            Value::Object(_) => raw_location(answer).into_iter().collect(),
            _ => Vec::new(),
        };
        let mut texts: HashMap<PathBuf, Option<Arc<str>>> = HashMap::new();
        let mut out = Vec::new();
        for (uri, range) in raw.into_iter().take(self.options.max_locations) {
            let Some(path) = uri_to_path(&uri) else {
                out.push(Location {
                    path: sanitize::bounded(sanitize::one_line(&uri), 1024, "…"),
                    range: self.range_from_server(&range, ""),
                });
                continue;
            };
            if !texts.contains_key(&path) {
                let open = self.docs.lock().await.peek(&path).map(|s| s.text.clone());
                let text = open.or_else(|| {
                    read_document(&path, self.options.max_document_bytes)
                        .ok()
                        .map(Arc::from)
                });
                texts.insert(path.clone(), text);
            }
            let text = texts.get(&path).cloned().flatten();
            out.push(Location {
                path: self.display(&path),
                range: self.range_from_server(&range, text.as_deref().unwrap_or("")),
            });
        }
        out.sort();
        out.dedup();
        out
    }

    /// A path as results show it: relative to the workspace inside it, absolute outside.
    fn display(&self, path: &Path) -> String {
        let shown = match path.strip_prefix(&self.root) {
            Ok(rel) if !rel.as_os_str().is_empty() => rel.to_string_lossy().into_owned(),
            _ => path.to_string_lossy().into_owned(),
        };
        sanitize::one_line(&shown)
    }
}

fn raw_location(v: &Value) -> Option<(String, lsp_types::Range)> {
    // A LocationLink points at the whole definition; its selection range is the name, which is
    // what a Location would have given.
    let (uri, range) = match v.get("targetUri") {
        Some(uri) => (
            uri,
            v.get("targetSelectionRange")
                .or_else(|| v.get("targetRange"))?,
        ),
        None => (v.get("uri")?, v.get("range")?),
    };
    Some((
        uri.as_str()?.to_string(),
        serde_json::from_value(range.clone()).ok()?,
    ))
}

fn hover_text(contents: &Value) -> String {
    match contents {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .map(hover_text)
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("\n\n"),
        Value::Object(o) => match (
            o.get("language").and_then(Value::as_str),
            o.get("value").and_then(Value::as_str),
        ) {
            (Some(lang), Some(value)) => format!("```{lang}\n{value}\n```"),
            (None, Some(value)) => value.to_string(),
            _ => String::new(),
        },
        _ => String::new(),
    }
}

fn is_current(p: &crate::inbound::Pushed, snap: &Snapshot) -> bool {
    match p.version {
        Some(v) => v >= snap.version,
        None => p.at >= snap.changed_at,
    }
}

fn dedupe(items: &mut Vec<RawDiagnostic>) {
    let mut seen: Vec<RawDiagnostic> = Vec::with_capacity(items.len());
    items.retain(|d| {
        if seen.contains(d) {
            false
        } else {
            seen.push(d.clone());
            true
        }
    });
}

/// Whether a document selector covers the document (`None`: every document).
fn selects(selector: Option<&[lsp_types::DocumentFilter]>, snap: &Snapshot) -> bool {
    let Some(filters) = selector else { return true };
    filters.iter().any(|f| {
        f.language.as_ref().is_none_or(|l| *l == snap.language_id)
            && f.scheme.as_ref().is_none_or(|s| s == "file")
            && f.pattern.as_ref().is_none_or(|p| {
                globset::GlobBuilder::new(p)
                    .literal_separator(true)
                    .build()
                    .is_ok_and(|g| g.compile_matcher().is_match(&snap.path))
            })
    })
}

/// The position just past the end of `text`, in the server's encoding.
fn end_position(text: &str, enc: Encoding) -> Value {
    let mut line = 0u32;
    let mut last = text;
    let mut rest = text;
    while let Some(i) = rest.find(['\n', '\r']) {
        let skip = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
        rest = &rest[i + skip..];
        line += 1;
        last = rest;
    }
    let chars = u32::try_from(last.chars().count()).unwrap_or(u32::MAX);
    json!({"line": line, "character": text::to_server_column(last, chars, enc)})
}

/// A file's text, bounded; invalid UTF-8 is replaced (servers speak JSON, which is Unicode).
fn read_document(path: &Path, limit: u64) -> Result<String, LspError> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let read_err = |e: std::io::Error| LspError::Read {
        path: path.to_path_buf(),
        detail: e.to_string(),
    };
    let not_regular = || LspError::Read {
        path: path.to_path_buf(),
        detail: "not a regular file".into(),
    };
    // Looked at before it is opened, so that no device or FIFO is ever opened (a path can come
    // from a server's answer), and again through the descriptor, so that what is read is what
    // was checked. `O_NONBLOCK` so that a FIFO swapped in between does not block the open;
    // `O_NOCTTY` so that no terminal is adopted.
    if !std::fs::metadata(path).map_err(read_err)?.is_file() {
        return Err(not_regular());
    }
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags((nix::fcntl::OFlag::O_NONBLOCK | nix::fcntl::OFlag::O_NOCTTY).bits())
        .open(path)
        .map_err(read_err)?;
    let meta = file.metadata().map_err(read_err)?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    if meta.len() > limit {
        return Err(LspError::FileTooLarge {
            path: path.to_path_buf(),
            size: meta.len(),
            limit,
        });
    }
    // The file may grow between the look and the read: read at most one byte past the limit.
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0).saturating_add(1));
    (&mut file)
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(read_err)?;
    if bytes.len() as u64 > limit {
        // It grew since it was looked at: its size now.
        let size = file.metadata().map_or(bytes.len() as u64, |m| m.len());
        return Err(LspError::FileTooLarge {
            path: path.to_path_buf(),
            size,
            limit,
        });
    }
    Ok(match String::from_utf8(bytes) {
        Ok(s) => s,
        Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
    })
}

fn died(server: &str, d: Death) -> LspError {
    let server = server.to_string();
    match d {
        Death::Exited(detail) => LspError::ServerExited { server, detail },
        Death::Protocol(detail) => LspError::Protocol { server, detail },
        Death::Flooded(detail) => LspError::Flooded { server, detail },
        Death::Stopped => LspError::ServerExited {
            server,
            detail: "stopped".into(),
        },
    }
}

fn start_error(server: &str, method: &str, e: RpcError, timeout: Duration) -> LspError {
    match e {
        RpcError::Died(d) => died(server, d),
        RpcError::Timeout => LspError::Timeout {
            server: server.to_string(),
            method: method.to_string(),
            after: timeout,
        },
        RpcError::Response { code, message, .. } => LspError::ServerError {
            server: server.to_string(),
            method: method.to_string(),
            code,
            message: sanitize::bounded(sanitize::one_line(&message), 1024, "…"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_is_read_whole_and_bounded() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("a.py");
        std::fs::write(&file, b"x = 1\n\xff\n").expect("write");
        // Invalid UTF-8 is replaced, the rest kept.
        assert_eq!(read_document(&file, 64).expect("read"), "x = 1\n\u{fffd}\n");
        // At the limit it is read; one byte over, refused with the sizes.
        assert_eq!(read_document(&file, 8).expect("read").len(), 10);
        match read_document(&file, 7) {
            Err(LspError::FileTooLarge { size, limit, .. }) => assert_eq!((size, limit), (8, 7)),
            other => panic!("expected FileTooLarge, got {other:?}"),
        }
    }

    /// A FIFO or a directory planted where a document should be is refused (the FIFO without
    /// waiting for a writer that never comes).
    #[test]
    fn a_fifo_or_a_directory_is_not_a_document() {
        let dir = tempfile::tempdir().expect("tmp");
        let fifo = dir.path().join("pipe.py");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).expect("mkfifo");
        let sub = dir.path().join("pkg.py");
        std::fs::create_dir(&sub).expect("dir");
        for path in [&fifo, &sub] {
            match read_document(path, 1024) {
                Err(LspError::Read { detail, .. }) => {
                    assert_eq!(detail, "not a regular file", "{}", path.display());
                }
                other => panic!("expected a refusal for {}, got {other:?}", path.display()),
            }
        }
        match read_document(&dir.path().join("absent.py"), 1024) {
            Err(LspError::Read { detail, .. }) => {
                assert!(detail.contains("No such file"), "{detail}")
            }
            other => panic!("expected a read error, got {other:?}"),
        }
    }

    #[test]
    fn our_capabilities_are_all_known_to_the_protocol_types() {
        // Deserialising into lsp-types and back must give the same JSON: a misspelt key would be
        // dropped on the way and show up here.
        let mut ours = client_capabilities();
        // The specification (3.17) names it `workspace.diagnostics`, and servers read that key;
        // lsp-types 0.97 spells it `diagnostic`. Ours follows the specification.
        let refresh = ours["workspace"]
            .as_object_mut()
            .and_then(|w| w.remove("diagnostics"))
            .expect("workspace.diagnostics");
        assert_eq!(refresh, json!({"refreshSupport": true}));
        let typed: lsp_types::ClientCapabilities =
            serde_json::from_value(ours.clone()).expect("capabilities parse");
        assert_eq!(serde_json::to_value(typed).expect("serialise"), ours);
    }

    #[test]
    fn server_capabilities_are_read_in_every_form() {
        let pyright = ServerCaps::parse(
            &json!({"textDocumentSync": 2, "hoverProvider": {"workDoneProgress": true}, "definitionProvider": true}),
        );
        assert_eq!(
            (pyright.open_close, pyright.change, pyright.save),
            (true, 2, false)
        );
        assert!(
            pyright.hover && pyright.definition && !pyright.references && pyright.pull.is_none()
        );
        assert_eq!(pyright.encoding, Encoding::Utf16);
        let other = ServerCaps::parse(&json!({
            "positionEncoding": "utf-8",
            "textDocumentSync": {"openClose": true, "change": 1, "save": {"includeText": true}},
            "diagnosticProvider": {"identifier": "x", "interFileDependencies": false, "workspaceDiagnostics": false},
            "referencesProvider": false
        }));
        assert_eq!(
            (other.change, other.save, other.save_text, other.references),
            (1, true, true, false)
        );
        assert_eq!(other.encoding, Encoding::Utf8);
        assert_eq!(other.pull.and_then(|p| p.identifier), Some("x".to_string()));
        assert!(ServerCaps::parse(&json!({"diagnosticProvider": null}))
            .pull
            .is_none());
    }

    #[test]
    fn the_end_of_a_text_is_where_a_whole_replacement_ends() {
        assert_eq!(
            end_position("", Encoding::Utf16),
            json!({"line": 0, "character": 0})
        );
        assert_eq!(
            end_position("ab\ncd😀", Encoding::Utf16),
            json!({"line": 1, "character": 4})
        );
        assert_eq!(
            end_position("ab\r\n", Encoding::Utf16),
            json!({"line": 1, "character": 0})
        );
    }

    #[test]
    fn hover_contents_of_every_shape_become_text() {
        assert_eq!(hover_text(&json!("plain")), "plain");
        assert_eq!(
            hover_text(&json!({"kind": "markdown", "value": "**x**"})),
            "**x**"
        );
        assert_eq!(
            hover_text(&json!(["a", {"language": "python", "value": "x: int"}])),
            "a\n\n```python\nx: int\n```"
        );
    }

    #[test]
    fn locations_and_links_are_both_read() {
        let range =
            json!({"start": {"line": 1, "character": 2}, "end": {"line": 1, "character": 5}});
        let sel = json!({"start": {"line": 1, "character": 3}, "end": {"line": 1, "character": 4}});
        assert_eq!(
            raw_location(&json!({"uri": "file:///a", "range": range})).map(|r| r.0),
            Some("file:///a".into())
        );
        let link = raw_location(
            &json!({"targetUri": "file:///b", "targetRange": range, "targetSelectionRange": sel}),
        )
        .expect("link");
        assert_eq!((link.0.as_str(), link.1.start.character), ("file:///b", 3));
        assert!(raw_location(&json!({"uri": 3})).is_none());
    }
}
