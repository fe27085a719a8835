//! Where a request stands in the merge queue and when it is expected to
//! merge and deploy: the train ahead of it, and the batches that board
//! before its own, played forward (`forecast`) with the medians of its
//! project's last merged batches (pipeline, merge round, deploy
//! confirmation), the pipeline's also over the project's CI history in
//! GitLab before them. Without enough history there is no expected time: a
//! guess would be believed; nor for a request whose batch is being
//! bisected, which may be the one that fails.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, NaiveDateTime, TimeDelta, Utc};

use crate::config::Settings;
use crate::db::batches::{BatchRow, batch_of, get_batch, live_members};
use crate::db::estimates::{
    CiPipeline, HISTORY, MergedRun, WaitingPlace, ci_history, deploy_delays, merged_runs,
    waiting_ahead, waiting_place,
};
use crate::db::train::{active_train, half_failed};
use crate::db::{DbTx, Reader};

use super::forecast::{
    Boarded, Boarding, Car, Durations, Fate, Paced, Waiting, fates, merge_times,
};
use super::split::{are_siblings, in_boarding_order, levels};
use super::train::to_build_on;

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
    /// Pipelines of the project's CI history the pipeline's median is
    /// also taken over.
    pub ci_samples: usize,
}

fn seconds(from: NaiveDateTime, to: NaiveDateTime) -> f64 {
    (to - from).as_seconds_f64().max(0.0)
}

/// The pipelines a project's pipeline median is taken over, in seconds:
/// those of its merged batches `runs` (newest first), then, up to
/// [`HISTORY`] in all, those of its CI history `ci` (newest first) that
/// finished before the oldest of `runs` opened. Three batches are too few
/// to say how long a pipeline takes (pipelines of 5–15 s gave a median of
/// 13 s); the project's CI before changegate is more of the same CI, and
/// anything in it after that point is changegate's own batches again, or
/// others' merge requests of the same time.
pub fn pipeline_samples(runs: &[MergedRun], ci: &[CiPipeline]) -> Vec<f64> {
    let oldest = runs.iter().map(|run| run.opened_at).min();
    let earlier = ci
        .iter()
        .filter(|pipeline| oldest.is_none_or(|oldest| pipeline.finished_at < oldest))
        .map(|pipeline| pipeline.seconds);
    runs.iter()
        .map(|run| seconds(run.opened_at, run.passed_at))
        .chain(earlier)
        .take(HISTORY as usize)
        .collect()
}

impl Medians {
    /// The medians of `runs` and `deploys`, the pipeline's also over the
    /// CI history `ci` (see [`pipeline_samples`]); `None` below
    /// [`MIN_HISTORY`] runs: the merge round is changegate's alone.
    pub fn of(runs: &[MergedRun], deploys: &[f64], ci: &[CiPipeline]) -> Option<Self> {
        if runs.len() < MIN_HISTORY {
            return None;
        }
        let pipelines = pipeline_samples(runs, ci);
        let rounds: Vec<f64> = runs
            .iter()
            .map(|r| seconds(r.merging_at, r.merged_at))
            .collect();
        Some(Self {
            ci_samples: pipelines.len() - runs.len().min(pipelines.len()),
            pipeline: median(pipelines),
            merge_round: median(rounds),
            deploy: (!deploys.is_empty()).then(|| median(deploys.to_vec())),
            samples: runs.len(),
        })
    }

    /// What the forecast plays a batch of their project with.
    fn durations(&self) -> Durations {
        Durations {
            pipeline: self.pipeline,
            merge_round: self.merge_round,
        }
    }
}

/// The median of `values` (not empty).
pub(super) fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    if values.len().is_multiple_of(2) {
        f64::midpoint(values[middle - 1], values[middle])
    } else {
        values[middle]
    }
}

/// A batch of the train as the forecast sees it, from its row.
fn car_of(batch: &BatchRow, now: NaiveDateTime) -> Car {
    let since =
        |at: Option<NaiveDateTime>| at.map_or(0.0, |at| (now - at).as_seconds_f64().max(0.0));
    match batch.phase.as_str() {
        "PIPELINE" => Car::Pipeline {
            since: since(batch.opened_at),
        },
        "PASSED" => Car::Passed,
        "MERGING" => Car::Merging {
            since: since(batch.merging_at),
        },
        _ => Car::Opening,
    }
}

/// The batch of `train` the one at `index` is built on: the one its
/// footing names; none when it was built on the target branch; before it
/// is built, the one it will be built on.
fn footing_of(train: &[BatchRow], index: usize) -> Option<usize> {
    let batch = &train[index];
    let ahead = match batch.ahead_batch_id {
        Some(ahead) => ahead,
        None if batch.base_sha.is_some() => return None,
        None => to_build_on(train, batch)?.id,
    };
    train.iter().position(|car| car.id == ahead)
}

