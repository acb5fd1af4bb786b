//! `hanzo-dev login [--provider P] [--device]` and `hanzo-dev logout [--provider P]`.
//!
//! The whole OAuth flow runs in the broker worker (started alone): the supervisor sends the
//! user's `oauth_providers` entry (user settings only), prints what the broker streams — the URL
//! to open, or the device code — opens the browser when there is one (the broker cannot run
//! programs), and prints the outcome. No token ever reaches this process.

use super::exit;
use crate::secrets::StartEnv;
use crate::startup::{config_dir, supervisor_config};
use crate::tree::Supervisor;
use anyhow::Context;
use hanzo_ipc::channel::StreamPart;
use hanzo_ipc::roles::broker::{
    self, LoginOutcome, LoginProgress, LoginRequest, OAuthProviderConfig,
};
use hanzo_ipc::Role;
use hanzo_policy::permission::Scope;
use hanzo_policy::settings::{parse_settings, OAuthProviderEntry};
use std::path::Path;

/// What `hanzo-dev login` takes.
#[derive(Debug, clap::Args)]
pub struct LoginArgs {
    /// hanzo, anthropic, openai, or the name of an `oauth_providers` entry in the user settings.
    #[arg(long, default_value = "hanzo")]
    pub provider: String,
    /// Use the device authorization grant (RFC 8628), for machines without a browser (SSH, CI).
    #[arg(long)]
    pub device: bool,
    /// Seconds to wait for the browser or for the code's approval.
    #[arg(long, default_value_t = 300)]
    pub timeout: u32,
}

/// What `hanzo-dev logout` takes.
#[derive(Debug, clap::Args)]
pub struct LogoutArgs {
    /// Whose stored credential to remove (`credentials.json`).
    #[arg(long, default_value = "hanzo")]
    pub provider: String,
}

/// What may be printed of a string that came from outside (a URL, a code): control, bidi and
/// invisible characters shown as visible escapes (`crate::term`), so it cannot move the cursor,
/// rewrite the terminal or read differently from what it is.
pub fn printable(s: &str) -> String {
    crate::term::sanitize_line_for_terminal(s).into_owned()
}

fn to_config(e: &OAuthProviderEntry) -> OAuthProviderConfig {
    OAuthProviderConfig {
        issuer: e.issuer.clone(),
        authorization_endpoint: e.authorization_endpoint.clone(),
        token_endpoint: e.token_endpoint.clone(),
        device_authorization_endpoint: e.device_authorization_endpoint.clone(),
        registration_endpoint: e.registration_endpoint.clone(),
        client_id: e.client_id.clone(),
        scopes: e.scopes.clone().unwrap_or_default(),
        resource: e.resource.clone(),
        device_poll_interval_secs: e.device_poll_interval_secs,
    }
}

/// The user settings' `oauth_providers.<provider>` entry. Only the user file is read: a
/// project's settings must not redirect a login.
pub fn user_provider_config(
    config_dir: &Path,
    provider: &str,
) -> anyhow::Result<Option<OAuthProviderConfig>> {
    let path = config_dir.join("settings.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    let (settings, warnings) = parse_settings(Scope::User, &path.display().to_string(), &text)
        .map_err(|e| super::exit::usage(e.to_string()))?;
    for w in warnings {
        eprintln!("warning: {}", printable(&w.to_string()));
    }
    Ok(settings
        .oauth_providers
        .as_ref()
        .and_then(|p| p.get(provider))
        .map(to_config))
}

/// Start the broker alone (what login, logout and `auth status` need).
pub async fn broker_only(env: &StartEnv) -> anyhow::Result<(Supervisor, crate::startup::RunDir)> {
    let kernel = hanzo_sandbox::doctor::probe_kernel();
    let (mut cfg, run_dir) = supervisor_config(None, env, kernel.landlock_abi)?;
    cfg.roles = Some(vec![Role::Broker]);
    Ok((Supervisor::start(cfg).await?, run_dir))
}

/// Open `url` in a browser: `$BROWSER` if set, else `xdg-open` when there is a display. Only
/// http(s) URLs; the program gets the URL as one argument (no shell). Returns whether one was
/// started.
fn open_browser(env: &StartEnv, url: &str) -> bool {
    if !(url.starts_with("https://") || url.starts_with("http://")) {
        return false;
    }
    let get = |k: &str| super::ask::lookup(env, k);
    let program = match get("BROWSER") {
        Some(b) => b.split(':').next().unwrap_or_default().to_string(),
        None if get("DISPLAY").is_some() || get("WAYLAND_DISPLAY").is_some() => "xdg-open".into(),
        None => return false,
    };
    if program.is_empty() {
        return false;
    }
    match std::process::Command::new(&program)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(mut child) => {
            // Reaped in the background; the login does not wait for the browser to exit.
            std::thread::spawn(move || {
                let _ = child.wait();
            });
            true
        }
        Err(e) => {
            eprintln!("could not start the browser {}: {e}", printable(&program));
            false
        }
    }
}

/// When an expiry is, for people: "in 59 min", "2 h ago".
pub fn relative(expires_at: i64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0);
    let d = expires_at - now;
    let (n, unit) = match d.unsigned_abs() {
        s if s < 120 => (s, "s"),
        s if s < 7200 => (s / 60, "min"),
        s if s < 172_800 => (s / 3600, "h"),
        s => (s / 86_400, "days"),
    };
    if d >= 0 {
        format!("in {n} {unit}")
    } else {
        format!("{n} {unit} ago")
    }
}

