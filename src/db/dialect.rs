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
