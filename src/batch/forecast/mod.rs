//! The merge train played forward: when each batch ahead of a request leaves
//! the train (merged, or failed and bisected) and when the request's own
//! batch merges, from the measured durations. Pure: `estimate` reads what
//! it needs and asks this module.
//!
//! It plays the rules the merge queue runs by (SPEC §7), round by claim
//! round: a batch is built on the one of its project ahead of it (the two
//! halves of a failed batch beside each other), tested for a pipeline of
//! its project's, and merges in train order; a failure is blamed once what
//! it was built on has passed, and sends every batch built on it back to be
//! built again. A batch that holds the change a bigger batch failed on (a
//! half of a bisection) is expected to fail again, one half of each pair,
//! until the change is alone. Halves board as soon as there is a place;
//! a project's ordinary requests board at most every half of its pipeline
//! (each project sharing a train has its own pace), beside a bisection as
//! at any other time (built on its last half, taken to pass), and ahead of
//! waiting halves only when there is a place for them too.

mod fates;
mod play;

use std::collections::HashMap;

pub use fates::fates;
use play::Play;

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

/// A batch of the train now.
#[derive(Debug, Clone, PartialEq)]
pub struct Boarded {
    /// Where it is.
    pub car: Car,
    /// What it is expected to do.
    pub fate: Fate,
    /// Its split group (`""`: ordinary requests).
    pub group: String,
    /// The batch of the train it is built on (its index), if any.
    pub on: Option<usize>,
    /// Its GitLab project.
    pub project: String,
    /// Its project's medians.
    pub durations: Durations,
}

/// A batch not claimed yet.
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    /// What it is expected to do.
    pub fate: Fate,
    /// Its split group (`""`: ordinary requests).
    pub group: String,
    /// How the pace holds it, when it is one of ordinary requests.
    pub paced: Paced,
    /// Its GitLab project.
    pub project: String,
    /// Its project's medians.
    pub durations: Durations,
}

/// How its project's pace holds a batch of ordinary requests not claimed
/// yet (each project sharing a train has its own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paced {
    /// Half a pipeline (its project's) after its project's newest batch:
    /// it is short of `batch.max_requests`, and waiting lets it grow.
    Held,
    /// Not at all: it fills a batch, or its project has no pace measured
    /// yet. Its project's pace then counts from it.
    Full,
}

/// How new batches board a train.
#[derive(Debug, Clone, PartialEq)]
pub struct Boarding {
    /// Batches not claimed yet, in the order their requests wait (the
    /// halves of failed batches, older, first).
    pub batches: Vec<Waiting>,
    /// At most this many batches in flight (`batch.max_in_flight`).
    pub depth: usize,
    /// Seconds between claim rounds (`batch.interval`).
    pub interval: f64,
    /// Seconds since each project's newest batch of ordinary requests
    /// boarded (not counting one built again): its pace counts from it.
    pub newest_boarded: HashMap<String, f64>,
}

