//! `outbox fanout dead-letters`: what each destination refused for good and what waits
//! behind it, per account, with where each account stands (parked, replaying,
//! replayed).

use std::collections::BTreeMap;

use outbox_core::{Account, DeadLetter, DeadLetterQuery, FanoutStore, Result};

use crate::wiring;

#[derive(Debug, Clone, clap::Args)]
pub struct DeadLettersArgs {
    /// The fan-out store: sqlite://PATH or postgres://…[?schema=NAME]
    #[arg(long)]
    pub database: Option<String>,
    /// Only this destination (a `--to` URL of `outbox fanout`).
    #[arg(long)]
    pub to: Option<String>,
    /// Only this account.
    #[arg(long)]
    pub account: Option<String>,
    /// One JSON object per dead letter instead of text.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: DeadLettersArgs) -> Result<()> {
    let destination = args
        .to
        .as_deref()
        .map(wiring::destination_name)
        .transpose()?;
    let account = args
        .account
        .as_deref()
        .map(|a| Account::parse(a).map_err(|e| e.with("field", "account")))
        .transpose()?;
    let store =
        wiring::fanout_store(&crate::config::fanout_database(args.database.as_deref())?).await?;
    let letters = read_all(store.as_ref(), destination.as_deref(), account.as_ref()).await?;
    let mut by_destination: BTreeMap<String, Vec<DeadLetter>> = BTreeMap::new();
    for letter in letters {
        by_destination
            .entry(letter.destination.clone())
            .or_default()
            .push(letter);
    }
    if by_destination.is_empty() && !args.json {
        println!("no dead letters");
    }
    for (destination, letters) in by_destination {
        let states: BTreeMap<String, _> = store
            .dead_letter_accounts(&destination)
            .await?
            .into_iter()
            .map(|a| (a.account.as_str().to_owned(), a))
            .collect();
        let mut by_account: BTreeMap<&str, Vec<&DeadLetter>> = BTreeMap::new();
        for letter in &letters {
            by_account
                .entry(letter.account.as_str())
                .or_default()
                .push(letter);
        }
        for (account, letters) in by_account {
            let Some(state) = states.get(account) else {
                continue;
            };
            if !args.json {
                println!(
                    "{destination}  {account}  {}: refused sequence {} (position {}), {} records, replayed through position {}",
                    state.state().as_str(),
                    state.refused_sequence,
                    state.refused_position,
                    state.records,
                    state.replayed_through
                );
            }
            for letter in letters {
                let replayed = letter.position <= state.replayed_through;
                if args.json {
                    println!(
                        "{}",
                        serde_json::json!({
                            "id": letter.id,
                            "destination": letter.destination,
                            "position": letter.position,
                            "account": letter.account.as_str(),
                            "sequence": letter.sequence,
                            "instruction_id": letter.instruction_id,
                            "reason": letter.reason.as_str(),
                            "error": letter.error,
                            "dead_lettered_at": letter.dead_lettered_at.to_rfc3339(),
                            "account_state": state.state().as_str(),
                            "replayed": replayed,
                        })
                    );
                } else {
                    println!(
                        "  #{} position {} sequence {} {} at {}{} instruction {}: {}",
                        letter.id,
                        letter.position,
                        letter.sequence,
                        letter.reason.as_str(),
                        letter.dead_lettered_at.to_rfc3339(),
                        if replayed { " (replayed)" } else { "" },
                        letter.instruction_id,
                        letter.error
                    );
                }
            }
        }
    }
    Ok(())
}

async fn read_all(
    store: &dyn FanoutStore,
    destination: Option<&str>,
    account: Option<&Account>,
) -> Result<Vec<DeadLetter>> {
    let mut all = Vec::new();
    let mut after_id = 0;
    loop {
        let page = store
            .read_dead_letters(&DeadLetterQuery {
                destination,
                account,
                after_id,
                ..DeadLetterQuery::default()
            })
            .await?;
        let Some(last) = page.last() else {
            return Ok(all);
        };
        after_id = last.id;
        all.extend(page);
    }
}
