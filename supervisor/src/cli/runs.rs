//! `hanzo-dev runs list|show ID [--json]|export ID [--output FILE]`: read the org's run store.
//!
//! `show` prints the whole run — header, every step with its tool calls and the permission
//! decision behind each, audit records and events — cut for reading; `show --json` and `export`
//! carry every byte. Opening the store first marks runs whose process died as `interrupted`.
//!
//! Everything printed for reading is made safe for a terminal (`crate::term`): stored text comes
//! from models and tool output, which a hostile workspace can steer.
//!
//! Exit codes: 0 done; 1 the output could not be written; 2 usage (a malformed id, an unusable
//! org or data directory); 4 no such run.

use super::exit;
use super::store;
use crate::secrets::StartEnv;
use crate::userfile::{write_user_file, PRIVATE};
use hanzo_policy::{AuditRecord, RuleRef};
use hanzo_store::{
    CallStatus, EventRecord, RunId, RunRecord, RunStatus, RunSummary, Session, SessionId,
    StepRecord, StoreError, ToolCallRecord,
};
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;

/// What `hanzo-dev runs` takes.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The org whose store to read (default: `HANZO_ORG`, else `local`).
    #[arg(long, global = true, value_name = "ORG")]
    pub org: Option<String>,
    /// Which `runs` command to run.
    #[command(subcommand)]
    pub command: RunsCommand,
}

