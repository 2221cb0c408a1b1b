//! docs/alerts.yaml: its structure, that it names only metrics the binaries export,
//! that docs/METRICS.md documents every metric and alert, and — with promtool — that
//! Prometheus accepts the rules and their unit tests (docs/alerts.test.yaml) pass.
//!
//! promtool comes from Debian's `prometheus` package (`scripts/promtool.sh install`,
//! which scripts/test.sh runs). Without it the promtool test says it skipped, unless
//! `OUTBOX_TEST_REQUIRE` is set: then it fails.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use outbox_core::metrics::{Kind, NAMES};

fn docs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs")
}

fn read(file: &str) -> String {
    std::fs::read_to_string(docs().join(file)).unwrap_or_else(|e| panic!("docs/{file}: {e}"))
}

fn rules() -> Vec<serde_json::Value> {
    let doc: serde_json::Value = serde_norway::from_str(&read("alerts.yaml")).expect("valid YAML");
    let groups = doc["groups"].as_array().expect("a groups list");
    assert!(!groups.is_empty(), "at least one group");
    groups
        .iter()
        .flat_map(|g| {
            assert!(
                g["name"].as_str().is_some_and(|n| !n.is_empty()),
                "a named group: {g}"
            );
            g["rules"].as_array().expect("a rules list").clone()
        })
        .collect()
}

/// Every series name the binaries can expose (histograms with their three series).
fn exported() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for &(name, kind, _) in NAMES {
        names.insert(name.to_owned());
        if kind == Kind::Histogram {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{name}{suffix}"));
            }
        }
    }
    names.extend(
        outbox_bins::admin::dev_ledger::NAMES
            .iter()
            .map(|n| n.to_string()),
    );
    names
}

/// The `outbox_…` names an expression reads.
fn metrics_in(expr: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(start) = rest.find("outbox_") {
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        found.push(tail[..end].to_owned());
        rest = &tail[end..];
    }
    found
}

#[test]
fn every_rule_is_an_alert_with_severity_runbook_and_exported_metrics() {
    let rules = rules();
    let exported = exported();
    let mut alerts = BTreeSet::new();
    for rule in &rules {
        let alert = rule["alert"]
            .as_str()
            .unwrap_or_else(|| panic!("an alert rule: {rule}"));
        assert!(alerts.insert(alert.to_owned()), "{alert} twice");
        let expr = rule["expr"]
            .as_str()
            .unwrap_or_else(|| panic!("{alert}: an expr"));
        let metrics = metrics_in(expr);
        assert!(
            !metrics.is_empty(),
            "{alert} reads no outbox metric: {expr}"
        );
        for metric in metrics {
            assert!(
                exported.contains(&metric),
                "{alert} reads {metric}, which nothing exports"
            );
        }
        let severity = rule["labels"]["severity"].as_str();
        assert!(
            matches!(severity, Some("warning" | "critical")),
            "{alert}: severity warning or critical, not {severity:?}"
        );
        for annotation in ["summary", "description"] {
            assert!(
                rule["annotations"][annotation]
                    .as_str()
                    .is_some_and(|t| !t.is_empty()),
                "{alert}: a {annotation}"
            );
        }
        assert_eq!(
            rule["annotations"]["runbook"].as_str(),
            Some(format!("docs/RUNBOOK.md#{}", alert.to_lowercase()).as_str()),
            "{alert}: its runbook section"
        );
    }
    let expected: BTreeSet<String> = [
        "OutboxRelayNotMoving",
        "OutboxAccountStopped",
        "OutboxGapOlderThanAlarm",
        "OutboxFanoutLoopDead",
        "OutboxCdcSlotWalGrowing",
        "OutboxPostgresHorizonHeld",
        "OutboxCriticalExceptionOpen",
    ]
    .map(str::to_owned)
    .into();
    assert_eq!(alerts, expected);
}

#[test]
fn metrics_md_documents_every_metric_and_every_alert() {
    let doc = read("METRICS.md");
    let names = NAMES
        .iter()
        .map(|(name, _, _)| *name)
        .chain(outbox_bins::admin::dev_ledger::NAMES.iter().copied());
    for name in names {
        assert!(
            doc.contains(&format!("`{name}`")),
            "docs/METRICS.md does not document {name}"
        );
    }
    for rule in rules() {
        let alert = rule["alert"].as_str().unwrap();
        assert!(
            doc.contains(&format!("`{alert}`")),
            "docs/METRICS.md does not name {alert}"
        );
    }
}

fn promtool() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("OUTBOX_PROMTOOL") {
        return Some(PathBuf::from(path));
    }
    let cached = Path::new("/var/cache/ledger-outbox/promtool/usr/bin/promtool");
    if cached.is_file() {
        return Some(cached.to_owned());
    }
    Command::new("promtool")
        .arg("--version")
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|_| PathBuf::from("promtool"))
}

#[test]
fn promtool_accepts_the_rules_and_their_unit_tests_pass() {
    let Some(promtool) = promtool() else {
        if std::env::var_os("OUTBOX_TEST_REQUIRE").is_some_and(|v| !v.is_empty()) {
            panic!(
                "promtool is missing and OUTBOX_TEST_REQUIRE is set: run scripts/promtool.sh install"
            );
        }
        eprintln!(
            "SKIPPED: no promtool (scripts/promtool.sh install); set OUTBOX_TEST_REQUIRE=1 to make this a failure"
        );
        return;
    };
    for args in [
        ["check", "rules", "alerts.yaml"],
        ["test", "rules", "alerts.test.yaml"],
    ] {
        let out = Command::new(&promtool)
            .args(args)
            .current_dir(docs())
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", promtool.display()));
        assert!(
            out.status.success(),
            "promtool {}:\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Every alert's runbook link lands on a heading of docs/RUNBOOK.md, and every
/// command the runbook tells the operator to run is one the binary has.
#[test]
fn the_runbook_has_a_section_per_alert_and_names_only_existing_commands() {
    let runbook = read("RUNBOOK.md");
    let headings: BTreeSet<String> = runbook
        .lines()
        .filter_map(|l| l.strip_prefix("### "))
        .map(|h| h.trim().to_lowercase())
        .collect();
    for rule in rules() {
        let alert = rule["alert"].as_str().unwrap();
        assert!(
            headings.contains(&alert.to_lowercase()),
            "docs/RUNBOOK.md has no `### {alert}` section"
        );
    }
    // `outbox WORD …` in code spans: each WORD is a subcommand of the binary.
    let help = std::process::Command::new(env!("CARGO_BIN_EXE_outbox"))
        .arg("--help")
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let known: BTreeSet<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert!(
        known.contains("relay") && known.contains("status"),
        "{help}"
    );
    let mut named = BTreeSet::new();
    for span in runbook.split('`').skip(1).step_by(2) {
        let words: Vec<&str> = span.split_whitespace().collect();
        if words.first() == Some(&"outbox") {
            let command = words
                .iter()
                .skip(1)
                .find(|w| !w.starts_with('-') && !w.contains('/') && **w != "…")
                .copied();
            if let Some(command) = command {
                named.insert(command.to_owned());
            }
        }
    }
    assert!(named.len() >= 8, "{named:?}");
    for command in &named {
        assert!(
            known.contains(command.as_str()),
            "docs/RUNBOOK.md names `outbox {command}`, which does not exist"
        );
    }
}
