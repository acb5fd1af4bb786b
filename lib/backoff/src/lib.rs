//! Overflow-safe exponential backoff with full jitter, for worker restarts and HTTP retries.
//! No dependencies: randomness comes from a small internal generator or from a source the caller injects.
//!
//! The ceiling for retry `n` (the first retry is `n = 0`) is `min(max_ms, base_ms · 2ⁿ)`, computed
//! with saturating arithmetic so that any `n` up to `u32::MAX` is safe. The delay is "full jitter":
//! uniform in `[0, ceiling(n)]`, both ends included.
//!
//! ```
//! use hanzo_backoff::{ceiling_ms, Backoff};
//! use std::time::Duration;
//!
//! assert_eq!(ceiling_ms(100, 30_000, 0), 100);
//! assert_eq!(ceiling_ms(100, 30_000, 4_000_000_000), 30_000);
//!
//! let mut backoff = Backoff::new(Duration::from_millis(100), Duration::from_secs(30)).with_seed(7);
//! let first = backoff.next_delay();
//! assert!(first <= Duration::from_millis(100));
//! assert_eq!(backoff.attempt(), 1);
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// How long a server's `Retry-After` is honoured at most unless the caller says otherwise. A server
/// asking for longer is treated as asking for this; the caller's [`RetryBudget`] decides whether
/// waiting at all is worth it.
pub const DEFAULT_RETRY_AFTER_CAP: Duration = Duration::from_secs(300);

/// The jitter ceiling in milliseconds for retry `n`: `min(max_ms, base_ms · 2ⁿ)`.
///
/// Saturating throughout, so it is defined (and monotone non-decreasing in `n`) for every `n`:
/// `2ⁿ` saturates to `u64::MAX` from `n = 64` on, and the product saturates too.
pub fn ceiling_ms(base_ms: u64, max_ms: u64, n: u32) -> u64 {
    base_ms.saturating_mul(2u64.saturating_pow(n)).min(max_ms)
}

/// A value uniform in `[0, ceiling]` (both ends included) drawn from `rand`.
///
/// Uses Lemire's multiply-and-shift with rejection so the result is unbiased. A source that keeps
/// producing rejected values (a constant test source) is accepted after a few draws, so this always
/// terminates and always stays within bounds.
pub fn jitter_ms(ceiling: u64, rand: &mut impl FnMut() -> u64) -> u64 {
    if ceiling == u64::MAX {
        // The span 2⁶⁴ covers every u64: any draw is already uniform.
        return rand();
    }
    let span = ceiling + 1;
    // The values of `low` below this threshold would over-represent some results.
    let threshold = span.wrapping_neg() % span;
    let mut product = u128::from(rand()) * u128::from(span);
    for _ in 0..16 {
        // The low half of the product (Lemire's method compares it with the threshold).
        #[allow(
            clippy::cast_possible_truncation,
            reason = "keeps the low 64 bits on purpose"
        )]
        let low = product as u64;
        if low >= threshold {
            break;
        }
        product = u128::from(rand()) * u128::from(span);
    }
    // product < 2⁶⁴ · span, so the high half is < span, i.e. ≤ ceiling.
    (product >> 64) as u64
}

/// A small, fast, non-cryptographic generator (SplitMix64) used for jitter.
///
/// Jitter only needs to decorrelate clients, not to be unpredictable to an attacker.
#[derive(Debug, Clone)]
pub struct JitterSource {
    state: u64,
}

impl JitterSource {
    /// A generator that yields the same sequence for the same seed (tests, replays).
    pub fn from_seed(seed: u64) -> Self {
        Self { state: seed }
    }

    /// A generator seeded from the process's hash keys and the clock, different per instance.
    pub fn from_entropy() -> Self {
        // `RandomState::new` draws fresh per-instance keys, so two generators created in the same
        // nanosecond still differ.
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0);
        hasher.write_u128(nanos);
        Self {
            state: hasher.finish(),
        }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Exponential backoff state: the next retry's number and where its jitter comes from.
#[derive(Debug, Clone)]
pub struct Backoff {
    base_ms: u64,
    max_ms: u64,
    attempt: u32,
    retry_after_cap_ms: u64,
    rng: JitterSource,
}

impl Backoff {
    /// Backoff starting at `base` and never above `max`, with entropy-seeded jitter.
    /// Durations are counted in whole milliseconds (longer than `u64::MAX` ms saturates).
    pub fn new(base: Duration, max: Duration) -> Self {
        Self::from_millis(duration_ms(base), duration_ms(max))
    }