/// The `runs` commands.
#[derive(Debug, clap::Subcommand)]
pub enum RunsCommand {
    /// The most recent runs, newest first.
    List {
        /// How many runs to show; 0 for all.
        #[arg(long, default_value_t = 20, value_name = "N")]
        limit: usize,
        /// A JSON array of run headers instead of a table.
        #[arg(long)]
        json: bool,
        /// Only the runs (turns) of this chat session, oldest first (ids from `runs sessions`).
        #[arg(long, value_name = "ID")]
        session: Option<String>,
    },
    /// The most recent chat sessions (`hanzo-dev chat`), newest first.
    Sessions {
        /// How many sessions to show; 0 for all.
        #[arg(long, default_value_t = 20, value_name = "N")]
        limit: usize,
        /// A JSON array of sessions instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One whole run: header, steps, tool calls with their permission decisions, audit, events.
    Show {
        /// The run id (from `runs list`).
        id: String,
        /// The full record as JSON, nothing cut.
        #[arg(long)]
        json: bool,
    },
    /// Write the run as one JSON document (`"format": "hanzo-run"`).
    Export {
        /// The run id (from `runs list`).
        id: String,
        /// Write here (created owner-only on Unix) instead of standard output.
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
    },
}

/// Runs `hanzo-dev runs …` against the org's store; returns the exit code.
pub fn run(args: &Args, env: &StartEnv) -> anyhow::Result<i32> {
    let mut out = std::io::stdout().lock();
    Ok(run_to(args, env, &mut out))
}

/// The command with its standard output given (tests pass a buffer). Errors go to stderr.
pub fn run_to(args: &Args, env: &StartEnv, out: &mut dyn Write) -> i32 {
    finish(execute(args, env).and_then(|text| emit(out, &text)))
}

fn execute(args: &Args, env: &StartEnv) -> Result<String, Failure> {
    let org = store::org(args.org.as_deref(), env);
    let store =
        store::open(args.org.as_deref(), env).map_err(|e| Failure::Usage(format!("{e:#}")))?;
    match &args.command {
        RunsCommand::List {
            limit,
            json,
            session,
        } => {
            let limit = if *limit == 0 { usize::MAX } else { *limit };
            let runs = match session {
                None => store.list_runs(limit).map_err(store_failure)?,
                Some(id) => {
                    let id = parse_session_id(id)?;
                    let mut runs = store
                        .list_session_runs(id)
                        .map_err(|e| session_not_found(e, id, &org))?;
                    runs.truncate(limit);
                    runs
                }
            };
            Ok(if *json {
                pretty_json(&runs)
            } else {
                render_run_table(&runs, &org)
            })
        }
        RunsCommand::Sessions { limit, json } => {
            let limit = if *limit == 0 { usize::MAX } else { *limit };
            let sessions = store.list_sessions(None, limit).map_err(store_failure)?;
            Ok(if *json {
                pretty_json(&sessions)
            } else {
                render_session_table(&sessions, &org)
            })
        }
        RunsCommand::Show { id, json } => {
            let id = parse_run_id(id)?;
            let record = store.load_run(id).map_err(|e| not_found(e, id, &org))?;
            Ok(if *json {
                pretty_json(&record)
            } else {
                render_run(&record)
            })
        }
        RunsCommand::Export { id, output } => {
            let id = parse_run_id(id)?;
            let doc = store.export_run(id).map_err(|e| not_found(e, id, &org))?;
            let text = pretty_json(&doc);
            match output {
                None => Ok(text),
                Some(path) => {
                    // No workspace here: a run in this directory could have planted a link.
                    let cwd = std::env::current_dir().ok();
                    write_user_file(path, text.as_bytes(), PRIVATE, cwd.as_deref())
                        .map_err(|e| Failure::Failed(e.to_string()))?;
                    eprintln!("wrote run {id} to {}", path.display());
                    Ok(String::new())
                }
            }
        }
    }
}

/// A run id as typed by a user: a positive integer.
pub(super) fn parse_run_id(text: &str) -> Result<RunId, Failure> {
    match text.trim().parse::<RunId>() {
        Ok(id) if id.0 > 0 => Ok(id),
        _ => Err(Failure::Usage(format!(
            "malformed run id {text:?}: a run id is a positive integer, as `hanzo-dev runs list` shows"
        ))),
    }
}

fn parse_session_id(text: &str) -> Result<SessionId, Failure> {
    match text.trim().parse::<SessionId>() {
        Ok(id) if id.0 > 0 => Ok(id),
        _ => Err(Failure::Usage(format!(
            "malformed session id {text:?}: a session id is a positive integer, as \
             `hanzo-dev runs sessions` shows"
        ))),
    }
}

fn session_not_found(e: StoreError, id: SessionId, org: &str) -> Failure {
    match e {
        StoreError::SessionNotFound(_) => Failure::NotFound(format!(
            "no session {id} in org {org} (see `hanzo-dev runs sessions --org {org}`)"
        )),
        other => store_failure(other),
    }
}

fn not_found(e: StoreError, id: RunId, org: &str) -> Failure {
    match e {
        StoreError::RunNotFound(_) => Failure::NotFound(format!(
            "no run {id} in org {org} (see `hanzo-dev runs list --org {org}`)"
        )),
        other => store_failure(other),
    }
}

pub(super) fn store_failure(e: StoreError) -> Failure {
    Failure::Failed(format!("run store: {e}"))
}

// ---- shared by `agents` and `runs` ----

/// Why a command did not succeed; decides the exit code.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Failure {
    /// Bad input or configuration: exit 2.
    Usage(String),
    /// The request was understood and could not be done (the output could not be written):
    /// exit 1.
    Failed(String),
    /// The run or agent named does not exist: exit 4.
    NotFound(String),
}

/// Print a failure on stderr and turn the outcome into an exit code.
pub(super) fn finish(result: Result<(), Failure>) -> i32 {
    match result {
        Ok(()) => exit::OK,
        Err(Failure::Usage(msg)) => {
            eprintln!("error: {msg}");
            exit::USAGE
        }
        Err(Failure::Failed(msg)) => {
            eprintln!("error: {msg}");
            exit::FAILED
        }
        Err(Failure::NotFound(msg)) => {
            eprintln!("error: {msg}");
            exit::NOT_FOUND
        }
    }
}

/// Write all of `text`; a closed pipe (`hanzo-dev runs list | head`) is not an error.
pub(super) fn emit(out: &mut dyn Write, text: &str) -> Result<(), Failure> {
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(Failure::Failed(format!("cannot write the output: {e}"))),
    }
}

