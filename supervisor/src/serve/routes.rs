//! The routes of the agents API (HIP-1210's surface) and their handlers. Every route but the
//! OpenAPI document needs a principal, and the principal's org is the only store a handler
//! opens: nothing in the path, the query, a header or the body can name another.

use super::events::{self, Follow};
use super::http::{json_response, parse_json, read_body, ApiError, Body};
use super::runs::{self, RunRequest};
use super::tokens::Principal;
use super::State;
use crate::agent::defs::{self, BUILTIN_NAMES};
use hanzo_store::{AgentDef, ApprovalMode, RunId, RunStore, StoreError};
use http::{Method, Request, Response, StatusCode};
use serde::Deserialize;
use serde_json::json;
use std::sync::Arc;

/// The OpenAPI 3.1 document (hand-written; a test checks it lists every route).
pub const OPENAPI: &str = include_str!("openapi.json");

/// A matched route.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `GET /v1/openapi.json`.
    OpenApi,
    /// `/v1/agents`: list, create.
    Agents,
    /// `/v1/agents/{ref}`: show, change, delete.
    Agent(String),
    /// `POST /v1/agents/{ref}/run`: start a run.
    AgentRun(String),
    /// `GET /v1/agents/{ref}/runs`: the agent's runs.
    AgentRuns(String),
    /// `GET /v1/runs/{id}`: one run's record.
    Run(RunId),
    /// `GET /v1/runs/{id}/events`: the run's events as server-sent events.
    RunEvents(RunId),
}

/// Every route pattern and its methods, as the OpenAPI document must list them.
pub const ROUTES: &[(&str, &[&str])] = &[
    ("/v1/openapi.json", &["get"]),
    ("/v1/agents", &["get", "post"]),
    ("/v1/agents/{ref}", &["get", "patch", "delete"]),
    ("/v1/agents/{ref}/run", &["post"]),
    ("/v1/agents/{ref}/runs", &["get"]),
    ("/v1/runs/{id}", &["get"]),
    ("/v1/runs/{id}/events", &["get"]),
];

fn percent_decode(seg: &str) -> Result<String, ApiError> {
    let bad = || ApiError::bad_request("bad_path", "the path is not valid percent-encoded UTF-8");
    let bytes = seg.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or_else(bad)?;
            let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

fn run_id(seg: &str) -> Result<RunId, ApiError> {
    seg.parse::<i64>()
        .ok()
        .filter(|n| *n > 0)
        .map(RunId)
        .ok_or_else(|| ApiError::not_found("run_not_found", "no such run"))
}

/// Match a path (without its query) to a route. Segments are percent-decoded one by one, so an
/// encoded `/` stays inside its segment and can never add one.
pub fn route(path: &str) -> Result<Route, ApiError> {
    let not_found = || ApiError::not_found("not_found", "no such route");
    let rest = path.strip_prefix("/v1/").ok_or_else(not_found)?;
    let segs: Vec<&str> = rest.split('/').collect();
    match segs.as_slice() {
        ["openapi.json"] => Ok(Route::OpenApi),
        ["agents"] => Ok(Route::Agents),
        ["agents", r] if !r.is_empty() => Ok(Route::Agent(percent_decode(r)?)),
        ["agents", r, "run"] if !r.is_empty() => Ok(Route::AgentRun(percent_decode(r)?)),
        ["agents", r, "runs"] if !r.is_empty() => Ok(Route::AgentRuns(percent_decode(r)?)),
        ["runs", id] => Ok(Route::Run(run_id(id)?)),
        ["runs", id, "events"] => Ok(Route::RunEvents(run_id(id)?)),
        _ => Err(not_found()),
    }
}

fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not answer that method",
    )
}

/// The principal of a request: its bearer token, verified against the token file.
async fn authenticate<B>(state: &State, req: &Request<B>) -> Result<Principal, ApiError> {
    let header = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(ApiError::unauthorized)?;
    let token = header
        .strip_prefix("Bearer ")
        .map(str::trim)
        .ok_or_else(ApiError::unauthorized)?;
    authenticate_bearer(state, token).await
}

