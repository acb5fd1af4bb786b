//! Test peers for OAuth: a real OpenID provider (`oidc-provider` from npm, started by
//! `test-deps/oidc/start.mjs`) and a test browser agent — an HTTP client that follows the
//! provider's redirects, keeps its cookies, and submits its login, consent and device forms like
//! a person would.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The repository root (the directory holding `test-deps/`).
pub fn repo_root() -> PathBuf {
    let mut dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    while !dir.join("test-deps").is_dir() {
        assert!(dir.pop(), "no test-deps/ above CARGO_MANIFEST_DIR");
    }
    dir
}

/// The two clients every test provider has.
pub const CODE_CLIENT: &str = "hanzo-dev-code";
pub const DEVICE_CLIENT: &str = "hanzo-dev-device";

pub fn default_config() -> serde_json::Value {
    serde_json::json!({
        "clients": [
            {
                "client_id": CODE_CLIENT,
                "application_type": "native",
                "redirect_uris": ["http://127.0.0.1/callback"],
                "token_endpoint_auth_method": "none",
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"]
            },
            {
                "client_id": DEVICE_CLIENT,
                "application_type": "native",
                "redirect_uris": [],
                "token_endpoint_auth_method": "none",
                "grant_types": ["urn:ietf:params:oauth:grant-type:device_code", "refresh_token"],
                "response_types": []
            }
        ]
    })
}

/// A running provider; killed on drop.
pub struct OidcProvider {
    pub issuer: String,
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
    _config: tempfile::NamedTempFile,
}

