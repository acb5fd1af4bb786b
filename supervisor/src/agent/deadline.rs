//! Every request the run path makes to a worker has a deadline: a worker that stops answering
//! (stopped with `SIGSTOP`, wedged, overloaded) must not stall the run forever. A missed deadline
//! is a [`Missed`] error, which the loop turns into something the model or the run sees — a tool
//! result, a failed model turn — and the request is dropped, which cancels it in the worker.
//! Restarting a worker that misses its heartbeat is the supervision tree's job (`worker.rs`).

use hanzo_ipc::Role;
use std::future::Future;
use std::time::Duration;

/// How long the run path waits for each kind of worker request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// The longest the model worker may go without sending anything during a turn (text, a tool
    /// call, a retry notice, the end). Model turns stream, so this bounds silence, not length.
    pub model_idle: Duration,
    /// Added to a tool's own time limit (a command's `timeout_ms`, a hook's) for the worker to
    /// kill what it started and answer.
    pub grace: Duration,
    /// File tools and other requests without a time limit of their own (tool definitions,
    /// loading a cassette, asking the broker).
    pub request: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            model_idle: Duration::from_secs(300),
            grace: Duration::from_secs(5),
            request: Duration::from_secs(120),
        }
    }
}

/// A worker did not answer in time.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the {role} worker did not answer {what} within {}; it may be stopped or overloaded. \
     The request was abandoned",
    seconds(*after)
)]
pub struct Missed {
    /// The worker that did not answer.
    pub role: Role,
    /// What was asked, as a phrase ("the tool call", "the model turn").
    pub what: &'static str,
    /// How long it was given.
    pub after: Duration,
}

fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

/// `fut`, or [`Missed`] once `after` has passed.
pub async fn within<T>(
    role: Role,
    what: &'static str,
    after: Duration,
    fut: impl Future<Output = T>,
) -> Result<T, Missed> {
    tokio::time::timeout(after, fut)
        .await
        .map_err(|_| Missed { role, what, after })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_that_never_answers_misses_its_deadline() {
        let r = within(
            Role::Tools,
            "the tool call",
            Duration::from_millis(20),
            std::future::pending::<()>(),
        )
        .await;
        let e = r.expect_err("missed");
        assert_eq!(e.role, Role::Tools);
        assert!(
            e.to_string()
                .starts_with("the tools worker did not answer the tool call within 0.0 s"),
            "{e}"
        );
        assert_eq!(
            within(Role::Model, "x", Duration::from_secs(5), async { 7 }).await,
            Ok(7)
        );
    }
}
