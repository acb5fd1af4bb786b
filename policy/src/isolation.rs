//! The isolation vocabulary, one type per idea, shared by the CLI, settings, the tools worker,
//! the store and the run events:
//!
//! - [`IsolationMode`] is what the user asks for (`--isolation`, `sandbox.isolation`);
//! - [`Tier`] is what a worker actually got, read from its attestation, never from a request.

use hanzo_ipc::attest::Attestation;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// How much isolation to insist on. Ordered from weakest to strongest, so that "a workspace file
/// may raise isolation but not lower it" is a comparison.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    PartialOrd,
    Ord,
    Hash,
    Default,
    Serialize,
    Deserialize,
    JsonSchema,
)]
#[serde(rename_all = "kebab-case")]
pub enum IsolationMode {
    /// Tier A only (Landlock, seccomp, no capabilities), even where tier B is available: for
    /// hosts whose namespaces misbehave, and for measuring what tier B costs.
    TierA,
    /// The best tier this machine offers: B when user namespaces work, else A (with the reason
    /// recorded).
    #[default]
    Auto,
    /// Tier B or nothing: fail closed, with advice, when namespaces are unavailable.
    Strict,
}

impl IsolationMode {
    /// Every mode, weakest first.
    pub const ALL: [IsolationMode; 3] = [
        IsolationMode::TierA,
        IsolationMode::Auto,
        IsolationMode::Strict,
    ];

    /// The name used on the command line, in settings and in records.
    pub fn as_str(self) -> &'static str {
        match self {
            IsolationMode::TierA => "tier-a",
            IsolationMode::Auto => "auto",
            IsolationMode::Strict => "strict",
        }
    }

    /// The mode named `s` ([`IsolationMode::as_str`]'s form), if any.
    pub fn parse(s: &str) -> Option<IsolationMode> {
        IsolationMode::ALL.into_iter().find(|m| m.as_str() == s)
    }

    /// One line for help texts.
    pub fn describe(self) -> &'static str {
        match self {
            IsolationMode::TierA => {
                "tier A only: Landlock, seccomp, no capabilities; no namespaces"
            }
            IsolationMode::Auto => "the best tier available: B when user namespaces work, else A",
            IsolationMode::Strict => {
                "tier B or nothing: fail closed (exit 3) when it is unavailable"
            }
        }
    }

    /// Whether this mode may enter tier B at all.
    pub fn wants_tier_b(self) -> bool {
        self != IsolationMode::TierA
    }

    /// Whether `tier` satisfies this mode.
    pub fn accepts(self, tier: Tier) -> bool {
        self != IsolationMode::Strict || tier == Tier::B
    }
}

impl fmt::Display for IsolationMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An unknown isolation mode name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown isolation mode {0:?} (expected tier-a, auto or strict)")]
pub struct UnknownIsolationMode(pub String);

impl FromStr for IsolationMode {
    type Err = UnknownIsolationMode;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        IsolationMode::parse(s).ok_or_else(|| UnknownIsolationMode(s.to_string()))
    }
}

/// The sandbox tier a process runs under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub enum Tier {
    /// Landlock, seccomp, no capabilities, rlimits.
    A,
    /// Tier A inside user, mount, pid, net and ipc namespaces.
    B,
}

impl Tier {
    /// `A` or `B`, as records and attestations write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::A => "A",
            Tier::B => "B",
        }
    }

    /// The tier written `s` ([`Tier::as_str`]'s form), if any.
    pub fn parse(s: &str) -> Option<Tier> {
        match s {
            "A" => Some(Tier::A),
            "B" => Some(Tier::B),
            _ => None,
        }
    }

    /// The tier a worker attested: B exactly when it lives in namespaces of its own.
    pub fn of(attestation: &Attestation) -> Tier {
        if attestation.namespaces.is_empty() {
            Tier::A
        } else {
            Tier::B
        }
    }
}

impl fmt::Display for Tier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_round_trip_through_their_names_and_serde() {
        for m in IsolationMode::ALL {
            assert_eq!(IsolationMode::parse(m.as_str()), Some(m));
            assert_eq!(m.as_str().parse::<IsolationMode>(), Ok(m));
            let json = serde_json::to_string(&m).expect("serializes");
            assert_eq!(json, format!("\"{}\"", m.as_str()));
        }
        assert!("lax".parse::<IsolationMode>().is_err());
    }

    #[test]
    fn modes_are_ordered_weakest_first() {
        assert!(IsolationMode::TierA < IsolationMode::Auto);
        assert!(IsolationMode::Auto < IsolationMode::Strict);
        assert_eq!(IsolationMode::default(), IsolationMode::Auto);
    }

    #[test]
    fn strict_accepts_tier_b_only() {
        assert!(IsolationMode::Strict.accepts(Tier::B));
        assert!(!IsolationMode::Strict.accepts(Tier::A));
        assert!(IsolationMode::Auto.accepts(Tier::A));
        assert!(!IsolationMode::TierA.wants_tier_b());
    }

    #[test]
    fn tiers_serialize_as_letters() {
        assert_eq!(serde_json::to_string(&Tier::B).expect("ok"), "\"B\"");
        assert_eq!(Tier::parse("A"), Some(Tier::A));
        assert_eq!(Tier::parse("a"), None);
    }
}
