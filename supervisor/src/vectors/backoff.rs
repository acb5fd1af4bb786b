//! `backoff-timing` vectors: ceilings checked exactly through `hanzo_backoff::ceiling_ms`, and
//! delays sampled through the real jitter paths (`Backoff::delay_with`, `Backoff::next_delay`)
//! checked to stay within `[0, ceiling]`.
use super::{field, u64_field};
use hanzo_backoff::{ceiling_ms, Backoff, JitterSource};
use serde_json::Value;
use std::time::Duration;

/// Random draws per attempt; enough to hit both ends of small ranges.
const SAMPLES: usize = 200;
/// How many sequential `next_delay` calls are checked (the ceiling is pinned long before).
const SEQUENTIAL: u32 = 70;

fn u64_list(case: &Value, key: &str) -> Result<Vec<u64>, String> {
    field(case, key)?
        .as_array()
        .ok_or_else(|| format!("malformed case: {key:?} must be an array"))?
        .iter()
        .map(|v| {
            v.as_u64()
                .ok_or_else(|| format!("malformed case: {key:?} holds {v}, not a u64"))
        })
        .collect()
}

fn within(delay: Duration, ceiling: u64) -> bool {
    delay.as_millis() <= u128::from(ceiling)
}

pub fn run(case: &Value) -> Result<(), String> {
    let base = u64_field(case, "base_ms")?;
    let max = u64_field(case, "max_ms")?;
    let attempts = u64_list(case, "attempts")?
        .into_iter()
        .map(|n| {
            u32::try_from(n).map_err(|_| format!("malformed case: attempt {n} exceeds u32::MAX"))
        })
        .collect::<Result<Vec<u32>, String>>()?;
    let ceilings = u64_list(case, "ceiling_ms")?;
    if attempts.len() != ceilings.len() {
        return Err(format!(
            "malformed case: {} attempts but {} ceilings",
            attempts.len(),
            ceilings.len()
        ));
    }

    for (&n, &want) in attempts.iter().zip(&ceilings) {
        let got = ceiling_ms(base, max, n);
        if got != want {
            return Err(format!("attempt {n}: ceiling_ms {got}, expected {want}"));
        }
    }

    let backoff = Backoff::from_millis(base, max);
    let mut rng = JitterSource::from_entropy();
    for (&n, &ceiling) in attempts.iter().zip(&ceilings) {
        // The extreme draws must land exactly on the ends of the range.
        let lowest = backoff.delay_with(n, || 0);
        let highest = backoff.delay_with(n, || u64::MAX);
        if lowest != Duration::ZERO || highest != Duration::from_millis(ceiling) {
            return Err(format!(
                "attempt {n}: extreme draws gave {lowest:?} and {highest:?}, expected 0ms and {ceiling}ms"
            ));
        }
        for _ in 0..SAMPLES {
            let delay = backoff.delay_with(n, || rng.next_u64());
            if !within(delay, ceiling) {
                return Err(format!(
                    "attempt {n}: sampled delay {delay:?} above ceiling {ceiling}ms"
                ));
            }
        }
    }

    // The stateful path a caller uses: retry n draws from [0, ceiling(n)], then n + 1.
    let mut sequential = Backoff::from_millis(base, max);
    for n in 0..SEQUENTIAL {
        let delay = sequential.next_delay();
        let ceiling = ceiling_ms(base, max, n);
        if !within(delay, ceiling) {
            return Err(format!(
                "next_delay at retry {n}: {delay:?} above ceiling {ceiling}ms"
            ));
        }
    }
    Ok(())
}
