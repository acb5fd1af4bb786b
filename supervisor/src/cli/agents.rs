//! `hanzo-dev agents create|list|show|delete`: agent definitions (a model, a system prompt and the
//! tools it may use) kept in the org's run store, next to the built-ins `plan`, `solve`, `code`,
//! `review` and the `auto` pipeline, which are listed and shown but never stored or deleted.
//!
//! Exit codes: 0 done; 1 the request could not be done (the name is taken); 2 usage (an unknown
//! tool, a built-in's name, an unreadable prompt file, a bad org); 4 no such agent.

use super::runs::{emit, finish, iso_utc, pretty_json, printable, store_failure, table, Failure};
use super::store;
use crate::agent::defs::{builtin, builtins, AGENT_DEFAULT_MODEL, AUTO_STAGES, BUILTIN_NAMES};
use crate::secrets::StartEnv;
use hanzo_store::{Agent, AgentDef, StoreError};
use serde::Serialize;
use std::io::Write;
use std::path::PathBuf;

/// What `hanzo-dev agents` takes.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The org whose store to use (default: `HANZO_ORG`, else `local`).
    #[arg(long, global = true, value_name = "ORG")]
    pub org: Option<String>,
    /// Which `agents` command to run.
    #[command(subcommand)]
    pub command: AgentsCommand,
}

/// The `agents` commands.
#[derive(Debug, clap::Subcommand)]
pub enum AgentsCommand {
    /// Store a new agent definition.
    Create {
        /// The agent's name (used with `hanzo-dev run --agent NAME`).
        name: String,
        /// The system prompt.
        #[arg(
            long,
            value_name = "TEXT",
            required_unless_present = "system_prompt_file"
        )]
        system_prompt: Option<String>,
        /// Read the system prompt from this file.
        #[arg(long, value_name = "FILE", conflicts_with = "system_prompt")]
        system_prompt_file: Option<PathBuf>,
        /// The tools it may use, comma-separated (`read_file,grep`); `--tools ''` for none.
        #[arg(
            long,
            value_name = "TOOLS",
            value_delimiter = ',',
            num_args = 1,
            required = true
        )]
        tools: Vec<String>,
        /// The model; the provider's default when omitted.
        #[arg(long, value_name = "MODEL")]
        model: Option<String>,
    },
    /// Built-in and stored agents.
    List {
        /// A JSON array of definitions instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// One agent's whole definition (built-ins too).
    Show {
        /// The agent's name (a built-in or a stored one; `hanzo-dev agents list` shows them).
        name: String,
        /// JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Delete a stored agent (its past runs stay on record).
    Delete {
        /// The stored agent's name (built-ins cannot be deleted).
        name: String,
    },
}

/// Runs `hanzo-dev agents …` against the org's store; returns the exit code.
pub fn run(args: &Args, env: &StartEnv) -> anyhow::Result<i32> {
    let mut out = std::io::stdout().lock();
    Ok(run_to(args, env, &mut out))
}

/// The command with its standard output given (tests pass a buffer). Errors go to stderr.
pub fn run_to(args: &Args, env: &StartEnv, out: &mut dyn Write) -> i32 {
    finish(execute(args, env).and_then(|text| emit(out, &text)))
}

/// What `list --json` and `show --json` print for one agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AgentView {
    /// The agent's name (`run --agent NAME`).
    pub name: String,
    /// Whether it is one of the built-in agents, which cannot be changed or deleted.
    pub builtin: bool,
    /// For the `auto` pipeline: the agents it runs in order; absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stages: Option<Vec<String>>,
    /// Empty = the provider's default.
    pub model: String,
    /// `None` only for the `auto` pipeline, whose stages bring their own.
    pub system_prompt: Option<String>,
    /// The tools it may call; any other call is denied before the policy is asked.
    pub tools: Vec<String>,
    /// Milliseconds since the Unix epoch; `None` for built-ins.
    pub created_ms: Option<u64>,
}

impl AgentView {
    fn builtin(def: AgentDef) -> AgentView {
        AgentView {
            name: def.name,
            builtin: true,
            stages: None,
            model: def.model,
            system_prompt: Some(def.system_prompt),
            tools: def.tools,
            created_ms: None,
        }
    }

    fn auto() -> AgentView {
        AgentView {
            name: "auto".into(),
            builtin: true,
            stages: Some(AUTO_STAGES.iter().map(|s| s.to_string()).collect()),
            model: AGENT_DEFAULT_MODEL.into(),
            system_prompt: None,
            tools: Vec::new(),
            created_ms: None,
        }
    }

    fn stored(agent: Agent) -> AgentView {
        AgentView {
            name: agent.def.name,
            builtin: false,
            stages: None,
            model: agent.def.model,
            system_prompt: Some(agent.def.system_prompt),
            tools: agent.def.tools,
            created_ms: Some(agent.created_ms),
        }
    }
}

