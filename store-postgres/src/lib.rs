//! PostgreSQL store (work in progress).
