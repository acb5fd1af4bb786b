//! Secrets never stay in the supervisor's environment, and their values never leave the loop.
//!
//! At start, before any thread exists, the supervisor keeps in its own environment only the
//! variables of an allow-list ([`OWN_ENV_ALLOW`], [`OWN_ENV_ALLOW_PREFIXES`]) that are not
//! secrets; every other variable is removed, and a secret's value is first overwritten in the
//! initial environment block so `/proc/<pid>/environ` no longer shows it. The original
//! environment is kept in memory ([`StartEnv`]) to build each worker's environment from its own
//! allow-list, secrets going to the broker only.
//!
//! A secret is recognised by name ([`is_secret_name`]: `*_API_KEY`, `*_TOKEN`, `*SECRET*`,
//! `*PASSWORD*`, `*_DSN`, `DATABASE_URL`, connection strings, … and the names listed in
//! `HANZO_SECRET_ENV`) or by value ([`is_secret_value`]: a URL carrying a password, a private
//! key, a token with a well-known prefix). Their values form the run's [`SecretValues`], the one
//! helper the loop (redacting what it records and shows) and the store (refusing a record that
//! still holds one) share.
//!
//! The "policytools" workstream is adding `hanzo_policy::secret_names` (the wider patterns, a
//! value test and this allow-list) for every crate to use; until it lands, the lists live here.

use hanzo_store::SecretValues;

/// The environment as it was, secrets included, for building worker environments.
pub struct StartEnv {
    /// Every variable of the environment the process started with, in its order, secrets included.
    pub vars: Vec<(String, String)>,
}

impl StartEnv {
    /// Secret names beyond the built-in patterns (from `HANZO_SECRET_ENV`).
    pub fn extra_secret_names(&self) -> Vec<String> {
        extra_secret_names(&self.vars)
    }

    /// Every variable recognised as a secret, by name or by value. Workers other than the broker
    /// never get these.
    pub fn secret_names(&self) -> Vec<String> {
        let configured = self.extra_secret_names();
        self.vars
            .iter()
            .filter(|(k, v)| is_secret_name(k, &configured) || is_secret_value(v))
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// The values of every secret variable: what must never reach a record, a log or the
    /// terminal.
    pub fn secret_values(&self) -> SecretValues {
        self.secret_values_with(&[])
    }

    /// [`StartEnv::secret_values`], also with the values of the variables `names` (the secrets
    /// the settings give MCP servers, whatever their names look like).
    pub fn secret_values_with(&self, names: &[String]) -> SecretValues {
        let configured = self.extra_secret_names();
        SecretValues::new(
            self.vars
                .iter()
                .filter(|(k, v)| {
                    is_secret_name(k, &configured) || is_secret_value(v) || names.contains(k)
                })
                .map(|(_, v)| v.clone()),
        )
    }
}

/// Variables the supervisor keeps in its own environment (unless their value looks secret).
pub const OWN_ENV_ALLOW: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "PWD",
    "TERM",
    "COLORTERM",
    "NO_COLOR",
    "LANG",
    "LANGUAGE",
    "TZ",
    "TMPDIR",
    "RUST_LOG",
    "RUST_BACKTRACE",
    "XDG_CONFIG_HOME",
    "XDG_DATA_HOME",
    "XDG_CACHE_HOME",
    "XDG_RUNTIME_DIR",
];

/// Prefixes of variables the supervisor keeps: locale settings and hanzo-dev's own (whose secret
/// ones, such as `HANZO_API_KEY`, are still removed).
pub const OWN_ENV_ALLOW_PREFIXES: &[&str] = &["LC_", "HANZO_"];

/// Whether the supervisor keeps `name=value` in its own environment.
pub fn kept_in_own_env(name: &str, value: &str, configured: &[String]) -> bool {
    let allowed =
        OWN_ENV_ALLOW.contains(&name) || OWN_ENV_ALLOW_PREFIXES.iter().any(|p| name.starts_with(p));
    allowed && !is_secret_name(name, configured) && !is_secret_value(value)
}

