//! The hand-written reference pages, checked against the code: every
//! configuration key, metric (with its labels) and alert is on its page, and
//! every one a page names exists.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use changegate::config::{STATIC_KEYS, STATIC_SECTIONS};
use metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};

const CONFIGURATION: &str = "docs/src/reference/configuration.md";
const METRICS: &str = "docs/src/reference/metrics.md";
const ALERTS: &str = "docs/src/reference/alerts.md";
const ALERT_RULES: &str = "deploy/prometheus/alerts.yml";

fn read(root: &Path, path: &str) -> anyhow::Result<String> {
    std::fs::read_to_string(root.join(path)).with_context(|| format!("reading {path}"))
}

/// The first cells of a page's table rows (lines starting with `|`, the
/// header and its rule skipped).
fn first_cells(page: &str) -> impl Iterator<Item = Vec<&str>> {
    page.lines()
        .filter(|line| line.starts_with('|') && !line.starts_with("|---"))
        .map(|line| line.trim_matches('|').split(" | ").map(str::trim).collect())
}

/// The keys a row's first cell names: backticked, a key without a dot
/// belonging to the section of the one before it (`` `workflow.short_polls`,
/// `long_polls` ``), `[section]` setting the section itself.
fn keys_of_cell(cell: &str) -> Vec<String> {
    let mut keys = Vec::new();
    let mut section = String::new();
    for (index, quoted) in cell.split('`').enumerate() {
        if index % 2 == 0 {
            continue;
        }
        if let Some(table) = quoted.strip_prefix('[').and_then(|q| q.strip_suffix(']')) {
            section = table.to_owned();
            keys.push(table.to_owned());
            continue;
        }
        match quoted.rsplit_once('.') {
            Some((named, _)) => {
                section = named.to_owned();
                keys.push(quoted.to_owned());
            }
            None if !section.is_empty() => keys.push(format!("{section}.{quoted}")),
            None => keys.push(quoted.to_owned()),
        }
    }
    keys
}

/// Whether `named` (as the page writes it) stands for `key`: the same, or
/// a pattern (`identity.*_header`), or an entry of a section of the
/// operator's own names (`rate_limit.<bucket>`, `targets."<key>".windows`).
fn names(named: &str, key: &str) -> bool {
    if named == key {
        return true;
    }
    if let Some((before, after)) = named.split_once('*') {
        return key.starts_with(before) && key.ends_with(after) && key.len() > named.len() - 1;
    }
    named
        .strip_prefix(key)
        .is_some_and(|rest| rest.starts_with(".<") || rest.starts_with(".\""))
}

/// Every configuration key is in the configuration page's table with its
/// kind (static exactly when a reload keeps it) and default, and every key
/// the table names is one changegate reads.
pub fn configuration(root: &Path) -> anyhow::Result<Vec<String>> {
    let page = read(root, CONFIGURATION)?;
    let named: Vec<String> = first_cells(&page)
        .filter_map(|cells| cells.first().map(|cell| keys_of_cell(cell)))
        .flatten()
        .filter(|key| key.contains('.') || !key.contains(' '))
        .collect();
    let known = changegate::config::known_keys();
    let mut problems = Vec::new();
    // Every row says whether a reload changes the key, and its default;
    // the static ones are exactly those a reload keeps (a section static
    // as a whole stands for its keys).
    let mut said_static = BTreeSet::new();
    for cells in first_cells(&page).skip(1) {
        let (Some(key), Some(kind), Some(default)) = (cells.first(), cells.get(1), cells.get(2))
        else {
            continue;
        };
        if !(kind.starts_with("static") || kind.starts_with("dynamic")) {
            problems.push(format!(
                "{CONFIGURATION}: {key}: the kind is neither static nor dynamic"
            ));
        }
        if default.is_empty() {
            problems.push(format!("{CONFIGURATION}: {key}: no default"));
        }
        if kind.starts_with("static") {
            for named in keys_of_cell(key) {
                let section = named.split('.').next().unwrap_or_default().to_owned();
                said_static.insert(if STATIC_SECTIONS.contains(&section.as_str()) {
                    section
                } else {
                    named
                });
            }
        }
    }
    let kept: BTreeSet<String> = STATIC_SECTIONS
        .iter()
        .chain(STATIC_KEYS)
        .map(|key| (*key).to_owned())
        .collect();
    for key in kept.difference(&said_static) {
        problems.push(format!(
            "{CONFIGURATION}: `{key}` is static (a reload keeps it) but not said so"
        ));
    }
    for key in said_static.difference(&kept) {
        problems.push(format!(
            "{CONFIGURATION}: `{key}` is said static, but a reload changes it"
        ));
    }
    for key in &known {
        if !named.iter().any(|n| names(n, key)) {
            problems.push(format!(
                "{CONFIGURATION}: configuration key `{key}` is missing"
            ));
        }
    }
    for key in &named {
        let is_section = known.iter().any(|k| k.starts_with(&format!("{key}.")));
        if !is_section
            && !known
                .iter()
                .any(|k| names(key, k) || key.starts_with(&format!("{k}.")))
        {
            problems.push(format!(
                "{CONFIGURATION}: `{key}` is not a configuration key changegate reads"
            ));
        }
    }
    Ok(problems)
}

