//! `outbox fanout replay`: release an account parked behind a dead letter. The request
//! is recorded (append-only) in the fan-out store; the running `outbox fanout` picks
//! it up within about a second and re-publishes the account's recorded messages in
//! order, before anything newer of that account.

use outbox_core::{Account, DeadLetterState, Error, Result};

use crate::wiring;

#[derive(Debug, Clone, clap::Args)]
#[command(group = clap::ArgGroup::new("which").required(true).args(["account", "all_parked"]))]
pub struct ReplayArgs {
    /// The fan-out store: sqlite://PATH or postgres://…[?schema=NAME]
    #[arg(long)]
    pub database: Option<String>,
    /// The destination (a `--to` URL of `outbox fanout`), once it accepts the messages.
    #[arg(long)]
    pub to: String,
    /// The account to release.
    #[arg(long)]
    pub account: Option<String>,
    /// Release every account parked at that destination.
    #[arg(long)]
    pub all_parked: bool,
}

pub async fn run(args: ReplayArgs) -> Result<()> {
    let destination = wiring::destination_name(&args.to)?;
    let accounts: Vec<Account> = match &args.account {
        Some(account) => {
            vec![Account::parse(account).map_err(|e| e.with("field", "account"))?]
        }
        None => Vec::new(),
    };
    let store =
        wiring::fanout_store(&crate::config::fanout_database(args.database.as_deref())?).await?;
    let states = store.dead_letter_accounts(&destination).await?;
    let accounts = if args.all_parked {
        let parked: Vec<Account> = states
            .iter()
            .filter(|a| a.state() == DeadLetterState::Parked)
            .map(|a| a.account.clone())
            .collect();
        if parked.is_empty() {
            println!("no account is parked at {destination}");
        }
        parked
    } else {
        accounts
    };
    for account in accounts {
        let request = store
            .request_replay(&destination, &account)
            .await
            .map_err(|e| match e.kind() {
                outbox_core::ErrorKind::NotFound => Error::invalid("account", e.message()),
                _ => e,
            })?;
        let state = states.iter().find(|a| a.account == account);
        println!(
            "replay #{} requested for {} at {destination}: from the refused sequence {} ({}); \
             the running `outbox fanout` re-publishes its dead letters in order",
            request.id,
            account.as_str(),
            state.map_or(0, |s| s.refused_sequence),
            state.map_or("parked", |s| s.state().as_str()),
        );
    }
    Ok(())
}
