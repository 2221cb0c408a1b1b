//! Progress of long interactive commands (`enqueue` of a large file, `relay --once`,
//! reconciliation, catch-up) on standard error. Drawn only when standard error is a
//! terminal: a pipe, a file or a scheduler's log gets nothing, so scripts that read
//! the output see only the results.

use std::io::IsTerminal;
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// A bar over `len` items, labelled `what`.
pub fn bar(len: u64, what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(len), target());
    if let Ok(style) = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({elapsed})") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(what.to_owned());
    bar
}

/// A spinner counting items of unknown number, labelled `what`.
pub fn spinner(what: &str) -> ProgressBar {
    spinning("{spinner} {msg} {pos} ({elapsed})", what)
}

fn spinning(template: &str, what: &str) -> ProgressBar {
    let spinner = ProgressBar::with_draw_target(None, target());
    if let Ok(style) = ProgressStyle::with_template(template) {
        spinner.set_style(style);
    }
    spinner.set_message(what.to_owned());
    spinner.enable_steady_tick(Duration::from_millis(200));
    spinner
}

fn target() -> ProgressDrawTarget {
    if std::io::stderr().is_terminal() {
        ProgressDrawTarget::stderr()
    } else {
        ProgressDrawTarget::hidden()
    }
}

/// Runs `work` with a spinner showing how long it has been running.
pub async fn while_running<T>(what: &str, work: impl std::future::Future<Output = T>) -> T {
    let spinner = spinning("{spinner} {msg} ({elapsed})", what);
    let outcome = work.await;
    spinner.finish_and_clear();
    outcome
}
