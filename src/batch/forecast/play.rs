//! The train played forward round by claim round, by the rules the merge
//! queue runs by (as `forecast` describes them).

use std::collections::{HashMap, VecDeque};

use super::super::split::are_siblings;
use super::{Boarded, Boarding, Car, Durations, Fate, Paced};

/// Rounds played at most: past them, what has not boarded gets no time.
const MAX_ROUNDS: usize = 100_000;

/// A batch of the train being played forward.
#[derive(Debug, Clone)]
struct Played {
    group: String,
    fate: Fate,
    /// The car it is built on.
    on: Option<usize>,
    /// When its pipeline ends.
    ends: f64,
    /// When it merges, once known while merging already.
    merging_ends: Option<f64>,
    /// When it failed.
    failed: Option<f64>,
    /// Its index in the answer, for the batches asked about.
    shown_as: Option<usize>,
    project: String,
    /// Its project's medians.
    durations: Durations,
}

/// A batch waiting to board.
#[derive(Debug, Clone)]
struct Queued {
    group: String,
    fate: Fate,
    paced: Paced,
    shown_as: Option<usize>,
    project: String,
    durations: Durations,
}

impl Queued {
    fn is_half(&self) -> bool {
        !self.group.is_empty()
    }
}

pub(super) struct Play {
    depth: usize,
    interval: f64,
    cars: Vec<Played>,
    queue: VecDeque<Queued>,
    /// When each project's newest batch of ordinary requests boarded.
    newest_ordinary: HashMap<String, f64>,
    /// Failed batches bisected so far, naming their halves.
    bisected: usize,
}

impl Play {
    pub(super) fn new(train: &[Boarded], boarding: &Boarding) -> Self {
        let cars = train
            .iter()
            .enumerate()
            .map(|(index, boarded)| {
                let durations = boarded.durations;
                let (ends, merging_ends) = match boarded.car {
                    Car::Opening => (durations.pipeline, None),
                    Car::Pipeline { since } => ((durations.pipeline - since).max(0.0), None),
                    Car::Passed => (0.0, None),
                    Car::Merging { since } => (0.0, Some((durations.merge_round - since).max(0.0))),
                };
                Played {
                    group: boarded.group.clone(),
                    fate: boarded.fate,
                    on: boarded.on,
                    ends,
                    merging_ends,
                    failed: None,
                    shown_as: Some(index),
                    project: boarded.project.clone(),
                    durations,
                }
            })
            .collect();
        let queue = boarding
            .batches
            .iter()
            .enumerate()
            .map(|(index, waiting)| Queued {
                group: waiting.group.clone(),
                fate: waiting.fate,
                paced: waiting.paced,
                shown_as: Some(train.len() + index),
                project: waiting.project.clone(),
                durations: waiting.durations,
            })
            .collect();
        Self {
            depth: boarding.depth.max(1),
            interval: boarding.interval.max(0.0),
            cars,
            queue,
            newest_ordinary: boarding
                .newest_boarded
                .iter()
                .map(|(project, age)| (project.clone(), -age))
                .collect(),
            bisected: 0,
        }
    }

    /// Plays rounds until every batch has boarded and every failure to
    /// come has happened: when each of the `shown` batches asked about
    /// merges.
    pub(super) fn merge_times(mut self, shown: usize) -> Vec<Option<f64>> {
        let mut now = self.first_round();
        for _ in 0..MAX_ROUNDS {
            self.fail_until(now);
            self.claim_round(now);
            if self.queue.is_empty() && !self.failing_after(now) {
                break;
            }
            match self.next_round(now) {
                Some(at) => now = at,
                None => break,
            }
        }
        let mut times = vec![None; shown];
        for (car, merge) in self.cars.iter().zip(self.merges()) {
            if let Some(index) = car.shown_as {
                times[index] = merge;
            }
        }
        times
    }

    /// The pace between batches of ordinary requests of `queued`'s
    /// project: half its pipeline in a train, none for one batch at a time.
    fn pace(&self, queued: &Queued) -> f64 {
        if self.depth > 1 {
            queued.durations.pipeline / 2.0
        } else {
            0.0
        }
    }

