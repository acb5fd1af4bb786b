//! Secrets never stay in the supervisor's environment.
//!
//! At start, before any thread exists, every secret-looking variable (`*_API_KEY`, `*_TOKEN`,
//! `*_SECRET`, `*PASSWORD*`, …; see `hanzo_policy::profile::is_secret_env`) is removed from the
//! process environment, so nothing the supervisor runs or prints can pick it up. The values are
//! kept in memory only to be handed to the broker worker at spawn; every other worker's
//! environment is built from an allow-list.

/// The environment as it was, secrets included, for building worker environments.
pub struct StartEnv {
    pub vars: Vec<(String, String)>,
}

impl StartEnv {
    /// Secret names beyond the built-in patterns (from `HANZO_SECRET_ENV`).
    pub fn extra_secret_names(&self) -> Vec<String> {
        extra_secret_names(&self.vars)
    }
}

/// Remove secrets from this process's environment — overwriting them in the initial environment
/// block, which `/proc/<pid>/environ` would otherwise still show — make the process non-dumpable,
/// and return the original environment.
///
/// Must be called while the process is single-threaded (the environment is changed in place).
pub fn scrub_own_environment(configured: &[String]) -> StartEnv {
    let vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let mut configured = configured.to_vec();
    configured.extend(extra_secret_names(&vars));
    let secret_names: Vec<String> = vars
        .iter()
        .filter(|(name, _)| hanzo_policy::profile::is_secret_env(name, &configured))
        .map(|(name, _)| name.clone())
        .collect();
    hanzo_sandbox::selfprotect::wipe_and_remove_env(&secret_names);
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
}
