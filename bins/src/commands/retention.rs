//! `outbox retention`: drop whole daily partitions past retention (PostgreSQL).

use crate::wiring;

pub async fn run(database: &str, older_than: std::time::Duration) -> outbox_core::Result<()> {
    let db = wiring::database(database)?;
    #[cfg(feature = "postgres")]
    {
        let age = chrono::Duration::from_std(older_than)
            .map_err(|_| outbox_core::Error::invalid("older_than", "too long"))?;
        let report = db.retention(chrono::Utc::now() - age).await?;
        for day in &report.dropped {
            println!("dropped {day}");
        }
        for (day, pending) in &report.kept {
            println!("kept {day}: {pending} events without a terminal outcome");
        }
        println!(
            "retention: {} days dropped, {} kept",
            report.dropped.len(),
            report.kept.len()
        );
        Ok(())
    }
    #[cfg(not(feature = "postgres"))]
    {
        let _ = (db, older_than);
        Err(outbox_core::Error::invalid(
            "database",
            "retention needs the `postgres` feature and a postgres:// database",
        ))
    }
}