/// A built-in by name, `auto` included.
fn builtin_view(name: &str) -> Option<AgentView> {
    if name == "auto" {
        return Some(AgentView::auto());
    }
    builtin(name).map(AgentView::builtin)
}

fn execute(args: &Args, env: &StartEnv) -> Result<String, Failure> {
    let org = store::org(args.org.as_deref(), env);
    let mut store =
        store::open(args.org.as_deref(), env).map_err(|e| Failure::Usage(format!("{e:#}")))?;
    match &args.command {
        AgentsCommand::Create {
            name,
            system_prompt,
            system_prompt_file,
            tools,
            model,
        } => {
            let prompt = match (system_prompt, system_prompt_file) {
                (Some(text), _) => text.clone(),
                (None, Some(path)) => std::fs::read_to_string(path).map_err(|e| {
                    Failure::Usage(format!(
                        "cannot read the system prompt file {}: {e}",
                        path.display()
                    ))
                })?,
                (None, None) => return Err(Failure::Usage(
                    "give the system prompt with --system-prompt TEXT or --system-prompt-file FILE"
                        .into(),
                )),
            };
            let def = AgentDef {
                name: name.clone(),
                model: model
                    .clone()
                    .unwrap_or_else(|| AGENT_DEFAULT_MODEL.to_string()),
                system_prompt: prompt,
                tools: check_tools(tools)?,
            };
            check_new_definition(&def)?;
            // Nothing secret is stored: a prompt holding the value of a secret variable of this
            // environment (an API key pasted by mistake) is refused by the store.
            store.set_secret_values(env.secret_values());
            let agent = store.create_agent(&def).map_err(|e| match e {
                StoreError::AgentExists(_) => Failure::Failed(format!(
                    "an agent named {name:?} already exists in org {org}; delete it first \
                     (`hanzo-dev agents delete {name}`) or choose another name"
                )),
                StoreError::InvalidAgentName { .. } => Failure::Usage(e.to_string()),
                StoreError::SecretInRecord { field, .. } => Failure::Usage(format!(
                    "refused: the agent's {field} contains the value of a secret environment \
                     variable, and secrets are never stored"
                )),
                other => store_failure(other),
            })?;
            Ok(format!(
                "created agent {} in org {org} ({} tool{})\n",
                agent.def.name,
                agent.def.tools.len(),
                if agent.def.tools.len() == 1 { "" } else { "s" }
            ))
        }
        AgentsCommand::List { json } => {
            let stored = store.list_agents().map_err(store_failure)?;
            let mut views: Vec<AgentView> =
                builtins().into_iter().map(AgentView::builtin).collect();
            views.push(AgentView::auto());
            // A stored agent cannot take a built-in's name, but a file written by another build
            // might hold one: the built-in is what `run --agent` uses, so only it is listed.
            views.extend(
                stored
                    .into_iter()
                    .filter(|a| !BUILTIN_NAMES.contains(&a.def.name.as_str()))
                    .map(AgentView::stored),
            );
            Ok(if *json {
                pretty_json(&views)
            } else {
                render_agent_table(&views)
            })
        }
        AgentsCommand::Show { name, json } => {
            let view = match builtin_view(name) {
                Some(v) => v,
                None => store
                    .get_agent(name)
                    .map_err(store_failure)?
                    .map(AgentView::stored)
                    .ok_or_else(|| unknown_agent(name, &org))?,
            };
            Ok(if *json {
                pretty_json(&view)
            } else {
                render_agent(&view)
            })
        }
        AgentsCommand::Delete { name } => {
            if BUILTIN_NAMES.contains(&name.as_str()) {
                return Err(Failure::Usage(format!(
                    "{name:?} is a built-in agent and cannot be deleted"
                )));
            }
            if !store.delete_agent(name).map_err(store_failure)? {
                return Err(unknown_agent(name, &org));
            }
            Ok(format!(
                "deleted agent {name} from org {org} (its past runs stay on record)\n"
            ))
        }
    }
}

fn unknown_agent(name: &str, org: &str) -> Failure {
    Failure::NotFound(format!(
        "no agent named {name:?} in org {org} (see `hanzo-dev agents list --org {org}`)"
    ))
}

/// Every built-in tool name, in the order the tools worker defines them.
fn known_tools() -> Vec<&'static str> {
    hanzo_tools::defs::definitions_json()
        .into_iter()
        .map(|(name, _, _)| name)
        .collect()
}