/// The principal a bearer value stands for: a JWT (when the server verifies JWTs) or one of
/// our own tokens. Shared by the HTTP routes and the WebSocket bridge.
pub async fn authenticate_bearer(state: &State, token: &str) -> Result<Principal, ApiError> {
    if super::jwt::looks_like_jwt(token) {
        let Some(cfg) = &state.jwt else {
            return Err(ApiError::unauthorized());
        };
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        return super::jwt::verify(cfg, token, now).await.map_err(|e| {
            eprintln!("auth: a JWT was refused: {e}");
            ApiError::unauthorized()
        });
    }
    match state.tokens.verify(token) {
        Ok(Some(p)) => Ok(p),
        Ok(None) => Err(ApiError::unauthorized()),
        Err(e) => {
            eprintln!("auth: {e}");
            Err(ApiError::internal())
        }
    }
}

/// Answer one request.
pub async fn handle<B>(state: Arc<State>, req: Request<B>) -> Response<Body>
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    match dispatch(&state, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn dispatch<B>(state: &Arc<State>, req: Request<B>) -> Result<Response<Body>, ApiError>
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let route = route(req.uri().path())?;
    if route == Route::OpenApi {
        return match *req.method() {
            Method::GET => Ok(openapi_response()),
            _ => Err(method_not_allowed()),
        };
    }
    // Authentication comes before anything about the route's data (even whether it exists).
    let who = authenticate(state, &req).await?;
    dispatch_as(state, &who, route, req).await
}

/// Answer `req` (already routed to `route`) for the principal `who`: the HTTP routes after
/// authentication, and the WebSocket bridge's JSON-RPC calls.
pub async fn dispatch_as<B>(
    state: &Arc<State>,
    who: &Principal,
    route: Route,
    req: Request<B>,
) -> Result<Response<Body>, ApiError>
where
    B: http_body::Body<Data = bytes::Bytes>,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    let who = who.clone();
    let method = req.method().clone();
    let (parts, body) = req.into_parts();
    let read = |cap| read_body(&parts.headers, body, cap);
    match (route, method) {
        (Route::Agents, Method::GET) => with_store(state, &who, list_agents).await,
        (Route::Agents, Method::POST) => {
            let b = read(state.max_body).await?;
            let req: AgentBody = parse_json(&b)?;
            with_store(state, &who, move |s| create_agent(s, req)).await
        }
        (Route::Agent(name), Method::GET) => {
            with_store(state, &who, move |s| get_agent(s, &name)).await
        }
        (Route::Agent(name), Method::PATCH) => {
            let b = read(state.max_body).await?;
            let req: AgentPatch = parse_json(&b)?;
            with_store(state, &who, move |s| patch_agent(s, &name, req)).await
        }
        (Route::Agent(name), Method::DELETE) => {
            with_store(state, &who, move |s| delete_agent(s, &name)).await
        }
        (Route::AgentRuns(name), Method::GET) => {
            with_store(state, &who, move |s| agent_runs(s, &name)).await
        }
        (Route::AgentRun(name), Method::POST) => {
            let b = read(state.max_body).await?;
            let req: RunBody = parse_json(&b)?;
            start_run(state, &who, name, req).await
        }
        (Route::Run(id), Method::GET) => {
            let registry = state.registry.clone();
            let org = who.org.clone();
            with_store(state, &who, move |s| {
                get_run(s, id, registry.is_active(&org, id))
            })
            .await
        }
        (Route::RunEvents(id), Method::GET) => follow_run(state, &who, id, &parts.headers).await,
        _ => Err(method_not_allowed()),
    }
}

fn openapi_response() -> Response<Body> {
    let doc: serde_json::Value =
        serde_json::from_str(OPENAPI).expect("the OpenAPI document is valid JSON (a test checks)");
    json_response(StatusCode::OK, &doc)
}

/// Run `f` on the principal's store, off the async threads (SQLite blocks).
async fn with_store<F>(
    state: &Arc<State>,
    who: &Principal,
    f: F,
) -> Result<Response<Body>, ApiError>
where
    F: FnOnce(&mut RunStore) -> Result<Response<Body>, ApiError> + Send + 'static,
{
    let state = state.clone();
    let org = who.org.clone();
    tokio::task::spawn_blocking(move || {
        let mut store = state.open_store(&org)?;
        f(&mut store)
    })
    .await
    .map_err(|_| ApiError::internal())?
}

