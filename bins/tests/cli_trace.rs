//! The trace context through the real binary: `outbox enqueue` stores a line's
//! `traceparent`/`tracestate` in the payload's metadata and refuses a malformed one
//! naming the line and the field; with the `otel` feature and an OTLP endpoint, the
//! enqueue span is exported over OTLP/HTTP to a collector on loopback.

use std::path::Path;
use std::process::{Command, Output};

use rusqlite::Connection;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn outbox(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_outbox"))
        .args(args)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .envs(env.iter().copied())
        .output()
        .expect("run outbox")
}

fn line(merchant: u32, trace: &str) -> String {
    format!(
        r#"{{"account":"merchants:{merchant}","postings":[{{"source":"world","destination":"merchants:{merchant}:available","amount":100,"asset":"USD/2"}}]{trace}}}"#
    )
}

fn migrated(dir: &Path) -> String {
    let url = format!("sqlite://{}", dir.join("outbox.db").display());
    let out = outbox(&["migrate", "--database", &url], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    url
}

fn enqueue(dir: &Path, url: &str, lines: &[String], env: &[(&str, &str)]) -> Output {
    let file = dir.join("payouts.jsonl");
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    outbox(
        &[
            "enqueue",
            "--database",
            url,
            "--file",
            file.to_str().unwrap(),
        ],
        env,
    )
}

fn stored_payloads(dir: &Path) -> Vec<String> {
    let conn = Connection::open(dir.join("outbox.db")).unwrap();
    let mut stmt = conn
        .prepare("SELECT payload FROM outbox_events ORDER BY position")
        .unwrap();
    stmt.query_map([], |row| row.get::<_, Vec<u8>>(0))
        .unwrap()
        .map(|p| String::from_utf8(p.unwrap()).unwrap())
        .collect()
}

#[test]
fn a_lines_trace_context_is_stored_in_the_payload_metadata() {
    let dir = tempfile::tempdir().unwrap();
    let url = migrated(dir.path());
    let traced = line(
        1,
        &format!(r#","traceparent":"{TRACEPARENT}","tracestate":"vendor=1""#),
    );
    let out = enqueue(dir.path(), &url, &[traced, line(2, "")], &[]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let payloads = stored_payloads(dir.path());
    let metadata = |p: &str| -> serde_json::Value {
        serde_json::from_str::<serde_json::Value>(p).unwrap()["post"]["metadata"].clone()
    };
    assert_eq!(metadata(&payloads[0])["traceparent"], TRACEPARENT);
    assert_eq!(metadata(&payloads[0])["tracestate"], "vendor=1");
    assert!(
        metadata(&payloads[1]).get("traceparent").is_none(),
        "{}",
        payloads[1]
    );
}

#[test]
fn a_malformed_traceparent_is_refused_naming_the_line_and_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let url = migrated(dir.path());
    let bad = line(2, r#","traceparent":"00-not-a-trace-01""#);
    let out = enqueue(dir.path(), &url, &[line(1, ""), bad], &[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("line=2") && err.contains("invalid traceparent"),
        "{err}"
    );
    assert!(
        stored_payloads(dir.path()).is_empty(),
        "nothing of the file is committed"
    );
}

#[cfg(feature = "otel")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_an_otlp_endpoint_the_enqueue_span_is_exported() {
    use std::sync::{Arc, Mutex};

    use axum::body::Bytes;
    use axum::http::HeaderMap;
    use axum::routing::post;

    type Received = Arc<Mutex<Vec<(Option<String>, Vec<u8>)>>>;
    let received: Received = Arc::default();
    let collector = axum::Router::new().route(
        "/v1/traces",
        post({
            let received = received.clone();
            move |headers: HeaderMap, body: Bytes| async move {
                let content_type = headers
                    .get("content-type")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                received.lock().unwrap().push((content_type, body.to_vec()));
                ""
            }
        }),
    );
    let port = outbox_testkit::ports::free_port();
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let server = tokio::spawn(async move { axum::serve(listener, collector).await });

    let dir = tempfile::tempdir().unwrap();
    let url = migrated(dir.path());
    let endpoint = format!("http://127.0.0.1:{port}");
    let out = tokio::task::spawn_blocking({
        let dir = dir.path().to_owned();
        move || {
            enqueue(
                &dir,
                &url,
                &[line(1, "")],
                &[("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)],
            )
        }
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The binary flushes its spans before it exits: they are here already.
    let received = received.lock().unwrap().clone();
    assert!(
        !received.is_empty(),
        "no OTLP request reached the collector"
    );
    let (content_type, body) = &received[0];
    assert_eq!(content_type.as_deref(), Some("application/x-protobuf"));
    let contains = |needle: &[u8]| body.windows(needle.len()).any(|w| w == needle);
    assert!(
        contains(b"outbox.enqueue"),
        "the enqueue span is in the export"
    );
    assert!(contains(b"outbox"), "the service name");

    // The payload took the exported span's context: its trace id is in the export.
    let payloads = stored_payloads(dir.path());
    let stored: serde_json::Value = serde_json::from_str(&payloads[0]).unwrap();
    let traceparent = stored["post"]["metadata"]["traceparent"].as_str().unwrap();
    let trace_id: Vec<u8> = (3..35)
        .step_by(2)
        .map(|i| u8::from_str_radix(&traceparent[i..i + 2], 16).unwrap())
        .collect();
    assert!(
        contains(&trace_id),
        "the stored trace id is the exported span's"
    );
    server.abort();
}