/// Where a request is in the merge queue.
enum Place {
    /// In a running batch of the train.
    Boarded(Box<BatchRow>),
    /// In the waiting set.
    Waiting(WaitingPlace),
}

/// Where operation `operation_id` stands in the merge queue, with its
/// expected times, as `snapshot` (a read transaction) shows it; `None`
/// when it is not in the queue (not approved yet, or merged already).
/// Its place, the train and the requests ahead are read in one snapshot:
/// read one after another, a claim round between them showed the request
/// out of the queue, or counted it twice, in its batch and waiting
/// behind it.
pub async fn queue_estimate(
    snapshot: &mut DbTx,
    settings: &Settings,
    operation_id: &str,
) -> Result<Option<QueueEstimate>, sqlx::Error> {
    let place = match batch_of(&mut *snapshot, operation_id).await? {
        Some(id) => match get_batch(&mut *snapshot, id).await? {
            Some(batch) if batch.status == "RUNNING" => Place::Boarded(Box::new(batch)),
            _ => return Ok(None),
        },
        None => match waiting_place(&mut *snapshot, operation_id).await? {
            Some(place) => Place::Waiting(place),
            None => return Ok(None),
        },
    };
    let (partition, project, own_group) = match &place {
        Place::Boarded(batch) => (&batch.partition_key, &batch.project, &batch.split_group),
        Place::Waiting(place) => (&place.partition_key, &place.project, &place.split_group),
    };
    let train = active_train(&mut *snapshot, partition).await?;
    // Every batch from the front of the train to the request's own, by
    // split group with its size (only a half's size matters).
    let mut groups: Vec<(String, usize)> = Vec::with_capacity(train.len() + 1);
    for car in &train {
        let size = if car.split_group.is_empty() {
            0
        } else {
            live_members(&mut *snapshot, car.id).await?.len()
        };
        groups.push((car.split_group.clone(), size));
    }
    // How the pace holds each batch not claimed yet (after the train's),
    // and whose it is.
    let mut paced: Vec<Paced> = Vec::new();
    let mut waiting_projects: Vec<String> = Vec::new();
    let (index, batch) = match &place {
        Place::Boarded(batch) => match train.iter().position(|car| car.id == batch.id) {
            Some(index) => (index, Some(batch.shown_number())),
            None => return Ok(None),
        },
        Place::Waiting(place) => {
            let per_batch = settings.batch.max_requests.max(1) as usize;
            let mut own_full = per_batch == 1;
            let mut ahead = waiting_ahead(&mut *snapshot, partition, place.id).await?;
            if settings.batch.max_in_flight > 1 {
                in_boarding_order(&mut ahead, |(_, group, _)| group);
            }
            for (of_project, group, count) in ahead {
                let count = usize::try_from(count).unwrap_or(0);
                // A half boards ahead of every ordinary request.
                let hows: Vec<Paced> = if !group.is_empty() {
                    vec![Paced::Held]
                } else if !place.split_group.is_empty() {
                    Vec::new()
                } else if of_project == place.project {
                    // The project's ordinary requests ahead fill whole
                    // batches first, and the rest share the request's own.
                    own_full = count % per_batch + 1 >= per_batch;
                    vec![Paced::Full; count / per_batch]
                } else {
                    // Another project's never share its batch: they board
                    // in batches of their own, full ones first, and the
                    // rest by their project's pace.
                    let mut hows = vec![Paced::Full; count / per_batch];
                    if count % per_batch != 0 {
                        hows.push(Paced::Held);
                    }
                    hows
                };
                let size = if group.is_empty() { 0 } else { count };
                groups.extend(std::iter::repeat_n((group, size), hows.len()));
                waiting_projects.extend(std::iter::repeat_n(of_project, hows.len()));
                paced.extend(hows);
            }
            groups.push((place.split_group.clone(), 1));
            paced.push(if own_full { Paced::Full } else { Paced::Held });
            waiting_projects.push(place.project.clone());
            (groups.len() - 1, None)
        }
    };
    let position = index + 1;
    let of = groups.len();
    let no_estimate = |basis: String| QueueEstimate {
        position,
        of,
        batch,
        expected_merge_at: None,
        expected_deploy_at: None,
        basis,
    };
    if !own_group.is_empty() {
        return Ok(Some(no_estimate(
            "its batch failed and is being bisected to find the change that fails CI: no expected time until its part is cleared".to_owned(),
        )));
    }
    let runs = merged_runs(&mut *snapshot, project).await?;
    let deploys = deploy_delays(&mut *snapshot, project).await?;
    let ci = ci_history(&mut *snapshot, project).await?;
    let Some(medians) = Medians::of(&runs, &deploys, &ci) else {
        return Ok(Some(no_estimate(format!(
            "no estimate yet: {} of the {MIN_HISTORY} merged batches of {project} needed to measure from",
            runs.len()
        ))));
    };
    // Only the batches ahead decide when its own merges.
    let ahead = train
        .iter()
        .map(|car| car.project.as_str())
        .chain(waiting_projects.iter().map(String::as_str))
        .take(index);
    let others = medians_of_others(snapshot, project, ahead).await?;
    let durations_of = |of: &str| {
        others
            .get(of)
            .copied()
            .flatten()
            .unwrap_or(medians)
            .durations()
    };
    let named: Vec<(&str, usize)> = groups.iter().map(|(g, n)| (g.as_str(), *n)).collect();
    let sibling_failed = halves_whose_sibling_failed(snapshot, &named).await?;
    let fates = fates(
        &named,
        |group| sibling_failed.contains(group),
        settings.batch.max_split_depth,
    );
    let now = Utc::now();
    let boarded: Vec<Boarded> = train
        .iter()
        .zip(&fates)
        .enumerate()
        .map(|(index, (batch, fate))| Boarded {
            car: car_of(batch, now.naive_utc()),
            fate: *fate,
            group: batch.split_group.clone(),
            on: footing_of(&train, index),
            project: batch.project.clone(),
            durations: durations_of(&batch.project),
        })
        .collect();
    let depth = settings.batch.max_in_flight as usize;
    // Each project's pace counts from its own newest batch; a project with
    // no pipelines measured has none (its batches board at once).
    let mut newest_boarded: HashMap<String, f64> = HashMap::new();
    for batch in train
        .iter()
        .filter(|batch| batch.split_group.is_empty() && batch.rebuilds == 0)
    {
        let age = (now.naive_utc() - batch.created_at)
            .as_seconds_f64()
            .max(0.0);
        let newest = newest_boarded.entry(batch.project.clone()).or_insert(age);
        *newest = newest.min(age);
    }
    let measured = |of: &str| of == project || others.get(of).copied().flatten().is_some();
    let boarding = Boarding {
        batches: groups[train.len()..]
            .iter()
            .zip(&fates[train.len()..])
            .zip(&paced)
            .zip(&waiting_projects)
            .map(|((((group, _), fate), paced), of)| Waiting {
                fate: *fate,
                group: group.clone(),
                paced: if measured(of) { *paced } else { Paced::Full },
                project: of.clone(),
                durations: durations_of(of),
            })
            .collect(),
        depth,
        interval: settings.batch.interval.as_secs_f64(),
        newest_boarded,
    };
    // Its own batch is one of ordinary requests, expected to merge: no time
    // means the forecast did not see it board.
    let Some(merge) = merge_times(&boarded, &boarding)[index] else {
        return Ok(Some(no_estimate(
            "no estimate yet: the forecast does not reach the round its batch boards in".to_owned(),
        )));
    };
    let bisecting = fates[..index]
        .iter()
        .any(|fate| matches!(fate, Fate::Fails { .. }));
    let at = |seconds: f64| now + TimeDelta::milliseconds((seconds * 1000.0) as i64);
    Ok(Some(QueueEstimate {
        position,
        of,
        batch,
        expected_merge_at: Some(at(merge)),
        expected_deploy_at: medians.deploy.map(|deploy| at(merge + deploy)),
        basis: basis(project, &medians, &others, depth, bisecting),
    }))
}

