//! The fault queue every simulator keeps, and the seeded randomness behind probabilistic
//! faults. The first queued fault that matches a call and wins its draw strikes; each fault
//! strikes at most `times` times. Draws happen only for faults that carry a probability, so
//! count-only faults stay exactly as predictable as before, and a run with the same seed and
//! the same sequence of calls strikes the same calls. The same generator draws the GitLab
//! simulator's pipeline durations, one generator per pipeline keyed from a seed of their own.

/// SplitMix64 (Steele, Lea and Flood, 2014). A dozen lines give the same sequence for a seed
/// on every platform and in every future build, which generators from a crate do not
/// promise across its versions; statistical quality far beyond "is this call unlucky" is
/// not needed.
#[derive(Clone, Debug)]
pub(crate) struct SeededRng {
    state: u64,
}

impl SeededRng {
    pub(crate) fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// A generator of its own for one thing named by `key` (a project, a merge request,
    /// which of its pipelines): its draws depend on the seed and the key only, not on how
    /// many draws were made before for other things.
    pub(crate) fn keyed(seed: u64, key: &[u64]) -> Self {
        let mut rng = Self::new(seed);
        for part in key {
            rng.state = rng.next_u64() ^ part;
        }
        rng
    }

    fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform draw from `[0, 1)`: the top 53 bits, as many as an `f64` mantissa holds.
    fn next_f64(&mut self) -> f64 {
        const SCALE: f64 = 1.0 / (1u64 << 53) as f64;
        (self.next_u64() >> 11) as f64 * SCALE
    }

    /// A uniform draw from `[low, high]`, to the nanosecond; `low` when `high` is not above it.
    pub(crate) fn duration_within(
        &mut self,
        low: std::time::Duration,
        high: std::time::Duration,
    ) -> std::time::Duration {
        let spread = high.saturating_sub(low);
        if spread.is_zero() {
            return low;
        }
        let nanos = u64::try_from(spread.as_nanos()).unwrap_or(u64::MAX);
        low + std::time::Duration::from_nanos(self.next_u64() % nanos.saturating_add(1))
    }
}

/// Whether `probability` is one a fault can carry.
pub(crate) fn is_probability(probability: f64) -> bool {
    (0.0..=1.0).contains(&probability)
}

/// How many more calls a fault may strike, and how likely each strike is.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Budget {
    times: u32,
    /// `None` strikes every matching call without a draw.
    probability: Option<f64>,
}

impl Budget {
    /// One strike, certain.
    pub(crate) const ONCE: Self = Self {
        times: 1,
        probability: None,
    };

    /// The same budget with `times` strikes.
    pub(crate) fn with_times(self, times: u32) -> Self {
        Self { times, ..self }
    }

    /// The same budget, each strike happening with `probability`.
    ///
    /// # Panics
    /// If `probability` is not within `0.0..=1.0`: a fault that can never be reasoned about
    /// is a test bug worth failing on at once.
    pub(crate) fn with_probability(self, probability: f64) -> Self {
        assert!(
            is_probability(probability),
            "a fault probability must be within 0.0..=1.0, got {probability}"
        );
        Self {
            probability: Some(probability),
            ..self
        }
    }
}

/// A fault that carries a [`Budget`].
pub(crate) trait Budgeted {
    /// The fault's budget, for the queue to spend.
    fn budget(&mut self) -> &mut Budget;
}

/// Queued faults, oldest first, with the generator their probabilities draw from.
#[derive(Debug)]
pub(crate) struct FaultQueue<F> {
    queue: Vec<F>,
    rng: SeededRng,
}

