//! The agent loop (HIP-0301 §2): model turn → tool calls under policy, hooks and the sandbox →
//! results back to the model, recorded as it happens.

pub mod defs;
