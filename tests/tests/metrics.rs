//! The admin servers of the real `outbox relay`, `outbox fanout`, `outbox consume`
//! and `outbox dev-ledger` processes, scraped during end-to-end runs on SQLite and
//! the dev ledger over HTTP: the figures are what happened (the counts equal the
//! printed summaries and the databases), the backlog and its oldest-pending
//! timestamp rise while an account is failing and fall to zero once it is not, and
//! `/readyz` answers 503 with its reason while the relay drains after a stop and
//! after a fan-out loop died of a real store fault.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::process::Process;
use common::*;
use outbox_ledger_dev::{
    DevLedger, DevLedgerConfig, RunningDevLedger, WebhookBackoff, WebhookTarget,
};
use outbox_testkit::ports::free_port;
use outbox_transport_http::WEBHOOK_PATH;

const PUBLISH_SECRET: &str = "metrics-hop2-secret";
/// Every wait for a figure is bounded by this.
const WITHIN: Duration = Duration::from_secs(60);

/// One scrape of `/metrics`: `name{labels} value` lines.
#[derive(Debug)]
struct Scrape(Vec<(String, BTreeMap<String, String>, f64)>);

impl Scrape {
    fn parse(text: &str) -> Self {
        let mut series = Vec::new();
        for line in text
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
        {
            let (head, value) = line.rsplit_once(' ').expect("a value");
            let value: f64 = value
                .parse()
                .unwrap_or_else(|_| panic!("not a number: {line}"));
            let (name, labels) = match head.split_once('{') {
                Some((name, rest)) => {
                    let body = rest.strip_suffix('}').expect("closing brace");
                    let labels = body
                        .split("\",")
                        .filter(|pair| !pair.is_empty())
                        .map(|pair| {
                            let (key, value) = pair.split_once("=\"").expect("key=\"value\"");
                            (key.to_owned(), value.trim_end_matches('"').to_owned())
                        })
                        .collect();
                    (name.to_owned(), labels)
                }
                None => (head.to_owned(), BTreeMap::new()),
            };
            series.push((name, labels, value));
        }
        Self(series)
    }

    /// The value of the series `name` whose labels include `labels`.
    fn get(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.0
            .iter()
            .find(|(n, l, _)| {
                n == name
                    && labels
                        .iter()
                        .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|(_, _, v)| *v)
    }

    fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        self.get(name, labels)
            .unwrap_or_else(|| panic!("no series {name}{labels:?} in the scrape: {self:?}"))
    }
}

async fn http_get(url: &str) -> (u16, String) {
    let answer = reqwest::get(url)
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"));
    let status = answer.status().as_u16();
    (status, answer.text().await.unwrap())
}

async fn scrape(admin: &str) -> Scrape {
    let (status, text) = http_get(&format!("http://{admin}/metrics")).await;
    assert_eq!(status, 200, "GET /metrics: {text}");
    Scrape::parse(&text)
}

