//! The merge train played forward: when each batch ahead of a request leaves
//! the train (merged, or failed and bisected) and when the request's own
//! batch merges, from the measured durations. Pure: `estimate` reads what
//! it needs and asks this module.
//!
//! A batch that holds the change a bigger batch failed on (a half of a
//! bisection) is expected to fail again, one half of each pair, until the
//! change is alone: each such failure sends every batch behind it back to
//! be built again (SPEC §7), so the requests behind a bisection wait for
//! its every level, and the estimate says so.

/// A batch of the train, as far as its expected merge is concerned.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Car {
    /// Not opened yet: its pipeline has not started.
    Opening,
    /// Its pipeline runs, started `since` seconds ago.
    Pipeline { since: f64 },
    /// Its pipeline passed; it waits for its turn.
    Passed,
    /// Merging, for `since` seconds.
    Merging { since: f64 },
}

/// What a batch is expected to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// It merges.
    Merges,
    /// It holds a change a bigger batch failed on: it fails, and its
    /// failing half fails `halvings` more times (a level of bisection each)
    /// before the change is alone or the split depth is reached.
    Fails { halvings: u32 },
}

/// The medians the train is played forward with, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Durations {
    /// A pipeline, from MR opened to passed.
    pub pipeline: f64,
    /// A merge round, from its turn to merged.
    pub merge_round: f64,
}

/// How new batches board a train.
#[derive(Debug, Clone, PartialEq)]
pub struct Boarding {
    /// Batches not claimed yet that board one after another, oldest
    /// requests first, each with its fate.
    pub batches: Vec<Fate>,
    /// At most this many batches in flight (`batch.max_in_flight`).
    pub depth: usize,
    /// Seconds between claim rounds (`batch.interval`).
    pub interval: f64,
    /// Seconds since the newest batch of the train boarded, if any: a
    /// train takes a new batch at most every half pipeline.
    pub newest_boarded: Option<f64>,
}

/// A failure to come, and whom it sends back: every batch claimed at
/// `boarded` or later, and before `at`, is behind the failing batch and is
/// built again at `at`.
#[derive(Debug, Clone, Copy)]
struct SentBack {
    boarded: f64,
    at: f64,
}

/// Seconds from now until each car of the train (front first) and then
/// each batch `boarding` merges; `None` for those expected to fail.
pub fn merge_times(
    cars: &[(Car, Fate)],
    boarding: &Boarding,
    durations: &Durations,
) -> Vec<Option<f64>> {
    let Durations {
        pipeline,
        merge_round,
    } = *durations;
    let pace = if boarding.depth > 1 {
        pipeline / 2.0
    } else {
        0.0
    };
    let half_round = boarding.interval / 2.0;
    let mut merges = Vec::with_capacity(cars.len() + boarding.batches.len());
    // When each batch leaves the train (merged or failed), freeing its place.
    let mut leaves: Vec<f64> = Vec::with_capacity(merges.capacity());
    let mut previous: f64 = 0.0;
    // A failure is blamed only once the pipelines ahead have passed.
    let mut proven: f64 = 0.0;
    let mut restart: Option<f64> = None;
    let mut failures: Vec<f64> = Vec::new();
    let mut sent_back: Vec<SentBack> = Vec::new();
    let halves_of = |failed: f64, halvings: u32| {
        let mut levels = Vec::new();
        let mut failed = failed;
        for _ in 0..halvings {
            let boarded = failed + pace + half_round;
            failed = boarded + pipeline;
            levels.push(SentBack {
                boarded,
                at: failed,
            });
        }
        levels
    };
    for (car, fate) in cars {
        let rebuilt = restart.filter(|_| !matches!(car, Car::Merging { .. }));
        let end = match (rebuilt, *car) {
            (Some(at), _) => at + pipeline,
            (None, Car::Pipeline { since }) => (pipeline - since).max(0.0),
            (None, Car::Opening) => pipeline,
            (None, Car::Passed | Car::Merging { .. }) => 0.0,
        };
        proven = proven.max(end);
        match *fate {
            Fate::Merges => {
                let merge = match (rebuilt, *car) {
                    (None, Car::Merging { since }) => (merge_round - since).max(0.0),
                    _ => end.max(previous) + merge_round,
                };
                previous = previous.max(merge);
                merges.push(Some(previous));
                leaves.push(previous);
            }
            Fate::Fails { halvings } => {
                restart = Some(restart.map_or(proven, |at| at.max(proven)));
                failures.push(proven);
                sent_back.push(SentBack {
                    boarded: 0.0,
                    at: proven,
                });
                sent_back.extend(halves_of(proven, halvings));
                merges.push(None);
                leaves.push(proven);
            }
        }
    }
    let paced = boarding
        .newest_boarded
        .map_or(0.0, |age| (pace - age).max(0.0));
    // When the round that claimed the last boarding batch ran.
    let mut round: Option<f64> = None;
    for fate in &boarding.batches {
        // Claimed once a place is free (the batch `depth` places ahead has
        // left): in the same round as the batch before it while there is
        // room, else at a later round the pace allows.
        let freed = leaves
            .len()
            .checked_sub(boarding.depth.max(1))
            .map_or(0.0, |index| leaves[index]);
        let mut claimed = match round {
            Some(at) if freed <= at => at,
            Some(at) => freed.max(at + pace) + half_round,
            None => freed.max(paced) + half_round,
        };
        // A failure before then sends the batches behind it back, and a
        // batch built again counts as just boarded: the pace starts again
        // from it; a failed batch's halves then board first, and the next
        // round waits a pace after them.
        for &failed in &failures {
            if failed < claimed {
                claimed = claimed.max(failed + pace + half_round);
            }
        }
        for level in &sent_back {
            if level.boarded < claimed {
                claimed = claimed.max(level.boarded + pace);
            }
        }
        round = Some(claimed);
        let end = sent_back
            .iter()
            .filter(|failure| failure.boarded <= claimed && claimed < failure.at)
            .fold(claimed + pipeline, |end, failure| {
                end.max(failure.at + pipeline)
            });
        proven = proven.max(end);
        match *fate {
            Fate::Merges => {
                let merge = end.max(previous) + merge_round;
                previous = merge;
                merges.push(Some(merge));
                leaves.push(merge);
            }
            Fate::Fails { halvings } => {
                sent_back.push(SentBack {
                    boarded: claimed,
                    at: proven,
                });
                failures.push(proven);
                sent_back.extend(halves_of(proven, halvings));
                merges.push(None);
                leaves.push(proven);
            }
        }
    }
    merges
}