fn store_error(e: StoreError) -> ApiError {
    match e {
        StoreError::InvalidAgentName { .. } => {
            ApiError::bad_request("invalid_agent", e.to_string())
        }
        StoreError::AgentExists(_) => {
            ApiError::new(StatusCode::CONFLICT, "agent_exists", e.to_string())
        }
        StoreError::RunNotFound(_) => ApiError::not_found("run_not_found", "no such run"),
        StoreError::SecretInRecord { field, .. } => ApiError::bad_request(
            "secret_refused",
            format!("the {field} contains the value of a secret, and secrets are never stored"),
        ),
        other => {
            eprintln!("store: {other}");
            ApiError::internal()
        }
    }
}

fn agent_not_found() -> ApiError {
    ApiError::not_found("agent_not_found", "no such agent")
}

/// `POST /v1/agents`. Unknown fields (an `org`, say) are ignored: the org is the token's.
#[derive(Debug, Deserialize)]
struct AgentBody {
    name: String,
    #[serde(default)]
    model: String,
    system_prompt: String,
    #[serde(default)]
    tools: Vec<String>,
}

/// `PATCH /v1/agents/:ref`: the fields to change.
#[derive(Debug, Deserialize)]
struct AgentPatch {
    model: Option<String>,
    system_prompt: Option<String>,
    tools: Option<Vec<String>>,
}

fn check_tools(tools: &[String]) -> Result<Vec<String>, ApiError> {
    let known: Vec<&str> = hanzo_tools::defs::definitions_json()
        .into_iter()
        .map(|(name, _, _)| name)
        .collect();
    let mut out: Vec<String> = Vec::new();
    for t in tools.iter().map(|t| t.trim()).filter(|t| !t.is_empty()) {
        if !known.contains(&t) {
            return Err(ApiError::bad_request(
                "invalid_agent",
                format!("unknown tool {t:?}; valid tools: {}", known.join(", ")),
            ));
        }
        if !out.iter().any(|o| o == t) {
            out.push(t.to_string());
        }
    }
    Ok(out)
}

fn check_prompt(p: &str) -> Result<(), ApiError> {
    if p.trim().is_empty() {
        return Err(ApiError::bad_request(
            "invalid_agent",
            "the system prompt is empty",
        ));
    }
    Ok(())
}

fn list_agents(s: &mut RunStore) -> Result<Response<Body>, ApiError> {
    let agents = s.list_agents().map_err(store_error)?;
    Ok(json_response(StatusCode::OK, &json!({ "agents": agents })))
}

fn create_agent(s: &mut RunStore, b: AgentBody) -> Result<Response<Body>, ApiError> {
    if BUILTIN_NAMES.contains(&b.name.as_str()) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "agent_exists",
            format!("{:?} is the name of a built-in agent", b.name),
        ));
    }
    check_prompt(&b.system_prompt)?;
    let def = AgentDef {
        name: b.name,
        model: b.model,
        system_prompt: b.system_prompt,
        tools: check_tools(&b.tools)?,
    };
    let agent = s.create_agent(&def).map_err(store_error)?;
    Ok(json_response(StatusCode::CREATED, &agent))
}

fn get_agent(s: &mut RunStore, name: &str) -> Result<Response<Body>, ApiError> {
    let agent = s
        .get_agent(name)
        .map_err(store_error)?
        .ok_or_else(agent_not_found)?;
    Ok(json_response(StatusCode::OK, &agent))
}

fn patch_agent(s: &mut RunStore, name: &str, p: AgentPatch) -> Result<Response<Body>, ApiError> {
    let mut def = s
        .get_agent(name)
        .map_err(store_error)?
        .ok_or_else(agent_not_found)?
        .def;
    if let Some(m) = p.model {
        def.model = m;
    }
    if let Some(sp) = p.system_prompt {
        check_prompt(&sp)?;
        def.system_prompt = sp;
    }
    if let Some(t) = p.tools {
        def.tools = check_tools(&t)?;
    }
    let agent = s
        .update_agent(&def)
        .map_err(store_error)?
        .ok_or_else(agent_not_found)?;
    Ok(json_response(StatusCode::OK, &agent))
}

fn delete_agent(s: &mut RunStore, name: &str) -> Result<Response<Body>, ApiError> {
    if !s.delete_agent(name).map_err(store_error)? {
        return Err(agent_not_found());
    }
    Ok(json_response(StatusCode::OK, &json!({ "deleted": name })))
}

