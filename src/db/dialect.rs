//! The few places where SQLite and MySQL/MariaDB SQL differ.
//!
//! Everything else is shared: both use `?` placeholders, and times are
//! stored at millisecond precision (`DATETIME(3)` on MySQL, fixed-width
//! `YYYY-MM-DD HH:MM:SS.SSS` text on SQLite, which sorts and compares like time).

use super::Backend;

/// SQL expression for the database's current UTC time at millisecond precision.
pub fn now_ms(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "strftime('%Y-%m-%d %H:%M:%f', 'now')",
        Backend::MySql => "CURRENT_TIMESTAMP(3)",
    }
}

/// SQL expression for the database's current time minus `?` milliseconds
/// (one bound integer parameter).
pub fn now_minus_ms(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => {
            "strftime('%Y-%m-%d %H:%M:%f', 'now', '-' || (? / 1000.0) || ' seconds')"
        }
        Backend::MySql => "(CURRENT_TIMESTAMP(3) - INTERVAL (? * 1000) MICROSECOND)",
    }
}

/// Suffix of a locking read. SQLite has none: its write transactions start
/// with `BEGIN IMMEDIATE` and so already exclude every other writer.
pub fn for_update(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "",
        Backend::MySql => " FOR UPDATE",
    }
}

/// Suffix of a shared locking read: the rows read stay as read until
/// commit, as an `INSERT … SELECT` would hold them. SQLite has none, as for
/// [`for_update`].
pub fn for_share(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "",
        Backend::MySql => " LOCK IN SHARE MODE",
    }
}

/// An inner join that reads its left table first, whatever the optimizer
/// would pick: `STRAIGHT_JOIN` on MySQL; on SQLite a `CROSS JOIN` never
/// swaps its tables.
pub fn outer_first_join(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => "CROSS JOIN",
        Backend::MySql => "STRAIGHT_JOIN",
    }
}

/// SQL expression for the database's current time plus `?` milliseconds
/// (one bound integer parameter).
pub fn now_plus_ms(backend: Backend) -> &'static str {
    match backend {
        Backend::Sqlite => {
            "strftime('%Y-%m-%d %H:%M:%f', 'now', '+' || (? / 1000.0) || ' seconds')"
        }
        Backend::MySql => "(CURRENT_TIMESTAMP(3) + INTERVAL (? * 1000) MICROSECOND)",
    }
}

/// The row groups of a multi-row `INSERT … VALUES`, one per row; many rows
/// in one statement are one round trip instead of one each.
pub fn value_rows<T>(rows: &[T], group: impl Fn(&T) -> String) -> String {
    rows.iter().map(group).collect::<Vec<_>>().join(", ")
}

/// Deletes up to `?` rows of `table` whose `column` is before now: MySQL
/// takes `DELETE … LIMIT`, SQLite (built without that option) a sub-select.
pub fn delete_expired(backend: Backend, table: &str, column: &str) -> String {
    let now = now_ms(backend);
    match backend {
        Backend::Sqlite => format!(
            "DELETE FROM {table} WHERE id IN (SELECT id FROM {table} WHERE {column} < {now} LIMIT ?)"
        ),
        Backend::MySql => format!("DELETE FROM {table} WHERE {column} < {now} LIMIT ?"),
    }
}
