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

/// Remove secrets from this process's environment — overwriting them in the initial environment
/// block, which `/proc/<pid>/environ` would otherwise still show — make the process non-dumpable,
/// and return the original environment.
///
/// Must be called while the process is single-threaded (the environment is changed in place).
pub fn scrub_own_environment(configured: &[String]) -> StartEnv {
    let vars: Vec<(String, String)> = std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect();
    let secret_names: Vec<String> = vars
        .iter()
        .filter(|(name, _)| hanzo_policy::profile::is_secret_env(name, configured))
        .map(|(name, _)| name.clone())
        .collect();
    hanzo_sandbox::selfprotect::wipe_and_remove_env(&secret_names);
    if let Err(e) = hanzo_sandbox::selfprotect::set_non_dumpable() {
        eprintln!("warning: cannot make hanzo-dev non-dumpable: {e}");
    }
    StartEnv { vars }
}