    /// Same as [`Backoff::new`] with the bounds in milliseconds.
    pub fn from_millis(base_ms: u64, max_ms: u64) -> Self {
        Self {
            base_ms,
            max_ms,
            attempt: 0,
            retry_after_cap_ms: duration_ms(DEFAULT_RETRY_AFTER_CAP),
            rng: JitterSource::from_entropy(),
        }
    }

    /// Use a deterministic jitter sequence (tests, reproducible runs).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.rng = JitterSource::from_seed(seed);
        self
    }

    /// The longest server-requested wait [`Backoff::next_delay_at_least`] honours
    /// (default [`DEFAULT_RETRY_AFTER_CAP`]).
    pub fn with_retry_after_cap(mut self, cap: Duration) -> Self {
        self.retry_after_cap_ms = duration_ms(cap);
        self
    }

    /// The number of the next retry (0 before the first).
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The base delay in milliseconds.
    pub fn base_ms(&self) -> u64 {
        self.base_ms
    }

    /// The cap in milliseconds.
    pub fn max_ms(&self) -> u64 {
        self.max_ms
    }

    /// The jitter ceiling of retry `n` (see [`ceiling_ms`]).
    pub fn ceiling(&self, n: u32) -> Duration {
        Duration::from_millis(ceiling_ms(self.base_ms, self.max_ms, n))
    }

    /// The delay for retry `n` with randomness from `rand`; does not advance the attempt counter.
    pub fn delay_with(&self, n: u32, mut rand: impl FnMut() -> u64) -> Duration {
        let ceiling = ceiling_ms(self.base_ms, self.max_ms, n);
        Duration::from_millis(jitter_ms(ceiling, &mut rand))
    }

    /// The delay before the next retry, uniform in `[0, ceiling(attempt)]`; advances the attempt.
    pub fn next_delay(&mut self) -> Duration {
        let ceiling = ceiling_ms(self.base_ms, self.max_ms, self.attempt);
        let rng = &mut self.rng;
        let delay = Duration::from_millis(jitter_ms(ceiling, &mut || rng.next_u64()));
        self.attempt = self.attempt.saturating_add(1);
        delay
    }

    /// [`Backoff::next_delay`] with randomness from `rand` instead of the internal generator.
    pub fn next_delay_with(&mut self, rand: impl FnMut() -> u64) -> Duration {
        let delay = self.delay_with(self.attempt, rand);
        // Saturating: after u32::MAX retries the ceiling is long since pinned at max anyway.
        self.attempt = self.attempt.saturating_add(1);
        delay
    }

    /// The next delay, but no shorter than `min` (a server's `Retry-After`), where `min` itself is
    /// capped at the retry-after cap so a hostile or buggy server cannot park us for days.
    /// Advances the attempt like [`Backoff::next_delay`].
    pub fn next_delay_at_least(&mut self, min: Duration) -> Duration {
        let jittered = self.next_delay();
        let floor = min.min(Duration::from_millis(self.retry_after_cap_ms));
        jittered.max(floor)
    }

    /// Start over after a success: the next delay is drawn for retry 0 again.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// Parse an HTTP `Retry-After` value in its delay-seconds form (RFC 9110 §10.2.3).
///
/// Returns `None` for the HTTP-date form or anything malformed, in which case the caller simply
/// uses its ordinary backoff. Absurdly large values saturate rather than fail; they are capped by
/// [`Backoff::next_delay_at_least`].
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let digits = value.trim_matches(|c| c == ' ' || c == '\t');
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let secs = digits.bytes().fold(0u64, |acc, b| {
        acc.saturating_mul(10).saturating_add(u64::from(b - b'0'))
    });
    Some(Duration::from_secs(secs))
}

/// A cap on the total time spent waiting between retries of one operation.
///
/// It counts only what it is told (delays slept, and optionally time spent in failed attempts),
/// so it is deterministic and never reads the clock itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryBudget {
    limit: Duration,
    spent: Duration,
}

impl RetryBudget {
    /// A budget of `limit` in total.
    pub fn new(limit: Duration) -> Self {
        Self {
            limit,
            spent: Duration::ZERO,
        }
    }

    /// Whether waiting `delay` more still fits within the limit.
    pub fn fits(&self, delay: Duration) -> bool {
        self.spent.saturating_add(delay) <= self.limit
    }

