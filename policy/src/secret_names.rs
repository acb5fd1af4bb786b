//! Which environment variables are secrets, and which variables the supervisor keeps at all.
//!
//! A secret reaches the broker only (design §2). Recognition is by name ([`is_secret_env`]) and,
//! whatever the name, by value ([`is_secret_value`]: a URL that carries a password). Everything
//! the supervisor keeps for itself is allow-listed ([`SUPERVISOR_ENV_ALLOW`]); [`classify_env`]
//! puts each variable of the supervisor's starting environment in exactly one class.
//!
//! False positives matter too: a name wrongly taken for a secret sends its value to the secret
//! scrubber, which then withholds every output that happens to contain it. So the patterns are
//! anchored on word boundaries (`_TOKEN` as a suffix, not `TOKEN` anywhere: `TOKENIZER_PATH` is
//! not a secret; `_PASS` as a suffix: `PASSAGE` is not), and a short list of well-known
//! non-secrets that a pattern would catch is excluded by name.

/// Exact names (compared upper-cased) that are secrets whatever the patterns say.
const SECRET_NAMES: &[&str] = &[
    "API_KEY",
    "APIKEY",
    "SECRET",
    "SECRET_KEY",
    "PRIVATE_KEY",
    "PASSWORD",
    "PASSWD",
    "TOKEN",
    "ACCESS_TOKEN",
    "AUTH_TOKEN",
    "COOKIE",
    "DATABASE_URL",
    "DATABASE_URI",
    "DB_URL",
    "DSN",
    "CONNECTION_STRING",
    "KUBECONFIG",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "DOCKER_AUTH_CONFIG",
    "MYSQL_PWD",
    "PGPASSFILE",
    "NETRC",
    // OTLP collector headers carry the collector's API key; the broker alone sends them.
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
];

/// Suffixes after an underscore (`*_TOKEN`), compared upper-cased.
const SECRET_SUFFIXES: &[&str] = &[
    "_API_KEY",
    "_APIKEY",
    "_TOKEN",
    "_PAT",
    "_SECRET",
    "_SECRET_KEY",
    "_PRIVATE_KEY",
    "_SIGNING_KEY",
    "_ENCRYPTION_KEY",
    "_MASTER_KEY",
    "_ACCESS_KEY",
    "_ACCESS_KEY_ID",
    "_ACCOUNT_KEY",
    "_STORAGE_KEY",
    "_DATABASE_URL",
    "_DATABASE_URI",
    "_DB_URL",
    "_DSN",
    "_CONNECTION_STRING",
    "_CONN_STRING",
    "_PASSWD",
    "_PASS",
    "_PWD",
    "_PASSPHRASE",
    "_AUTH",
    "_AUTH_CONFIG",
    "_COOKIE",
    "_SESSION",
    "_WEBHOOK",
    "_WEBHOOK_URL",
    "_CREDENTIALS",
];

/// Substrings, compared upper-cased: these words mean a secret wherever they appear.
const SECRET_INFIXES: &[&str] = &[
    "PASSWORD",
    "CREDENTIAL",
    "PASSPHRASE",
    "AUTHTOKEN",
    "_AUTH_TOKEN",
    "_SECRET_",
    "_PRIVATE_KEY_",
];

/// Prefixes, compared upper-cased (`SECRET_KEY_BASE`, `TOKEN_…`).
const SECRET_PREFIXES: &[&str] = &["SECRET_", "PRIVATE_KEY_"];

/// Well-known variables a pattern above would catch but that carry no secret; taking them for
/// secrets would make the scrubber withhold every output containing their (common) values.
const NOT_SECRET: &[&str] = &[
    "DESKTOP_SESSION",
    "XDG_SESSION_ID",
    "XDG_SESSION_TYPE",
    "XDG_SESSION_CLASS",
    "XDG_SESSION_DESKTOP",
    "DBUS_SESSION_BUS_ADDRESS",
    "SESSION_MANAGER",
    "HANZO_SECRET_ENV",
    "OLDPWD",
    "PWD",
];

/// True for variable names that hold secrets and may reach the broker only.
///
/// `configured` holds extra exact names from settings (and `HANZO_SECRET_ENV`).
pub fn is_secret_env(name: &str, configured: &[String]) -> bool {
    if configured.iter().any(|c| c == name) {
        return true;
    }
    let upper = name.to_ascii_uppercase();
    if NOT_SECRET.contains(&upper.as_str()) {
        return false;
    }
    SECRET_NAMES.contains(&upper.as_str())
        || SECRET_SUFFIXES.iter().any(|s| upper.ends_with(s))
        || SECRET_INFIXES.iter().any(|s| upper.contains(s))
        || SECRET_PREFIXES.iter().any(|s| upper.starts_with(s))
}

/// True when `value` carries a password whatever the variable is called: a URL with a password
/// in its user information (`scheme://user:pass@host`, `redis://:pass@host`), anywhere in the
/// value (a list of URLs counts), or a `password=`/`pwd=` parameter in a URL's query (JDBC).
pub fn is_secret_value(value: &str) -> bool {
    let mut rest = value;
    while let Some(at) = rest.find("://") {
        let scheme_ok = scheme_before(&rest[..at]);
        let after = &rest[at + 3..];
        if scheme_ok && (userinfo_has_password(after) || query_has_password(after)) {
            return true;
        }
        rest = after;
    }
    false
}

