//! `outbox enqueue`: a JSON-lines file of payouts into the outbox, all or nothing.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use outbox_core::{Backoff, Error, ErrorKind, NewEvent, RawNewEvent, Result, RetryPolicy};

use crate::wiring;

/// How often a whole-file transaction is retried when the database is busy.
const BUSY_RETRIES: u32 = 5;

pub async fn run(database: &str, file: &Path) -> Result<()> {
    let db = wiring::database(database)?;
    let text = read(file)?;
    let (events, lines) = parse(&text)?;
    let numbered: Vec<(usize, NewEvent)> = lines.iter().copied().zip(events).collect();
    if numbered.is_empty() {
        return Err(Error::invalid(
            "file",
            format!("{} holds no payouts", file.display()),
        ));
    }
    // The whole file is one transaction: a busy database retries it whole.
    let busy = RetryPolicy {
        backoff: Backoff {
            initial: Duration::from_millis(50),
            max: Duration::from_secs(1),
        },
        max_retries: Some(BUSY_RETRIES),
    };
    let progress = crate::progress::bar(numbered.len() as u64, "enqueue");
    let stored = busy
        .run("enqueue", || {
            db.enqueue_all(numbered.clone(), progress.clone())
        })
        .await;
    progress.finish_and_clear();
    let stored = stored?;
    let accounts: BTreeSet<_> = stored.iter().map(|e| e.account.as_str()).collect();
    println!(
        "enqueued {} events for {} accounts from {} (positions {} to {})",
        stored.len(),
        accounts.len(),
        file.display(),
        stored[0].position,
        stored[stored.len() - 1].position
    );
    Ok(())
}

/// The whole file, or standard input for `-`; an error names the field `file`.
pub(super) fn read(file: &Path) -> Result<String> {
    let mut text = String::new();
    let outcome = if file == Path::new("-") {
        std::io::stdin().read_to_string(&mut text).map(drop)
    } else {
        std::fs::read_to_string(file).map(|t| text = t)
    };
    outcome.map_err(|e| {
        Error::new(
            ErrorKind::Config,
            format!("cannot read {}: {e}", file.display()),
        )
        .with("field", "file")
    })?;
    Ok(text)
}

/// Parses every non-blank line; the first bad one fails the whole file, naming its line.
fn parse(text: &str) -> Result<(Vec<NewEvent>, Vec<usize>)> {
    let mut events = Vec::new();
    let mut lines = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let number = index + 1;
        if line.trim().is_empty() {
            continue;
        }
        let raw: RawNewEvent = serde_json::from_str(line)
            .map_err(|e| Error::invalid("json", e.to_string()).with("line", number))?;
        let event = raw.into_new_event().map_err(|e| e.with("line", number))?;
        events.push(event);
        lines.push(number);
    }
    Ok((events, lines))
}
