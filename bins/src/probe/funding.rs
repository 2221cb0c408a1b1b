//! Funding a probe ledger: every account a payload debits gets enough from `@world`
//! first, so the payloads are postable as they are, even by a ledger that posts
//! each of them several times (which is what a misbehaving one does).

use std::collections::BTreeMap;
use std::sync::LazyLock;

use outbox_core::{LedgerCommand, PostBody, Result, Script};
use regex::Regex;
use serde_json::json;

use super::ledger::{ProbeLedger, refused};

/// Each debit is funded this many times over (plus a few minor units for the
/// changed-body step): one post per step that may post, were the ledger broken.
const TIMES: u64 = 4;

/// What to credit from `@world`: (account, asset) → minor units.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Funding {
    pub credits: BTreeMap<(String, String), u64>,
    /// Payloads whose debits could not be read (a script beyond the simple forms),
    /// named for the report.
    pub unread: Vec<String>,
}

impl Funding {
    /// Adds the debits of `command` (labelled `label` in the report).
    pub fn add(&mut self, label: &str, command: &LedgerCommand) {
        let debits = match command {
            LedgerCommand::Post(post) => match &post.body {
                PostBody::Postings(postings) => postings
                    .iter()
                    .map(|p| {
                        (
                            p.source.as_str().to_owned(),
                            p.asset.as_str().to_owned(),
                            p.amount.minor_units(),
                        )
                    })
                    .collect(),
                PostBody::Script(script) => match script_debits(script) {
                    Some(debits) => debits,
                    None => {
                        self.unread.push(label.to_owned());
                        return;
                    }
                },
            },
            // A revert moves money back from where its target put it.
            LedgerCommand::Revert(_) => Vec::new(),
        };
        for (account, asset, amount) in debits {
            if account == "world" {
                continue;
            }
            let credit = self.credits.entry((account, asset)).or_insert(0);
            *credit = credit.saturating_add(amount.saturating_mul(TIMES).saturating_add(TIMES));
        }
    }

    /// The accounts funded, for the report: `merchants:4471:available USD/2 194000004`.
    pub fn lines(&self) -> Vec<String> {
        self.credits
            .iter()
            .map(|((account, asset), amount)| format!("{account} {asset} {amount}"))
            .collect()
    }

    /// Posts one funding transaction from `@world` into `ledger`.
    ///
    /// # Errors
    /// The ledger's refusal, or a transport error.
    pub async fn post(&self, client: &ProbeLedger, ledger: &str) -> Result<()> {
        if self.credits.is_empty() {
            return Ok(());
        }
        let postings: Vec<_> = self
            .credits
            .iter()
            .map(|((account, asset), amount)| {
                json!({"source": "world", "destination": account, "amount": amount, "asset": asset})
            })
            .collect();
        let body = json!({"postings": postings, "metadata": {"outbox_probe": "funding"}});
        let answer = client
            .write(ledger, &["transactions"], None, body.to_string().as_bytes())
            .await?;
        if answer.is_success() {
            return Ok(());
        }
        Err(refused(&format!("funding ledger {ledger:?}"), &answer))
    }
}

static SEND: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"send\s+(?:\[\s*([A-Z][A-Z0-9_]*(?:/[0-9]+)?)\s+([0-9]+)\s*\]|\$([a-z_][a-z0-9_]*))\s*\(\s*source\s*=\s*(@[A-Za-z0-9_:-]+|\$[a-z_][a-z0-9_]*)",
    )
    .expect("static regex")
});

/// The debits of a script of the simple form `send [ASSET N] | $m ( source = @a | $a …`;
/// `None` when any `send` is of another form (several sources, `max`, …).
fn script_debits(script: &Script) -> Option<Vec<(String, String, u64)>> {
    let sends = script.plain.matches("send").count();
    let mut debits = Vec::new();
    for found in SEND.captures_iter(&script.plain) {
        let (asset, amount) = match (found.get(1), found.get(2), found.get(3)) {
            (Some(asset), Some(amount), _) => {
                (asset.as_str().to_owned(), amount.as_str().to_owned())
            }
            (_, _, Some(var)) => {
                let (asset, amount) = script.vars.get(var.as_str())?.split_once(' ')?;
                (asset.to_owned(), amount.trim().to_owned())
            }
            _ => return None,
        };
        let source = &found[4];
        let account = match source.strip_prefix('$') {
            Some(var) => script.vars.get(var)?.trim_start_matches('@').to_owned(),
            None => source.trim_start_matches('@').to_owned(),
        };
        debits.push((account, asset, amount.parse().ok()?));
    }
    (debits.len() == sends).then_some(debits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use outbox_core::{Metadata, PostCommand};

    fn script(plain: &str, vars: &[(&str, &str)]) -> LedgerCommand {
        LedgerCommand::Post(PostCommand {
            body: PostBody::Script(Script {
                plain: plain.into(),
                vars: vars
                    .iter()
                    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                    .collect(),
            }),
            reference: None,
            metadata: Metadata::new(),
        })
    }

    #[test]
    fn script_debits_are_read_from_the_simple_forms() {
        let mut funding = Funding::default();
        funding.add(
            "line 1",
            &script(
                "send [USD/2 100] (\n source = @merchants:1:available\n destination = @b\n)\nsend $m (\n source = $src\n destination = @c\n)",
                &[("m", "EUR/2 7"), ("src", "merchants:2")],
            ),
        );
        funding.add(
            "line 2",
            &script(
                "send [USD/2 5] (\n source = @world\n destination = @b\n)",
                &[],
            ),
        );
        assert_eq!(
            funding.lines(),
            ["merchants:1:available USD/2 404", "merchants:2 EUR/2 32"]
        );
        funding.add(
            "line 3",
            &script(
                "send [USD/2 5] (\n source = {\n @a\n @b\n }\n destination = @c\n)",
                &[],
            ),
        );
        assert_eq!(funding.unread, ["line 3"]);
    }
}