/// Whether the text just before `://` ends in a URL scheme (`[A-Za-z][A-Za-z0-9+.-]*`).
fn scheme_before(text: &str) -> bool {
    let scheme: String = text
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        .collect();
    scheme
        .chars()
        .last()
        .is_some_and(|c| c.is_ascii_alphabetic())
}

/// `after` starts right after `://`. The authority ends at the first `/`, `?`, `#` or
/// whitespace; its user information is what precedes the last `@`.
fn userinfo_has_password(after: &str) -> bool {
    let end = after
        .find(|c: char| matches!(c, '/' | '?' | '#') || c.is_whitespace() || c == ',')
        .unwrap_or(after.len());
    let authority = &after[..end];
    let Some(at) = authority.rfind('@') else {
        return false;
    };
    match authority[..at].split_once(':') {
        Some((_, password)) => !password.is_empty(),
        None => false,
    }
}

fn query_has_password(after: &str) -> bool {
    let end = after
        .find(|c: char| c.is_whitespace() || c == ',')
        .unwrap_or(after.len());
    let url = &after[..end];
    let Some((_, query)) = url.split_once(['?', ';']) else {
        return false;
    };
    query.split(['&', ';']).any(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let k = k.to_ascii_lowercase();
        !v.is_empty() && matches!(k.as_str(), "password" | "pwd" | "pass" | "passwd")
    })
}

/// The variables the supervisor and its workers legitimately need. An entry ending in `*` is a
/// prefix. `HANZO_*` covers the product's own settings; a `HANZO_*` name that looks like a
/// secret (`HANZO_API_KEY`) is a secret first (see [`classify_env`]).
pub const SUPERVISOR_ENV_ALLOW: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TERM",
    "COLORTERM",
    "TERMINFO",
    "COLUMNS",
    "LINES",
    "TZ",
    "TMPDIR",
    "XDG_*",
    "RUST_LOG",
    "RUST_BACKTRACE",
    "NO_COLOR",
    "CLICOLOR",
    "CLICOLOR_FORCE",
    "HANZO_*",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "EDITOR",
    "VISUAL",
    "PAGER",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
];

/// Whether `name` is on [`SUPERVISOR_ENV_ALLOW`] (exact, or by a `*` prefix entry).
pub fn supervisor_env_allowed(name: &str) -> bool {
    SUPERVISOR_ENV_ALLOW
        .iter()
        .any(|entry| match entry.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => name == *entry,
        })
}

/// What becomes of one variable of the supervisor's starting environment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EnvClass {
    /// A secret (by name or by value): removed from the supervisor, handed to the broker only.
    Secret,
    /// Kept: the supervisor and its workers need it.
    Allowed,
    /// Neither: removed and used by nobody.
    Dropped,
}