/// What changegate describes and registers at start-up: each metric's kind,
/// and the labels of the series it starts at zero.
#[derive(Default)]
struct Described {
    kinds: BTreeMap<String, &'static str>,
    labels: BTreeMap<String, BTreeSet<String>>,
}

/// A recorder that keeps only what [`Described`] holds; every metric it
/// hands out does nothing.
#[derive(Clone, Default)]
struct Catalogue(Arc<Mutex<Described>>);

impl Catalogue {
    fn describe(&self, name: &KeyName, kind: &'static str) {
        if let Ok(mut described) = self.0.lock() {
            described.kinds.insert(name.as_str().to_owned(), kind);
        }
    }

    fn register(&self, key: &Key) {
        if let Ok(mut described) = self.0.lock() {
            described
                .labels
                .entry(key.name().to_owned())
                .or_default()
                .extend(key.labels().map(|label| label.key().to_owned()));
        }
    }
}

impl Recorder for Catalogue {
    fn describe_counter(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
        self.describe(&key, "counter");
    }
    fn describe_gauge(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
        self.describe(&key, "gauge");
    }
    fn describe_histogram(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
        self.describe(&key, "histogram");
    }
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.register(key);
        Counter::noop()
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.register(key);
        Gauge::noop()
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.register(key);
        Histogram::noop()
    }
}

/// Every metric changegate describes is in the metrics page's table with
/// its type and the labels of its series, and every metric the page names
/// is one changegate exports.
pub fn metrics(root: &Path) -> anyhow::Result<Vec<String>> {
    let page = read(root, METRICS)?;
    let catalogue = Catalogue::default();
    metrics::with_local_recorder(&catalogue, changegate::telemetry::describe_metrics);
    let described = catalogue
        .0
        .lock()
        .map_err(|_| anyhow::anyhow!("the metrics catalogue's lock"))?;
    let rows: Vec<Vec<&str>> = first_cells(&page).collect();
    let mut problems = Vec::new();
    for (name, kind) in &described.kinds {
        let Some(row) = rows.iter().find(|cells| {
            cells
                .first()
                .is_some_and(|c| c.contains(&format!("`{name}`")))
        }) else {
            problems.push(format!("{METRICS}: metric `{name}` is missing"));
            continue;
        };
        if !row.get(1).is_some_and(|cell| cell.starts_with(kind)) {
            problems.push(format!("{METRICS}: `{name}` is a {kind}"));
        }
        for label in described.labels.get(name).into_iter().flatten() {
            if !row
                .get(2)
                .is_some_and(|cell| cell.contains(&format!("`{label}`")))
            {
                problems.push(format!("{METRICS}: `{name}` has the label `{label}`"));
            }
        }
    }
    for row in &rows {
        let Some(cell) = row.first() else { continue };
        for (index, quoted) in cell.split('`').enumerate() {
            if index % 2 == 1
                && quoted.starts_with("changegate_")
                && !described.kinds.contains_key(quoted)
            {
                problems.push(format!(
                    "{METRICS}: `{quoted}` is not a metric changegate exports"
                ));
            }
        }
    }
    Ok(problems)
}

/// Every alert rule has its runbook (a `#### <alert>` heading) on the
/// alerts page, and every runbook there is for an alert that exists.
pub fn alerts(root: &Path) -> anyhow::Result<Vec<String>> {
    let rules = read(root, ALERT_RULES)?;
    let page = read(root, ALERTS)?;
    let alerts: BTreeSet<&str> = rules
        .lines()
        .filter_map(|line| line.trim().strip_prefix("- alert:"))
        .map(str::trim)
        .collect();
    let runbooks: BTreeSet<&str> = page
        .lines()
        .filter_map(|line| line.strip_prefix("#### "))
        .map(str::trim)
        .collect();
    let mut problems = Vec::new();
    for alert in alerts.difference(&runbooks) {
        problems.push(format!("{ALERTS}: alert {alert} has no runbook"));
    }
    for runbook in runbooks.difference(&alerts) {
        problems.push(format!(
            "{ALERTS}: {runbook} is not an alert of {ALERT_RULES}"
        ));
    }
    Ok(problems)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cell_names_keys_of_the_section_before_them() {
        assert_eq!(
            keys_of_cell("`workflow.short_polls`, `long_polls`"),
            ["workflow.short_polls", "workflow.long_polls"]
        );
        assert_eq!(
            keys_of_cell("`[identity.jwt]` `hs256_secret`"),
            ["identity.jwt", "identity.jwt.hs256_secret"]
        );
    }

    #[test]
    fn patterns_and_names_of_the_operators_own_stand_for_keys() {
        assert!(names("identity.*_header", "identity.user_header"));
        assert!(!names("identity.*_header", "identity.aliases"));
        assert!(names("rate_limit.<bucket>", "rate_limit"));
        assert!(names("targets.\"<key>\".windows", "targets"));
        assert!(!names("batch.max_request", "batch.max_requests"));
    }
}