pub(super) fn pretty_json<T: serde::Serialize + ?Sized>(value: &T) -> String {
    let mut s = serde_json::to_string_pretty(value).expect("store records always serialize");
    s.push('\n');
    s
}

/// `text` safe to print on a terminal (`crate::term::sanitize_for_terminal`: tabs and line feeds
/// kept, every other control, bidi and invisible character shown escaped). Stored text comes from
/// models and tool output, which a hostile workspace can steer; raw escape sequences could
/// otherwise rewrite or hide lines of the record.
pub(super) fn printable(text: &str) -> String {
    crate::term::sanitize_for_terminal(text).into_owned()
}

/// Columns padded to their widest cell, two spaces apart; the last column is not padded. Cells
/// are made [`printable`] first.
pub(super) fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| r.iter().map(|c| printable(c).replace('\n', " ")).collect())
        .collect();
    let rows = rows.as_slice();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = headers.iter().map(|h| h.to_string()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i + 1 == row.len() {
                line.push_str(cell);
            } else {
                let pad = widths[i].saturating_sub(cell.chars().count());
                line.push_str(cell);
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `YYYY-MM-DDTHH:MM:SSZ` from milliseconds since the Unix epoch (UTC, proleptic Gregorian).
pub fn iso_utc(ms: u64) -> String {
    let secs = ms / 1000;
    let days = i64::try_from(secs / 86_400).unwrap_or(i64::MAX / 2);
    let tod = secs % 86_400;
    // Days since 1970-01-01 to a civil date, counting in 400-year eras that start on March 1st
    // so the leap day is the last day of each year.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153; // 0 = March
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        tod / 3600,
        (tod % 3600) / 60,
        tod % 60
    )
}

/// A duration for people: `350ms`, `4.2s`, `1m03s`, `2h05m`.
pub(super) fn human_duration(ms: u64) -> String {
    match ms {
        0..=999 => format!("{ms}ms"),
        1_000..=59_999 => format!("{}.{}s", ms / 1000, (ms % 1000) / 100),
        60_000..=3_599_999 => format!("{}m{:02}s", ms / 60_000, (ms % 60_000) / 1000),
        _ => format!("{}h{:02}m", ms / 3_600_000, (ms % 3_600_000) / 60_000),
    }
}

/// At most `max` characters of `s`, with `…` standing in for the rest.
pub(super) fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

/// The first line of `s`, at most `max` characters, with `…` when anything was left out. Tabs
/// become spaces; other control characters are left for [`printable`] to show escaped.
pub(super) fn one_line(s: &str, max: usize) -> String {
    let mut lines = s.trim().lines();
    let first: String = lines
        .next()
        .unwrap_or("")
        .chars()
        .map(|c| if c == '\t' { ' ' } else { c })
        .collect();
    if lines.next().is_some() && first.chars().count() < max {
        return format!("{first}…");
    }
    cut(&first, max)
}

// ---- runs list ----

/// Longest task input shown in the list.
const LIST_INPUT_CHARS: usize = 60;

fn run_duration(run: &RunSummary) -> String {
    match run.ended_ms {
        Some(end) => human_duration(end.saturating_sub(run.started_ms)),
        None => "-".into(),
    }
}

fn or_dash(s: Option<&str>) -> String {
    match s {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => "-".into(),
    }
}

/// The `runs list` table.
pub fn render_run_table(runs: &[RunSummary], org: &str) -> String {
    if runs.is_empty() {
        return format!("no runs in org {org}\n");
    }
    let rows: Vec<Vec<String>> = runs
        .iter()
        .map(|r| {
            vec![
                r.id.to_string(),
                r.status.to_string(),
                or_dash(r.agent.as_deref()),
                or_dash(Some(&r.model)),
                r.isolation.to_string(),
                iso_utc(r.started_ms),
                run_duration(r),
                format!("{}/{}", r.usage.input, r.usage.output),
                one_line(&r.input, LIST_INPUT_CHARS),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "STATUS",
            "AGENT",
            "MODEL",
            "ISOLATION",
            "STARTED",
            "DURATION",
            "TOKENS(IN/OUT)",
            "INPUT",
        ],
        &rows,
    )
}

/// The `runs sessions` table.
pub fn render_session_table(sessions: &[Session], org: &str) -> String {
    if sessions.is_empty() {
        return format!("no sessions in org {org}\n");
    }
    let rows: Vec<Vec<String>> = sessions
        .iter()
        .map(|s| {
            vec![
                s.id.to_string(),
                s.agent.clone(),
                iso_utc(s.updated_ms),
                one_line(&s.workspace, LIST_INPUT_CHARS),
                one_line(s.title.as_deref().unwrap_or("-"), LIST_INPUT_CHARS),
            ]
        })
        .collect();
    table(&["ID", "AGENT", "UPDATED", "WORKSPACE", "TITLE"], &rows)
}

// ---- runs show ----

/// Longest string inside a JSON value in the human view.
const JSON_STRING_CHARS: usize = 80;
/// Longest compact JSON line in the human view.
const JSON_LINE_CHARS: usize = 240;
/// Lines of a tool's output or error shown in the human view.
const OUTPUT_LINES: usize = 8;
/// Longest line of a tool's output shown in the human view.
const OUTPUT_LINE_CHARS: usize = 160;

/// Compact JSON with long strings cut, for reading (never for export).
pub(super) fn compact_json(v: &Value) -> String {
    fn shorten(v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(cut(s, JSON_STRING_CHARS)),
            Value::Array(items) => Value::Array(items.iter().map(shorten).collect()),
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(k, v)| (cut(k, JSON_STRING_CHARS), shorten(v)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }
    let text = serde_json::to_string(&shorten(v)).expect("a serde_json::Value always serializes");
    cut(&text, JSON_LINE_CHARS)
}

/// `text` indented under a label, cut to its first lines with a marker saying how much is left.
fn first_lines(out: &mut String, indent: &str, text: &str, id: RunId) {
    let lines: Vec<&str> = text.lines().collect();
    if lines.is_empty() {
        out.push_str(&format!("{indent}(empty)\n"));
    }
    for line in lines.iter().take(OUTPUT_LINES) {
        out.push_str(&format!("{indent}{}\n", cut(line, OUTPUT_LINE_CHARS)));
    }
    let more = lines.len().saturating_sub(OUTPUT_LINES);
    let long_line = lines
        .iter()
        .take(OUTPUT_LINES)
        .any(|l| l.chars().count() > OUTPUT_LINE_CHARS);
    if more > 0 {
        out.push_str(&format!(
            "{indent}[… {more} more line{} cut; `hanzo-dev runs show {id} --json` has all]\n",
            if more == 1 { "" } else { "s" }
        ));
    } else if long_line {
        out.push_str(&format!(
            "{indent}[… long lines cut; `hanzo-dev runs show {id} --json` has all]\n"
        ));
    }
}

/// `rule #2 "bash(cargo *)", project settings` (the rule's scope), or the policy default.
pub(super) fn describe_rule(rule: Option<&RuleRef>) -> String {
    match rule {
        None => "no rule matched: policy default".into(),
        Some(r) => match r.scope {
            Some(s) => format!("rule #{} {:?}, {} settings", r.index, r.pattern, s.as_str()),
            None => format!("rule #{} {:?}", r.index, r.pattern),
        },
    }
}

fn render_header(out: &mut String, r: &RunSummary) {
    out.push_str(&format!("run {}  {}\n", r.id, r.status));
    let mut field = |label: &str, value: String| {
        out.push_str(&format!("  {:<10} {value}\n", format!("{label}:")));
    };
    field("input", one_line(&r.input, 200));
    field("agent", or_dash(r.agent.as_deref()));
    field("model", or_dash(Some(&r.model)));
    field("isolation", r.isolation.to_string());
    field("status", r.status.to_string());
    field("outcome", or_dash(r.outcome.as_deref()));
    field("started", iso_utc(r.started_ms));
    field(
        "ended",
        match r.ended_ms {
            Some(end) => format!("{} (took {})", iso_utc(end), run_duration(r)),
            None if r.status == RunStatus::Running => "- (still running)".into(),
            None => "-".into(),
        },
    );
    field(
        "tokens",
        format!("{} in, {} out", r.usage.input, r.usage.output),
    );
    // A multi-line task is shown whole under the header; the one-line form above is its start.
    if r.input.trim().lines().count() > 1 {
        out.push_str("  full input:\n");
        for line in r.input.lines() {
            out.push_str(&format!("    {line}\n"));
        }
    }
}

fn render_tool_call(out: &mut String, c: &ToolCallRecord, run: RunId) {
    let call = &c.call;
    let verdict = if call.allowed { "allowed" } else { "DENIED" };
    out.push_str(&format!(
        "  tool {}  {verdict}  {}{}\n",
        call.name,
        human_duration(call.duration_ms),
        call.tool_use_id
            .as_deref()
            .map(|id| format!("  [{id}]"))
            .unwrap_or_default()
    ));
    out.push_str(&format!("    input:     {}\n", compact_json(&call.input)));
    out.push_str(&format!(
        "    decision:  {} ({}) → {verdict} by {}: {}\n",
        call.permission.as_str(),
        describe_rule(call.rule.as_ref()),
        call.decided_by,
        call.decision_reason
    ));
    if !call.hook_results.is_empty() {
        let hooks = serde_json::to_value(&call.hook_results).expect("hook results serialize");
        out.push_str(&format!("    hooks:     {}\n", compact_json(&hooks)));
    }
    if c.status == CallStatus::Started {
        out.push_str("    status:    started, never finished (the run stopped while it ran)\n");
    }
    if let Some(output) = &call.output {
        out.push_str("    output:\n");
        first_lines(out, "      ", output, run);
    }
    if let Some(error) = &call.error {
        out.push_str("    error:\n");
        first_lines(out, "      ", error, run);
    }
}

fn render_step(out: &mut String, s: &StepRecord, run: RunId) {
    let took = match s.ended_ms {
        Some(end) => human_duration(end.saturating_sub(s.started_ms)),
        None => "not finished".into(),
    };
    out.push_str(&format!(
        "\nstep {}  {took}  tokens {} in, {} out\n",
        s.index, s.usage.input, s.usage.output
    ));
    if let Some(text) = s.text.as_deref().filter(|t| !t.trim().is_empty()) {
        out.push_str("  text:\n");
        for line in text.lines() {
            out.push_str(&format!("    {line}\n"));
        }
    }
    for c in &s.tool_calls {
        render_tool_call(out, c, run);
    }
}

fn render_audit(out: &mut String, audit: &[AuditRecord]) {
    out.push_str(&format!("\naudit ({})\n", audit.len()));
    for a in audit {
        out.push_str(&format!(
            "  {}  {}  {} ({})  {}  {}\n",
            iso_utc(a.timestamp),
            a.tool_name,
            a.mode.as_str(),
            describe_rule(a.rule_matched.as_ref()),
            cut(&a.input_digest, 20),
            one_line(&a.reason, 120)
        ));
    }
}

fn render_events(out: &mut String, events: &[EventRecord], steps: &[StepRecord]) {
    out.push_str(&format!("\nevents ({})\n", events.len()));
    for e in events {
        let step = e
            .step
            .and_then(|id| steps.iter().find(|s| s.id == id))
            .map(|s| format!("step {}  ", s.index))
            .unwrap_or_default();
        out.push_str(&format!(
            "  {}  {step}{}  {}\n",
            iso_utc(e.recorded_ms),
            e.kind,
            compact_json(&e.data)
        ));
    }
}

/// The human view of `runs show`.
pub fn render_run(record: &RunRecord) -> String {
    let mut out = String::new();
    render_header(&mut out, &record.run);
    if record.steps.is_empty() {
        out.push_str("\n(no steps recorded)\n");
    }
    for s in &record.steps {
        render_step(&mut out, s, record.run.id);
    }
    render_audit(&mut out, &record.audit);
    render_events(&mut out, &record.events, &record.steps);
    printable(&out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use hanzo_policy::{PermissionMode, Scope};
    use hanzo_store::{StepId, TokenUsage, ToolCall};
    use serde_json::json;

    fn summary(id: i64, status: RunStatus) -> RunSummary {
        RunSummary {
            id: RunId(id),
            agent: Some("code".into()),
            input: "fix the failing test\nin src/lib.rs please".into(),
            model: "claude-test".into(),
            isolation: hanzo_policy::Tier::B,
            status,
            outcome: Some("done".into()),
            started_ms: 1_700_000_000_000,
            ended_ms: Some(1_700_000_004_200),
            usage: TokenUsage {
                input: 1200,
                output: 340,
            },
        }
    }

    fn call(name: &str, allowed: bool, output: Option<String>) -> ToolCallRecord {
        ToolCallRecord {
            id: 1,
            call: ToolCall {
                tool_use_id: Some("toolu_1".into()),
                name: name.into(),
                input: json!({"path": "src/lib.rs", "content": "x".repeat(500)}),
                permission: if allowed {
                    PermissionMode::Allow
                } else {
                    PermissionMode::Deny
                },
                rule: Some(RuleRef {
                    scope: Some(Scope::Project),
                    index: 2,
                    pattern: "bash(curl *)".into(),
                }),
                allowed,
                decision_reason: if allowed {
                    "allowed by rule".into()
                } else {
                    "network tools are denied".into()
                },
                decided_by: hanzo_store::DecidedBy::Rule,
                hook_results: vec![hanzo_store::HookResult::Pre {
                    allowed: true,
                    failed: false,
                    reason: None,
                    decided_by: Some("./check.sh".into()),
                }],
                output,
                error: None,
                duration_ms: 12,
            },
            status: hanzo_store::CallStatus::Finished,
            recorded_ms: 1_700_000_001_000,
        }
    }

    #[test]
    fn iso_time_is_utc_calendar_time() {
        assert_eq!(iso_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso_utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(iso_utc(1_700_000_000_999), "2023-11-14T22:13:20Z");
        assert_eq!(iso_utc(4_102_444_799_000), "2099-12-31T23:59:59Z");
    }

    #[test]
    fn durations_read_naturally() {
        assert_eq!(human_duration(0), "0ms");
        assert_eq!(human_duration(999), "999ms");
        assert_eq!(human_duration(4_250), "4.2s");
        assert_eq!(human_duration(63_000), "1m03s");
        assert_eq!(human_duration(7_500_000), "2h05m");
    }

    #[test]
    fn cutting_marks_what_was_left_out() {
        assert_eq!(cut("short", 10), "short");
        assert_eq!(cut("abcdef", 4), "abc…");
        // Character-, not byte-based: never splits a multi-byte character.
        assert_eq!(cut("ééééé", 3), "éé…");
        assert_eq!(one_line("first\nsecond", 40), "first…");
        assert_eq!(one_line("a\tb", 40), "a b");
        assert_eq!(one_line("  only  ", 40), "only");
    }

    #[test]
    fn terminal_escapes_in_stored_text_are_shown_not_obeyed() {
        assert_eq!(printable("a\tb\nc"), "a\tb\nc");
        assert_eq!(printable("\u{1b}[2Jx\r\u{9b}1m"), "␛[2Jx␍<U+009B>1m");
        let mut record = RunRecord {
            run: summary(4, RunStatus::Succeeded),
            steps: vec![StepRecord {
                id: StepId(1),
                index: 1,
                started_ms: 0,
                ended_ms: Some(1),
                text: Some("ok\u{1b}[1A\u{1b}[2K".into()),
                usage: TokenUsage::default(),
                tool_calls: vec![call("bash", false, None)],
            }],
            audit: vec![],
            events: vec![],
        };
        record.steps[0].tool_calls[0].call.error = Some("\u{1b}]0;pwned\u{7}".into());
        let text = render_run(&record);
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{text:?}"
        );
        assert!(text.contains("ok␛[1A␛[2K"), "{text}");
        assert!(text.contains("␛]0;pwned␇"), "{text}");
        let mut run = summary(5, RunStatus::Failed);
        run.input = "\u{1b}[31mred".into();
        let t = render_run_table(&[run], "local");
        assert!(t.contains("␛[31mred") && !t.contains('\u{1b}'), "{t}");
    }

    #[test]
    fn table_aligns_columns() {
        let t = table(
            &["ID", "NAME", "X"],
            &[
                vec!["1".into(), "long-name".into(), "a".into()],
                vec!["22".into(), "n".into(), "b".into()],
            ],
        );
        assert_eq!(t, "ID  NAME       X\n1   long-name  a\n22  n          b\n");
    }

    #[test]
    fn run_ids_must_be_positive_integers() {
        assert_eq!(parse_run_id("42"), Ok(RunId(42)));
        for bad in ["abc", "0", "-3", "1.5", ""] {
            assert!(
                matches!(parse_run_id(bad), Err(Failure::Usage(m)) if m.contains("malformed run id")),
                "{bad}"
            );
        }
    }

    #[test]
    fn run_table_has_one_line_per_run_with_every_column() {
        let mut running = summary(8, RunStatus::Running);
        running.ended_ms = None;
        running.agent = None;
        let t = render_run_table(&[running, summary(7, RunStatus::Succeeded)], "local");
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3, "{t}");
        assert!(lines[0].starts_with("ID  STATUS"), "{t}");
        let row: Vec<&str> = lines[2].split_whitespace().collect();
        assert_eq!(
            row[..8],
            [
                "7",
                "succeeded",
                "code",
                "claude-test",
                "B",
                "2023-11-14T22:13:20Z",
                "4.2s",
                "1200/340"
            ]
        );
        assert!(lines[2].ends_with("fix the failing test…"), "{t}");
        let row: Vec<&str> = lines[1].split_whitespace().collect();
        assert_eq!(row[..3], ["8", "running", "-"]);
        assert_eq!(row[6], "-", "a running run has no duration: {t}");
        assert_eq!(render_run_table(&[], "acme"), "no runs in org acme\n");
    }

    #[test]
    fn compact_json_cuts_long_strings_only() {
        let v = json!({"path": "a.rs", "content": "y".repeat(200), "n": 3});
        let s = compact_json(&v);
        assert!(s.starts_with(r#"{"path":"a.rs","content":"yyy"#), "{s}");
        assert!(s.contains("…\",\"n\":3}"), "{s}");
        assert_eq!(compact_json(&json!([1, true, null])), "[1,true,null]");
    }

    #[test]
    fn show_renders_decisions_hooks_and_cut_output() {
        let output: String = (1..=20).map(|i| format!("line {i}\n")).collect();
        let record = RunRecord {
            run: summary(3, RunStatus::Failed),
            steps: vec![StepRecord {
                id: StepId(10),
                index: 1,
                started_ms: 1_700_000_000_000,
                ended_ms: Some(1_700_000_000_500),
                text: Some("Let me look.".into()),
                usage: TokenUsage {
                    input: 100,
                    output: 20,
                },
                tool_calls: vec![
                    call("read_file", true, Some(output)),
                    call("bash", false, None),
                ],
            }],
            audit: vec![AuditRecord {
                timestamp: 1_700_000_000_100,
                session_id: "3".into(),
                tool_name: "bash".into(),
                input_digest: "sha256:0123456789abcdef0123".into(),
                mode: PermissionMode::Deny,
                rule_matched: None,
                reason: "no network".into(),
            }],
            events: vec![EventRecord {
                id: 1,
                step: Some(StepId(10)),
                kind: "compaction".into(),
                data: json!({"dropped": 4}),
                recorded_ms: 1_700_000_000_200,
            }],
        };
        let text = render_run(&record);
        assert!(text.starts_with("run 3  failed\n"), "{text}");
        assert!(text.contains("  agent:     code\n"), "{text}");
        assert!(text.contains("  isolation: B\n"), "{text}");
        assert!(text.contains("  tokens:    1200 in, 340 out\n"), "{text}");
        assert!(
            text.contains("  full input:\n    fix the failing test\n    in src/lib.rs please\n"),
            "{text}"
        );
        assert!(
            text.contains("\nstep 1  500ms  tokens 100 in, 20 out\n"),
            "{text}"
        );
        assert!(text.contains("    Let me look.\n"), "{text}");
        assert!(
            text.contains("  tool read_file  allowed  12ms  [toolu_1]\n"),
            "{text}"
        );
        assert!(text.contains("  tool bash  DENIED  12ms"), "{text}");
        assert!(
            text.contains(
                "    decision:  deny (rule #2 \"bash(curl *)\", project settings) → DENIED by rule: network tools are denied\n"
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"    hooks:     [{"phase":"pre","allowed":true,"failed":false,"reason":null,"decided_by":"./check.sh"}]"#),
            "{text}"
        );
        // The 500-character input value is cut in this view.
        assert!(!text.contains(&"x".repeat(100)), "{text}");
        assert!(text.contains("      line 8\n"), "{text}");
        assert!(!text.contains("line 9\n"), "{text}");
        assert!(
            text.contains("[… 12 more lines cut; `hanzo-dev runs show 3 --json` has all]"),
            "{text}"
        );
        assert!(text.contains("\naudit (1)\n"), "{text}");
        assert!(
            text.contains("  bash  deny (no rule matched: policy default)  sha256:0123456789ab…  no network\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "\nevents (1)\n  2023-11-14T22:13:20Z  step 1  compaction  {\"dropped\":4}\n"
            ),
            "{text}"
        );
    }

    #[test]
    fn show_of_an_empty_run_says_so() {
        let mut run = summary(5, RunStatus::Running);
        run.ended_ms = None;
        let text = render_run(&RunRecord {
            run,
            steps: vec![],
            audit: vec![],
            events: vec![],
        });
        assert!(text.contains("- (still running)"), "{text}");
        assert!(text.contains("(no steps recorded)"), "{text}");
        assert!(
            text.contains("audit (0)") && text.contains("events (0)"),
            "{text}"
        );
    }

    #[test]
    fn commands_against_a_temporary_store() {
        let dir = tempfile::tempdir().expect("tempdir");
        let env = StartEnv {
            vars: vec![("XDG_DATA_HOME".into(), dir.path().display().to_string())],
        };
        let list = Args {
            org: Some("acme".into()),
            command: RunsCommand::List {
                limit: 0,
                json: true,
                session: None,
            },
        };
        let mut out = Vec::new();
        assert_eq!(run_to(&list, &env, &mut out), exit::OK);
        assert_eq!(String::from_utf8(out).expect("utf-8"), "[]\n");
        let show = |id: &str| Args {
            org: Some("acme".into()),
            command: RunsCommand::Show {
                id: id.into(),
                json: false,
            },
        };
        assert_eq!(run_to(&show("9"), &env, &mut Vec::new()), exit::NOT_FOUND);
        assert_eq!(run_to(&show("nine"), &env, &mut Vec::new()), exit::USAGE);
        let bad_org = Args {
            org: Some("Bad Org".into()),
            command: RunsCommand::List {
                limit: 1,
                json: false,
                session: None,
            },
        };
        assert_eq!(run_to(&bad_org, &env, &mut Vec::new()), exit::USAGE);
    }
}
