//! `hanzo-broker` is the broker worker: the only process that holds credentials (environment,
//! user settings, `credentials.json`), the one that runs OAuth logins and refreshes, and the one
//! that performs authenticated HTTP for others.
//!
//! It parses almost nothing: requests arrive credential-free on the direct channel, are checked
//! against a per-provider allow-list, get the credential injected, and the response goes back raw.
//! It is also the egress proxy for sandboxed commands ([`egress`]): the only way a command reaches
//! a network host, and only one the user allowed.
// The cast lints (issue 11), enforced crate by crate until every member passes them.
#![deny(
    clippy::cast_possible_truncation,
    clippy::cast_possible_wrap,
    clippy::cast_sign_loss,
    clippy::cast_lossless
)]
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod allow;
pub mod credentials;
pub mod egress;
pub mod fetch;
pub mod jwks;
pub mod mcp_http;
pub mod mcp_secrets;
pub mod oauth;
pub mod pkce;
pub mod secret;
pub mod store;
pub mod traces;
mod worker;

pub use allow::{AllowError, AllowList};
pub use credentials::CredentialStore;
pub use fetch::Broker;
pub use secret::Secret;
pub use worker::worker_main;
