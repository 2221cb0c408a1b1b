//! `outbox fanout` and `outbox consume` refuse bad destinations and sources with an
//! error naming the flag, before binding or connecting anything; and the HTTP path
//! works binary to binary: fanout → signed POST → consume.

use std::process::{Command, Output, Stdio};

fn outbox(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(args)
        .env("OUTBOX_LOG", "error")
        .stdin(Stdio::null())
        .output()
        .expect("run outbox")
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn fanout_names_a_bad_destination() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("fanout.db").display());
    let base = [
        "fanout",
        "--listen",
        "127.0.0.1:0",
        "--database",
        &db,
        "--secret",
        "s",
    ];
    for (to, needle) in [
        ("ftp://example/x", "ftp:// is not a destination"),
        ("not a url", "is not a URL"),
        ("https://127.0.0.1:9/hop2/messages", "--publish-secret"),
    ] {
        let output = outbox(&[&base[..], &["--to", to]].concat());
        assert!(!output.status.success(), "{to} was accepted");
        let err = stderr(&output);
        assert!(err.contains(needle), "{to}: {err}");
    }
}

#[test]
fn consume_names_a_bad_source() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("treasury.db").display());
    for (from, needle) in [
        ("nats://127.0.0.1:4222/x", "nats:// is not a source"),
        ("http://not-an-address", "expected http://HOST:PORT"),
        ("http://127.0.0.1:0", "--secret"),
    ] {
        let output = outbox(&["consume", "--from", from, "--database", &db]);
        assert!(!output.status.success(), "{from} was accepted");
        let err = stderr(&output);
        assert!(err.contains(needle), "{from}: {err}");
    }
}

#[cfg(feature = "amqp")]
#[test]
fn amqp_urls_need_an_exchange() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("treasury.db").display());
    let output = outbox(&[
        "consume",
        "--from",
        "amqp://guest:guest@127.0.0.1:5672/%2f",
        "--database",
        &db,
    ]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("?exchange=NAME"),
        "{}",
        stderr(&output)
    );
}

#[cfg(not(feature = "kafka"))]
#[test]
fn a_transport_not_compiled_in_names_its_feature() {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("treasury.db").display());
    let output = outbox(&[
        "consume",
        "--from",
        "kafka://127.0.0.1:9092/t",
        "--database",
        &db,
    ]);
    assert!(!output.status.success());
    assert!(
        stderr(&output).contains("--features kafka"),
        "{}",
        stderr(&output)
    );
}

/// Runs `outbox fanout` with `to` destinations, bounded: a process still running
/// after 20 s was accepted (and is killed).
fn fanout_with(to: &[&str]) -> Result<Output, String> {
    let dir = tempfile::tempdir().unwrap();
    let db = format!("sqlite://{}", dir.path().join("fanout.db").display());
    let mut args = vec![
        "fanout",
        "--listen",
        "127.0.0.1:0",
        "--database",
        &db,
        "--secret",
        "s",
        "--publish-secret",
        "p",
    ];
    for url in to {
        args.extend(["--to", url]);
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(&args)
        .env("OUTBOX_LOG", "error")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run outbox");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            let output = child.wait_with_output().unwrap();
            return Err(format!(
                "still running after 20 s: {}",
                String::from_utf8_lossy(&output.stdout)
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    Ok(child.wait_with_output().unwrap())
}

#[test]
fn fanout_refuses_two_destinations_with_one_identity() {
    let mut cases = vec![(
        "http://127.0.0.1:9/hop2/messages?tenant=a",
        "http://user:s3cret@127.0.0.1:9/hop2/messages?tenant=b",
        "http://127.0.0.1:9/hop2/messages",
    )];
    if cfg!(feature = "amqp") {
        cases.push((
            "amqp://guest:guest@127.0.0.1:5672/%2f?exchange=dup-events&queues=4",
            "amqp://app:s3cret@127.0.0.1/%2F?exchange=dup-events",
            "amqp://127.0.0.1:5672/%2F?exchange=dup-events",
        ));
    }
    if cfg!(feature = "kafka") {
        cases.push((
            "kafka://127.0.0.1:9092,127.0.0.2:9092/dup-events?partitions=4",
            "kafka://127.0.0.2:9092,127.0.0.1/dup-events",
            "kafka://127.0.0.1:9092,127.0.0.2:9092/dup-events",
        ));
    }
    for (first, second, identity) in cases {
        let output = fanout_with(&["http://127.0.0.1:9/other", first, second])
            .unwrap_or_else(|e| panic!("{first} and {second} were both accepted: {e}"));
        assert!(!output.status.success(), "{first} and {second}");
        let err = stderr(&output);
        assert!(
            err.contains("--to #2") && err.contains("--to #3") && err.contains(identity),
            "{first} and {second}: {err}"
        );
        assert!(!err.contains("s3cret"), "a credential in the error: {err}");
    }
}
