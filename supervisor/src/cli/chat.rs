//! `hanzo-dev chat` (and `hanzo-dev` with no subcommand on a terminal): an interactive session
//! on the same supervisor, workers, policy and store as `run` (HIP-0301 §11). Each message is a
//! turn — a run recorded under the session — on ONE worker tree that stays up between turns.
//!
//! The path: [`run`] → `run::prepare` (the same refusals as `run`) → the session (new, or
//! `--resume`) → the worker tree → [`Session::serve`]: the screen (`crate::tui`) and, per turn,
//! an [`AgentLoop`] whose events and permission questions reach the screen over a channel.
//! Ctrl-C cancels the running turn (its command is killed and the run recorded `cancelled`); a
//! second Ctrl-C within a second, or Ctrl-D on an empty line, ends the session.

use super::exit::usage;
use super::host::{prepare, Host, Prepared, Ready};
use super::run::{self as run_cmd, DemoDir};
use crate::agent::approval::{approval_parser, ApprovalMode};
use crate::agent::run::RunReport;
use crate::agent::session;
use crate::secrets::StartEnv;
use crate::tui::app::{App, Intent};
use crate::tui::bridge::{ChatEvents, ChatPrompter, UiMsg};
use crate::tui::git::{gh_available, Git};
use crate::tui::slash::{self, Slash};
use anyhow::Context;
use crossterm::event::{Event, KeyEvent};
use hanzo_line_edit::{History, InputMode};
use hanzo_store::{NewSession, RunStatus, SessionId};
use ratatui::backend::CrosstermBackend;
use ratatui::Terminal;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

/// What `hanzo-dev chat` takes.
#[derive(Debug, Default, clap::Args)]
pub struct Args {
    /// Agent: a built-in (`plan`, `solve`, `code`, `review`, `auto`) or a stored one [default:
    /// code, or the resumed session's].
    #[arg(long)]
    pub agent: Option<String>,
    /// Continue a session: its id (`hanzo-dev runs sessions`), or none for the latest one in
    /// this workspace.
    #[arg(long, value_name = "ID", num_args = 0..=1, default_missing_value = "latest")]
    pub resume: Option<String>,
    /// A session on the bundled demo project with its recorded model, offline (as `run --demo`).
    #[arg(long, conflicts_with_all = ["replay", "workspace", "resume"])]
    pub demo: bool,
    /// Play a cassette instead of calling a provider; its exchanges answer the turns in order.
    #[arg(long, value_name = "FILE")]
    pub replay: Option<PathBuf>,
    /// What to do when a call needs approval [default: prompt].
    #[arg(long, value_parser = approval_parser())]
    pub approval: Option<ApprovalMode>,
    /// Input mode: default, emacs or vim (else `HANZO_INPUT_MODE`, else settings `input_mode`).
    #[arg(long, value_name = "MODE")]
    pub input_mode: Option<InputMode>,
    /// The workspace (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// Write every model exchange of the session to FILE as a cassette (rewritten after each
    /// turn), as `run --record`.
    #[arg(long, value_name = "FILE", conflicts_with = "demo")]
    pub record: Option<PathBuf>,
    /// The limits and model flags `chat` shares with `run`.
    #[command(flatten)]
    pub session: run_cmd::SessionFlags,
}

impl Args {
    /// `hanzo-dev` with no subcommand: `chat` with its defaults.
    pub fn default_for_terminal() -> Args {
        Args::default()
    }

    /// The `run` arguments `run::prepare` checks: the same refusals, the same settings.
    fn run_args(&self) -> run_cmd::Args {
        run_cmd::Args {
            demo: self.demo,
            agent: self.agent.clone(),
            approval: self.approval,
            workspace: self.workspace.clone(),
            replay: self.replay.clone(),
            record: self.record.clone(),
            ..run_cmd::Args::for_session("(chat)", &self.session)
        }
    }
}

/// Runs `hanzo-dev chat` on the terminal until the person quits; returns the exit code.
pub async fn run(args: &Args, env: StartEnv) -> anyhow::Result<i32> {
    if !std::io::stdin().is_terminal() || !std::io::stdout().is_terminal() {
        return Err(usage(
            "hanzo-dev chat needs a terminal (stdin and stdout); for one task without one, use \
             `hanzo-dev run TASK`",
        ));
    }
    let demo = if args.demo {
        Some(DemoDir::create()?)
    } else {
        None
    };
    let result = chat_in(args, &env, demo.as_ref().map(DemoDir::path)).await;
    if let Some(d) = demo {
        d.finish(false);
    }
    result
}

