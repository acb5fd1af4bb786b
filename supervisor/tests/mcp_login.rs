//! `hanzo-dev mcp login | logout SERVER` through the real binary and its real broker: a real
//! OpenID provider (`oidc-provider`, test-deps) is the authorization server of a real
//! streamable-HTTP MCP server (`fixtures/mcp/oauth_server.py`) that lets in only a bearer JWT
//! the provider signed for it (signature checked against the provider's JWKS, `aud` = its URL).
//! A test browser agent acts as the user on the URL the CLI prints. Then `hanzo-dev mcp call`
//! succeeds with the stored token (refreshed with rotation), a token stored for one URL is not
//! sent to another, and after `mcp logout` the next call is a denial. The canary: the tokens
//! appear in `credentials.json` only — no other file, no process's environment or command line,
//! no output at `-vv`, no `auth status`.

mod common;
#[path = "../../workers/broker/tests/support/oidc.rs"]
mod oidc;

use common::browser::{credentials, file_texts, tree_texts, LoginRun};
use common::env::TestHome;
use oidc::{Browser, OidcProvider};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A private user with a directory `srv` for the MCP fixture's files.
fn new_home() -> TestHome {
    let home = TestHome::new();
    std::fs::create_dir_all(home.path("srv")).expect("mkdir");
    home
}

/// User settings naming one remote MCP server.
fn serve(home: &TestHome, name: &str, url: &str) {
    home.settings(json!({ "mcp_servers": { name: { "url": url } } }));
}

/// The OAuth-protected MCP fixture; killed on drop.
struct McpServer {
    child: Child,
    url: String,
    seen: PathBuf,
}

impl Drop for McpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl McpServer {
    fn start(dir: &Path, name: &str, opts: &[String]) -> McpServer {
        let port_file = dir.join(format!("{name}.port"));
        let seen = dir.join(format!("{name}.seen"));
        let child = Command::new("/usr/bin/python3")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/oauth_server.py"))
            .arg(&port_file)
            .arg(&seen)
            .args(opts)
            .stdin(Stdio::null())
            .spawn()
            .expect("python3");
        let mut port = None;
        for _ in 0..600 {
            if let Ok(p) = std::fs::read_to_string(&port_file) {
                port = Some(p);
                break;
            }
            // Polling with a deadline: the child announces its port only through this file.
            std::thread::sleep(Duration::from_millis(50));
        }
        let port = port.expect("the MCP fixture listens");
        McpServer {
            child,
            url: format!("http://127.0.0.1:{port}/mcp"),
            seen,
        }
    }

    /// What the bearer token of each MCP request (POST to /mcp) was: none, valid, invalid.
    fn bearers(&self) -> Vec<String> {
        std::fs::read_to_string(&self.seen)
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["method"] == "POST" && v["path"] == "/mcp")
            .map(|v| v["bearer"].as_str().unwrap_or_default().to_string())
            .collect()
    }
}

fn query(url: &str, key: &str) -> String {
    reqwest::Url::parse(url)
        .expect("url")
        .query_pairs()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.into_owned())
        .unwrap_or_else(|| panic!("no {key} in {url}"))
}

fn assert_absent(tokens: &[&str], haystack: &str, what: &str) {
    for t in tokens {
        assert!(!haystack.contains(t), "a token appears in {what}");
        assert!(
            !haystack.contains(&t[t.len() - 16..]),
            "a piece of a token appears in {what}"
        );
    }
}

/// `hanzo-dev mcp call docs whoami --json`'s document.
fn call(home: &TestHome, seen: &mut Vec<(String, String)>) -> Value {
    let (_, out, err) = home.run(&["-vv", "mcp", "call", "docs", "whoami", "--yes", "--json"]);
    seen.push(("mcp call output at -vv".into(), format!("{out}{err}")));
    serde_json::from_str(out.lines().last().unwrap_or_default())
        .unwrap_or_else(|_| panic!("a JSON outcome: {out}{err}"))
}

