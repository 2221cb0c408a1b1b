//! The treasury's own tables, beside the inbox tables the outbox migrations create.

use outbox_core::Result;
use outbox_store_postgres::map_error;
use sqlx::PgPool;

/// `merchant_balances` is the treasury's book: what each merchant may be paid, per
/// asset, in minor units. `treasury_journal` says which instruction moved it: one row
/// per applied posting or reversal, append-only (the trigger refuses UPDATE, DELETE
/// and TRUNCATE), keyed on the instruction id so that a second application of one
/// instruction could never commit, whatever happened upstream. `entry` numbers the
/// rows in the order they were booked: one account's rows follow its sequence.
const TABLES: &str = "
CREATE TABLE IF NOT EXISTS merchant_balances (
    merchant        TEXT   NOT NULL,
    asset           TEXT   NOT NULL,
    available_minor BIGINT NOT NULL,
    PRIMARY KEY (merchant, asset)
);

CREATE TABLE IF NOT EXISTS treasury_journal (
    entry          BIGINT      GENERATED ALWAYS AS IDENTITY,
    instruction_id TEXT        PRIMARY KEY,
    account        TEXT        NOT NULL,
    sequence       BIGINT      NOT NULL,
    kind           TEXT        NOT NULL CHECK (kind IN ('committed', 'reverted')),
    ledger_tx_id   BIGINT,
    applied_at     TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE OR REPLACE FUNCTION treasury_journal_refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'treasury_journal is append-only: % refused', TG_OP;
END
$$;

CREATE OR REPLACE TRIGGER treasury_journal_append_only
    BEFORE UPDATE OR DELETE ON treasury_journal
    FOR EACH ROW EXECUTE FUNCTION treasury_journal_refuse_change();

CREATE OR REPLACE TRIGGER treasury_journal_no_truncate
    BEFORE TRUNCATE ON treasury_journal
    FOR EACH STATEMENT EXECUTE FUNCTION treasury_journal_refuse_change();
";

/// Creates the treasury's tables if they are missing, in the pool's schema.
///
/// # Errors
/// Storage errors, classified by `map_error`.
pub async fn create_tables(pool: &PgPool) -> Result<()> {
    let mut tx = pool.begin().await.map_err(map_error)?;
    // Two instances starting together would race on CREATE … IF NOT EXISTS (a
    // unique violation in the catalogue): the first one creates, the second waits.
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('treasury-service tables'))")
        .execute(&mut *tx)
        .await
        .map_err(map_error)?;
    sqlx::raw_sql(TABLES)
        .execute(&mut *tx)
        .await
        .map_err(map_error)?;
    tx.commit().await.map_err(map_error)
}
