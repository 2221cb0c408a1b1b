//! Readiness: named conditions the sampler and the loops keep up to date, and the
//! stop signal (a process draining its work is alive but no longer ready).

use std::collections::BTreeMap;
use std::sync::Mutex;

use tokio::sync::watch;

/// What `/readyz` answers from.
#[derive(Debug)]
pub struct Health {
    draining: watch::Receiver<bool>,
    /// Condition → `None` while it holds, or why it does not.
    conditions: Mutex<BTreeMap<String, Option<String>>>,
}

impl Health {
    /// Readiness that turns false for good once `stopping` turns true.
    pub fn new(stopping: watch::Receiver<bool>) -> Self {
        Self {
            draining: stopping,
            conditions: Mutex::default(),
        }
    }

    /// Records whether `condition` holds (`None`) or why not.
    pub fn set(&self, condition: &str, problem: Option<String>) {
        self.conditions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(condition.to_owned(), problem);
    }

    /// `Ok` when ready, else every reason it is not, one per line.
    pub fn readiness(&self) -> Result<(), String> {
        let mut reasons = Vec::new();
        if *self.draining.borrow() {
            reasons.push("draining: a stop was requested".to_owned());
        }
        let conditions = self.conditions.lock().unwrap_or_else(|p| p.into_inner());
        for (condition, problem) in conditions.iter() {
            if let Some(problem) = problem {
                reasons.push(format!("{condition}: {problem}"));
            }
        }
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(reasons.join("\n"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_until_a_condition_fails_or_a_stop_is_requested() {
        let (stop, stopping) = watch::channel(false);
        let health = Health::new(stopping);
        health.set("store", Some("not read yet".to_owned()));
        assert_eq!(health.readiness(), Err("store: not read yet".to_owned()));
        health.set("store", None);
        assert_eq!(health.readiness(), Ok(()));
        health.set("loop http://h/x", Some("ended: boom".to_owned()));
        assert_eq!(
            health.readiness(),
            Err("loop http://h/x: ended: boom".to_owned())
        );
        health.set("loop http://h/x", None);
        stop.send(true).unwrap();
        assert_eq!(
            health.readiness(),
            Err("draining: a stop was requested".to_owned())
        );
    }
}