/// Trim the names, drop empty ones and repeats (keeping the first), and refuse any that is not a
/// built-in tool, naming each one and the valid names.
pub(super) fn check_tools(tools: &[String]) -> Result<Vec<String>, Failure> {
    let known = known_tools();
    let mut out: Vec<String> = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    for t in tools.iter().map(|t| t.trim()).filter(|t| !t.is_empty()) {
        if !known.contains(&t) {
            if !unknown.iter().any(|u| u == t) {
                unknown.push(t.to_string());
            }
        } else if !out.iter().any(|o| o == t) {
            out.push(t.to_string());
        }
    }
    if !unknown.is_empty() {
        let names: Vec<String> = unknown.iter().map(|u| format!("{u:?}")).collect();
        return Err(Failure::Usage(format!(
            "unknown tool{} {}; valid tools: {}",
            if unknown.len() == 1 { "" } else { "s" },
            names.join(", "),
            known.join(", ")
        )));
    }
    Ok(out)
}

/// Refuse what the store would accept but `run --agent` could not use sensibly.
fn check_new_definition(def: &AgentDef) -> Result<(), Failure> {
    if BUILTIN_NAMES.contains(&def.name.as_str()) {
        return Err(Failure::Usage(format!(
            "{:?} is the name of a built-in agent (built-ins: {}); choose another name",
            def.name,
            BUILTIN_NAMES.join(", ")
        )));
    }
    if def.system_prompt.trim().is_empty() {
        return Err(Failure::Usage("the system prompt is empty".into()));
    }
    Ok(())
}

fn model_label(model: &str) -> String {
    if model.is_empty() {
        "(provider default)".into()
    } else {
        model.to_string()
    }
}