/// Runs `hanzo-dev login`: OAuth through the broker, which stores the tokens in
/// `credentials.json`; returns the exit code.
pub async fn login(args: &LoginArgs, env: StartEnv) -> anyhow::Result<i32> {
    let Some(dir) = config_dir(&env) else {
        eprintln!("error: neither XDG_CONFIG_HOME nor HOME is set, so there is nowhere to store the login");
        return Ok(exit::USAGE);
    };
    let config = match user_provider_config(&dir, &args.provider) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(exit::USAGE);
        }
    };
    // The broker may write only beneath this directory, which must exist when it starts.
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let (sup, _run_dir) = broker_only(&env).await?;
    let result = run_login(args, &env, &sup, config).await;
    sup.shutdown().await;
    result
}

async fn run_login(
    args: &LoginArgs,
    env: &StartEnv,
    sup: &Supervisor,
    config: Option<OAuthProviderConfig>,
) -> anyhow::Result<i32> {
    let request = broker::Request::Login(LoginRequest {
        provider: args.provider.clone(),
        device: args.device,
        config,
        timeout_secs: args.timeout,
    });
    let mut stream = sup.broker.call_stream(request).await?;
    while let Some(part) = stream.next().await {
        match part {
            Ok(StreamPart::Item(broker::Item::Login(p))) => show_progress(env, &p),
            Ok(StreamPart::Item(_)) => {}
            Ok(StreamPart::Done(broker::Response::LoggedIn(outcome))) => {
                println!("{}", describe_login(&outcome));
                note_precedence(sup, &outcome.provider).await;
                return Ok(exit::OK);
            }
            Ok(StreamPart::Done(other)) => anyhow::bail!("unexpected broker reply {other:?}"),
            Err(e) => {
                eprintln!(
                    "error: login to {} failed: {}",
                    printable(&args.provider),
                    printable(&e.to_string())
                );
                return Ok(exit::FAILED);
            }
        }
    }
    anyhow::bail!("the broker ended the login without an answer")
}

/// An API key from the environment or the settings keeps precedence over a login: say so.
async fn note_precedence(sup: &Supervisor, provider: &str) {
    if let Ok(broker::Response::AuthStatus(r)) = sup.broker.call(broker::Request::AuthStatus).await
    {
        if let Some(e) = r.entries.iter().find(|e| e.name == provider) {
            if e.source != broker::CredentialSource::CredentialFile {
                eprintln!(
                    "note: {} also has an API key from {}, which takes precedence over the login",
                    printable(provider),
                    match e.source {
                        broker::CredentialSource::Env => "the environment",
                        _ => "the user settings",
                    }
                );
            }
        }
    }
}

/// Print what the broker streams during a login (`hanzo-dev login`, `hanzo-dev mcp login`).
pub(crate) fn show_progress(env: &StartEnv, p: &LoginProgress) {
    match p {
        LoginProgress::OpenBrowser { url: raw } => {
            let url = printable(raw);
            // A URL that needed escaping is shown, never handed to a browser.
            let opened = url == *raw && open_browser(env, &url);
            eprintln!(
                "{} this URL in a browser to log in:\n\n  {url}\n",
                if opened { "Opened" } else { "Open" }
            );
        }
        LoginProgress::DeviceCode {
            user_code,
            verification_uri,
            verification_uri_complete,
            expires_in,
        } => {
            eprintln!(
                "To log in, visit\n\n  {}\n\nand enter the code  {}  (valid for {} min).",
                printable(verification_uri),
                printable(user_code),
                expires_in / 60
            );
            if let Some(c) = verification_uri_complete {
                eprintln!(
                    "Or open this URL, which carries the code:\n\n  {}\n",
                    printable(c)
                );
            }
        }
        LoginProgress::Waiting { message } => eprintln!("{}…", printable(message)),
    }
}

fn describe_login(o: &LoginOutcome) -> String {
    let mut s = format!("Logged in to {} (OAuth", printable(&o.provider));
    if let Some(t) = o.expires_at {
        s.push_str(&format!("; the access token expires {}", relative(t)));
    }
    if !o.scopes.is_empty() {
        s.push_str(&format!("; scopes: {}", printable(&o.scopes.join(" "))));
    }
    s.push_str(").");
    s
}

/// Runs `hanzo-dev logout`: removes the provider's entry from `credentials.json`; returns the exit
/// code.
pub async fn logout(args: &LogoutArgs, env: StartEnv) -> anyhow::Result<i32> {
    let Some(dir) = config_dir(&env) else {
        eprintln!("error: neither XDG_CONFIG_HOME nor HOME is set, so no credential is stored");
        return Ok(exit::USAGE);
    };
    if !dir
        .join(hanzo_broker::credentials::CREDENTIALS_FILE)
        .exists()
    {
        println!("No stored credential for {}.", printable(&args.provider));
        return Ok(exit::OK);
    }
    let (sup, _run_dir) = broker_only(&env).await?;
    let reply = sup
        .broker
        .call(broker::Request::Logout {
            provider: args.provider.clone(),
        })
        .await;
    sup.shutdown().await;
    match reply {
        Ok(broker::Response::LoggedOut { provider, removed }) => {
            if removed {
                println!(
                    "Logged out of {}: its stored credential was removed.",
                    printable(&provider)
                );
            } else {
                println!(
                    "No stored credential for {} (credentials from the environment are not touched).",
                    printable(&provider)
                );
            }
            Ok(exit::OK)
        }
        Ok(other) => anyhow::bail!("unexpected broker reply {other:?}"),
        Err(e) => {
            eprintln!("error: logout failed: {}", printable(&e.to_string()));
            Ok(exit::FAILED)
        }
    }
}