#[test]
fn mcp_login_stores_a_bound_token_that_calls_use_until_logout() {
    // Access tokens live 30 s, inside the broker's refresh margin: every later use refreshes.
    let op = OidcProvider::start(json!({"clients": [], "access_token_ttl": 30}));
    let home = new_home();
    let srv = McpServer::start(
        &home.path("srv"),
        "docs",
        &[format!("issuer={}", op.issuer)],
    );
    serve(&home, "docs", &srv.url);
    let mut seen: Vec<(String, String)> = Vec::new();

    // Before any login: the server's 401 is a denial.
    let before = call(&home, &mut seen);
    assert_ne!(before["classification"], "allowed", "{before}");
    assert!(credentials(&home).get("mcp:docs").is_none());

    let login = LoginRun::start(home.command(&["-vv", "mcp", "login", "docs", "--timeout", "120"]));
    let url = login.url_after("this URL in a browser");
    assert!(url.starts_with(&format!("{}/auth?", op.issuer)), "{url}");
    // A callback with the wrong state is refused, and the listener keeps waiting.
    let redirect = query(&url, "redirect_uri");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let forged = rt
        .block_on(
            reqwest::Client::new()
                .get(format!("{redirect}?code=forged-code&state=not-the-state"))
                .send(),
        )
        .expect("the listener answers");
    assert_eq!(forged.status().as_u16(), 400);
    let page = rt.block_on(Browser::new().open(&url));
    assert_eq!(page.status, 200, "{}", page.body);
    let (code, out, err) = login.finish();
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("Logged in to MCP server docs"), "{out}");
    seen.push(("mcp login output at -vv".into(), format!("{out}{err}")));

    // What the authorization server was asked: S256, `resource` = the server, a registration.
    assert_eq!(query(&url, "code_challenge_method"), "S256");
    assert_eq!(query(&url, "resource"), srv.url);
    assert!(query(&url, "scope").contains("mcp:read"), "{url}");
    assert!(op.request_urls().iter().any(|u| u == "/reg"));
    assert!(op.events("grant.error").is_empty(), "{:?}", op.log());
    let creds = credentials(&home);
    let entry = &creds["mcp:docs"];
    assert_eq!(entry["resource"], json!(srv.url), "{creds}");
    let at = entry["access_token"].as_str().expect("access").to_string();
    let rt1 = entry["refresh_token"]
        .as_str()
        .expect("refresh")
        .to_string();
    assert_eq!(oidc::jwt_claims(&at)["aud"], json!(srv.url));

    // A call: the broker refreshes the short-lived token (rotating the refresh token) and the
    // server accepts it.
    let ok = call(&home, &mut seen);
    assert_eq!(ok["classification"], "allowed", "{ok}");
    assert_eq!(ok["result"]["content"][0]["text"], "hello alice", "{ok}");
    let creds = credentials(&home);
    let at2 = creds["mcp:docs"]["access_token"]
        .as_str()
        .expect("access")
        .to_string();
    let rt2 = creds["mcp:docs"]["refresh_token"]
        .as_str()
        .expect("refresh")
        .to_string();
    assert_ne!(at2, at, "refreshed before use");
    assert_ne!(rt2, rt1, "the refresh token rotated");
    assert_eq!(srv.bearers().last().map(String::as_str), Some("valid"));

    // auth status lists the server's credential, with its resource, and no token.
    let (code, text, e) = home.run(&["-vv", "auth", "status"]);
    assert_eq!(code, 0, "{e}");
    assert!(
        text.contains("mcp:docs") && text.contains("oauth"),
        "{text}"
    );
    assert!(text.contains(&format!("for {}", srv.url)), "{text}");
    seen.push(("auth status".into(), format!("{text}{e}")));
    let (code, j, e) = home.run(&["auth", "status", "--json"]);
    assert_eq!(code, 0, "{e}");
    let v: Value = serde_json::from_str(&j).expect("JSON");
    let c = v["credentials"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["provider"] == "mcp:docs"))
        .cloned()
        .expect("the MCP credential is listed");
    assert_eq!(c["resource"], json!(srv.url));
    assert_eq!(c["refreshable"], true);
    seen.push(("auth status --json".into(), j));

    // A cloned repository's settings point `docs` at another server (a project `url` needs no
    // trust: it runs nothing), at the same authorization server: the token, bound to the URL
    // it was issued for, is not sent there.
    let other = McpServer::start(
        &home.path("srv"),
        "other",
        &[format!("issuer={}", op.issuer)],
    );
    std::fs::create_dir_all(home.path("ws/.hanzo")).expect("mkdir");
    std::fs::write(
        home.path("ws/.hanzo/settings.json"),
        json!({"mcp_servers": {"docs": {"url": other.url}}}).to_string(),
    )
    .expect("project settings");
    let moved = call(&home, &mut seen);
    assert_ne!(moved["classification"], "allowed", "{moved}");
    let said = &seen.last().expect("output").1;
    assert!(said.contains("is for another URL"), "{said}");
    assert!(!other.bearers().is_empty());
    assert!(
        other.bearers().iter().all(|b| b == "none"),
        "{:?}",
        other.bearers()
    );
    std::fs::remove_file(home.path("ws/.hanzo/settings.json")).expect("rm");
    drop(other);

    // Every hanzo process of a whole tree: no token in its environment or command line.
    seen.extend(tree_texts(&home));

    // Every file under home, config and data (the run store) but credentials.json.
    seen.extend(file_texts(&[
        home.path("home"),
        home.path("data"),
        home.path("config"),
        home.path("ws"),
    ]));
    for (what, text) in &seen {
        assert_absent(&[&at, &rt1, &at2, &rt2], text, what);
    }

    // Logout: the tokens are gone and the next call is a denial, sent without a token.
    let (code, out, _) = home.run(&["mcp", "logout", "docs"]);
    assert_eq!(code, 0);
    assert!(out.contains("Logged out of MCP server docs"), "{out}");
    assert!(credentials(&home).get("mcp:docs").is_none());
    let calls = srv.bearers().len();
    let after = call(&home, &mut seen);
    assert_ne!(after["classification"], "allowed", "{after}");
    let bearers = srv.bearers();
    assert!(bearers.len() > calls);
    assert!(bearers[calls..].iter().all(|b| b == "none"), "{bearers:?}");
    let (_, out, _) = home.run(&["mcp", "logout", "docs"]);
    assert!(out.contains("No stored credential"), "{out}");
}

