//! Summary statistics of a row's samples and the interleaved schedule the samples are taken in.
//!
//! Theory of operation: start times are skewed (a slow tail from page cache, cgroup and RCU work), so
//! a row is summarised by its median and its min–max range, never a mean. Rows are measured
//! round by round (A B C … A B C …) so that drift of the machine during the run (another job, thermal
//! state, a growing dentry cache) hits every row alike instead of favouring whichever row ran first.
//!
//! Pure code; unit tests below.
use std::time::Duration;

/// Median, minimum and maximum of a non-empty set of samples.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    pub median: Duration,
    pub min: Duration,
    pub max: Duration,
}

impl Summary {
    /// Summarises `samples`; None when there are none. The median of an even count is the mean
    /// of the two middle samples.
    pub fn of(samples: &[Duration]) -> Option<Summary> {
        let mut sorted = samples.to_vec();
        sorted.sort_unstable();
        let (&min, &max) = (sorted.first()?, sorted.last()?);
        let mid = sorted.len() / 2;
        let median = if sorted.len() % 2 == 1 {
            sorted[mid]
        } else {
            (sorted[mid - 1] + sorted[mid]) / 2
        };
        Some(Summary { median, min, max })
    }
}

/// `numerator / denominator` of two medians (pier's median over a peer's): below 1 means pier is
/// faster. None when the denominator is zero.
pub fn ratio(numerator: Duration, denominator: Duration) -> Option<f64> {
    (!denominator.is_zero()).then(|| numerator.as_secs_f64() / denominator.as_secs_f64())
}

/// One step of the schedule: the phase, the round within it and the row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    /// True for warm-up steps, whose samples are discarded.
    pub warmup: bool,
    /// Round number within its phase, from 0.
    pub round: usize,
    /// Index of the row.
    pub row: usize,
}

/// The interleaved schedule: `warmup` rounds then `runs` rounds, each round visiting every row once
/// in order.
pub fn interleave(rows: usize, warmup: usize, runs: usize) -> impl Iterator<Item = Step> {
    let phase = move |warmup: bool, rounds: usize| {
        (0..rounds).flat_map(move |round| (0..rows).map(move |row| Step { warmup, round, row }))
    };
    phase(true, warmup).chain(phase(false, runs))
}

/// `0..len` starting at `round % len`: each round starts one place further, so no row is always
/// measured first (right after whatever the previous round's last cell left behind).
pub fn rotated(len: usize, round: usize) -> impl Iterator<Item = usize> {
    (0..len).map(move |i| (i + round) % len)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(values: &[u64]) -> Vec<Duration> {
        values.iter().map(|&v| Duration::from_millis(v)).collect()
    }

    #[test]
    fn odd_count_median_is_the_middle_sample() {
        let summary = Summary::of(&ms(&[9, 1, 5])).expect("summary");
        assert_eq!(summary.median, Duration::from_millis(5));
        assert_eq!(summary.min, Duration::from_millis(1));
        assert_eq!(summary.max, Duration::from_millis(9));
    }

    #[test]
    fn even_count_median_is_the_mean_of_the_middle_two() {
        let summary = Summary::of(&ms(&[4, 1, 10, 2])).expect("summary");
        assert_eq!(summary.median, Duration::from_millis(3));
    }

    #[test]
    fn no_samples_no_summary() {
        assert_eq!(Summary::of(&[]), None);
    }

    #[test]
    fn ratio_of_medians() {
        let r = ratio(Duration::from_millis(2), Duration::from_millis(8)).expect("ratio");
        assert!((r - 0.25).abs() < 1e-12);
        assert_eq!(ratio(Duration::from_millis(2), Duration::ZERO), None);
    }

    #[test]
    fn schedule_is_warmup_then_rounds_of_every_row() {
        let steps: Vec<(bool, usize, usize)> = interleave(3, 1, 2)
            .map(|s| (s.warmup, s.round, s.row))
            .collect();
        let expected = vec![
            (true, 0, 0),
            (true, 0, 1),
            (true, 0, 2),
            (false, 0, 0),
            (false, 0, 1),
            (false, 0, 2),
            (false, 1, 0),
            (false, 1, 1),
            (false, 1, 2),
        ];
        assert_eq!(steps, expected);
    }

    #[test]
    fn every_round_visits_every_row_once_starting_one_further() {
        let rounds: Vec<Vec<usize>> = (0..4).map(|r| rotated(3, r).collect()).collect();
        assert_eq!(rounds, [[0, 1, 2], [1, 2, 0], [2, 0, 1], [0, 1, 2]]);
    }

    #[test]
    fn schedule_without_rows_is_empty() {
        assert_eq!(interleave(0, 3, 30).count(), 0);
    }
}