    /// When the newest batch of ordinary requests of `project` boarded.
    fn newest(&self, project: &str) -> f64 {
        self.newest_ordinary
            .get(project)
            .copied()
            .unwrap_or(f64::NEG_INFINITY)
    }

    /// Whether `queued`'s project's pace lets its batch board at `now`.
    fn paced(&self, queued: &Queued, now: f64) -> bool {
        queued.paced != Paced::Held || now - self.newest(&queued.project) >= self.pace(queued)
    }

    /// The next claim round: half an interval away on average.
    fn first_round(&self) -> f64 {
        self.interval / 2.0
    }

    /// The first claim round at or after `at`, and after `now`.
    fn round_at_or_after(&self, at: f64, now: f64) -> f64 {
        if self.interval <= 0.0 {
            return at.max(now);
        }
        let rounds = ((at - now) / self.interval).ceil().max(1.0);
        now + rounds * self.interval
    }

    /// When car `index` is decided: its pipeline's end, and for a failure,
    /// also the ends of those it is built on (blamed only once they pass).
    fn decided(&self, index: usize) -> f64 {
        let car = &self.cars[index];
        if let Some(failed) = car.failed {
            return failed;
        }
        let mut at = car.ends;
        if matches!(car.fate, Fate::Fails { .. }) {
            let mut on = car.on;
            while let Some(ahead) = on {
                at = at.max(self.cars[ahead].ends);
                on = self.cars[ahead].on;
            }
        }
        at
    }

    /// When each car merges (`None`: it fails), as things stand: in train
    /// order, each after its pipeline and after every car ahead has left.
    fn merges(&self) -> Vec<Option<f64>> {
        let mut ahead_left: f64 = 0.0;
        self.cars
            .iter()
            .enumerate()
            .map(|(index, car)| match (car.fate, car.merging_ends) {
                (Fate::Fails { .. }, _) => {
                    ahead_left = ahead_left.max(self.decided(index));
                    None
                }
                (Fate::Merges, Some(ends)) => {
                    ahead_left = ahead_left.max(ends);
                    Some(ends)
                }
                (Fate::Merges, None) => {
                    let merged = car.ends.max(ahead_left) + car.durations.merge_round;
                    ahead_left = merged;
                    Some(merged)
                }
            })
            .collect()
    }

    /// When each car leaves the train: merged or failed.
    fn leaves(&self) -> Vec<f64> {
        self.merges()
            .into_iter()
            .enumerate()
            .map(|(index, merged)| merged.unwrap_or_else(|| self.decided(index)))
            .collect()
    }

