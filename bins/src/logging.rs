//! Log lines on standard error: text with colours only on a terminal (a pipe or a
//! file gets no escape codes), or JSON, one object per line, for log shippers. Event
//! id, account and sequence are span and event fields, so they are JSON fields too.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

use crate::config::{LogFormat, LogSettings};

/// Installs the subscriber. `default_level` applies when `log.level` (`OUTBOX_LOG`)
/// is unset; a level that does not parse is reported and the default used.
pub fn init(settings: &LogSettings, default_level: &str) {
    let filter = match settings.level.as_deref() {
        Some(level) => EnvFilter::try_new(level).unwrap_or_else(|e| {
            eprintln!("warning: log.level {level:?} is not a filter ({e}); using {default_level}");
            EnvFilter::new(default_level)
        }),
        None => EnvFilter::new(default_level),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match settings.format {
        LogFormat::Json => builder
            .json()
            .with_current_span(true)
            .with_span_list(false)
            .init(),
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
    }
}