#[test]
fn mcp_device_login_where_the_authorization_server_offers_it() {
    let op = OidcProvider::start(json!({"clients": []}));
    let home = new_home();
    let srv = McpServer::start(
        &home.path("srv"),
        "docs",
        &[format!("issuer={}", op.issuer)],
    );
    serve(&home, "docs", &srv.url);
    let login =
        LoginRun::start(home.command(&["mcp", "login", "docs", "--device", "--timeout", "120"]));
    let url = login.url_after("Or open this URL");
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let page = rt.block_on(Browser::new().open(&url));
    assert_eq!(page.status, 200, "{}", page.body);
    let (code, out, err) = login.finish();
    assert_eq!(code, 0, "{out}{err}");
    assert!(err.contains("and enter the code"), "{err}");
    let creds = credentials(&home);
    assert_eq!(creds["mcp:docs"]["resource"], json!(srv.url));
    let at = creds["mcp:docs"]["access_token"].as_str().expect("access");
    assert_eq!(oidc::jwt_claims(at)["aud"], json!(srv.url));
    let ok = home.run(&["mcp", "call", "docs", "whoami", "--yes", "--json"]);
    assert!(ok.1.contains("hello alice"), "{ok:?}");
}

#[test]
fn metadata_naming_another_resource_gets_no_token() {
    // The server's protected-resource metadata claims to be another resource (one the user
    // may have a login for) at the same authorization server: no authorization is asked.
    let op = OidcProvider::start(json!({"clients": []}));
    let home = new_home();
    let srv = McpServer::start(
        &home.path("srv"),
        "liar",
        &[
            format!("issuer={}", op.issuer),
            "prm_resource=http://127.0.0.1:9/victim".into(),
        ],
    );
    serve(&home, "docs", &srv.url);
    let (code, out, err) = home.run(&["mcp", "login", "docs", "--timeout", "5"]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("not this server"), "{err}");
    assert!(
        !op.request_urls()
            .iter()
            .any(|u| u.starts_with("/auth") || u.starts_with("/token") || u == "/reg"),
        "{:?}",
        op.request_urls()
    );
    assert!(credentials(&home).get("mcp:docs").is_none());
}

#[test]
fn an_authorization_url_with_escapes_is_printed_inert_and_not_opened() {
    // The server is its own authorization server, and its authorization endpoint carries an
    // OSC title sequence and a bidi override. A `BROWSER` that would record being started.
    let home = new_home();
    let srv = McpServer::start(&home.path("srv"), "hostile", &["issuer=self".into()]);
    serve(&home, "docs", &srv.url);
    let opened = home.path("opened");
    let browser = home.path("browser.sh");
    std::fs::write(
        &browser,
        format!("#!/bin/sh\necho \"$1\" > {}\n", opened.display()),
    )
    .expect("browser");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&browser, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let out = home
        .command(&["mcp", "login", "docs", "--timeout", "3"])
        .env("BROWSER", &browser)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("/authorize"), "{err}");
    assert!(err.contains("timed out"), "{err}");
    for bad in ['\u{1b}', '\u{7}', '\u{202e}'] {
        assert!(!err.contains(bad), "{bad:?} reached the terminal: {err:?}");
    }
    // The URL as printed is what a browser would have been given, if any: nothing unsafe.
    if let Ok(got) = std::fs::read_to_string(&opened) {
        assert!(
            !got.contains('\u{1b}') && !got.contains('\u{202e}'),
            "{got:?}"
        );
    }
}

#[test]
fn mcp_login_refuses_what_is_not_a_configured_remote_server() {
    let home = new_home();
    home.settings(json!({"mcp_servers": {"local": {"command": "/bin/true"}}}));
    let (code, _, err) = home.run(&["mcp", "login", "local"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("stdio server"), "{err}");
    let (code, _, err) = home.run(&["mcp", "login", "nosuch"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no MCP server named nosuch"), "{err}");
}