/// Secret first (so `HANZO_API_KEY` and a proxy URL with a password go to the broker), then the
/// allow-list, else dropped. `configured` holds extra secret names (settings, `HANZO_SECRET_ENV`).
pub fn classify_env(name: &str, value: &str, configured: &[String]) -> EnvClass {
    if is_secret_env(name, configured) || is_secret_value(value) {
        EnvClass::Secret
    } else if supervisor_env_allowed(name) {
        EnvClass::Allowed
    } else {
        EnvClass::Dropped
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Names that must be recognised as secrets, each with what it stands for.
    const SECRETS: &[&str] = &[
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "ANTHROPIC_API_KEY",
        "OPENAI_API_KEY",
        "HANZO_API_KEY",
        "API_KEY",
        "GITHUB_TOKEN",
        "GH_TOKEN",
        "GH_ENTERPRISE_TOKEN",
        "GITHUB_PAT",
        "GITLAB_TOKEN",
        "CI_JOB_TOKEN",
        "NPM_TOKEN",
        "NODE_AUTH_TOKEN",
        "YARN_NPM_AUTH_TOKEN",
        "npm_config__authToken",
        "NPM_CONFIG__AUTH",
        "CARGO_REGISTRY_TOKEN",
        "PYPI_TOKEN",
        "TWINE_PASSWORD",
        "AWS_SECRET",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_ACCESS_KEY_ID",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "STRIPE_SECRET_KEY",
        "DJANGO_SECRET_KEY",
        "SECRET_KEY_BASE",
        "CLIENT_SECRET_ID",
        "SSH_PRIVATE_KEY",
        "JWT_SIGNING_KEY",
        "APP_ENCRYPTION_KEY",
        "DATABASE_URL",
        "TEST_DATABASE_URL",
        "SENTRY_DSN",
        "AZURE_STORAGE_CONNECTION_STRING",
        "AZURE_STORAGE_ACCOUNT_KEY",
        "AZURE_CLIENT_SECRET",
        "GOOGLE_APPLICATION_CREDENTIALS",
        "KUBECONFIG",
        "DB_PASSWORD",
        "my_password_file",
        "PGPASSWORD",
        "MYSQL_PWD",
        "FTP_PASSWD",
        "SMTP_PASS",
        "GPG_PASSPHRASE",
        "BASIC_AUTH",
        "DOCKER_AUTH_CONFIG",
        "SESSION_COOKIE",
        "RAILS_SESSION",
        "SLACK_WEBHOOK_URL",
        "VAULT_TOKEN",
        "CONSUL_HTTP_TOKEN",
        "DIGITALOCEAN_ACCESS_TOKEN",
        "ALIBABA_CLOUD_ACCESS_KEY_SECRET",
        "SERVICE_CREDENTIALS",
    ];

    /// Names that must not be taken for secrets (the scrubber would withhold their values).
    const NOT_SECRETS: &[&str] = &[
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "PATH",
        "HOME",
        "TOKENIZER_PATH",
        "PASSAGE",
        "PASSAGE_DIR",
        "PWD",
        "OLDPWD",
        "LANG",
        "TERM",
        "SHELL",
        "USER",
        "GITHUB_ACTIONS",
        "GITHUB_WORKSPACE",
        "GITHUB_SHA",
        "GH_REPO",
        "DESKTOP_SESSION",
        "XDG_SESSION_TYPE",
        "DBUS_SESSION_BUS_ADDRESS",
        "HANZO_SECRET_ENV",
        "HANZO_SESSION_ID",
        "HANZO_MODEL",
        "RUST_LOG",
        "CARGO_HOME",
        "KEYBOARD_LAYOUT",
        "PUBLIC_KEY_PATH",
        "AUTHOR",
        "OAUTH_CALLBACK_PORT",
        "COMPASS_HOME",
        "BYPASS_CACHE",
        "PASS_THROUGH",
        "SESSION_NAME",
    ];

    #[test]
    fn secret_names_both_ways() {
        assert!(SECRETS.len() + NOT_SECRETS.len() >= 60);
        for n in SECRETS {
            assert!(is_secret_env(n, &[]), "{n} should be a secret");
        }
        for n in NOT_SECRETS {
            assert!(!is_secret_env(n, &[]), "{n} should not be a secret");
        }
    }

    #[test]
    fn configured_names_are_secrets_exactly() {
        let extra = ["CORP_KEY".to_string()];
        assert!(is_secret_env("CORP_KEY", &extra));
        assert!(!is_secret_env("CORP_KEYS", &extra));
        // A configured name outranks the not-secret list.
        assert!(is_secret_env("PWD", &["PWD".to_string()]));
    }

    #[test]
    fn urls_with_passwords_are_secret_values() {
        for v in [
            "postgres://app:s3cret@db.internal:5432/app",
            "redis://:hunter2@cache:6379/0",
            "https://user:tok@proxy.corp:8080",
            "mongodb+srv://u:p@cluster0.example.net/test",
            "http://a/ , socks5://u:p@h:1080",
            "jdbc:postgresql://db/app?user=app&password=x",
            "mysql://u:p@h",
        ] {
            assert!(is_secret_value(v), "{v}");
        }
        for v in [
            "postgres://localhost/dev",
            "https://user@example.com/x",
            "https://example.com/a:b@c",
            "http://u:@host",
            "/usr/bin:/bin",
            "user:pass@host",
            "://u:p@h",
            "git@github.com:org/repo.git",
            "jdbc:postgresql://db/app?user=app",
        ] {
            assert!(!is_secret_value(v), "{v}");
        }
    }

    #[test]
    fn the_supervisor_environment_is_allow_listed() {
        let c = |n: &str, v: &str| classify_env(n, v, &[]);
        assert_eq!(c("PATH", "/usr/bin"), EnvClass::Allowed);
        assert_eq!(c("LC_CTYPE", "C.UTF-8"), EnvClass::Allowed);
        assert_eq!(c("XDG_CONFIG_HOME", "/h/.config"), EnvClass::Allowed);
        assert_eq!(c("HANZO_MODEL", "m"), EnvClass::Allowed);
        assert_eq!(c("SSL_CERT_FILE", "/etc/ssl/x.pem"), EnvClass::Allowed);
        assert_eq!(c("HANZO_API_KEY", "sk"), EnvClass::Secret);
        assert_eq!(c("ANTHROPIC_API_KEY", "sk"), EnvClass::Secret);
        assert_eq!(
            c("HTTPS_PROXY", "http://u:p@proxy:3128"),
            EnvClass::Secret,
            "a proxy URL with a password is a secret whatever its name"
        );
        assert_eq!(c("HTTPS_PROXY", "http://proxy:3128"), EnvClass::Allowed);
        assert_eq!(c("MY_URL", "postgres://a:b@h/db"), EnvClass::Secret);
        for dropped in [
            "SSH_AUTH_SOCK",
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "DISPLAY",
            "BASH_ENV",
            "GIT_DIR",
            "PYTHONPATH",
            "NODE_OPTIONS",
        ] {
            assert_eq!(c(dropped, "x"), EnvClass::Dropped, "{dropped}");
        }
    }
}