/// The `agents list` table.
pub fn render_agent_table(views: &[AgentView]) -> String {
    let rows: Vec<Vec<String>> = views
        .iter()
        .map(|v| {
            vec![
                v.name.clone(),
                if v.builtin { "built-in" } else { "stored" }.into(),
                if v.stages.is_some() {
                    "-".to_string()
                } else {
                    model_label(&v.model)
                },
                match &v.stages {
                    Some(stages) => stages.join("→"),
                    None => v.tools.len().to_string(),
                },
                v.created_ms.map(iso_utc).unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    table(&["NAME", "KIND", "MODEL", "TOOLS", "CREATED"], &rows)
}

/// The `agents show` text.
pub fn render_agent(v: &AgentView) -> String {
    let mut out = String::new();
    out.push_str(&format!("name:    {}\n", v.name));
    let kind = match (v.builtin, v.created_ms) {
        (true, _) => "built-in".to_string(),
        (false, Some(ms)) => format!("stored, created {}", iso_utc(ms)),
        (false, None) => "stored".to_string(),
    };
    out.push_str(&format!("kind:    {kind}\n"));
    if let Some(stages) = &v.stages {
        out.push_str(&format!(
            "stages:  {} (each stage's final text is passed to the next)\n",
            stages.join(" → ")
        ));
    }
    if v.stages.is_none() {
        out.push_str(&format!("model:   {}\n", model_label(&v.model)));
        let tools = if v.tools.is_empty() {
            "(none)".to_string()
        } else {
            v.tools.join(", ")
        };
        out.push_str(&format!("tools:   {tools}\n"));
    }
    if let Some(prompt) = &v.system_prompt {
        out.push_str("system prompt:\n");
        for line in prompt.lines() {
            out.push_str(&format!("  {line}\n"));
        }
    }
    printable(&out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::exit;

    fn env_in(dir: &std::path::Path) -> StartEnv {
        StartEnv {
            vars: vec![
                ("XDG_DATA_HOME".into(), dir.display().to_string()),
                ("EXAMPLE_API_KEY".into(), "sk-canary-agents-77".into()),
            ],
        }
    }

    fn strings(xs: &[&str]) -> Vec<String> {
        xs.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn tools_are_checked_trimmed_and_deduplicated() {
        assert_eq!(
            check_tools(&strings(&[" read_file", "grep", "read_file", ""])),
            Ok(strings(&["read_file", "grep"]))
        );
        assert_eq!(check_tools(&strings(&[""])), Ok(vec![]));
        let Err(Failure::Usage(msg)) = check_tools(&strings(&["grep", "curl", "rm", "curl"]))
        else {
            panic!("unknown tools must be a usage error");
        };
        assert!(
            msg.starts_with(r#"unknown tools "curl", "rm"; valid tools: "#),
            "{msg}"
        );
        for t in known_tools() {
            assert!(msg.contains(t), "{msg} lacks {t}");
        }
    }

    #[test]
    fn builtin_names_and_empty_prompts_are_refused() {
        let def = |name: &str, prompt: &str| AgentDef {
            name: name.into(),
            model: String::new(),
            system_prompt: prompt.into(),
            tools: vec![],
        };
        for name in BUILTIN_NAMES {
            assert!(
                matches!(check_new_definition(&def(name, "p")), Err(Failure::Usage(m)) if m.contains("built-in")),
                "{name}"
            );
        }
        assert!(matches!(
            check_new_definition(&def("mine", "  \n")),
            Err(Failure::Usage(_))
        ));
        assert_eq!(check_new_definition(&def("mine", "p")), Ok(()));
    }

    #[test]
    fn table_marks_builtins_and_shows_stored_agents() {
        let mut views: Vec<AgentView> = builtins().into_iter().map(AgentView::builtin).collect();
        views.push(AgentView::auto());
        views.push(AgentView::stored(Agent {
            def: AgentDef {
                name: "reviewer".into(),
                model: "claude-test".into(),
                system_prompt: "Review.".into(),
                tools: strings(&["read_file", "grep"]),
            },
            created_ms: 1_700_000_000_000,
        }));
        let t = render_agent_table(&views);
        let rows: Vec<Vec<&str>> = t.lines().map(|l| l.split_whitespace().collect()).collect();
        assert_eq!(rows[0], ["NAME", "KIND", "MODEL", "TOOLS", "CREATED"]);
        assert_eq!(
            rows[1],
            ["plan", "built-in", "(provider", "default)", "0", "-"]
        );
        assert_eq!(rows[3][0], "code");
        assert_eq!(
            rows[3][4],
            crate::agent::defs::ALL_TOOLS.len().to_string(),
            "{t}"
        );
        // The pipeline has no model or tools of its own: its stages are shown instead.
        assert_eq!(rows[5], ["auto", "built-in", "-", "plan→code→review", "-"]);
        assert_eq!(
            rows[6],
            [
                "reviewer",
                "stored",
                "claude-test",
                "2",
                "2023-11-14T22:13:20Z"
            ]
        );
    }

    #[test]
    fn show_text_has_every_field() {
        let text = render_agent(&AgentView::builtin(builtin("solve").expect("solve")));
        assert!(
            text.starts_with("name:    solve\nkind:    built-in\n"),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "tools:   {}\n",
                crate::agent::defs::READ_ONLY_TOOLS.join(", ")
            )),
            "{text}"
        );
        assert!(
            text.contains("system prompt:\n  You are an analysis agent"),
            "{text}"
        );
        let auto = render_agent(&AgentView::auto());
        assert!(auto.contains("stages:  plan → code → review"), "{auto}");
        assert!(
            !auto.contains("tools:") && !auto.contains("model:"),
            "{auto}"
        );
        let plan = render_agent(&AgentView::builtin(builtin("plan").expect("plan")));
        assert!(plan.contains("tools:   (none)\n"), "{plan}");
    }

    #[test]
    fn create_show_delete_in_a_temporary_store() {
        let dir = tempfile::tempdir().expect("tempdir");
        let env = env_in(dir.path());
        let args = |command| Args { org: None, command };
        let create = |name: &str, prompt: &str| {
            args(AgentsCommand::Create {
                name: name.into(),
                system_prompt: Some(prompt.into()),
                system_prompt_file: None,
                tools: strings(&["grep"]),
                model: Some("m1".into()),
            })
        };
        let mut out = Vec::new();
        assert_eq!(run_to(&create("mine", "Look."), &env, &mut out), exit::OK);
        assert_eq!(
            String::from_utf8(out).expect("utf-8"),
            "created agent mine in org local (1 tool)\n"
        );
        assert_eq!(
            run_to(&create("mine", "Again."), &env, &mut Vec::new()),
            exit::FAILED
        );
        // A pasted API key is never stored.
        assert_eq!(
            run_to(
                &create("leaky", "use key sk-canary-agents-77"),
                &env,
                &mut Vec::new()
            ),
            exit::USAGE
        );
        let mut out = Vec::new();
        let show = args(AgentsCommand::Show {
            name: "mine".into(),
            json: true,
        });
        assert_eq!(run_to(&show, &env, &mut out), exit::OK);
        let v: serde_json::Value = serde_json::from_slice(&out).expect("json");
        assert_eq!(v["model"], "m1");
        assert_eq!(v["tools"], serde_json::json!(["grep"]));
        assert_eq!(v["builtin"], false);
        let show_leaky = args(AgentsCommand::Show {
            name: "leaky".into(),
            json: false,
        });
        assert_eq!(run_to(&show_leaky, &env, &mut Vec::new()), exit::NOT_FOUND);
        let delete = |name: &str| args(AgentsCommand::Delete { name: name.into() });
        assert_eq!(run_to(&delete("mine"), &env, &mut Vec::new()), exit::OK);
        assert_eq!(
            run_to(&delete("mine"), &env, &mut Vec::new()),
            exit::NOT_FOUND
        );
        assert_eq!(run_to(&delete("code"), &env, &mut Vec::new()), exit::USAGE);
    }
}