/// Scrapes `admin` until `done` holds (bounded); returns that scrape.
async fn scrape_until(admin: &str, what: &str, done: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = Instant::now() + WITHIN;
    loop {
        // Until the admin server is bound (a moment after the process starts), not yet.
        let last = match reqwest::get(format!("http://{admin}/metrics")).await {
            Ok(answer) if answer.status().is_success() => {
                let scrape = Scrape::parse(&answer.text().await.unwrap());
                if done(&scrape) {
                    return scrape;
                }
                format!("{scrape:?}")
            }
            Ok(answer) => format!("status {}", answer.status()),
            Err(e) => format!("no answer: {e}"),
        };
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; last scrape: {last}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Polls `/readyz` until it answers `status` (bounded); returns the body.
async fn readyz_until(admin: &str, status: u16) -> String {
    let deadline = Instant::now() + WITHIN;
    loop {
        // The admin server binds a moment after the intake: until then, not yet.
        let last = match reqwest::get(format!("http://{admin}/readyz")).await {
            Ok(answer) => {
                let got = answer.status().as_u16();
                let body = answer.text().await.unwrap();
                if got == status {
                    return body;
                }
                format!("{got} {body}")
            }
            Err(e) => format!("no answer: {e}"),
        };
        assert!(
            Instant::now() < deadline,
            "/readyz never answered {status}; last: {last}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A number printed in a summary line: `… {label} N…`.
fn printed(lines: &[String], prefix: &str, label: &str) -> f64 {
    let line = lines
        .iter()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting {prefix:?} in {lines:?}"));
    let rest = line
        .split_once(&format!("{label} "))
        .unwrap_or_else(|| panic!("no {label:?} in {line:?}"))
        .1;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap()
}

fn count(path: &std::path::Path, sql: &str) -> f64 {
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.query_row(sql, [], |r| r.get::<_, i64>(0)).unwrap() as f64
}

fn admin_flags(addr: &str) -> Vec<String> {
    vec![
        "--admin-listen".into(),
        addr.into(),
        "--admin-sample-interval-ms".into(),
        "100".into(),
    ]
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn loopback() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// The in-process dev ledger, on a loopback port of its own, sending its webhooks to
/// the fan-out intake on `fanout_port`.
async fn ledger_to(fanout_port: u16) -> RunningDevLedger {
    DevLedger::start(DevLedgerConfig {
        webhooks: vec![WebhookTarget {
            url: format!("http://127.0.0.1:{fanout_port}{WEBHOOK_PATH}"),
            secret: SECRET.to_owned(),
        }],
        webhook_backoff: WebhookBackoff {
            initial: Duration::from_millis(20),
            max: Duration::from_millis(200),
            max_attempts: 100,
        },
        create_ledgers: vec![LEDGER.to_owned()],
        ..DevLedgerConfig::default()
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scraped_figures_follow_an_end_to_end_run() {
    let outbox = Outbox::new().await;
    let (fanout_port, consumer_port) = (free_port(), free_port());
    let (relay_admin, fanout_admin, consumer_admin) = (loopback(), loopback(), loopback());
    let treasury = outbox.dir().join("treasury.db");
    let fanout_db = outbox.dir().join("fanout.db");
    let destination = format!("http://127.0.0.1:{consumer_port}/hop2/messages");

    let mut consume_args = strings(&[
        "consume",
        "--from",
        &format!("http://127.0.0.1:{consumer_port}"),
        "--secret",
        PUBLISH_SECRET,
        "--database",
        &format!("sqlite://{}", treasury.display()),
    ]);
    consume_args.extend(admin_flags(&consumer_admin));
    let consumer = Process::start("consume", &consume_args, "admin: ").await;
    let mut fanout_args = strings(&[
        "fanout",
        "--listen",
        &format!("127.0.0.1:{fanout_port}"),
        "--database",
        &format!("sqlite://{}", fanout_db.display()),
        "--secret",
        SECRET,
        "--to",
        &destination,
        "--publish-secret",
        PUBLISH_SECRET,
        "--poll-interval-ms",
        "50",
    ]);
    fanout_args.extend(admin_flags(&fanout_admin));
    let fanout = Process::start("fanout", &fanout_args, "admin: ").await;
    let ledger = ledger_to(fanout_port).await;

    // merchants:3 first, so its event is the oldest pending while its writes fail.
    let enqueue_started = chrono::Utc::now();
    let events = outbox.enqueue(&[
        fund("3", 10_000),
        fund("1", 10_000),
        fund("2", 10_000),
        payout("1", 2_500),
        payout("2", 2_500),
        payout("3", 2_500),
        // Nothing funds merchants:9: the ledger refuses it (INSUFFICIENT_FUND).
        payout("9", 2_500),
    ]);
    let total = events.len() as f64;
    let oldest = events[0].created_at;
    assert!(oldest >= enqueue_started - chrono::Duration::seconds(1));
    ledger.faults().fail_matching("merchants:3:available");

    let mut relay_args = strings(&[
        "relay",
        "--database",
        &outbox.url(),
        "--ledger-url",
        &ledger.url(),
        "--ledger-name",
        LEDGER,
        "--poll-interval-ms",
        "50",
    ]);
    relay_args.extend(admin_flags(&relay_admin));
    let relay = Process::start("relay", &relay_args, "admin: ").await;
    let relay_labels = [("relay", "relay")];

    // While merchants:3 fails: the others are posted or refused, merchants:3 is parked,
    // and the cursor waits behind its first event, the oldest pending one.
    let during = scrape_until(&relay_admin, "merchants:3 parked behind the others", |s| {
        s.get("outbox_relay_events_posted_total", &relay_labels) == Some(4.0)
            && s.get("outbox_relay_events_rejected_total", &relay_labels) == Some(1.0)
            && s.get("outbox_relay_parked_accounts", &relay_labels) == Some(1.0)
            && s.get("outbox_relay_pending_events", &relay_labels) == Some(total)
            && s.get("outbox_exceptions_open", &[("kind", "rejected")]) == Some(1.0)
    })
    .await;
    assert!(during.value("outbox_relay_events_failed_total", &relay_labels) >= 1.0);
    let oldest_seconds = oldest.timestamp_micros() as f64 / 1e6;
    let reported = during.value(
        "outbox_relay_oldest_pending_timestamp_seconds",
        &relay_labels,
    );
    assert!(
        (reported - oldest_seconds).abs() < 0.01,
        "the oldest pending timestamp is its event's enqueue time: {reported} against {oldest_seconds}"
    );
    assert_eq!(
        during.value("outbox_relay_stopped_accounts", &relay_labels),
        0.0
    );
    assert_eq!(
        during.value("outbox_exceptions_open", &[("kind", "rejected")]),
        1.0,
        "the refusal is an open exception"
    );
    assert_eq!(during.value("outbox_store_up", &[]), 1.0);
    let info = during
        .0
        .iter()
        .find(|(n, _, _)| n == "outbox_info")
        .expect("outbox_info");
    assert_eq!(
        info.1.get("version").map(String::as_str),
        Some(env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(info.1["config"].len(), 12, "{info:?}");
    // A parked account is the relay working as designed: still ready.
    assert_eq!(readyz_until(&relay_admin, 200).await, "ready\n");

    ledger.faults().clear();
    let after = scrape_until(&relay_admin, "the backlog to drain", |s| {
        s.get("outbox_relay_pending_events", &relay_labels) == Some(0.0)
            && s.get("outbox_relay_parked_accounts", &relay_labels) == Some(0.0)
    })
    .await;
    assert_eq!(
        after.value(
            "outbox_relay_oldest_pending_timestamp_seconds",
            &relay_labels
        ),
        0.0,
        "nothing pending: no oldest timestamp"
    );
    assert_eq!(
        after.value("outbox_relay_events_posted_total", &relay_labels),
        6.0
    );
    let bulk_requests = after.value("outbox_relay_bulk_size_count", &relay_labels);
    assert!(bulk_requests >= 1.0);
    // A bulk request is a bulk of many accounts' heads (`call="bulk"`) or one
    // account's ordered run (`call="run"`): each is timed under its own call.
    let timed = |call: &str| {
        after
            .get(
                "outbox_relay_post_duration_seconds_count",
                &[("relay", "relay"), ("call", call)],
            )
            .unwrap_or(0.0)
    };
    assert!(
        timed("bulk") + timed("run") >= bulk_requests,
        "every bulk request is timed"
    );

    // Hop 2: everything the ledger committed or refused reaches the consumer.
    let dest = [("destination", destination.as_str())];
    let fanned = scrape_until(&fanout_admin, "the fan-out to publish everything", |s| {
        s.get("outbox_fanout_messages_published_total", &dest) == Some(total)
            && s.get("outbox_fanout_pending_messages", &dest) == Some(0.0)
    })
    .await;
    assert_eq!(fanned.value("outbox_fanout_loop_alive", &dest), 1.0);
    assert_eq!(
        fanned.value("outbox_fanout_oldest_pending_timestamp_seconds", &dest),
        0.0
    );
    assert_eq!(
        fanned.value(
            "outbox_fanout_parked_accounts",
            &[
                ("destination", destination.as_str()),
                ("reason", "dead_letter")
            ]
        ),
        0.0
    );
    assert_eq!(
        count(&fanout_db, "SELECT count(*) FROM fanout_messages"),
        total
    );
    assert_eq!(readyz_until(&fanout_admin, 200).await, "ready\n");
    let inbox = [("consumer", "treasury")];
    let consumed = scrape_until(&consumer_admin, "the consumer to apply everything", |s| {
        s.get("outbox_inbox_messages_applied_total", &inbox) == Some(total)
            && s.get("outbox_inbox_gaps", &inbox) == Some(0.0)
    })
    .await;
    assert_eq!(consumed.value("outbox_inbox_gaps", &inbox), 0.0);
    assert_eq!(
        consumed.value("outbox_inbox_oldest_gap_timestamp_seconds", &inbox),
        0.0
    );
    assert_eq!(
        count(&treasury, "SELECT count(*) FROM inbox_messages"),
        total
    );
    assert_eq!(readyz_until(&consumer_admin, 200).await, "ready\n");

    // The printed summaries say the same as the last scrapes.
    let relay_lines = relay.terminate().await;
    assert_eq!(printed(&relay_lines, "relay relay:", "accepted"), 6.0);
    assert_eq!(printed(&relay_lines, "relay relay:", "rejected"), 1.0);
    assert_eq!(printed(&relay_lines, "relay relay:", "replayed"), 0.0);
    let fanout_lines = fanout.terminate().await;
    assert_eq!(
        printed(
            &fanout_lines,
            &format!("fanout {destination}:"),
            "published"
        ),
        fanned.value("outbox_fanout_messages_published_total", &dest)
    );
    let consumer_lines = consumer.terminate().await;
    assert_eq!(
        printed(&consumer_lines, "consume treasury:", "applied"),
        consumed.value("outbox_inbox_messages_applied_total", &inbox)
    );
    assert_eq!(
        printed(&consumer_lines, "consume treasury:", "duplicates"),
        consumed
            .get("outbox_inbox_messages_duplicate_total", &inbox)
            .unwrap_or(0.0)
    );
}

/// A relay stopped while the ledger holds its post's answer finishes that post before
/// it exits: meanwhile it is alive (`/healthz`) and not ready (`/readyz` 503,
/// draining).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_draining_relay_is_alive_and_not_ready() {
    let outbox = Outbox::new().await;
    let ledger = dev_ledger(None).await;
    let admin = loopback();
    let events = outbox.enqueue(&[fund("5", 1_000)]);
    ledger
        .faults()
        .hold_after_commit_matching("merchants:5:available", Duration::from_secs(300));
    let mut args = strings(&[
        "relay",
        "--database",
        &outbox.url(),
        "--ledger-url",
        &ledger.url(),
        "--ledger-name",
        LEDGER,
        "--poll-interval-ms",
        "50",
        "--request-timeout-ms",
        "600000",
    ]);
    args.extend(admin_flags(&admin));
    let relay = Process::start("relay", &args, "admin: ").await;
    assert_eq!(readyz_until(&admin, 200).await, "ready\n");
    // The post is in flight once the ledger committed it (its answer is held).
    eventually(WITHIN, "the ledger to commit the post", || {
        ledger.stats().transactions == 1
    })
    .await;

    let pid = relay.pid().to_string();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(sent.success());
    let body = readyz_until(&admin, 503).await;
    assert!(body.contains("draining"), "{body}");
    let (status, live) = http_get(&format!("http://{admin}/healthz")).await;
    assert_eq!((status, live.as_str()), (200, "ok\n"));

    // Shutting the ledger down releases the held answer: the relay records it and exits.
    ledger.shutdown().await;
    let lines = relay.wait().await;
    assert_eq!(
        printed(&lines, "relay relay:", "accepted"),
        1.0,
        "{lines:?}"
    );
    assert_eq!(events.len(), 1);
}

/// `outbox dev-ledger --admin-listen`: its transactions and webhook counters, and
/// readiness while it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_dev_ledger_serves_its_own_counters() {
    let outbox = Outbox::new().await;
    let (listen, admin) = (loopback(), loopback());
    let mut args = strings(&["dev-ledger", "--listen", &listen, "--ledger", LEDGER]);
    args.extend(admin_flags(&admin));
    let ledger = Process::start("dev-ledger", &args, "admin: ").await;
    outbox.enqueue(&[fund("7", 1_000), payout("7", 400)]);
    let mut relay = relay_process(&outbox.url(), &format!("http://{listen}"), &["--once"])
        .spawn()
        .unwrap();
    let status = tokio::time::timeout(WITHIN, relay.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "relay --once exited with {status}");

    let scraped = scrape_until(&admin, "the dev ledger's transactions", |s| {
        s.get("outbox_dev_ledger_transactions_total", &[]) == Some(2.0)
    })
    .await;
    assert_eq!(
        scraped.value("outbox_dev_ledger_webhooks_pending", &[]),
        0.0
    );
    assert_eq!(
        scraped.value("outbox_dev_ledger_webhooks_failed_total", &[]),
        0.0
    );
    assert_eq!(readyz_until(&admin, 200).await, "ready\n");
    ledger.terminate().await;
}

/// An HTTP destination that takes each request and answers only once `release`
/// turns true: a publish to it stays in flight meanwhile. The counter says how many
/// requests it took.
async fn stalling_destination(
    release: tokio::sync::watch::Receiver<bool>,
) -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", free_port()))
        .await
        .unwrap();
    let url = format!("http://{}/hop2/messages", listener.local_addr().unwrap());
    let taken = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = Arc::clone(&taken);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let mut release = release.clone();
            let counter = Arc::clone(&counter);
            tokio::spawn(async move {
                let mut request = vec![0u8; 64 * 1024];
                let _ = stream.read(&mut request).await;
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let _ = release.wait_for(|go| *go).await;
                let _ = stream
                    .write_all(b"HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    (url, taken)
}

/// A fan-out loop whose store refuses its cursor writes (a trigger on the cursor
/// table, as a botched migration would leave) ends; while the process finishes the
/// other destination's publish in flight before it exits, the loop shows as not alive
/// and `/readyz` answers 503 naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_fanout_loop_shows_as_not_alive_and_not_ready() {
    use common::fanout_process::{HOP2_SECRET, deliver, webhook_body};
    use common::hop2::Probe;
    use outbox_core::{MessageSink, Subscriber};
    use outbox_testkit::ProbeConsumer;
    use outbox_transport_http::{HttpSubscriber, SubscriberConfig};

    let dir = tempfile::tempdir().unwrap();
    let fanout_db = dir.path().join("fanout.db");
    // Destination A: a real signed receiver feeding a probe consumer.
    let subscriber = HttpSubscriber::bind(SubscriberConfig::new(
        ([127, 0, 0, 1], 0).into(),
        HOP2_SECRET,
    ))
    .await
    .unwrap();
    let healthy = subscriber.url();
    let probe = Probe::new().await;
    let sink: Arc<dyn MessageSink> = probe.clone();
    let (_stop_receiver, receiver_stopping) = tokio::sync::watch::channel(false);
    tokio::spawn(async move { subscriber.run(sink, receiver_stopping).await });
    // Destination B: holds its answer until released.
    let (release, released) = tokio::sync::watch::channel(false);
    let (stalling, stalled) = stalling_destination(released).await;

    let (intake_port, admin) = (free_port(), loopback());
    let mut fanout = tokio::process::Command::new(outbox_binary())
        .args(["fanout", "--listen", &format!("127.0.0.1:{intake_port}")])
        .args(["--database", &format!("sqlite://{}", fanout_db.display())])
        .args(["--secret", SECRET, "--publish-secret", HOP2_SECRET])
        .args(["--to", &healthy, "--to", &stalling])
        .args(["--poll-interval-ms", "50"])
        .args(admin_flags(&admin))
        .env("OUTBOX_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let intake = format!("http://127.0.0.1:{intake_port}{WEBHOOK_PATH}");
    let deadline = Instant::now() + WITHIN;
    while tokio::net::TcpStream::connect(("127.0.0.1", intake_port))
        .await
        .is_err()
    {
        assert!(Instant::now() < deadline, "the intake never listened");
        assert!(
            fanout.try_wait().unwrap().is_none(),
            "outbox fanout exited at start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(readyz_until(&admin, 200).await, "ready\n");

    // The first message: A confirms it, B's publish of it stays in flight.
    let first = webhook_body(&[("merchants:7002", 1, 1)]);
    assert_eq!(deliver(&intake, "wh-1", &first).await, 204);
    let a_cursor = || {
        rusqlite::Connection::open(&fanout_db)
            .and_then(|c| {
                c.query_row(
                    "SELECT count(*) FROM fanout_cursors WHERE transport = ?1 AND position = 1",
                    [&healthy],
                    |r| r.get::<_, i64>(0),
                )
            })
            .unwrap_or(0)
    };
    eventually(
        WITHIN,
        "A to keep the first message's cursor and B to take it",
        || a_cursor() == 1 && stalled.load(std::sync::atomic::Ordering::SeqCst) == 1,
    )
    .await;
    assert_eq!(probe.received().len(), 1);
    // Then the store refuses A's cursor; A publishes the second message and cannot
    // keep its cursor: its loop ends, while B still waits for its answer.
    let conn = rusqlite::Connection::open(&fanout_db).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    for event in ["INSERT", "UPDATE"] {
        conn.execute_batch(&format!(
            "CREATE TRIGGER refuse_{event}_a BEFORE {event} ON fanout_cursors
             WHEN NEW.transport = '{healthy}'
             BEGIN SELECT RAISE(ABORT, 'fanout_cursors refuses this destination'); END;"
        ))
        .unwrap();
    }
    drop(conn);
    let second = webhook_body(&[("merchants:7002", 2, 2)]);
    assert_eq!(deliver(&intake, "wh-2", &second).await, 204);
    let reason = readyz_until(&admin, 503).await;
    assert!(
        reason.contains(&format!("fan-out loop {healthy}: ended")),
        "the reason names the dead loop: {reason}"
    );
    assert!(!reason.contains(&stalling), "{reason}");
    let scraped = scrape(&admin).await;
    assert_eq!(
        scraped.value("outbox_fanout_loop_alive", &[("destination", &healthy)]),
        0.0
    );
    assert_eq!(
        scraped.value("outbox_fanout_loop_alive", &[("destination", &stalling)]),
        1.0
    );
    assert_eq!(
        scraped.value(
            "outbox_fanout_messages_published_total",
            &[("destination", &healthy)]
        ),
        2.0
    );
    assert_eq!(probe.received().len(), 2);
    assert_eq!(
        stalled.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "B still on its first"
    );

    // Released, B settles and the process exits non-zero, naming A.
    release.send(true).unwrap();
    let status = tokio::time::timeout(WITHIN, fanout.wait())
        .await
        .unwrap()
        .unwrap();
    let mut stderr = String::new();
    use tokio::io::AsyncReadExt;
    fanout
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .await
        .unwrap();
    eprintln!("outbox fanout exited ({status}) after /readyz said: {reason}stderr:\n{stderr}");
    assert!(!status.success(), "exited with {status}: {stderr}");
    assert!(stderr.contains(&healthy), "{stderr}");
}

/// A CDC relay on PostgreSQL reports its backlog falling to zero, the server's
/// horizon and its slot's retained WAL, and the exceptions of its database.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_postgres_cdc_relay_reports_backlog_horizon_and_slot() {
    let Some(outbox) = common::postgres::PgOutbox::new().await else {
        return;
    };
    let ledger = dev_ledger(None).await;
    let name = format!("metrics{}", &outbox_core::EventId::new().to_string()[24..]);
    let events = outbox
        .enqueue(&[fund("11", 1_000), payout("11", 100), payout("12", 100)])
        .await;
    let admin = loopback();
    let mut args = strings(&[
        "relay",
        "--database",
        &outbox.url(),
        "--ledger-url",
        &ledger.url(),
        "--ledger-name",
        LEDGER,
        "--name",
        &name,
        "--cdc",
        "--poll-interval-ms",
        "50",
    ]);
    args.extend(admin_flags(&admin));
    let relay = Process::start("relay --cdc", &args, "admin: ").await;
    let labels = [("relay", name.as_str())];
    let slot = format!("outbox_{name}");
    let scraped = scrape_until(&admin, "the CDC relay to post and read its slot", |s| {
        s.get("outbox_relay_events_posted_total", &labels) == Some(2.0)
            && s.get("outbox_relay_events_rejected_total", &labels) == Some(1.0)
            && s.get("outbox_relay_pending_events", &labels) == Some(0.0)
            && s.get("outbox_cdc_slot_retained_wal_bytes", &[("slot", &slot)])
                .is_some()
    })
    .await;
    assert_eq!(
        scraped.value("outbox_relay_oldest_pending_timestamp_seconds", &labels),
        0.0
    );
    assert!(scraped.value("outbox_postgres_horizon_age_seconds", &[]) >= 0.0);
    assert!(
        scraped
            .get("outbox_postgres_horizon_held_back_events", &[])
            .is_some()
    );
    assert_eq!(
        scraped.value("outbox_exceptions_open", &[("kind", "rejected")]),
        1.0,
        "payout 12 had no funds"
    );
    assert_eq!(scraped.value("outbox_store_up", &[]), 1.0);
    assert_eq!(readyz_until(&admin, 200).await, "ready\n");
    let lines = relay.terminate().await;
    assert_eq!(printed(&lines, &format!("relay {name}:"), "accepted"), 2.0);
    assert_eq!(events.len(), 3);
    outbox.drop(Some(&name)).await;
}

/// A consumer whose database cannot be read (its gap queue's table renamed away, as
/// a botched migration would leave it) is not ready, says why and reports the store
/// down; once the table is back it is ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_consumer_whose_store_cannot_be_read_is_not_ready_until_it_can() {
    let dir = tempfile::tempdir().unwrap();
    let treasury = dir.path().join("treasury.db");
    let admin = loopback();
    let mut args = strings(&[
        "consume",
        "--from",
        &format!("http://{}", loopback()),
        "--secret",
        PUBLISH_SECRET,
        "--database",
        &format!("sqlite://{}", treasury.display()),
    ]);
    args.extend(admin_flags(&admin));
    let consumer = Process::start("consume", &args, "admin: ").await;
    assert_eq!(readyz_until(&admin, 200).await, "ready\n");

    let conn = rusqlite::Connection::open(&treasury).unwrap();
    conn.busy_timeout(Duration::from_secs(10)).unwrap();
    conn.execute_batch("ALTER TABLE inbox_held RENAME TO inbox_held_gone")
        .unwrap();
    let reason = readyz_until(&admin, 503).await;
    assert!(
        reason.contains("store: unreachable") && reason.contains("inbox_held"),
        "{reason}"
    );
    let down = scrape_until(&admin, "the store reported down", |s| {
        s.get("outbox_store_up", &[]) == Some(0.0)
    })
    .await;
    assert!(down.get("outbox_info", &[]).is_some());

    conn.execute_batch("ALTER TABLE inbox_held_gone RENAME TO inbox_held")
        .unwrap();
    assert_eq!(readyz_until(&admin, 200).await, "ready\n");
    assert_eq!(scrape(&admin).await.value("outbox_store_up", &[]), 1.0);
    consumer.terminate().await;
}
