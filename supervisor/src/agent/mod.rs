//! The agent loop (HIP-0301 §2, design §7): model turn → tool calls under policy, approval, hooks
//! and the sandbox → results back to the model, every step and decision recorded as it happens.
//!
//! - [`traits`]: the three seams (`ApiClient`, `ToolExecutor`, `PermissionPrompter`).
//! - [`workers`]: their production implementations over the model and tools workers.
//! - [`approval`]: the terminal prompter and the non-interactive approval modes.
//! - [`run`]: the loop, steps, limits and cancellation; `call` (one turn's tool calls: caps,
//!   gate, record, execute) and `compact` (compaction) extend it.
//! - [`record`]: what goes on record from tool calls, and the run's byte budget.
//! - [`deadline`]: the deadline of every request to a worker.
//! - [`events`]: what a run reports as it goes (live view, `--json`).
//! - [`defs`]: the built-in agents.
//! - [`session`]: a chat session's earlier turns as the next turn's messages.

pub mod approval;
mod call;
mod compact;
pub mod deadline;
pub mod defs;
pub mod events;
pub mod lsp;
pub mod record;
pub mod run;
pub mod session;
pub mod traits;
pub mod workers;

pub use approval::{ApprovalMode, Prompter};
pub use events::{EventSink, RunEvent};
pub use run::{AgentLoop, Limits, LoopConfig, RunReport, RunSpec};
pub use traits::{ApiClient, PermissionDecision, PermissionPrompter, ToolExecutor};
