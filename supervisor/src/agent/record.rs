//! What the loop puts on record from tool calls: each input and output within a per-field size
//! and the whole run within a byte budget, so a model that makes its tools produce (or itself
//! writes) gigabytes cannot fill the disk through the store. A cut is always marked; once the
//! budget is gone the run stops, because nothing may run that could not be recorded.

use serde_json::{json, Value};

/// The most of one tool input or output that is stored (the model is shown all of it).
pub const FIELD_LIMIT: usize = 128 * 1024;

/// The default budget for the tool inputs and outputs of one run (`run --max-record-bytes`).
pub const DEFAULT_RECORD_BYTES: u64 = 64 * 1024 * 1024;

/// Bytes of tool inputs and outputs a run may still write to the store.
#[derive(Debug, Clone)]
pub struct RecordBudget {
    max: u64,
    used: u64,
    exhausted: bool,
}

impl RecordBudget {
    /// A budget of `max` bytes, none used yet.
    pub fn new(max: u64) -> RecordBudget {
        RecordBudget {
            max,
            used: 0,
            exhausted: false,
        }
    }

    /// True once something could not be recorded for lack of budget.
    pub fn exhausted(&self) -> bool {
        self.exhausted
    }

    /// Bytes recorded so far.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Why the run stops once the budget is gone.
    pub fn stop_reason(&self) -> String {
        format!(
            "the run's record budget is used up: {} bytes of tool inputs and outputs are on \
             record, the limit is {} (raise it with --max-record-bytes). The run stopped so that \
             nothing runs without a record",
            self.used, self.max
        )
    }

    /// Charge `n` bytes; false (and exhausted) when they do not fit.
    fn charge(&mut self, n: usize) -> bool {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        if self.exhausted || self.used.saturating_add(n) > self.max {
            self.exhausted = true;
            return false;
        }
        self.used += n;
        true
    }

    /// A tool input as it is stored: whole, cut to [`FIELD_LIMIT`] bytes of its JSON text with
    /// the cut marked, or a marker when the budget is gone.
    pub fn input(&mut self, input: Value) -> Value {
        let text = serde_json::to_string(&input).expect("a Value always serializes");
        let stored = if text.len() <= FIELD_LIMIT {
            input
        } else {
            json!({
                "truncated_input": head(&text, FIELD_LIMIT),
                "original_bytes": text.len(),
            })
        };
        if self.charge(text.len().min(FIELD_LIMIT)) {
            stored
        } else {
            json!({"not_recorded": "the run's record budget was used up", "original_bytes": text.len()})
        }
    }

    /// A tool output (or error) as it is stored, likewise.
    pub fn text(&mut self, text: String) -> String {
        let n = text.len();
        let stored = if n <= FIELD_LIMIT {
            text
        } else {
            let kept = head(&text, FIELD_LIMIT);
            format!(
                "{kept}\n[… {} bytes cut from the record; the model was shown all {n}]",
                n - kept.len()
            )
        };
        if self.charge(n.min(FIELD_LIMIT)) {
            stored
        } else {
            format!("[not recorded: the run's record budget was used up; {n} bytes]")
        }
    }
}

/// At most `max` bytes of `s`, cut at a character boundary.
fn head(s: &str, max: usize) -> &str {
    let mut end = max.min(s.len());
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_values_are_stored_whole_and_counted() {
        let mut b = RecordBudget::new(1000);
        assert_eq!(b.input(json!({"a": 1})), json!({"a": 1}));
        assert_eq!(b.text("hello".into()), "hello");
        assert_eq!(b.used(), 7 + 5);
        assert!(!b.exhausted());
    }

    #[test]
    fn oversize_values_are_cut_with_the_cut_marked() {
        let mut b = RecordBudget::new(u64::MAX);
        let big = "é".repeat(FIELD_LIMIT); // two bytes each
        let stored = b.text(big.clone());
        assert!(stored.len() < big.len());
        assert!(
            stored.contains("bytes cut from the record"),
            "{}",
            &stored[stored.len() - 80..]
        );
        let input = b.input(json!({"content": big}));
        assert_eq!(input["original_bytes"], FIELD_LIMIT * 2 + 14);
        assert!(input["truncated_input"].as_str().unwrap().len() <= FIELD_LIMIT);
    }

    #[test]
    fn the_budget_runs_out_and_says_so() {
        let mut b = RecordBudget::new(10);
        assert_eq!(b.text("12345".into()), "12345");
        assert!(b.text("1234567".into()).starts_with("[not recorded"));
        assert!(b.exhausted());
        // Once gone it stays gone, even for something small.
        assert!(b.text("1".into()).starts_with("[not recorded"));
        assert!(b.stop_reason().contains("--max-record-bytes"));
    }
}