/// Whether a variable's name says it holds a secret: the policy's patterns (`*_API_KEY`,
/// `*_TOKEN`, `*_SECRET`, `*PASSWORD*`, `*CREDENTIAL*`, `API_KEY`, the configured names) and the
/// wider ones common in the wild (`AWS_SECRET_ACCESS_KEY`, `*_SECRET_KEY`, `*_PRIVATE_KEY`,
/// `*PASSWD*`, `*PASSPHRASE*`, `DATABASE_URL`, `*_DATABASE_URL`, `*_DSN`, `*CONNECTION_STRING*`,
/// `*_AUTH`, `*_COOKIE`, `*_SESSION_KEY`).
pub fn is_secret_name(name: &str, configured: &[String]) -> bool {
    if hanzo_policy::profile::is_secret_env(name, configured) {
        return true;
    }
    let upper = name.to_ascii_uppercase();
    upper.contains("SECRET")
        || upper.contains("PASSWD")
        || upper.contains("PASSPHRASE")
        || upper.contains("CONNECTION_STRING")
        || upper.contains("CONNSTR")
        || upper.ends_with("_PRIVATE_KEY")
        || upper.ends_with("_ACCESS_KEY")
        || upper.ends_with("_SESSION_KEY")
        || upper.ends_with("_DSN")
        || upper == "DSN"
        || upper == "DATABASE_URL"
        || upper.ends_with("_DATABASE_URL")
        || upper.ends_with("_DB_URL")
        || upper.ends_with("_AUTH")
        || upper.ends_with("_COOKIE")
}

/// Whether a value looks like a secret whatever its variable is called: a URL with a password
/// (`postgres://user:pw@host`), a private key block, or a token with a well-known prefix.
pub fn is_secret_value(value: &str) -> bool {
    let v = value.trim();
    if v.contains("-----BEGIN") && v.contains("PRIVATE KEY") {
        return true;
    }
    if let Some((scheme, rest)) = v.split_once("://") {
        let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
        let scheme_ok = !scheme.is_empty()
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
        if scheme_ok {
            if let Some((userinfo, _host)) = authority.rsplit_once('@') {
                if userinfo
                    .split_once(':')
                    .is_some_and(|(_, pw)| !pw.is_empty())
                {
                    return true;
                }
            }
        }
    }
    const PREFIXES: &[&str] = &[
        "sk-",
        "sk_live_",
        "rk_live_",
        "ghp_",
        "gho_",
        "ghu_",
        "ghs_",
        "ghr_",
        "github_pat_",
        "glpat-",
        "xoxb-",
        "xoxp-",
        "xoxa-",
        "xapp-",
        "AKIA",
        "ASIA",
        "AIza",
        "hf_",
        "npm_",
        "pypi-",
    ];
    v.len() >= 16 && !v.contains(char::is_whitespace) && PREFIXES.iter().any(|p| v.starts_with(p))
}

/// Keep only the allowed, non-secret variables in this process's environment — overwriting the
/// value of every removed secret in the initial environment block first — make the process
/// non-dumpable, and return the original environment.
///
/// Must be called while the process is single-threaded (the environment is changed in place).
pub fn scrub_own_environment(configured: &[String]) -> StartEnv {
    let vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let mut configured = configured.to_vec();
    configured.extend(extra_secret_names(&vars));
    let removed: Vec<String> = vars
        .iter()
        .filter(|(name, value)| !kept_in_own_env(name, value, &configured))
        .map(|(name, _)| name.clone())
        .collect();
    hanzo_sandbox::selfprotect::wipe_and_remove_env(&removed);
    // Variables that are not valid UTF-8 cannot be judged; they go too.
    for (k, v) in std::env::vars_os() {
        if k.to_str().is_none() || v.to_str().is_none() {
            std::env::remove_var(&k);
        }
    }
    if let Err(e) = hanzo_sandbox::selfprotect::set_non_dumpable() {
        eprintln!("warning: cannot make hanzo-dev non-dumpable: {e}");
    }
    StartEnv { vars }
}

/// Extra secret variable names, comma-separated, from `HANZO_SECRET_ENV` (for names the built-in
/// patterns do not catch, such as `CORP_KEY`).
pub const SECRET_NAMES_ENV: &str = "HANZO_SECRET_ENV";

