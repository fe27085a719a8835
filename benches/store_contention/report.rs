//! What a run found: the answers that were not 2xx, the store retries and
//! the log lines, as a table row and as the list of what missed the targets.

use std::collections::BTreeMap;

use tracing::Level;

use crate::log_lines::{Line, Seen};

/// Answers other than 2xx, by route, status and code; status 0: no answer
/// came (the code says why).
#[derive(Default)]
pub struct Answers(BTreeMap<(&'static str, u16, String), usize>);

impl Answers {
    pub fn count(&mut self, route: &'static str, status: u16, code: &str) {
        if !(200..300).contains(&status) {
            *self.0.entry((route, status, code.to_owned())).or_default() += 1;
        }
    }

    pub fn add(&mut self, other: Answers) {
        for (key, count) in other.0 {
            *self.0.entry(key).or_default() += count;
        }
    }

    fn sum(&self, counted: impl Fn(u16, &str) -> bool) -> usize {
        self.0
            .iter()
            .filter(|((_, status, code), _)| counted(*status, code))
            .map(|(_, count)| count)
            .sum()
    }
}

/// The store retry counters of the process's recorder: by reason, and the
/// retries exhausted. Every in-process instance records into it, so its
/// counts are the instances' sum.
pub struct Retries {
    by_reason: BTreeMap<String, f64>,
    exhausted: f64,
}

impl Retries {
    pub fn read() -> Self {
        let text = changegate::telemetry::metrics_handle().render();
        let mut by_reason = BTreeMap::new();
        let mut exhausted = 0.0;
        for line in text.lines() {
            let Some((name, value)) = line.rsplit_once(' ') else {
                continue;
            };
            let Ok(value) = value.parse::<f64>() else {
                continue;
            };
            if name == "changegate_store_retries_exhausted_total" {
                exhausted = value;
            } else if let Some(reason) = name
                .strip_prefix("changegate_store_retries_total{reason=\"")
                .and_then(|rest| rest.strip_suffix("\"}"))
            {
                by_reason.insert(reason.to_owned(), value);
            }
        }
        Self {
            by_reason,
            exhausted,
        }
    }

    /// What was counted after `before`, reasons that stayed put left out.
    pub fn since(self, before: &Retries) -> Self {
        Self {
            by_reason: self
                .by_reason
                .into_iter()
                .map(|(reason, n)| {
                    let taken = n - before.by_reason.get(&reason).copied().unwrap_or(0.0);
                    (reason, taken)
                })
                .filter(|(_, taken)| *taken > 0.0)
                .collect(),
            exhausted: self.exhausted - before.exhausted,
        }
    }
}

/// What one run found.
pub struct Report {
    pub run: usize,
    pub answers: Answers,
    pub retries: Retries,
    pub lines: BTreeMap<Line, Seen>,
    pub load_seconds: f64,
    /// Whether nothing was still moving when the wait for it ran out.
    pub settled: bool,
}

impl Report {
    pub const HEADER: &str = "| run | 5xx | RETRY_LATER | store retries by reason | retries exhausted | WARN lines | ERROR lines | load s |\n\
                              |---|---|---|---|---|---|---|---|";

    fn lines_at(&self, level: Level) -> usize {
        self.lines
            .iter()
            .filter(|(line, _)| line.level == level)
            .map(|(_, seen)| seen.count)
            .sum()
    }

    pub fn row(&self) -> String {
        let retries: Vec<String> = self
            .retries
            .by_reason
            .iter()
            .map(|(reason, n)| format!("{reason} {n}"))
            .collect();
        let retries = if retries.is_empty() {
            "none".to_owned()
        } else {
            retries.join(", ")
        };
        format!(
            "| {} | {} | {} | {retries} | {} | {} | {} | {:.1} |",
            self.run,
            self.answers.sum(|status, _| status >= 500),
            self.answers.sum(|_, code| code == "RETRY_LATER"),
            self.retries.exhausted,
            self.lines_at(Level::WARN),
            self.lines_at(Level::ERROR),
            self.load_seconds,
        )
    }

    /// Every answer that was not 2xx and every line logged, one a line.
    pub fn details(&self) -> Vec<String> {
        let answers = self.answers.0.iter().map(|((route, status, code), count)| {
            format!("answer {route} {status} {code}: {count}")
        });
        let lines = self.lines.iter().map(|(line, seen)| {
            let first = if seen.fields.is_empty() {
                String::new()
            } else {
                format!(" (the first with {})", seen.fields)
            };
            format!(
                "{} {} \"{}\"{}: {}{first}",
                line.level,
                line.target,
                line.message,
                status_of(line),
                seen.count
            )
        });
        answers.chain(lines).collect()
    }

    /// What missed the targets, by name; empty when nothing did.
    pub fn misses(&self) -> Vec<String> {
        let mut misses = Vec::new();
        if !self.settled {
            misses.push("requests or webhooks still moving when the wait ran out".to_owned());
        }
        for ((route, status, code), count) in &self.answers.0 {
            if *status >= 500 || *status == 0 || code == "RETRY_LATER" {
                misses.push(format!("{count} × {route} {status} {code}"));
            }
        }
        for (line, seen) in &self.lines {
            misses.push(format!(
                "{} × {} {}: {}{}",
                seen.count,
                line.level,
                line.target,
                line.message,
                status_of(line)
            ));
        }
        misses
    }
}

fn status_of(line: &Line) -> String {
    line.status
        .as_ref()
        .map_or_else(String::new, |status| format!(" (status {status})"))
}
