//! Where a request stands in the merge queue and when it is expected to
//! merge and deploy: the train ahead of it played forward with the medians
//! of its project's last merged batches (pipeline, merge round, deploy
//! confirmation). Without enough history there is no expected time: a
//! guess would be believed.

use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};

use crate::config::Settings;
use crate::db::Db;
use crate::db::batches::{BatchRow, batch_of, get_batch};
use crate::db::estimates::{MergedRun, deploy_delays, merged_runs, waiting_place};
use crate::db::train::active_train;

/// Merged batches a project needs before its times are estimated.
pub const MIN_HISTORY: usize = 3;

/// A request's place in the merge queue, and when it is expected to land.
#[derive(Debug, Clone, PartialEq)]
pub struct QueueEstimate {
    /// Its batch's place: 1 is the next batch to merge.
    pub position: usize,
    /// Batches in the queue, its own included.
    pub of: usize,
    /// Its batch's number, once it is in one.
    pub batch: Option<i64>,
    /// When its batch is expected to merge.
    pub expected_merge_at: Option<DateTime<Utc>>,
    /// When the deploy is expected to confirm it.
    pub expected_deploy_at: Option<DateTime<Utc>>,
    /// What the times come from, or why there are none.
    pub basis: String,
}

/// The medians the queue is played forward with, in seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Medians {
    /// A pipeline, from MR opened to passed.
    pub pipeline: f64,
    /// A merge round, from its turn to merged.
    pub merge_round: f64,
    /// From merged to the deploy's confirmation, when measured.
    pub deploy: Option<f64>,
    /// Merged batches they come from.
    pub samples: usize,
}

impl Medians {
    /// The medians of `runs` and `deploys`; `None` below [`MIN_HISTORY`].
    pub fn of(runs: &[MergedRun], deploys: &[f64]) -> Option<Self> {
        if runs.len() < MIN_HISTORY {
            return None;
        }
        let seconds =
            |from: NaiveDateTime, to: NaiveDateTime| (to - from).as_seconds_f64().max(0.0);
        let pipelines: Vec<f64> = runs
            .iter()
            .map(|r| seconds(r.opened_at, r.passed_at))
            .collect();
        let rounds: Vec<f64> = runs
            .iter()
            .map(|r| seconds(r.merging_at, r.merged_at))
            .collect();
        Some(Self {
            pipeline: median(pipelines),
            merge_round: median(rounds),
            deploy: (!deploys.is_empty()).then(|| median(deploys.to_vec())),
            samples: runs.len(),
        })
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len().is_multiple_of(2) {
        f64::midpoint(values[middle - 1], values[middle])
    } else {
        values[middle]
    }
}

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

impl Car {
    fn of(batch: &BatchRow, now: NaiveDateTime) -> Self {
        let since =
            |at: Option<NaiveDateTime>| at.map_or(0.0, |at| (now - at).as_seconds_f64().max(0.0));
        match batch.phase.as_str() {
            "PIPELINE" => Self::Pipeline {
                since: since(batch.opened_at),
            },
            "PASSED" => Self::Passed,
            "MERGING" => Self::Merging {
                since: since(batch.merging_at),
            },
            _ => Self::Opening,
        }
    }
}

/// How new batches board a train.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Boarding {
    /// Batches not claimed yet that board, one after another.
    pub batches: usize,
    /// At most this many batches in flight (`batch.max_in_flight`).
    pub depth: usize,
    /// Seconds between claim rounds (`batch.interval`).
    pub interval: f64,
    /// Seconds since the newest batch of the train boarded, if any: a
    /// train takes a new batch at most every half pipeline.
    pub newest_boarded: Option<f64>,
}

/// Seconds from now until each car of the train (front first) merges, and
/// then each of the batches `boarding`, which board as room frees up and
/// the train's pace allows.
pub fn merge_times(cars: &[Car], boarding: &Boarding, medians: &Medians) -> Vec<f64> {
    let Boarding {
        batches,
        depth,
        interval,
        newest_boarded,
    } = *boarding;
    let pace = if depth > 1 {
        medians.pipeline / 2.0
    } else {
        0.0
    };
    let mut merges: Vec<f64> = Vec::with_capacity(cars.len() + batches);
    let mut previous: f64 = 0.0;
    for car in cars {
        let merge = match *car {
            Car::Merging { since } => (medians.merge_round - since).max(0.0),
            Car::Passed => previous + medians.merge_round,
            Car::Pipeline { since } => {
                (medians.pipeline - since).max(0.0).max(previous) + medians.merge_round
            }
            Car::Opening => medians.pipeline.max(previous) + medians.merge_round,
        };
        previous = previous.max(merge);
        merges.push(previous);
    }
    let mut paced = newest_boarded.map_or(0.0, |age| (pace - age).max(0.0));
    for _ in 0..batches {
        // A new batch is claimed at the next round once a place is free
        // (the batch `depth` places ahead of it has merged) and the pace
        // allows.
        let freed = merges
            .len()
            .checked_sub(depth.max(1))
            .map_or(0.0, |index| merges[index]);
        let claimed = freed.max(paced) + interval / 2.0;
        let merge = (claimed + medians.pipeline).max(previous) + medians.merge_round;
        previous = merge;
        paced = claimed + pace;
        merges.push(merge);
    }
    merges
}