fn extra_secret_names(vars: &[(String, String)]) -> Vec<String> {
    vars.iter()
        .filter(|(k, _)| k == SECRET_NAMES_ENV)
        .flat_map(|(_, v)| v.split(','))
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extra_names_come_from_hanzo_secret_env() {
        let vars = vec![
            (
                "HANZO_SECRET_ENV".to_string(),
                " CORP_KEY, ,VAULT_ADDR".to_string(),
            ),
            ("PATH".to_string(), "/bin".to_string()),
        ];
        assert_eq!(
            super::extra_secret_names(&vars),
            vec!["CORP_KEY", "VAULT_ADDR"]
        );
    }

    #[test]
    fn common_secret_names_are_recognised() {
        for n in [
            "ANTHROPIC_API_KEY",
            "GITHUB_TOKEN",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_ACCESS_KEY",
            "STRIPE_SECRET_KEY",
            "DJANGO_SECRET",
            "MY_SECRET_THING",
            "DATABASE_URL",
            "ANALYTICS_DATABASE_URL",
            "SENTRY_DSN",
            "AZURE_STORAGE_CONNECTION_STRING",
            "DB_PASSWORD",
            "MYSQL_PASSWD",
            "GPG_PASSPHRASE",
            "DEPLOY_PRIVATE_KEY",
            "NPM_CONFIG__AUTH",
            "SESSION_COOKIE",
            "GOOGLE_APPLICATION_CREDENTIALS",
        ] {
            assert!(is_secret_name(n, &[]), "{n}");
        }
        for n in [
            "PATH",
            "HOME",
            "TOKENIZER_PATH",
            "LANG",
            "HANZO_MODEL",
            "AUTHOR",
        ] {
            assert!(!is_secret_name(n, &[]), "{n}");
        }
        assert!(is_secret_name("CORP_KEY", &["CORP_KEY".to_string()]));
    }

    #[test]
    fn secret_looking_values_are_recognised_whatever_the_name() {
        for v in [
            "postgres://app:hunter2@db.internal:5432/prod",
            "redis://:s3cret@cache:6379",
            "sk-ant-api03-abcdefghijklmnop",
            "ghp_0123456789abcdefghijklmnop",
            "AKIAIOSFODNN7EXAMPLE",
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Bl\n-----END OPENSSH PRIVATE KEY-----",
        ] {
            assert!(is_secret_value(v), "{v}");
        }
        for v in [
            "/usr/bin:/bin",
            "https://example.com/path",
            "postgres://app@db/prod",
            "skip-this",
            "en_US.UTF-8",
            "xterm-256color",
        ] {
            assert!(!is_secret_value(v), "{v}");
        }
    }

    #[test]
    fn the_own_environment_keeps_the_allow_list_minus_secrets() {
        assert!(kept_in_own_env("PATH", "/bin", &[]));
        assert!(kept_in_own_env("LC_ALL", "C", &[]));
        assert!(kept_in_own_env("HANZO_MODEL", "m", &[]));
        assert!(!kept_in_own_env("HANZO_API_KEY", "x", &[]));
        assert!(!kept_in_own_env("SSH_AUTH_SOCK", "/tmp/agent", &[]));
        assert!(!kept_in_own_env("LD_PRELOAD", "/x.so", &[]));
        assert!(!kept_in_own_env("EDITOR", "vi", &[]));
        assert!(!kept_in_own_env(
            "HANZO_ENDPOINT",
            "https://u:pw@gw.example",
            &[]
        ));
        let env = StartEnv {
            vars: vec![
                ("DB_URL".into(), "mysql://root:toor@localhost/x".into()),
                ("DATABASE_URL".into(), "sqlite:///x.db".into()),
                ("OPENAI_API_KEY".into(), "sk-openai-canary".into()),
                ("DISABLE_TOKEN".into(), "0".into()),
                ("PATH".into(), "/bin".into()),
            ],
        };
        let values = env.secret_values();
        assert_eq!(
            values.len(),
            3,
            "{values:?}: the one-character value is not one"
        );
        assert!(values.found_in("x mysql://root:toor@localhost/x y"));
        assert_eq!(
            env.secret_names(),
            ["DB_URL", "DATABASE_URL", "OPENAI_API_KEY", "DISABLE_TOKEN"]
        );
    }
}