    /// The failing cars not failed yet.
    fn failing(&self) -> impl Iterator<Item = usize> + '_ {
        self.cars
            .iter()
            .enumerate()
            .filter(|(_, car)| matches!(car.fate, Fate::Fails { .. }) && car.failed.is_none())
            .map(|(index, _)| index)
    }

    fn failing_after(&self, now: f64) -> bool {
        self.failing().any(|index| self.decided(index) > now)
    }

    /// Every failure decided by `now`, in the order they are.
    fn fail_until(&mut self, now: f64) {
        while let Some((index, at)) = self
            .failing()
            .map(|index| (index, self.decided(index)))
            .filter(|(_, at)| *at <= now)
            .min_by(|a, b| a.1.total_cmp(&b.1))
        {
            self.fail(index, at);
        }
    }

    /// Car `index` fails at `at`: every car built on it is built again
    /// then, on what is ahead of it, and its halves wait to board, ahead
    /// of every ordinary request.
    fn fail(&mut self, index: usize, at: f64) {
        self.cars[index].failed = Some(at);
        let mut on_it = vec![index];
        for behind in index + 1..self.cars.len() {
            let built_on_it = self.cars[behind].on.is_some_and(|on| on_it.contains(&on));
            if built_on_it && self.cars[behind].failed.is_none() {
                on_it.push(behind);
                let car = &self.cars[behind];
                let on = self.footing(behind, (&car.project, &car.group), at);
                let car = &mut self.cars[behind];
                car.on = on;
                car.ends = at + car.durations.pipeline;
            }
        }
        let failed = &self.cars[index];
        let (fate, project, durations) = (failed.fate, failed.project.clone(), failed.durations);
        let Fate::Fails { halvings } = fate else {
            return;
        };
        if halvings == 0 {
            return;
        }
        self.bisected += 1;
        let parent = match self.cars[index].group.as_str() {
            "" => String::new(),
            group => format!("{group}/"),
        };
        let halves = [
            (
                format!("{parent}~{}a", self.bisected),
                Fate::Fails {
                    halvings: halvings - 1,
                },
            ),
            (format!("{parent}~{}b", self.bisected), Fate::Merges),
        ];
        let after = self
            .queue
            .iter()
            .take_while(|queued| queued.is_half())
            .count();
        for (offset, (group, fate)) in halves.into_iter().enumerate() {
            let half = Queued {
                group,
                fate,
                paced: Paced::Held,
                shown_as: None,
                project: project.clone(),
                durations,
            };
            self.queue.insert(after + offset, half);
        }
    }

    /// What a car at `place` (of `project`, in `group`) is built on at
    /// `now`: the last car of its project ahead still in the train, unless
    /// that is its sibling.
    fn footing(&self, place: usize, (project, group): (&str, &str), now: f64) -> Option<usize> {
        let leaves = self.leaves();
        (0..place).rev().find(|&ahead| {
            let car = &self.cars[ahead];
            leaves[ahead] > now && car.project == project && !are_siblings(&car.group, group)
        })
    }

    /// The claim round at `now`, as the merge queue plays it.
    fn claim_round(&mut self, now: f64) {
        let leaves = self.leaves();
        let mut active = leaves.iter().filter(|left| **left > now).count();
        if self.depth == 1 {
            if active == 0
                && let Some(first) = self.queue.pop_front()
            {
                self.board(first, now);
            }
            return;
        }
        while active < self.depth {
            // As each claim reads the paces again: a full batch boards
            // without waiting for its project's.
            let halves = self.queue.iter().filter(|queued| queued.is_half()).count();
            let ordinary = self
                .queue
                .iter()
                .position(|queued| !queued.is_half() && self.paced(queued, now));
            let next = match ordinary {
                Some(index) if active + 1 + halves <= self.depth => index,
                _ if halves > 0 => self.queue.iter().position(Queued::is_half).unwrap_or(0),
                _ => break,
            };
            let Some(queued) = self.queue.remove(next) else {
                break;
            };
            self.board(queued, now);
            active += 1;
        }
    }

    fn board(&mut self, queued: Queued, now: f64) {
        if !queued.is_half() {
            self.newest_ordinary.insert(queued.project.clone(), now);
        }
        let on = self.footing(self.cars.len(), (&queued.project, &queued.group), now);
        self.cars.push(Played {
            group: queued.group,
            fate: queued.fate,
            on,
            ends: now + queued.durations.pipeline,
            merging_ends: None,
            failed: None,
            shown_as: queued.shown_as,
            project: queued.project,
            durations: queued.durations,
        });
    }

    /// The next claim round that may claim differently: the first round
    /// after a change, or, while ordinary requests wait, the moment their
    /// project's pace lets their batch board (an instance claims then,
    /// though never sooner than an interval after the newest).
    fn next_round(&self, now: f64) -> Option<f64> {
        let changed = self
            .next_change(now)
            .map(|at| self.round_at_or_after(at, now));
        let paced = self
            .queue
            .iter()
            .filter(|queued| self.depth > 1 && !queued.is_half() && queued.paced == Paced::Held)
            .map(|queued| self.newest(&queued.project) + self.pace(queued).max(self.interval))
            .filter(|at| *at > now);
        changed.into_iter().chain(paced).min_by(f64::total_cmp)
    }

    /// The next time after `now` when a round may claim differently: a
    /// failure, a car leaving, or a half tested.
    fn next_change(&self, now: f64) -> Option<f64> {
        let leaves = self.leaves();
        let ends = self.cars.iter().enumerate().map(|(index, car)| {
            if car.group.is_empty() {
                f64::NEG_INFINITY
            } else {
                self.decided(index)
            }
        });
        leaves
            .iter()
            .copied()
            .chain(ends)
            .chain(self.failing().map(|index| self.decided(index)))
            .filter(|at| *at > now)
            .min_by(f64::total_cmp)
    }
}