/// The halves of `groups` whose sibling has left the queue by failing
/// (split again, or failed for good as the change that failed CI), not by
/// merging: a half whose sibling merged is the one holding the change.
async fn halves_whose_sibling_failed(
    snapshot: &mut DbTx,
    groups: &[(&str, usize)],
) -> Result<HashSet<String>, sqlx::Error> {
    let mut clear = HashSet::new();
    for (group, _) in groups {
        let present = groups.iter().any(|(other, _)| are_siblings(group, other));
        if !present && sibling_failed(&mut *snapshot, group).await? {
            clear.insert((*group).to_owned());
        }
    }
    Ok(clear)
}

/// Whether the other half of the failed batch `group` was split off has
/// failed (split again, or failed for good): with one change failing CI,
/// `group` is then clear. `false` for an ordinary group.
async fn sibling_failed(reader: impl Into<Reader<'_>>, group: &str) -> Result<bool, sqlx::Error> {
    match levels(group).pop() {
        Some((parent, sibling)) => half_failed(reader, parent, &sibling).await,
        None => Ok(false),
    }
}

/// The medians of each of `projects` other than `own` (sharing its
/// train), `None` for one with too little history: its batches are then
/// played with `own`'s, as are those of the batches behind.
async fn medians_of_others(
    snapshot: &mut DbTx,
    own: &str,
    projects: impl Iterator<Item = &str>,
) -> Result<BTreeMap<String, Option<Medians>>, sqlx::Error> {
    let mut others = BTreeMap::new();
    for of in projects {
        if of != own && !others.contains_key(of) {
            let runs = merged_runs(&mut *snapshot, of).await?;
            let ci = ci_history(&mut *snapshot, of).await?;
            others.insert(of.to_owned(), Medians::of(&runs, &[], &ci));
        }
    }
    Ok(others)
}