async fn chat_in(args: &Args, env: &StartEnv, demo: Option<&Path>) -> anyhow::Result<i32> {
    let rargs = args.run_args();
    let mut prep = match prepare(&rargs, env, demo)? {
        Ok(p) => p,
        Err(code) => return Ok(code),
    };
    let session = open_session(args, &mut prep)?;
    let mut host = Host::start(prep, &rargs, env).await?;
    let result = serve(args, &rargs, &mut host, session, env, demo.is_some()).await;
    host.shutdown().await;
    let (code, session) = result?;
    eprintln!("session {session}: continue it with `hanzo-dev chat --resume {session}`");
    Ok(code)
}

/// The session to talk in: the one `--resume` names (its agent, unless `--agent` says
/// otherwise), or a new one.
fn open_session(args: &Args, prep: &mut Prepared) -> anyhow::Result<SessionId> {
    let workspace = prep.workspace.display().to_string();
    let Some(which) = &args.resume else {
        let s = prep.store.create_session(&NewSession {
            agent: prep.agent_name.clone(),
            workspace,
            title: None,
        })?;
        return Ok(s.id);
    };
    let session = if which == "latest" {
        prep.store
            .list_sessions(Some(&workspace), 1)?
            .into_iter()
            .next()
            .ok_or_else(|| {
                super::exit::not_found(format!(
                    "no session to resume in {workspace}: start one with `hanzo-dev chat`"
                ))
            })?
    } else {
        let id: SessionId = which
            .parse()
            .map_err(|_| usage(format!("--resume {which:?}: a session id is a number")))?;
        prep.store
            .get_session(id)
            .map_err(|e| super::exit::not_found(format!("{e} (see `hanzo-dev runs sessions`)")))?
    };
    if args.agent.is_none() && session.agent != prep.agent_name {
        prep.stages = run_cmd::resolve_agent(&session.agent, &prep.store)?;
        prep.agent_name = session.agent.clone();
    }
    Ok(session.id)
}

/// The terminal in raw mode on the alternate screen, put back when dropped (also on a panic
/// or an error).
struct TerminalGuard;

impl TerminalGuard {
    fn enter() -> anyhow::Result<TerminalGuard> {
        crossterm::terminal::enable_raw_mode().context("cannot put the terminal in raw mode")?;
        crossterm::execute!(
            std::io::stdout(),
            crossterm::terminal::EnterAlternateScreen,
            crossterm::event::EnableBracketedPaste
        )
        .context("cannot set up the terminal")?;
        Ok(TerminalGuard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        let _ = crossterm::execute!(
            std::io::stdout(),
            crossterm::event::DisableBracketedPaste,
            crossterm::terminal::LeaveAlternateScreen,
            crossterm::cursor::Show
        );
        let _ = crossterm::terminal::disable_raw_mode();
    }
}

/// Terminal events, read on a thread of their own (crossterm's read blocks).
fn spawn_input() -> mpsc::UnboundedReceiver<Event> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        while let Ok(ev) = crossterm::event::read() {
            if tx.send(ev).is_err() {
                break;
            }
        }
    });
    rx
}

/// The input mode: `--input-mode`, else the settings (which read `HANZO_INPUT_MODE` first).
fn input_mode(args: &Args, prep: &Prepared) -> InputMode {
    args.input_mode.unwrap_or_else(|| {
        prep.loaded
            .merged
            .config
            .input_mode
            .as_str()
            .parse()
            .unwrap_or_default()
    })
}

/// The history file of a workspace: `{data_dir}/history/<sha256 of its path>`, outside it.
fn history_path(env: &StartEnv, workspace: &Path) -> anyhow::Result<PathBuf> {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(workspace.as_os_str().as_encoded_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    Ok(super::store::data_dir(env)?.join("history").join(hex))
}

type Term = Terminal<CrosstermBackend<std::io::Stdout>>;

/// Everything a turn needs that stays the same across turns.
struct Turns<'a> {
    ready: &'a Ready,
    args: &'a run_cmd::Args,
    prompter: &'a ChatPrompter,
    sink: &'a ChatEvents,
}

