//! Building a worker's environment from the allow-list: the base variables, the role's own, and
//! for the broker alone the secret variables.

use hanzo_ipc::Role;
use hanzo_policy::profile::{is_secret_env, SandboxProfile, BASE_ENV_ALLOW};

/// The environment for a worker of `profile.role`, taken from `parent_env`: variables named in
/// `BASE_ENV_ALLOW` or `profile.env_allow`, plus — for the broker only — every secret variable
/// (`is_secret_env`, with `secret_names_configured`). A secret never reaches another role, even
/// when a profile lists its name. Order follows `parent_env`.
pub fn role_env(
    profile: &SandboxProfile,
    parent_env: impl Iterator<Item = (String, String)>,
    secret_names_configured: &[String],
) -> Vec<(String, String)> {
    parent_env
        .filter(|(name, _)| {
            if is_secret_env(name, secret_names_configured) {
                return profile.role == Role::Broker;
            }
            BASE_ENV_ALLOW.contains(&name.as_str()) || profile.env_allow.contains(&name.as_str())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hanzo_policy::profile::{profile_for, ProfileContext};

    fn parent() -> Vec<(String, String)> {
        [
            ("PATH", "/usr/bin"),
            ("HOME", "/root"),
            ("CANARY_API_KEY", "sk-canary"),
            ("CORP_KEY", "corp"),
            ("SSL_CERT_FILE", "/etc/ssl/cert.pem"),
            ("LANG", "C.UTF-8"),
            ("SSH_AUTH_SOCK", "/tmp/agent"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
    }

    fn names(env: &[(String, String)]) -> Vec<&str> {
        env.iter().map(|(k, _)| k.as_str()).collect()
    }

    #[test]
    fn canary_secret_reaches_the_broker_only() {
        let configured = vec!["CORP_KEY".to_string()];
        for role in Role::ALL {
            let p = profile_for(role, &ProfileContext::default());
            let env = role_env(&p, parent().into_iter(), &configured);
            let has_canary = env
                .iter()
                .any(|(k, v)| k == "CANARY_API_KEY" && v == "sk-canary");
            let has_corp = env.iter().any(|(k, _)| k == "CORP_KEY");
            assert_eq!(has_canary, role == Role::Broker, "{role}");
            assert_eq!(has_corp, role == Role::Broker, "{role}");
            assert!(
                !env.iter().any(|(k, _)| k == "HOME" || k == "SSH_AUTH_SOCK"),
                "{role}"
            );
        }
    }

    #[test]
    fn base_and_role_allow_lists_apply() {
        let model = profile_for(Role::Model, &ProfileContext::default());
        assert_eq!(
            names(&role_env(&model, parent().into_iter(), &[])),
            ["PATH", "LANG"]
        );
        let broker = profile_for(Role::Broker, &ProfileContext::default());
        assert_eq!(
            names(&role_env(&broker, parent().into_iter(), &[])),
            ["PATH", "CANARY_API_KEY", "SSL_CERT_FILE", "LANG"]
        );
    }

    #[test]
    fn a_secret_named_in_a_profile_allow_list_still_stays_out() {
        let mut tools = profile_for(Role::Tools, &ProfileContext::default());
        tools.env_allow = &["CANARY_API_KEY"];
        let env = role_env(&tools, parent().into_iter(), &[]);
        assert!(!names(&env).contains(&"CANARY_API_KEY"));
    }
}
