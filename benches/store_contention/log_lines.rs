//! The WARN and ERROR lines changegate logs, counted by message.
//!
//! The instances run in this process, so their lines go to the one global
//! subscriber. `Application` installs none (the binary's `main` does, with
//! `[log] level`), so the one installed here is the only one, and it keeps
//! WARN and ERROR whatever the instances' configuration says.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::sync::{Arc, Mutex, PoisonError};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

/// What sorts lines together: the level, where it was logged, its message
/// and, for a failed request, its HTTP status (a 500 is not a 503).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Line {
    /// WARN or ERROR.
    pub level: Level,
    /// The module that logged it (for lines from the `log` crate, its target).
    pub target: String,
    /// The message, without the line's other fields.
    pub message: String,
    /// The `status` field, if the line has one.
    pub status: Option<String>,
}

/// How often a line was logged, and the other fields of its first time.
pub struct Seen {
    /// Times logged.
    pub count: usize,
    /// The first time's other fields (`operation_id=…`), each cut to the
    /// first line and [`FIELD_CHARS`] characters: an error's backtrace or a
    /// statement's text would bury the rest.
    pub fields: String,
}

/// How much of a field's value [`Seen::fields`] keeps.
const FIELD_CHARS: usize = 160;

type Lines = Arc<Mutex<BTreeMap<Line, Seen>>>;

/// The lines logged since the last [`LogLines::take`].
#[derive(Clone)]
pub struct LogLines(Lines);

impl LogLines {
    /// Installs the process's global subscriber, keeping WARN and ERROR.
    pub fn install() -> Self {
        let lines = Lines::default();
        tracing_subscriber::registry()
            .with(Recorder(lines.clone()).with_filter(LevelFilter::WARN))
            .init();
        Self(lines)
    }

    /// The lines logged since the last call, which are forgotten.
    pub fn take(&self) -> BTreeMap<Line, Seen> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

struct Recorder(Lines);

impl<S: Subscriber> Layer<S> for Recorder {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let target = fields
            .log_target
            .unwrap_or_else(|| event.metadata().target().to_owned());
        // The simulators standing in for GitLab and the deploy pipeline share
        // the process; their lines are not changegate's.
        if target.starts_with("changegate_sim") {
            return;
        }
        let line = Line {
            level: *event.metadata().level(),
            target,
            message: fields.message,
            status: fields.status,
        };
        let mut lines = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        lines
            .entry(line)
            .or_insert_with(|| Seen {
                count: 0,
                fields: fields.rest,
            })
            .count += 1;
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    log_target: Option<String>,
    status: Option<String>,
    rest: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "log.target" => self.log_target = Some(value.to_owned()),
            "log.module_path" | "log.file" => {}
            _ => self.record_debug(field, &value),
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            "message" => self.message = format!("{value:?}"),
            "status" => self.status = Some(format!("{value:?}")),
            "log.line" => {}
            name => {
                let text = format!("{value:?}");
                let first = text.lines().next().unwrap_or_default();
                let cut: String = first.chars().take(FIELD_CHARS).collect();
                let more = if cut.len() < text.len() { "…" } else { "" };
                let gap = if self.rest.is_empty() { "" } else { " " };
                let _ = write!(self.rest, "{gap}{name}={cut}{more}");
            }
        }
    }
}