/// What the session's state is between turns.
struct Talk {
    session: SessionId,
    model: String,
    /// `/diff` output waiting to go with the next message.
    context: Option<String>,
    history: Option<PathBuf>,
    quit: bool,
}

async fn serve(
    args: &Args,
    rargs: &run_cmd::Args,
    host: &mut Host,
    session: SessionId,
    env: &StartEnv,
    demo: bool,
) -> anyhow::Result<(i32, SessionId)> {
    let ready = match host.ready(rargs, Default::default()).await? {
        Ok(r) => r,
        Err(code) => return Ok((code, session)),
    };
    let (ui_tx, mut ui_rx) = mpsc::unbounded_channel::<UiMsg>();
    let sink = ChatEvents(ui_tx.clone());
    let approval = args.approval.unwrap_or(ApprovalMode::Prompt);
    let prompter = ChatPrompter::new(ui_tx, approval);
    let turns = Turns {
        ready: &ready,
        args: rargs,
        prompter: &prompter,
        sink: &sink,
    };
    let model = ready.model.clone();
    let tier = ready.tier;
    let history = history_path(env, &host.prep.workspace).ok();
    let mut talk = Talk {
        session,
        model,
        context: None,
        history,
        quit: false,
    };

    let _guard = TerminalGuard::enter()?;
    let mut term = Terminal::new(CrosstermBackend::new(std::io::stdout()))?;
    let size = term.size()?;
    let color = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let mut app = App::new(size.width, color, input_mode(args, &host.prep));
    if let Some(h) = talk.history.as_deref().and_then(|p| History::load(p).ok()) {
        *app.editor.history_mut() = h;
    }
    app.status = crate::tui::app::Status {
        model: talk.model.clone(),
        agent: host.prep.agent_name.clone(),
        tier: tier.to_string(),
        approval: approval.as_str().to_string(),
        session: talk.session.0,
        max_context: rargs.max_context,
        ..Default::default()
    };
    show_history(&mut app, &host.prep, talk.session)?;
    if demo {
        app.transcript.notice(
            "demo: the model is a RECORDING (offline); the workers, sandbox, policy and store \
             are real. Press Enter to send the demo's task.",
        );
        app.editor.set_text(crate::demo::TASK);
    } else {
        app.transcript
            .notice("hanzo-dev chat: /help lists commands; Ctrl-D or Ctrl-C twice exits.");
    }
    let mut input = spawn_input();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    while !talk.quit {
        term.draw(|f| app.draw(f))?;
        tokio::select! {
            ev = input.recv() => {
                let Some(ev) = ev else { break };
                if let Some(text) = on_event(&mut app, ev, &mut talk) {
                    submit(&mut app, &mut term, &turns, host, &mut talk, &mut input, &mut ui_rx, &text).await?;
                }
            }
            Some(msg) = ui_rx.recv() => app.apply(msg),
            _ = tick.tick() => { app.tick(Instant::now()); }
        }
    }
    Ok((0, talk.session))
}

/// One terminal event while no turn runs; `Some(text)` when the user sent a message.
fn on_event(app: &mut App, ev: Event, talk: &mut Talk) -> Option<String> {
    match ev {
        Event::Key(k) => match app.on_key(k, Instant::now()) {
            Intent::Submit(text) => return Some(text),
            Intent::Quit => talk.quit = true,
            Intent::CancelTurn | Intent::None => {}
        },
        Event::Paste(s) => app.editor.insert_str(&s),
        _ => {}
    }
    None
}

/// The earlier turns of a resumed session, shown as they were.
fn show_history(app: &mut App, prep: &Prepared, session: SessionId) -> anyhow::Result<()> {
    let turns = prep.store.session_turns(session)?;
    if turns.is_empty() {
        return Ok(());
    }
    app.transcript.notice(&format!(
        "resumed session {session}: {} earlier turns",
        turns.len()
    ));
    let summary = prep.store.session_context(session)?.summary;
    for t in turns {
        app.transcript.push_user(&t.user);
        match &t.answer {
            Some(a) => app.transcript.push_reply(a),
            None => app.transcript.notice(&format!("(turn {})", t.status)),
        }
        if let Some(s) = summary.as_ref().filter(|s| s.through_run == t.run) {
            app.transcript.notice(&format!(
                "conversation compacted here: {} → {} tokens; the next turn starts from this \
                 summary",
                s.tokens_before, s.tokens_after
            ));
            app.transcript.push_reply(&s.summary);
        }
    }
    Ok(())
}