/// Seconds from now until each batch of `train` (front first) and then
/// each batch of `boarding` merges; `None` for those expected to fail, or
/// not boarded within the rounds played. Each batch takes its own
/// project's durations, and its project's pace: half its pipeline.
pub fn merge_times(train: &[Boarded], boarding: &Boarding) -> Vec<Option<f64>> {
    Play::new(train, boarding).merge_times(train.len() + boarding.batches.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    const DURATIONS: Durations = Durations {
        pipeline: 10.0,
        merge_round: 1.0,
    };

    /// The project asked about.
    const OWN: &str = "config/repo";

    /// `batch`, of another project sharing the train.
    fn of_another_project(batch: Boarded) -> Boarded {
        Boarded {
            project: "other/repo".to_owned(),
            ..batch
        }
    }

    /// Batches of ordinary requests: full ones, then the last, which is
    /// not (as a request's own is, behind those ahead of it).
    fn ordinary(batches: usize) -> Vec<Waiting> {
        (0..batches)
            .map(|index| Waiting {
                fate: Fate::Merges,
                group: String::new(),
                paced: if index + 1 < batches {
                    Paced::Full
                } else {
                    Paced::Held
                },
                project: OWN.to_owned(),
                durations: DURATIONS,
            })
            .collect()
    }

    fn boarding(batches: usize, depth: usize, newest_boarded: Option<f64>) -> Boarding {
        Boarding {
            batches: ordinary(batches),
            depth,
            interval: 2.0,
            newest_boarded: newest(newest_boarded),
        }
    }

    /// This project's newest batch boarded `age` seconds ago, if given.
    fn newest(age: Option<f64>) -> HashMap<String, f64> {
        age.map(|age| (OWN.to_owned(), age)).into_iter().collect()
    }

    /// A train of ordinary batches, each built on the one ahead.
    fn merging(cars: &[Car]) -> Vec<Boarded> {
        cars.iter()
            .enumerate()
            .map(|(index, car)| boarded(*car, Fate::Merges, "", index.checked_sub(1)))
            .collect()
    }

    fn boarded(car: Car, fate: Fate, group: &str, on: Option<usize>) -> Boarded {
        Boarded {
            car,
            fate,
            group: group.to_owned(),
            on,
            project: OWN.to_owned(),
            durations: DURATIONS,
        }
    }

    #[test]
    fn a_train_merges_one_after_another_each_no_sooner_than_its_own_pipeline() {
        let cars = merging(&[
            Car::Pipeline { since: 8.0 },
            Car::Pipeline { since: 5.0 },
            Car::Opening,
        ]);
        let merges = merge_times(&cars, &boarding(0, 4, None));
        assert_eq!(merges, vec![Some(3.0), Some(6.0), Some(11.0)]);
    }

    #[test]
    fn each_batch_takes_its_own_projects_durations() {
        // Another project's batch at the front, with pipelines of a
        // minute and merge rounds of 5 s; this project's behind it, and
        // one of its batches waiting, boarding at the next round.
        let slow = Durations {
            pipeline: 60.0,
            merge_round: 5.0,
        };
        let mut cars = merging(&[Car::Pipeline { since: 10.0 }, Car::Opening]);
        cars[0] = Boarded {
            durations: slow,
            ..of_another_project(cars[0].clone())
        };
        cars[1].on = None;
        let merges = merge_times(&cars, &boarding(1, 4, Some(60.0)));
        assert_eq!(merges, vec![Some(55.0), Some(56.0), Some(57.0)]);
    }

    #[test]
    fn another_projects_bisection_holds_only_its_own_batches() {
        // Another project's batch at the front fails at 1 s, and its
        // halves board and are tested until 11 s and later. This
        // project's batch behind is built on the target branch, not on
        // it, and merges once its own pipeline ends (6 s); its waiting
        // batch boards as the pace allows (4 s, half a pipeline after its
        // newest), not once the other project's halves are tested.
        let front = of_another_project(boarded(
            Car::Pipeline { since: 9.0 },
            Fate::Fails { halvings: 1 },
            "",
            None,
        ));
        let cars = [
            front,
            boarded(Car::Pipeline { since: 4.0 }, Fate::Merges, "", None),
        ];
        let merges = merge_times(&cars, &boarding(1, 4, Some(1.0)));
        assert_eq!(merges, vec![None, Some(7.0), Some(15.0)]);
    }

    #[test]
    fn a_batch_boards_on_its_own_projects_batch_ahead() {
        // This project's batch at the front, another project's behind it
        // failing at 8 s. This project's waiting batch boards at 4 s on its
        // own project's (on the other project's, it would be built again
        // when that fails), and merges after the front.
        let failing = of_another_project(boarded(
            Car::Pipeline { since: 2.0 },
            Fate::Fails { halvings: 0 },
            "",
            None,
        ));
        let cars = [boarded(Car::Opening, Fate::Merges, "", None), failing];
        let merges = merge_times(&cars, &boarding(1, 4, Some(1.0)));
        assert_eq!(merges, vec![Some(11.0), None, Some(15.0)]);
    }

    #[test]
    fn a_passed_batch_waits_for_the_front_and_a_merging_one_is_nearly_done() {
        let cars = merging(&[Car::Merging { since: 0.5 }, Car::Passed, Car::Passed]);
        assert_eq!(
            merge_times(&cars, &boarding(0, 4, None)),
            vec![Some(0.5), Some(1.5), Some(2.5)]
        );
    }

    #[test]
    fn a_waiting_request_boards_once_a_place_is_free() {
        let front = merging(&[Car::Pipeline { since: 0.0 }]);
        // Room in the train, the front boarded long ago: claimed at the
        // next round (half an interval away on average).
        let room = merge_times(&front, &boarding(1, 4, Some(60.0)));
        assert_eq!(room, vec![Some(11.0), Some(12.0)]);
        // The front boarded 2 s ago: the next boards at the first round
        // half a pipeline after it (3 s from now).
        let paced = merge_times(&front, &boarding(1, 4, Some(2.0)));
        assert_eq!(paced, vec![Some(11.0), Some(14.0)]);
        // A full batch ahead of it does not wait for the pace: it boards
        // at the next round (1 s from now), and the pace then counts from
        // it, so the last boards at 6 s.
        let full_ahead = merge_times(&front, &boarding(2, 4, Some(2.0)));
        assert_eq!(full_ahead, vec![Some(11.0), Some(12.0), Some(17.0)]);
        // Another project's full batch ahead boards at the next round too,
        // but leaves this project's pace where it was: the last still
        // boards at 3 s.
        let mut others_ahead = boarding(2, 4, Some(2.0));
        others_ahead.batches[0].project = "other/repo".to_owned();
        let shared = merge_times(&front, &others_ahead);
        assert_eq!(shared, vec![Some(11.0), Some(12.0), Some(14.0)]);
        // A full train of one: claimed at the round the front merged in.
        let full = merge_times(&front, &boarding(1, 1, Some(60.0)));
        assert_eq!(full, vec![Some(11.0), Some(22.0)]);
    }

    #[test]
    fn a_failing_batch_sends_back_the_batches_built_on_it_and_its_halves_board_first() {
        let cars = [
            boarded(
                Car::Pipeline { since: 4.0 },
                Fate::Fails { halvings: 1 },
                "",
                None,
            ),
            boarded(Car::Pipeline { since: 4.0 }, Fate::Merges, "", Some(0)),
            boarded(Car::Pipeline { since: 1.0 }, Fate::Merges, "", Some(1)),
        ];
        let waiting = |depth| Boarding {
            batches: ordinary(1),
            depth,
            interval: 2.0,
            newest_boarded: newest(Some(1.0)),
        };
        // The front fails when its pipeline ends (6 s): the two behind it
        // are built again then, and merge a pipeline and a round later.
        let room = merge_times(&cars, &waiting(4));
        assert_eq!(&room[..3], &[None, Some(17.0), Some(18.0)]);
        // With room, the waiting batch boards at the pace (the round at
        // 5 s), built on the third: built again with it at 6, it merges
        // after it.
        assert_eq!(room[3], Some(19.0));
        // In a full train of three, the round at the pace's moment (4 s)
        // finds no place; the next, an interval later, comes as the front
        // fails (6 s). The halves of the failed batch take the places
        // that free, one at 6 s and the other at 16 s, once the first has
        // failed and the two built again are nearly merged. The ordinary
        // batch does not wait for the halves' pipelines: it boards as the
        // second car built again merges (18 s), and merges after the
        // half, at 29.
        let full = merge_times(&cars, &waiting(3));
        assert_eq!(full[3], Some(29.0));
    }
    #[test]
    fn an_ordinary_batch_boards_beside_a_bisection_on_its_last_half() {
        // The front fails at 1 s and its halves board then; the waiting
        // batch's pace lets it board at 3 s. It boards then, built on the
        // second half (taken to pass, the first to fail at 11 s), not once
        // the halves are tested, and merges after the second half (12 s)
        // as its own pipeline ends (13 s), a round later.
        let front = boarded(
            Car::Pipeline { since: 9.0 },
            Fate::Fails { halvings: 1 },
            "",
            None,
        );
        let merges = merge_times(&[front], &boarding(1, 4, Some(2.0)));
        assert_eq!(merges, vec![None, Some(14.0)]);
    }

    #[test]
    fn another_projects_short_batch_waits_for_its_own_pace() {
        // Another project's batch of a few requests waits ahead, its
        // project's newest batch boarded 1 s ago and its pipelines taking
        // 20 s: it boards at its own pace (9 s from now), not at the next
        // round, and merges at 30 s. This project's batch behind it (its
        // pace met long ago) boards at the next round (1 s), and merges
        // after the front, at 12 s.
        let slow = Durations {
            pipeline: 20.0,
            merge_round: 1.0,
        };
        let front = merging(&[Car::Pipeline { since: 0.0 }]);
        let mut shared = boarding(2, 4, Some(60.0));
        shared.batches[0] = Waiting {
            project: "other/repo".to_owned(),
            durations: slow,
            ..shared.batches[0].clone()
        };
        shared.batches[0].paced = Paced::Held;
        shared.newest_boarded.insert("other/repo".to_owned(), 1.0);
        let merges = merge_times(&front, &shared);
        assert_eq!(merges, vec![Some(11.0), Some(30.0), Some(12.0)]);
    }
}