/// Where operation `operation_id` stands in the merge queue now, with its
/// expected times; `None` when it is not in the queue (not approved yet,
/// or merged already).
pub async fn queue_estimate(
    db: &Db,
    settings: &Settings,
    operation_id: &str,
) -> Result<Option<QueueEstimate>, sqlx::Error> {
    let (partition, project, own, older) = match batch_of(db, operation_id).await? {
        Some(id) => match get_batch(db, id).await? {
            Some(batch) if batch.status == "RUNNING" => (
                batch.partition_key.clone(),
                batch.project.clone(),
                Some(batch),
                0,
            ),
            _ => return Ok(None),
        },
        None => match waiting_place(db, operation_id).await? {
            Some(place) => (place.partition_key, place.project, None, place.older),
            None => return Ok(None),
        },
    };
    let train = active_train(db, &partition).await?;
    let (index, boarding, batch) = match &own {
        Some(batch) => match train.iter().position(|car| car.id == batch.id) {
            Some(index) => (index, 0, Some(batch.shown_number())),
            None => return Ok(None),
        },
        None => {
            let older = usize::try_from(older).unwrap_or(0);
            let ahead = older / settings.batch.max_requests.max(1) as usize;
            (train.len() + ahead, ahead + 1, None)
        }
    };
    let of = train.len() + boarding;
    let runs = merged_runs(db, &project).await?;
    let Some(medians) = Medians::of(&runs, &deploy_delays(db, &project).await?) else {
        return Ok(Some(QueueEstimate {
            position: index + 1,
            of,
            batch,
            expected_merge_at: None,
            expected_deploy_at: None,
            basis: format!(
                "no estimate yet: {} of the {MIN_HISTORY} merged batches of {project} needed to measure from",
                runs.len()
            ),
        }));
    };
    let now = Utc::now();
    let cars: Vec<Car> = train
        .iter()
        .map(|batch| Car::of(batch, now.naive_utc()))
        .collect();
    let depth = settings.batch.max_in_flight as usize;
    let newest_boarded = train
        .iter()
        .map(|batch| batch.created_at)
        .max()
        .map(|at| (now.naive_utc() - at).as_seconds_f64().max(0.0));
    let boarding = Boarding {
        batches: boarding,
        depth,
        interval: settings.batch.interval.as_secs_f64(),
        newest_boarded,
    };
    let merges = merge_times(&cars, &boarding, &medians);
    let at = |seconds: f64| now + TimeDelta::milliseconds((seconds * 1000.0) as i64);
    let merge = merges[index];
    Ok(Some(QueueEstimate {
        position: index + 1,
        of,
        batch,
        expected_merge_at: Some(at(merge)),
        expected_deploy_at: medians.deploy.map(|deploy| at(merge + deploy)),
        basis: basis(&project, &medians, depth),
    }))
}

fn basis(project: &str, medians: &Medians, depth: usize) -> String {
    let deploy = medians.deploy.map_or_else(
        || "no deploy measured yet".to_owned(),
        |d| format!("deploy {d:.0} s"),
    );
    format!(
        "medians of the last {} merged batches of {project}: pipeline {:.0} s, merge round {:.0} s, {deploy}; up to {depth} batches in flight",
        medians.samples, medians.pipeline, medians.merge_round
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MEDIANS: Medians = Medians {
        pipeline: 10.0,
        merge_round: 1.0,
        deploy: Some(3.0),
        samples: 5,
    };

    fn boarding(batches: usize, depth: usize, newest_boarded: Option<f64>) -> Boarding {
        Boarding {
            batches,
            depth,
            interval: 2.0,
            newest_boarded,
        }
    }

    #[test]
    fn a_train_merges_one_after_another_each_no_sooner_than_its_own_pipeline() {
        let cars = [
            Car::Pipeline { since: 8.0 },
            Car::Pipeline { since: 5.0 },
            Car::Opening,
        ];
        let merges = merge_times(&cars, &boarding(0, 4, None), &MEDIANS);
        assert_eq!(merges, vec![3.0, 6.0, 11.0]);
    }

    #[test]
    fn a_passed_batch_waits_for_the_front_and_a_merging_one_is_nearly_done() {
        let cars = [Car::Merging { since: 0.5 }, Car::Passed, Car::Passed];
        assert_eq!(
            merge_times(&cars, &boarding(0, 4, None), &MEDIANS),
            vec![0.5, 1.5, 2.5]
        );
    }

    #[test]
    fn a_waiting_request_boards_once_a_place_is_free() {
        let front = [Car::Pipeline { since: 0.0 }];
        // Room in the train, the front boarded long ago: claimed at the
        // next round (a second on average).
        let room = merge_times(&front, &boarding(1, 4, Some(60.0)), &MEDIANS);
        assert_eq!(room, vec![11.0, 12.0]);
        // The front boarded 2 s ago: the next boards half a pipeline after
        // it, and the one after half a pipeline later still.
        let paced = merge_times(&front, &boarding(2, 4, Some(2.0)), &MEDIANS);
        assert_eq!(paced, vec![11.0, 15.0, 21.0]);
        // A full train of one: claimed once the front merged.
        let full = merge_times(&front, &boarding(1, 1, Some(60.0)), &MEDIANS);
        assert_eq!(full, vec![11.0, 23.0]);
    }

    #[test]
    fn there_is_no_estimate_without_enough_history() {
        let at = |s: i64| DateTime::from_timestamp(s, 0).unwrap().naive_utc();
        let run = |start: i64, pipeline: i64| MergedRun {
            opened_at: at(start),
            passed_at: at(start + pipeline),
            merging_at: at(start + pipeline),
            merged_at: at(start + pipeline + 2),
        };
        assert_eq!(Medians::of(&[run(0, 10), run(100, 12)], &[]), None);
        let medians = Medians::of(&[run(0, 10), run(100, 14), run(200, 12)], &[4.0]).unwrap();
        assert_eq!(
            (medians.pipeline, medians.merge_round, medians.deploy),
            (12.0, 2.0, Some(4.0))
        );
    }
}