fn agent_runs(s: &mut RunStore, name: &str) -> Result<Response<Body>, ApiError> {
    let runs = s.list_runs_of_agent(name, 100).map_err(store_error)?;
    Ok(json_response(StatusCode::OK, &json!({ "runs": runs })))
}

fn get_run(s: &mut RunStore, id: RunId, active: bool) -> Result<Response<Body>, ApiError> {
    let record = s.load_run(id).map_err(store_error)?;
    let mut v = serde_json::to_value(&record).expect("a run record serializes");
    if let Some(o) = v.as_object_mut() {
        o.insert("active".into(), json!(active));
    }
    Ok(json_response(StatusCode::OK, &v))
}

/// `POST /v1/agents/:ref/run`.
#[derive(Debug, Deserialize)]
struct RunBody {
    task: String,
    /// `deny`, `allow-listed` or `allow`; at most the server's `--approval`.
    approval: Option<String>,
    max_steps: Option<u32>,
}

/// How much an unattended mode lets through, to compare a request with the server's ceiling.
fn rank(m: ApprovalMode) -> u8 {
    match m {
        ApprovalMode::Deny | ApprovalMode::Prompt => 0,
        ApprovalMode::AllowListed => 1,
        ApprovalMode::Allow => 2,
    }
}

fn approval_of(requested: Option<&str>, ceiling: ApprovalMode) -> Result<ApprovalMode, ApiError> {
    let Some(text) = requested else {
        return Ok(ceiling);
    };
    let mode = ApprovalMode::parse(text)
        .filter(|m| *m != ApprovalMode::Prompt)
        .ok_or_else(|| {
            ApiError::bad_request(
                "invalid_request",
                "approval must be deny, allow-listed or allow (nobody is there to prompt)",
            )
        })?;
    if rank(mode) > rank(ceiling) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "approval_not_permitted",
            format!(
                "this server allows at most --approval {} (its own --approval)",
                ceiling.as_str()
            ),
        ));
    }
    Ok(mode)
}

async fn start_run(
    state: &Arc<State>,
    who: &Principal,
    agent: String,
    b: RunBody,
) -> Result<Response<Body>, ApiError> {
    if b.task.trim().is_empty() {
        return Err(ApiError::bad_request(
            "invalid_request",
            "the task is empty",
        ));
    }
    if b.max_steps == Some(0) {
        return Err(ApiError::bad_request(
            "invalid_request",
            "max_steps must be at least 1",
        ));
    }
    let approval = approval_of(b.approval.as_deref(), state.approval)?;
    if defs::builtin(&agent).is_none() && agent != "auto" {
        let name = agent.clone();
        let st = state.clone();
        let org = who.org.clone();
        let exists = tokio::task::spawn_blocking(move || -> Result<bool, ApiError> {
            Ok(st
                .open_store(&org)?
                .get_agent(&name)
                .map_err(store_error)?
                .is_some())
        })
        .await
        .map_err(|_| ApiError::internal())??;
        if !exists {
            return Err(agent_not_found());
        }
    }
    let req = RunRequest {
        org: who.org.clone(),
        agent,
        task: b.task,
        approval,
        max_steps: b.max_steps,
    };
    let id = runs::start(
        &state.template,
        req,
        &state.data_dir,
        state.secrets.clone(),
        &state.registry,
    )
    .await
    .map_err(|e| {
        eprintln!("run start: {e}");
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "run_not_started",
            "the run process ended before the run started; the server's log says why",
        )
    })?;
    let mut r = json_response(
        StatusCode::ACCEPTED,
        &json!({
            "run_id": id.0,
            "status": "running",
            "run": format!("/v1/runs/{}", id.0),
            "events": format!("/v1/runs/{}/events", id.0),
        }),
    );
    if let Ok(v) = http::HeaderValue::from_str(&format!("/v1/runs/{}", id.0)) {
        r.headers_mut().insert(http::header::LOCATION, v);
    }
    Ok(r)
}

async fn follow_run(
    state: &Arc<State>,
    who: &Principal,
    id: RunId,
    headers: &http::HeaderMap,
) -> Result<Response<Body>, ApiError> {
    let after = match headers.get("last-event-id") {
        None => 0,
        Some(v) => v
            .to_str()
            .ok()
            .and_then(|s| s.trim().parse::<i64>().ok())
            .filter(|n| *n >= 0)
            .ok_or_else(|| {
                ApiError::bad_request("invalid_request", "Last-Event-ID must be an event id")
            })?,
    };
    // 404 before any header of a stream goes out: the run must be in this org's file.
    check_run(state, who, id).await?;
    Ok(events::response(Follow {
        data_dir: state.data_dir.clone(),
        org: who.org.clone(),
        run: id,
        after,
        registry: state.registry.clone(),
    }))
}