/// A message sent: a slash command, or a turn.
#[allow(clippy::too_many_arguments)]
async fn submit(
    app: &mut App,
    term: &mut Term,
    turns: &Turns<'_>,
    host: &mut Host,
    talk: &mut Talk,
    input: &mut mpsc::UnboundedReceiver<Event>,
    ui_rx: &mut mpsc::UnboundedReceiver<UiMsg>,
    text: &str,
) -> anyhow::Result<()> {
    if let Some(path) = &talk.history {
        if let Some(dir) = path.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Err(e) = app.editor.history().save(path) {
            app.message = Some(format!("history not saved: {e}"));
        }
    }
    match slash::parse(text) {
        Some(Slash::Commit(None)) => {
            let diff = match Git::open(&host.prep.workspace).and_then(|g| g.diff()) {
                Ok(d) => d,
                Err(e) => {
                    app.transcript.error(&e.to_string());
                    return Ok(());
                }
            };
            app.transcript.push_user("/commit");
            let task = format!(
                "Propose a git commit message in the Conventional Commits form for this diff. \
                 Answer with the message only: one summary line, optionally a blank line and a \
                 body.\n\n{diff}"
            );
            let report = turn(app, term, turns, host, talk, input, ui_rx, &task).await?;
            if let Some(r) = report.filter(|r| r.status == RunStatus::Succeeded) {
                let msg = r.final_text.trim().lines().next().unwrap_or("").to_string();
                app.editor.set_text(&format!("/commit {msg}"));
                app.message =
                    Some("Enter commits with this message; edit it first if you like".into());
            }
            Ok(())
        }
        Some(Slash::Compact) => {
            app.transcript.push_user(text);
            compact(app, term, turns, host, talk, input, ui_rx).await
        }
        Some(Slash::Mcp) => {
            app.transcript.push_user(text);
            let servers: Vec<String> = host
                .prep
                .loaded
                .merged
                .config
                .enabled_mcp_servers()
                .map(|(n, _)| n.clone())
                .collect();
            // The mcp worker runs only when a server is ready (`Ready::mcp_limit`).
            let mcp = turns.ready.mcp_limit.map(|_| &host.sup.mcp);
            app.transcript
                .notice(&slash::mcp_listing(&servers, mcp).await);
            Ok(())
        }
        Some(cmd) => {
            app.transcript.push_user(text);
            slash_command(app, turns, &mut host.prep, talk, cmd)?;
            Ok(())
        }
        None => {
            let task = match talk.context.take() {
                Some(ctx) => format!("{text}\n\n{ctx}"),
                None => text.to_string(),
            };
            app.transcript.push_user(text);
            if host.prep.store.get_session(talk.session)?.title.is_none() {
                if let Some(t) = hanzo_store::title_from(text) {
                    let _ = host.prep.store.set_session_title(talk.session, &t);
                }
            }
            turn(app, term, turns, host, talk, input, ui_rx, &task).await?;
            Ok(())
        }
    }
}

/// One turn: a run under the session, drawn as it streams; Ctrl-C cancels it.
#[allow(clippy::too_many_arguments)]
async fn turn(
    app: &mut App,
    term: &mut Term,
    turns: &Turns<'_>,
    host: &mut Host,
    talk: &mut Talk,
    input: &mut mpsc::UnboundedReceiver<Event>,
    ui_rx: &mut mpsc::UnboundedReceiver<UiMsg>,
    task: &str,
) -> anyhow::Result<Option<RunReport>> {
    let (cancel_tx, cancel_rx) = watch::channel(false);
    let model = talk.model.clone();
    app.busy = true;
    let fut = host.turn(
        turns.ready,
        turns.args,
        &model,
        turns.sink,
        turns.prompter,
        cancel_rx,
        talk.session,
        task,
    );
    tokio::pin!(fut);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let result = loop {
        term.draw(|f| app.draw(f))?;
        tokio::select! {
            r = &mut fut => break r,
            Some(msg) = ui_rx.recv() => app.apply(msg),
            ev = input.recv() => match ev {
                Some(Event::Key(k)) => busy_key(app, k, talk, &cancel_tx),
                Some(Event::Paste(s)) => app.editor.insert_str(&s),
                Some(_) => {}
                None => { let _ = cancel_tx.send(true); }
            },
            _ = tick.tick() => { app.tick(Instant::now()); }
        }
    };
    while let Ok(msg) = ui_rx.try_recv() {
        app.apply(msg);
    }
    app.deny_open_prompts("the turn ended");
    app.busy = false;
    match result {
        Ok(report) => Ok(Some(report)),
        Err(e) => {
            app.transcript.error(&format!(
                "the run store could not be written, so the turn stopped: {e:#}"
            ));
            Ok(None)
        }
    }
}