/// What each batch of `groups` (front to back: the train's, then those
/// waiting) is expected to do, from its split group (`""`: an ordinary
/// batch; `12a`, `12a/15b`: a half of a failed batch) and its size, one
/// change failing in each bisected batch: of two halves both still there,
/// the first is taken to fail (either does, and the batches behind wait
/// the same); a half whose sibling has gone fails, unless the sibling is
/// itself being split, having failed.
pub fn fates(groups: &[(&str, usize)], max_split_depth: u32) -> Vec<Fate> {
    groups
        .iter()
        .map(|(group, size)| {
            if group.is_empty() {
                return Fate::Merges;
            }
            let sibling = sibling(group);
            let present = |g: &str| groups.iter().any(|(other, _)| *other == g);
            let split = |g: &str| {
                let prefix = format!("{g}/");
                groups.iter().any(|(other, _)| other.starts_with(&prefix))
            };
            let fails = match sibling.as_deref() {
                Some(sibling) if present(sibling) => group.ends_with('a'),
                Some(sibling) => !split(sibling),
                None => true,
            };
            if fails {
                Fate::Fails {
                    halvings: halvings(*size, group.split('/').count(), max_split_depth),
                }
            } else {
                Fate::Merges
            }
        })
        .collect()
}

/// The other half of the same failed batch: `12a` ↔ `12b`.
fn sibling(group: &str) -> Option<String> {
    let (stem, last) = group.split_at(group.len().checked_sub(1)?);
    match last {
        "a" => Some(format!("{stem}b")),
        "b" => Some(format!("{stem}a")),
        _ => None,
    }
}

/// How many more times a failing batch of `size` at split `depth` is
/// halved (its failing half each time) before one request is left or
/// `batch.max_split_depth` is reached.
fn halvings(size: usize, depth: usize, max_split_depth: u32) -> u32 {
    let (mut size, mut depth, mut halvings) = (size, depth, 0);
    while size > 1 && depth < max_split_depth as usize {
        size = size.div_ceil(2);
        depth += 1;
        halvings += 1;
    }
    halvings
}

#[cfg(test)]
mod tests {
    use super::*;

    const DURATIONS: Durations = Durations {
        pipeline: 10.0,
        merge_round: 1.0,
    };

    fn boarding(batches: usize, depth: usize, newest_boarded: Option<f64>) -> Boarding {
        Boarding {
            batches: vec![Fate::Merges; batches],
            depth,
            interval: 2.0,
            newest_boarded,
        }
    }