/// `Ok` when run `id` is in the principal's org file, else 404 `run_not_found`.
pub async fn check_run(state: &Arc<State>, who: &Principal, id: RunId) -> Result<(), ApiError> {
    let st = state.clone();
    let org = who.org.clone();
    tokio::task::spawn_blocking(move || -> Result<(), ApiError> {
        st.open_store(&org)?.get_run(id).map_err(store_error)?;
        Ok(())
    })
    .await
    .map_err(|_| ApiError::internal())?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_openapi_document_lists_every_route_and_method_and_nothing_else() {
        let doc: serde_json::Value = serde_json::from_str(OPENAPI).expect("valid JSON");
        assert_eq!(doc["openapi"], "3.1.0");
        let paths = doc["paths"].as_object().expect("paths");
        assert_eq!(paths.len(), ROUTES.len());
        for (path, methods) in ROUTES {
            let item = paths.get(*path).unwrap_or_else(|| panic!("{path} missing"));
            let mut listed: Vec<&str> = item
                .as_object()
                .expect("path item")
                .keys()
                .map(String::as_str)
                .filter(|k| *k != "parameters")
                .collect();
            listed.sort_unstable();
            let mut want = methods.to_vec();
            want.sort_unstable();
            assert_eq!(listed, want, "{path}");
            // And the router answers it.
            let concrete = path.replace("{ref}", "some-agent").replace("{id}", "3");
            assert!(route(&concrete).is_ok(), "{concrete}");
        }
        let codes = doc["components"]["schemas"]["Error"]["properties"]["error"]["properties"]
            ["code"]["enum"]
            .as_array()
            .expect("codes");
        for code in [
            "unauthorized",
            "payload_too_large",
            "run_not_found",
            "run_not_started",
        ] {
            assert!(codes.iter().any(|c| c == code), "{code}");
        }
    }

    #[test]
    fn routes_match_and_encoded_slashes_stay_in_their_segment() {
        assert_eq!(route("/v1/agents").expect("agents"), Route::Agents);
        assert_eq!(
            route("/v1/agents/..%2F..%2Fetc%2Fpasswd").expect("agent"),
            Route::Agent("../../etc/passwd".into())
        );
        assert_eq!(
            route("/v1/agents/a%20b/run").expect("run"),
            Route::AgentRun("a b".into())
        );
        assert_eq!(
            route("/v1/runs/7/events").expect("events"),
            Route::RunEvents(RunId(7))
        );
        for bad in ["/v1/runs/-1", "/v1/runs/x", "/v1/runs/0"] {
            assert_eq!(route(bad).expect_err(bad).code, "run_not_found");
        }
        for bad in [
            "/",
            "/v2/agents",
            "/v1/agents/",
            "/v1/agents/a/b/c",
            "/v1//agents",
        ] {
            assert_eq!(
                route(bad).expect_err(bad).status,
                StatusCode::NOT_FOUND,
                "{bad}"
            );
        }
        assert_eq!(route("/v1/agents/%zz").expect_err("bad").code, "bad_path");
        assert_eq!(route("/v1/agents/%ff").expect_err("bad").code, "bad_path");
    }

    #[test]
    fn a_request_cannot_widen_the_servers_approval_mode() {
        assert_eq!(
            approval_of(None, ApprovalMode::AllowListed),
            Ok(ApprovalMode::AllowListed)
        );
        assert_eq!(
            approval_of(Some("deny"), ApprovalMode::Allow),
            Ok(ApprovalMode::Deny)
        );
        let e = approval_of(Some("allow"), ApprovalMode::AllowListed).expect_err("wider");
        assert_eq!(e.code, "approval_not_permitted");
        assert_eq!(
            approval_of(Some("prompt"), ApprovalMode::Allow)
                .expect_err("p")
                .code,
            "invalid_request"
        );
        assert_eq!(
            approval_of(Some("yes"), ApprovalMode::Allow)
                .expect_err("y")
                .code,
            "invalid_request"
        );
    }
}