/// `/compact`: the model summarises the session so far (no tools), and the summary is stored
/// for the next turns to start from. Refused with fewer than two turns since the last one;
/// Ctrl-C abandons it. Nothing is stored unless the summary is, so a failure loses nothing.
#[allow(clippy::too_many_arguments)]
async fn compact(
    app: &mut App,
    term: &mut Term,
    turns: &Turns<'_>,
    host: &mut Host,
    talk: &mut Talk,
    input: &mut mpsc::UnboundedReceiver<Event>,
    ui_rx: &mut mpsc::UnboundedReceiver<UiMsg>,
) -> anyhow::Result<()> {
    let ctx = host.prep.store.session_context(talk.session)?;
    let plan = match session::plan_compaction(talk.session, &ctx) {
        Ok(p) => p,
        Err(why) => {
            app.transcript.error(&why);
            return Ok(());
        }
    };
    app.transcript.notice(&format!(
        "compacting {} turns ({} tokens)… Ctrl-C abandons it",
        plan.turns, plan.tokens_before
    ));
    app.busy = true;
    let api = host.model_api(turns.ready, turns.args, &talk.model, turns.sink);
    let outcome = {
        let fut = session::summarise(&api, &plan);
        tokio::pin!(fut);
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        loop {
            term.draw(|f| app.draw(f))?;
            tokio::select! {
                r = &mut fut => break Some(r),
                Some(msg) = ui_rx.recv() => app.apply(msg),
                ev = input.recv() => match ev {
                    Some(Event::Key(k)) => match app.on_key(k, Instant::now()) {
                        Intent::CancelTurn => break None,
                        Intent::Quit => {
                            talk.quit = true;
                            break None;
                        }
                        Intent::Submit(_) | Intent::None => {}
                    },
                    Some(Event::Paste(s)) => app.editor.insert_str(&s),
                    Some(_) => {}
                    None => break None,
                },
                _ = tick.tick() => { app.tick(Instant::now()); }
            }
        }
    };
    let recorded = api.take_recorded();
    drop(api);
    app.busy = false;
    host.keep_recorded(recorded)?;
    let (summary, usage) = match outcome {
        Some(Ok(done)) => done,
        Some(Err(why)) => {
            app.transcript.error(&format!(
                "compaction failed: {why}. The session is as it was."
            ));
            return Ok(());
        }
        None => {
            app.transcript
                .notice("compaction abandoned: the session is as it was");
            return Ok(());
        }
    };
    app.status.tokens_in += usage.input_tokens;
    app.status.tokens_out += usage.output_tokens;
    let row = session::summary_row(&plan, &summary);
    match host.prep.store.record_session_summary(&row) {
        Ok(stored) => {
            app.status.context_used = stored.tokens_after;
            app.transcript.notice(&format!(
                "conversation compacted: {} → {} tokens ({} turns; the next turn starts from \
                 this summary)",
                stored.tokens_before, stored.tokens_after, stored.turns
            ));
            app.transcript.push_reply(&summary);
        }
        Err(e) => app.transcript.error(&format!(
            "the summary could not be stored ({e}); the session is as it was"
        )),
    }
    Ok(())
}

fn busy_key(app: &mut App, k: KeyEvent, talk: &mut Talk, cancel: &watch::Sender<bool>) {
    match app.on_key(k, Instant::now()) {
        Intent::CancelTurn => {
            let _ = cancel.send(true);
        }
        Intent::Quit => {
            talk.quit = true;
            app.deny_open_prompts("the session is ending");
            let _ = cancel.send(true);
        }
        Intent::Submit(_) | Intent::None => {}
    }
}