impl<F: Budgeted + Clone> FaultQueue<F> {
    /// An empty queue whose draws follow `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            queue: Vec::new(),
            rng: SeededRng::new(seed),
        }
    }

    /// Queues a fault behind those already queued; one with no strikes left is dropped.
    pub(crate) fn push(&mut self, mut fault: F) {
        if fault.budget().times > 0 {
            self.queue.push(fault);
        }
    }

    /// Drops every queued fault; the generator keeps its position.
    pub(crate) fn clear(&mut self) {
        self.queue.clear();
    }

    /// Spends one strike of the first fault that `matches` and wins its draw, and returns
    /// it. A fault that loses its draw lets the call pass on to the faults behind it.
    pub(crate) fn take(&mut self, matches: impl Fn(&F) -> bool) -> Option<F> {
        let rng = &mut self.rng;
        let position = self.queue.iter_mut().position(|fault| {
            matches(fault)
                && fault
                    .budget()
                    .probability
                    .is_none_or(|probability| rng.next_f64() < probability)
        })?;
        let fault = &mut self.queue[position];
        let budget = fault.budget();
        budget.times -= 1;
        let spent = budget.times == 0;
        let taken = fault.clone();
        if spent {
            self.queue.remove(position);
        }
        Some(taken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct Probe(&'static str, Budget);

    impl Budgeted for Probe {
        fn budget(&mut self) -> &mut Budget {
            &mut self.1
        }
    }

    #[test]
    fn splitmix64_matches_the_reference_sequence() {
        let mut rng = SeededRng::new(0);
        let first: Vec<u64> = (0..3).map(|_| rng.next_u64()).collect();
        assert_eq!(
            first,
            [
                0xE220_A839_7B1D_CDAF,
                0x6E78_9E6A_A1B9_65F4,
                0x06C4_5D18_8009_454F
            ]
        );
        assert!((0..1000).all(|_| (0.0..1.0).contains(&rng.next_f64())));
    }

    #[test]
    fn durations_are_drawn_within_their_range_and_follow_the_seed() {
        use std::time::Duration;
        let (low, high) = (Duration::from_secs(5), Duration::from_secs(15));
        let draws = |seed| {
            let mut rng = SeededRng::new(seed);
            (0..200)
                .map(|_| rng.duration_within(low, high))
                .collect::<Vec<_>>()
        };
        let first = draws(4);
        assert_eq!(first, draws(4));
        assert_ne!(first, draws(5));
        assert!(first.iter().all(|d| (low..=high).contains(d)));
        assert!(first.iter().any(|d| *d < Duration::from_secs(7)));
        assert!(first.iter().any(|d| *d > Duration::from_secs(13)));
        let mut rng = SeededRng::new(0);
        assert_eq!(rng.duration_within(high, low), high, "an empty range");
    }

    #[test]
    fn count_only_faults_strike_in_order_without_drawing() {
        let mut queue = FaultQueue::new(7);
        queue.push(Probe("a", Budget::ONCE.with_times(2)));
        queue.push(Probe("b", Budget::ONCE));
        queue.push(Probe("never", Budget::ONCE.with_times(0)));
        let names: Vec<_> = std::iter::from_fn(|| queue.take(|_| true).map(|p| p.0)).collect();
        assert_eq!(names, ["a", "a", "b"]);
        assert_eq!(queue.rng.next_u64(), SeededRng::new(7).next_u64());
    }

    #[test]
    fn probabilistic_faults_follow_the_seed_and_respect_their_count() {
        let pattern = |seed| {
            let mut queue = FaultQueue::new(seed);
            queue.push(Probe("p", Budget::ONCE.with_times(5).with_probability(0.5)));
            (0..40)
                .map(|_| queue.take(|_| true).is_some())
                .collect::<Vec<_>>()
        };
        assert_eq!(pattern(1), pattern(1));
        assert_ne!(pattern(1), pattern(2));
        assert_eq!(pattern(1).iter().filter(|hit| **hit).count(), 5);

        let mut queue = FaultQueue::new(3);
        queue.push(Probe("never", Budget::ONCE.with_probability(0.0)));
        queue.push(Probe(
            "always",
            Budget::ONCE.with_times(3).with_probability(1.0),
        ));
        let names: Vec<_> = std::iter::from_fn(|| queue.take(|_| true).map(|p| p.0)).collect();
        assert_eq!(names, ["always"; 3]);
    }

    #[test]
    #[should_panic(expected = "within 0.0..=1.0")]
    fn out_of_range_probabilities_are_refused() {
        let _ = Budget::ONCE.with_probability(1.5);
    }
}