fn basis(
    project: &str,
    medians: &Medians,
    others: &BTreeMap<String, Option<Medians>>,
    depth: usize,
    bisecting: bool,
) -> String {
    let deploy = medians.deploy.map_or_else(
        || "no deploy measured yet".to_owned(),
        |d| format!("deploy {d:.0} s"),
    );
    // What the play takes for granted, said: a pipeline that fails with
    // nothing foretelling it moves every time shown behind it.
    let passes = if bisecting {
        "; a failed batch ahead is being bisected, and each of its failing halves sends the batches behind it back to be built again; every other batch taken to pass CI"
    } else {
        "; if every batch ahead, and its own, passes CI"
    };
    let shared: String = others
        .iter()
        .map(|(other, medians)| match medians {
            Some(m) => format!(
                "; batches of {other} ahead by its own medians (pipeline {:.0} s, merge round {:.0} s)",
                m.pipeline, m.merge_round
            ),
            None => format!(
                "; batches of {other} ahead timed as {project}'s: {other} has fewer than {MIN_HISTORY} merged batches"
            ),
        })
        .collect();
    let ci = match medians.ci_samples {
        0 => String::new(),
        n => format!(" (the pipeline's with {n} earlier pipelines of its CI in GitLab)"),
    };
    format!(
        "medians of the last {} merged batches of {project}{ci}: pipeline {:.0} s, merge round {:.0} s, {deploy}; up to {depth} batches in flight{shared}{passes}",
        medians.samples, medians.pipeline, medians.merge_round
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn there_is_no_estimate_without_enough_history() {
        let ci: Vec<CiPipeline> = (0..5).map(|n| past(n, -100 - n, 20.0)).collect();
        assert_eq!(Medians::of(&[run(0, 10), run(100, 12)], &[], &ci), None);
        let medians = Medians::of(&[run(0, 10), run(100, 14), run(200, 12)], &[4.0], &[]).unwrap();
        assert_eq!(
            (medians.pipeline, medians.merge_round, medians.deploy),
            (12.0, 2.0, Some(4.0))
        );
    }

    fn at(seconds: i64) -> NaiveDateTime {
        DateTime::from_timestamp(1_000_000 + seconds, 0)
            .unwrap()
            .naive_utc()
    }

    /// A merged batch opened at `start`, its pipeline `pipeline` seconds.
    fn run(start: i64, pipeline: i64) -> MergedRun {
        MergedRun {
            opened_at: at(start),
            passed_at: at(start + pipeline),
            merging_at: at(start + pipeline),
            merged_at: at(start + pipeline + 2),
        }
    }

    /// Pipeline `id` of the CI history, finished at `finished`.
    fn past(id: i64, finished: i64, seconds: f64) -> CiPipeline {
        CiPipeline {
            pipeline_id: id,
            seconds,
            finished_at: at(finished),
        }
    }

    #[test]
    fn the_pipeline_median_takes_the_ci_history_from_before_the_merged_batches() {
        // Three merged batches of long pipelines, newest first; the CI
        // history has five shorter ones from before, and two that finished
        // after the first batch opened (changegate's own, or of its time).
        let runs = [run(200, 14), run(100, 13), run(0, 10)];
        let mut ci = vec![past(9, 150, 30.0), past(8, 5, 30.0)];
        ci.extend((1..=5).map(|n| past(n, -10 * n, (4 + 2 * n) as f64)));
        assert_eq!(
            pipeline_samples(&runs, &ci),
            [14.0, 13.0, 10.0, 6.0, 8.0, 10.0, 12.0, 14.0]
        );
        let medians = Medians::of(&runs, &[], &ci).unwrap();
        assert_eq!(
            (medians.pipeline, medians.samples, medians.ci_samples),
            (11.0, 3, 5)
        );
        // Without merged batches, the CI history alone; never more than
        // the last twenty in all.
        assert_eq!(pipeline_samples(&[], &ci).len(), 7);
        let many: Vec<MergedRun> = (0..18).rev().map(|n| run(n * 100, 10)).collect();
        let samples = pipeline_samples(&many, &ci);
        assert_eq!(samples.len(), HISTORY as usize);
        assert_eq!(&samples[18..], [6.0, 8.0]);
    }
}