/// The slash commands that are not turns.
fn slash_command(
    app: &mut App,
    turns: &Turns<'_>,
    prep: &mut Prepared,
    talk: &mut Talk,
    cmd: Slash,
) -> anyhow::Result<()> {
    let git = || Git::open(&prep.workspace);
    let shown = |r: Result<String, crate::tui::git::GitError>, app: &mut App| match r {
        Ok(out) => app.transcript.notice(&out),
        Err(e) => app.transcript.error(&e.to_string()),
    };
    match cmd {
        Slash::Agent(name) => match run_cmd::resolve_agent(&name, &prep.store) {
            Ok(stages) => {
                prep.stages = stages;
                prep.agent_name = name.clone();
                app.status.agent = name.clone();
                app.transcript
                    .notice(&format!("agent: {name} (from the next turn)"));
            }
            Err(e) => app.transcript.error(&format!("{e:#}")),
        },
        Slash::Clear => {
            let s = prep.store.create_session(&NewSession {
                agent: prep.agent_name.clone(),
                workspace: prep.workspace.display().to_string(),
                title: None,
            })?;
            talk.session = s.id;
            talk.context = None;
            turns.prompter.forget();
            app.transcript.clear();
            app.status.session = s.id.0;
            app.status.tokens_in = 0;
            app.status.tokens_out = 0;
            app.status.context_used = 0;
            app.transcript
                .notice(&format!("new session {}: the transcript is empty", s.id));
        }
        Slash::Help => {
            let mut text = String::from("commands:\n");
            for (c, h) in slash::COMMANDS {
                text.push_str(&format!("{c:<16} {h}\n"));
            }
            text.push_str(
                "keys: Enter sends · Alt-Enter or C-j a new line · Tab completes · Ctrl-O \
                 folds/unfolds tool output · PageUp/PageDown scroll · Ctrl-C cancels the turn \
                 (twice exits) · Ctrl-D on an empty line exits",
            );
            app.transcript.notice(&text);
        }
        Slash::Model(None) => app.transcript.notice(&format!("model: {}", talk.model)),
        Slash::Model(Some(m)) => {
            talk.model = m.clone();
            app.status.model = m.clone();
            app.transcript.notice(&format!(
                "model: {m} (from the next turn; the provider decides whether it exists)"
            ));
        }
        Slash::Permissions => app.transcript.notice(&permissions_text(prep)),
        Slash::Mcp | Slash::Commit(None) | Slash::Compact => {}
        Slash::Branch(name) => shown(git().and_then(|g| g.branch(&name)), app),
        Slash::Commit(Some(msg)) => shown(git().and_then(|g| g.commit(&msg)), app),
        Slash::Diff => match git().and_then(|g| g.diff()) {
            Ok(d) => {
                let lines = d.lines().count();
                talk.context = Some(d);
                app.transcript.notice(&format!(
                    "the diff ({lines} lines) goes with your next message"
                ));
            }
            Err(e) => app.transcript.error(&e.to_string()),
        },
        Slash::Stash => {
            let ts = super::runs::iso_utc(hanzo_policy::audit::now_ms());
            shown(git().and_then(|g| g.stash(&ts)), app);
        }
        Slash::Worktree(name) => shown(git().and_then(|g| g.worktree(&name)).map(|(m, _)| m), app),
        Slash::CommitPushPr => shown(git().and_then(|g| g.commit_push_pr(gh_available())), app),
        Slash::Invalid(why) => app.transcript.error(&why),
    }
    Ok(())
}

/// `/permissions`: the rules in effect, by scope, in the order they are checked.
fn permissions_text(prep: &Prepared) -> String {
    let rules = &prep.loaded.merged.config.permissions;
    let mut out = format!(
        "permission rules (workspace {}trusted):\n",
        if prep.policy.is_trusted() { "" } else { "not " }
    );
    for (scope, list) in [
        ("local", &rules.local),
        ("project", &rules.project),
        ("user", &rules.user),
    ] {
        for r in list {
            out.push_str(&format!(
                "  [{scope}] {} → {}\n",
                r.tool_pattern,
                r.mode.as_str()
            ));
        }
    }
    if rules.local.is_empty() && rules.project.is_empty() && rules.user.is_empty() {
        out.push_str("  none: every call that needs approval is asked about\n");
    }
    out
}