impl OidcProvider {
    pub fn start(config: serde_json::Value) -> OidcProvider {
        let dir = repo_root().join("test-deps/oidc");
        assert!(
            dir.join("node_modules/oidc-provider").is_dir(),
            "the OpenID provider is not installed in {}: run ./scripts/setup.sh",
            dir.display()
        );
        let cfg = tempfile::NamedTempFile::new().expect("config file");
        std::fs::write(cfg.path(), config.to_string()).expect("write config");
        let mut child = Command::new("node")
            .arg(dir.join("start.mjs"))
            .arg(cfg.path())
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("node runs (./scripts/setup.sh installs the test peers)");
        let stdout = child.stdout.take().expect("stdout");
        let log = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = std::sync::mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(issuer) = line.strip_prefix("LISTENING ") {
                    let _ = tx.send(issuer.to_string());
                }
                sink.lock().expect("log").push(line);
            }
        });
        let issuer = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the OpenID provider starts listening");
        OidcProvider {
            issuer,
            child,
            log,
            _config: cfg,
        }
    }

    /// Every JSON line the provider printed (requests and grant events).
    pub fn log(&self) -> Vec<serde_json::Value> {
        self.log
            .lock()
            .expect("log")
            .iter()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The URLs of the requests the provider received.
    pub fn request_urls(&self) -> Vec<String> {
        self.log()
            .iter()
            .filter_map(|v| v.get("url").and_then(|u| u.as_str()).map(str::to_string))
            .collect()
    }

    pub fn events(&self, name: &str) -> Vec<serde_json::Value> {
        self.log()
            .into_iter()
            .filter(|v| v.get("event").and_then(|e| e.as_str()) == Some(name))
            .collect()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTML form: where it posts and its inputs (name → value).
#[derive(Debug, Clone)]
pub struct Form {
    pub id: Option<String>,
    pub action: String,
    pub inputs: Vec<(String, String)>,
}

fn attr(tag: &str, name: &str) -> Option<String> {
    let re = regex::Regex::new(&format!(r#"(?is)\b{name}\s*=\s*"([^"]*)""#)).expect("regex");
    re.captures(tag).map(|c| html_unescape(&c[1]))
}

fn html_unescape(s: &str) -> String {
    s.replace("&amp;", "&")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
}

pub fn forms(html: &str) -> Vec<Form> {
    let form_re = regex::Regex::new(r"(?is)<form\b([^>]*)>(.*?)</form>").expect("regex");
    let input_re = regex::Regex::new(r"(?is)<input\b([^>]*)>").expect("regex");
    form_re
        .captures_iter(html)
        .map(|c| Form {
            id: attr(&c[1], "id"),
            action: attr(&c[1], "action").unwrap_or_default(),
            inputs: input_re
                .captures_iter(&c[2])
                .filter_map(|i| {
                    Some((
                        attr(&i[1], "name")?,
                        attr(&i[1], "value").unwrap_or_default(),
                    ))
                })
                .collect(),
        })
        .collect()
}

/// What the browser saw at the end.
#[derive(Debug)]
pub struct Page {
    pub url: String,
    pub status: u16,
    pub body: String,
}

/// The test browser agent.
pub struct Browser {
    http: reqwest::Client,
    cookies: BTreeMap<(String, String), String>,
    /// The account it signs in as.
    pub login: String,
    /// Press "abort"/deny instead of approving.
    pub deny: bool,
    /// Every URL it visited, in order.
    pub visited: Vec<String>,
}

impl Browser {
    pub fn new() -> Browser {
        Browser {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .build()
                .expect("client"),
            cookies: BTreeMap::new(),
            login: "alice".into(),
            deny: false,
            visited: Vec::new(),
        }
    }

    fn cookie_header(&self, url: &reqwest::Url) -> String {
        let host = url.host_str().unwrap_or_default().to_string();
        self.cookies
            .iter()
            .filter(|((h, _), _)| *h == host)
            .map(|((_, k), v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    fn keep_cookies(&mut self, url: &reqwest::Url, resp: &reqwest::Response) {
        let host = url.host_str().unwrap_or_default().to_string();
        for v in resp.headers().get_all("set-cookie") {
            let Ok(v) = v.to_str() else { continue };
            let first = v.split(';').next().unwrap_or_default();
            if let Some((k, val)) = first.split_once('=') {
                let expired = v.to_ascii_lowercase().contains("expires=thu, 01 jan 1970");
                if expired || val.is_empty() {
                    self.cookies.remove(&(host.clone(), k.trim().to_string()));
                } else {
                    self.cookies
                        .insert((host.clone(), k.trim().to_string()), val.to_string());
                }
            }
        }
    }

    async fn request(
        &mut self,
        method: reqwest::Method,
        url: &str,
        form: Option<&[(String, String)]>,
    ) -> (reqwest::Url, reqwest::Response) {
        let u = reqwest::Url::parse(url).expect("absolute url");
        self.visited.push(u.to_string());
        let mut req = self.http.request(method, u.clone());
        let cookies = self.cookie_header(&u);
        if !cookies.is_empty() {
            req = req.header("cookie", cookies);
        }
        if let Some(f) = form {
            req = req.form(f);
        }
        let resp = req.send().await.expect("the browser reaches the page");
        self.keep_cookies(&u, &resp);
        (u, resp)
    }

    /// Open `url` and act like a user until a page without a form to submit is reached (the
    /// loopback redirect's page, or the device flow's success page).
    pub async fn open(&mut self, url: &str) -> Page {
        let mut next: (reqwest::Method, String, Option<Vec<(String, String)>>) =
            (reqwest::Method::GET, url.to_string(), None);
        for _ in 0..30 {
            let (u, resp) = self
                .request(next.0.clone(), &next.1, next.2.as_deref())
                .await;
            let status = resp.status().as_u16();
            if (300..400).contains(&status) {
                let loc = resp
                    .headers()
                    .get("location")
                    .and_then(|l| l.to_str().ok())
                    .expect("a redirect has a location");
                let target = u.join(loc).expect("location resolves").to_string();
                next = (reqwest::Method::GET, target, None);
                continue;
            }
            let body = resp.text().await.unwrap_or_default();
            let aborted = next
                .2
                .as_ref()
                .is_some_and(|f| f.iter().any(|(k, _)| k == "abort"));
            let Some(form) = self.pick_form(&body).filter(|_| !aborted) else {
                return Page {
                    url: u.to_string(),
                    status,
                    body,
                };
            };
            let action = u
                .join(&form.action)
                .expect("form action resolves")
                .to_string();
            next = (reqwest::Method::POST, action, Some(form.inputs));
        }
        panic!("the browser went round in circles: {:?}", self.visited);
    }

    fn pick_form(&self, html: &str) -> Option<Form> {
        let mut all = forms(html);
        let mut form = if all.len() == 1 {
            all.pop()?
        } else {
            all.into_iter().find(|f| {
                f.inputs
                    .iter()
                    .any(|(k, _)| k == "prompt" || k == "confirm")
            })?
        };
        for (k, v) in form.inputs.iter_mut() {
            match k.as_str() {
                "login" => *v = self.login.clone(),
                "password" => *v = "any-password".into(),
                _ => {}
            }
        }
        if self.deny && form.inputs.iter().any(|(k, _)| k == "confirm") {
            form.inputs.retain(|(k, _)| k != "confirm");
            form.inputs.push(("abort".into(), "yes".into()));
        }
        Some(form)
    }
}

/// The claims of a JWT access token (signature not checked: the test only reads what was
/// issued).
pub fn jwt_claims(token: &str) -> serde_json::Value {
    use base64::Engine;
    let payload = token.split('.').nth(1).expect("a JWT");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .expect("base64url");
    serde_json::from_slice(&bytes).expect("JSON claims")
}