    /// Record `delay` and return `true` if it fits; otherwise record nothing and return `false`
    /// (the caller should give up rather than retry).
    pub fn try_spend(&mut self, delay: Duration) -> bool {
        if self.fits(delay) {
            self.spent = self.spent.saturating_add(delay);
            true
        } else {
            false
        }
    }

    /// Record time spent regardless of the limit (e.g. the duration of a failed attempt).
    pub fn spend(&mut self, elapsed: Duration) {
        self.spent = self.spent.saturating_add(elapsed);
    }

    /// Time recorded so far.
    pub fn spent(&self) -> Duration {
        self.spent
    }

    /// Time left before the limit (zero once it is reached or overrun).
    pub fn remaining(&self) -> Duration {
        self.limit.saturating_sub(self.spent)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ceilings_double_from_base_at_retry_zero() {
        let got: Vec<u64> = (0..6).map(|n| ceiling_ms(100, 10_000, n)).collect();
        assert_eq!(got, vec![100, 200, 400, 800, 1600, 3200]);
        assert_eq!(ceiling_ms(100, 10_000, 7), 10_000);
    }

    #[test]
    fn ceilings_saturate_at_any_attempt_number() {
        assert_eq!(ceiling_ms(1, u64::MAX, 63), 1 << 63);
        assert_eq!(ceiling_ms(1, u64::MAX, 64), u64::MAX);
        assert_eq!(ceiling_ms(3, u64::MAX, 63), u64::MAX);
        assert_eq!(ceiling_ms(u64::MAX, u64::MAX, u32::MAX), u64::MAX);
        assert_eq!(ceiling_ms(100, 30_000, u32::MAX), 30_000);
    }

    #[test]
    fn zero_base_or_zero_max_means_no_delay() {
        assert_eq!(ceiling_ms(0, 30_000, u32::MAX), 0);
        assert_eq!(ceiling_ms(100, 0, 0), 0);
        let b = Backoff::from_millis(0, 1000).with_seed(1);
        assert_eq!(b.delay_with(50, || u64::MAX), Duration::ZERO);
    }

    #[test]
    fn base_above_max_is_capped_from_the_first_retry() {
        assert_eq!(ceiling_ms(5_000, 1_000, 0), 1_000);
    }

    #[test]
    fn extreme_random_values_map_to_the_ends_of_the_range() {
        let b = Backoff::from_millis(100, 30_000);
        assert_eq!(b.delay_with(2, || 0), Duration::ZERO);
        assert_eq!(b.delay_with(2, || u64::MAX), Duration::from_millis(400));
        assert_eq!(jitter_ms(u64::MAX, &mut || 12345), 12345);
        assert_eq!(jitter_ms(0, &mut || u64::MAX), 0);
    }

    #[test]
    fn jitter_is_roughly_uniform_over_a_small_range() {
        // 4 buckets of [0, 3]; with 40_000 seeded draws each should be near 10_000.
        let mut rng = JitterSource::from_seed(42);
        let mut counts = [0u32; 4];
        for _ in 0..40_000 {
            let draw = jitter_ms(3, &mut || rng.next_u64());
            counts[usize::try_from(draw).expect("a draw of at most 3")] += 1;
        }
        for c in counts {
            assert!(
                (9_000..11_000).contains(&c),
                "bucket count {c} far from 10000"
            );
        }
    }

    #[test]
    fn next_delay_advances_and_reset_restarts() {
        let mut b = Backoff::from_millis(100, 1_000).with_seed(9);
        for n in 0..10u32 {
            assert_eq!(b.attempt(), n);
            let d = b.next_delay();
            assert!(
                d <= b.ceiling(n),
                "retry {n}: {d:?} above {:?}",
                b.ceiling(n)
            );
        }
        b.reset();
        assert_eq!(b.attempt(), 0);
        assert!(b.next_delay_with(|| u64::MAX) <= Duration::from_millis(100));
    }

    #[test]
    fn same_seed_gives_same_sequence() {
        let mut a = Backoff::from_millis(100, 60_000).with_seed(5);
        let mut b = Backoff::from_millis(100, 60_000).with_seed(5);
        let sa: Vec<_> = (0..20).map(|_| a.next_delay()).collect();
        let sb: Vec<_> = (0..20).map(|_| b.next_delay()).collect();
        assert_eq!(sa, sb);
    }

    #[test]
    fn entropy_seeded_generators_differ() {
        let mut a = JitterSource::from_entropy();
        let mut b = JitterSource::from_entropy();
        assert_ne!((a.next_u64(), a.next_u64()), (b.next_u64(), b.next_u64()));
    }

    #[test]
    fn attempt_counter_saturates() {
        let mut b = Backoff::from_millis(1, 10).with_seed(1);
        b.attempt = u32::MAX;
        let d = b.next_delay();
        assert!(d <= Duration::from_millis(10));
        assert_eq!(b.attempt(), u32::MAX);
    }

    #[test]
    fn retry_after_is_a_floor_and_is_capped() {
        let mut b = Backoff::from_millis(100, 1_000).with_seed(3);
        // The server's wait dominates the small jittered delay.
        assert_eq!(
            b.next_delay_at_least(Duration::from_secs(20)),
            Duration::from_secs(20)
        );
        // A zero floor leaves the jittered delay alone.
        assert!(b.next_delay_at_least(Duration::ZERO) <= Duration::from_millis(400));
        // A day-long request is cut to the cap.
        let mut capped = Backoff::from_millis(100, 1_000)
            .with_seed(3)
            .with_retry_after_cap(Duration::from_secs(60));
        assert_eq!(
            capped.next_delay_at_least(Duration::from_secs(86_400)),
            Duration::from_secs(60)
        );
        assert_eq!(capped.attempt(), 1);
    }

    #[test]
    fn retry_after_header_values() {
        assert_eq!(parse_retry_after("120"), Some(Duration::from_secs(120)));
        assert_eq!(parse_retry_after(" 0 "), Some(Duration::ZERO));
        assert_eq!(
            parse_retry_after("99999999999999999999999"),
            Some(Duration::from_secs(u64::MAX))
        );
        assert_eq!(parse_retry_after("Fri, 31 Dec 1999 23:59:59 GMT"), None);
        assert_eq!(parse_retry_after("-1"), None);
        assert_eq!(parse_retry_after("1.5"), None);
        assert_eq!(parse_retry_after(""), None);
    }

    #[test]
    fn budget_refuses_a_retry_that_would_overrun() {
        let mut budget = RetryBudget::new(Duration::from_secs(10));
        assert!(budget.try_spend(Duration::from_secs(6)));
        assert!(!budget.fits(Duration::from_secs(5)));
        assert!(!budget.try_spend(Duration::from_secs(5)));
        assert_eq!(budget.spent(), Duration::from_secs(6));
        assert!(budget.try_spend(Duration::from_secs(4)));
        assert_eq!(budget.remaining(), Duration::ZERO);
        assert!(budget.fits(Duration::ZERO));
        budget.spend(Duration::MAX);
        assert_eq!(budget.spent(), Duration::MAX);
        assert!(!budget.fits(Duration::ZERO));
    }

    proptest! {
        #[test]
        fn delay_never_exceeds_ceiling(base in any::<u64>(), max in any::<u64>(), n in any::<u32>(), seed in any::<u64>()) {
            let b = Backoff::from_millis(base, max);
            let mut rng = JitterSource::from_seed(seed);
            let d = b.delay_with(n, || rng.next_u64());
            prop_assert!(d <= Duration::from_millis(ceiling_ms(base, max, n)));
        }

        #[test]
        fn ceiling_is_monotone_and_bounded(base in any::<u64>(), max in any::<u64>(), n in any::<u32>(), k in 0u32..80) {
            let c = ceiling_ms(base, max, n);
            prop_assert!(c <= max);
            prop_assert!(c <= base.saturating_mul(2u64.saturating_pow(n)));
            prop_assert!(ceiling_ms(base, max, n.saturating_add(k)) >= c);
            prop_assert!(ceiling_ms(base, max, n.saturating_add(1)) >= c);
        }

        #[test]
        fn ceiling_matches_wide_arithmetic(base in any::<u64>(), max in any::<u64>(), n in 0u32..200) {
            // Exact reference in u128 (or "infinite" once 2ⁿ alone exceeds u64).
            let exact: u128 = if base == 0 { 0 }
                else if n >= 64 { u128::MAX }
                else { u128::from(base) * (1u128 << n) };
            let want = u64::try_from(exact.min(u128::from(max))).expect("at most max, a u64");
            prop_assert_eq!(ceiling_ms(base, max, n), want);
        }

        #[test]
        fn jitter_in_bounds_for_any_source_values(ceiling in any::<u64>(), draws in proptest::collection::vec(any::<u64>(), 1..20)) {
            let mut i = 0;
            let mut source = || { let v = draws[i % draws.len()]; i += 1; v };
            prop_assert!(jitter_ms(ceiling, &mut source) <= ceiling);
        }
    }
}