    fn merging(cars: &[Car]) -> Vec<(Car, Fate)> {
        cars.iter().map(|car| (*car, Fate::Merges)).collect()
    }

    #[test]
    fn a_train_merges_one_after_another_each_no_sooner_than_its_own_pipeline() {
        let cars = merging(&[
            Car::Pipeline { since: 8.0 },
            Car::Pipeline { since: 5.0 },
            Car::Opening,
        ]);
        let merges = merge_times(&cars, &boarding(0, 4, None), &DURATIONS);
        assert_eq!(merges, vec![Some(3.0), Some(6.0), Some(11.0)]);
    }

    #[test]
    fn a_passed_batch_waits_for_the_front_and_a_merging_one_is_nearly_done() {
        let cars = merging(&[Car::Merging { since: 0.5 }, Car::Passed, Car::Passed]);
        assert_eq!(
            merge_times(&cars, &boarding(0, 4, None), &DURATIONS),
            vec![Some(0.5), Some(1.5), Some(2.5)]
        );
    }

    #[test]
    fn a_waiting_request_boards_once_a_place_is_free() {
        let front = merging(&[Car::Pipeline { since: 0.0 }]);
        // Room in the train, the front boarded long ago: claimed at the
        // next round (a second on average).
        let room = merge_times(&front, &boarding(1, 4, Some(60.0)), &DURATIONS);
        assert_eq!(room, vec![Some(11.0), Some(12.0)]);
        // The front boarded 2 s ago: the next boards half a pipeline after
        // it, and the one after in the same round, there being room.
        let paced = merge_times(&front, &boarding(2, 4, Some(2.0)), &DURATIONS);
        assert_eq!(paced, vec![Some(11.0), Some(15.0), Some(16.0)]);
        // A full train of one: claimed once the front merged.
        let full = merge_times(&front, &boarding(1, 1, Some(60.0)), &DURATIONS);
        assert_eq!(full, vec![Some(11.0), Some(23.0)]);
    }

    #[test]
    fn a_failing_half_sends_the_batches_behind_it_back_and_its_halves_those_after_them() {
        let cars = [
            (Car::Pipeline { since: 4.0 }, Fate::Fails { halvings: 1 }),
            (Car::Pipeline { since: 4.0 }, Fate::Merges),
            (Car::Pipeline { since: 1.0 }, Fate::Merges),
        ];
        let waiting = |depth| Boarding {
            batches: vec![Fate::Merges],
            depth,
            interval: 2.0,
            newest_boarded: Some(1.0),
        };
        // The front fails when its pipeline ends (6 s): the two behind it
        // are built again then, and merge a pipeline and a round later.
        let room = merge_times(&cars, &waiting(4), &DURATIONS);
        assert_eq!(&room[..3], &[None, Some(17.0), Some(18.0)]);
        // With room, the waiting batch boards at the pace (5 s), behind the
        // failing front: built again at 6, it merges after the third.
        assert_eq!(room[3], Some(19.0));
        // In a full train it boards once the front has failed, a pace
        // after the batches built again (6 + 5 + 1), in the round that
        // takes the failed batch's halves first: one half fails at 22 and
        // sends it back.
        let full = merge_times(&cars, &waiting(3), &DURATIONS);
        assert_eq!(full[3], Some(22.0 + 10.0 + 1.0));
    }

    #[test]
    fn one_half_of_each_pair_is_expected_to_fail_until_the_change_is_alone() {
        assert_eq!(
            fates(&[("", 3), ("7a", 5), ("7b", 5), ("", 9)], 4),
            [
                Fate::Merges,
                Fate::Fails { halvings: 3 },
                Fate::Merges,
                Fate::Merges
            ]
        );
        // 7a failed and is being split, so 7b is clear; of 7a's halves the
        // first is taken to fail; a lone half whose sibling passed holds
        // the change.
        assert_eq!(
            fates(&[("7b", 5), ("7a/9a", 2), ("7a/9b", 3)], 4),
            [Fate::Merges, Fate::Fails { halvings: 1 }, Fate::Merges]
        );
        assert_eq!(fates(&[("7a/9b", 3)], 4), [Fate::Fails { halvings: 2 }]);
        // The split depth stops the halving.
        assert_eq!(
            fates(&[("1a/2a/3a/4a", 6)], 4),
            [Fate::Fails { halvings: 0 }]
        );
    }
}
