//! Reports end to end (docs/operations/history-and-reports.md, "Reports"): a day of synthetic per-minute rollups (and a
//! previous day) written into a history store through its API, then a `portico-registry` process on
//! that store: `GET /reports` and `portico report` give figures that match the inputs exactly
//! (calls, availability, quantiles of the known histograms, top codes, change vs the previous
//! period), and `POST /reports/send` writes the reports to `--reports-dir` and mails the API's
//! owner its report through SMTP (a tiny SMTP sink in this test).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common::procs::registry_command;
use crate::common::{registry, seed_history, Proc, Registry, TOKEN};
use portico_testkit::{free_port, write_private, ZooKeeper};
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

const OWNER: &str = "owner-pay@example.com";

/// One received mail: (recipients, data).
type Mails = Arc<Mutex<Vec<(Vec<String>, String)>>>;

/// A minimal SMTP server: accepts every message and keeps it.
async fn smtp_sink() -> (u16, Mails) {
    let mails: Mails = Arc::default();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let kept = mails.clone();
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                return;
            };
            let kept = kept.clone();
            tokio::spawn(async move {
                let (r, mut w) = sock.into_split();
                let mut lines = BufReader::new(r).lines();
                w.write_all(b"220 sink ESMTP\r\n").await.unwrap();
                let mut rcpt = Vec::new();
                while let Ok(Some(line)) = lines.next_line().await {
                    let upper = line.to_ascii_uppercase();
                    if upper.starts_with("EHLO") || upper.starts_with("HELO") {
                        w.write_all(b"250 sink\r\n").await.unwrap();
                    } else if upper.starts_with("RCPT TO:") {
                        rcpt.push(line[8..].trim().trim_matches(['<', '>']).to_owned());
                        w.write_all(b"250 OK\r\n").await.unwrap();
                    } else if upper.starts_with("DATA") {
                        w.write_all(b"354 go on\r\n").await.unwrap();
                        let mut data = String::new();
                        while let Ok(Some(l)) = lines.next_line().await {
                            if l == "." {
                                break;
                            }
                            data.push_str(&l);
                            data.push('\n');
                        }
                        kept.lock().unwrap().push((std::mem::take(&mut rcpt), data));
                        w.write_all(b"250 queued\r\n").await.unwrap();
                    } else if upper.starts_with("QUIT") {
                        w.write_all(b"221 bye\r\n").await.unwrap();
                        return;
                    } else {
                        w.write_all(b"250 OK\r\n").await.unwrap();
                    }
                }
            });
        }
    });
    (port, mails)
}

fn registry_process(zk: &ZooKeeper, work: &Path, db: &Path, smtp: u16) -> (Proc, Registry) {
    let port = free_port();
    let token = work.join("token");
    write_private(&token, TOKEN);
    let proc = Proc::spawn(
        "registry",
        registry_command(zk, port)
            .arg("--admin-token-file")
            .arg(&token)
            .arg("--data-dir")
            .arg(work.join("data"))
            .arg("--history-db")
            .arg(db)
            .arg("--reports-dir")
            .arg(work.join("reports"))
            .args(["--smtp", &format!("smtp://127.0.0.1:{smtp}")])
            .args(["--smtp-from", "Portico <portico@example.com>"]),
        work,
    );
    (
        proc,
        Registry {
            base: format!("http://127.0.0.1:{port}/api/v1"),
            http: reqwest::Client::new(),
        },
    )
}

fn check_figures(r: &Value) {
    let apis = r["apis"].as_array().unwrap();
    assert_eq!(apis.len(), 2, "{r:#}");
    let a = &apis[0];
    assert_eq!(a["api"], "pay.create");
    assert_eq!(a["owner"], OWNER);
    assert_eq!(a["calls"], 100_000);
    assert_eq!(a["errors"], 2_000);
    assert_eq!(a["availability"], 0.98);
    // Cumulative 50 000 / 90 000 / 99 000 / 100 000: ranks fall on the bucket tops, TP99.9
    // (rank 99 900) is 900/1000 into (50, 500] ms.
    assert_eq!(a["p50_ms"], 5.0);
    assert_eq!(a["p90_ms"], 10.0);
    assert_eq!(a["p99_ms"], 50.0);
    assert_eq!(a["p999_ms"], 455.0);
    assert_eq!(
        a["top_errors"],
        json!([{"status": 502, "code": "UPSTREAM_ERROR", "count": 2000},
               {"status": 429, "code": "RATE_LIMITED", "count": 1000}])
    );
    assert_eq!(a["breaker_openings"], 3);
    assert_eq!(a["switch_flips"], 2);
    assert_eq!(a["change"]["previous_calls"], 50_000);
    assert_eq!(a["change"]["previous_availability"], 1.0);
    assert_eq!(a["change"]["calls_pct"], 100.0);
    assert_eq!(a["change"]["availability_pts"], -2.0);
    // The previous TP99: 99% into (0, 5] ms = 4.95 ms.
    assert_eq!(a["change"]["previous_p99_ms"], 4.95);
    assert_eq!(a["change"]["p99_pct"], 910.1);
    assert_eq!(a["series"].as_array().unwrap().len(), 24);
    let series_calls: u64 = a["series"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["calls"].as_u64().unwrap())
        .sum();
    assert_eq!(series_calls, 100_000);
    let q = &apis[1];
    assert_eq!(
        (q["api"].as_str(), q["calls"].as_u64()),
        (Some("pay.query"), Some(100))
    );
    assert_eq!(q["p99_ms"], 99.0);
    assert!(
        q["change"]["calls_pct"].is_null(),
        "no previous calls: no change"
    );
    assert_eq!(r["platform"]["calls"], 100_100);
    assert_eq!(r["slowest"][0], json!({"api": "pay.query", "p99_ms": 99.0}));
    assert_eq!(
        r["slowest"][1],
        json!({"api": "pay.create", "p99_ms": 50.0})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_synthetic_day_gives_exact_figures_and_the_owner_gets_the_report_by_mail() {
    let work = tempfile::tempdir().unwrap();
    let db = work.path().join("history.sqlite");
    seed_history(&db);
    let zk = ZooKeeper::on_shared_locked();
    let setup = registry(&zk).await;
    let cluster = json!({"protocol": "http", "endpoints": [{"addr": "127.0.0.1:9"}]});
    setup.put("/clusters/pay", &cluster).await.expect(201);
    setup
        .put("/sandbox/clusters/pay", &cluster)
        .await
        .expect(201);
    for (id, owner) in [("pay.create", Some(OWNER)), ("pay.query", None)] {
        let mut doc = json!({"id": id, "http": {"method": "POST", "path": format!("/v1/{id}")},
            "backend": {"cluster": "pay", "http": {}}});
        if let Some(o) = owner {
            doc["owner"] = json!(o);
        }
        setup.post("/sandbox/apis", &doc).await.expect(201);
        setup
            .post(&format!("/apis/{id}/publish"), &json!({}))
            .await
            .expect(200);
    }
    let live = setup.get("/apis/pay.create").await.expect(200);
    assert_eq!(live.body["owner"], OWNER, "{:#}", live.body);

    let (port, mails) = smtp_sink().await;
    let (mut proc, reg) = registry_process(&zk, work.path(), &db, port);
    let deadline = Instant::now() + Duration::from_secs(60);
    let day = loop {
        let up = reg
            .request(reqwest::Method::GET, "/reports?period=day")
            .send()
            .await
            .is_ok_and(|r| r.status().is_success());
        if up {
            break reg.get("/reports?period=day").await.expect(200).body;
        }
        proc.assert_alive();
        assert!(Instant::now() < deadline, "the registry did not answer");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    check_figures(&day);
    // One API; a week holds both days (and so no previous period).
    let one = reg
        .get("/reports?period=day&api=pay.query")
        .await
        .expect(200)
        .body;
    assert_eq!(one["apis"].as_array().unwrap().len(), 1);
    assert_eq!(one["platform"]["calls"], 100);
    let week = reg.get("/reports?period=week").await.expect(200).body;
    assert_eq!(week["apis"][0]["calls"], 150_000);
    assert_eq!(week["apis"][0]["change"]["previous_calls"], 0);
    assert_eq!(week["apis"][0]["series"].as_array().unwrap().len(), 28);
    reg.get("/reports?period=month").await.expect(400);
    let html = reg
        .http
        .get(format!("{}/reports?format=html", reg.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert!(html.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/html"));
    let page = html.text().await.unwrap();
    assert!(
        page.contains("pay.create") && page.contains("<svg"),
        "{page}"
    );

    // The CLI asks the registry for the same report.
    let out = Command::new(env!("CARGO_BIN_EXE_portico"))
        .args(["--registry", reg.base.trim_end_matches("/api/v1")])
        .args(["report", "--period", "day", "--format", "json"])
        .env("PORTICO_ADMIN_TOKEN", TOKEN)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cli: Value = serde_json::from_slice(&out.stdout).unwrap();
    check_figures(&cli);
    let out = Command::new(env!("CARGO_BIN_EXE_portico"))
        .args(["--registry", reg.base.trim_end_matches("/api/v1")])
        .args(["report", "--api", "pay.create"])
        .env("PORTICO_ADMIN_TOKEN", TOKEN)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("pay.create") && text.contains("98.000") && text.contains("455ms"),
        "{text}"
    );

    // Send now: the owner gets their report (pay.create only), and the files are written.
    let sent = reg
        .post("/reports/send?period=day", &json!({}))
        .await
        .expect(200)
        .body;
    assert_eq!(sent["mails"][0]["to"], OWNER, "{sent:#}");
    assert_eq!(sent["mails"][0]["sent"], true, "{sent:#}");
    assert_eq!(sent["mails"][0]["apis"], json!(["pay.create"]));
    let mails = mails.lock().unwrap().clone();
    assert_eq!(mails.len(), 1, "one owner, one mail");
    let (to, data) = &mails[0];
    assert_eq!(to, &[OWNER.to_owned()]);
    assert!(data.contains("Subject: Portico day report"), "{data}");
    assert!(data.contains("pay.create:"), "{data}");
    assert!(!data.contains("pay.query"), "only the owner's APIs: {data}");
    let files: Vec<String> = sent["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(files.len(), 4, "{files:?}");
    let owner_json = files
        .iter()
        .find(|f| f.ends_with(&format!("-day-{OWNER}.json")))
        .unwrap();
    let written: Value = serde_json::from_slice(&std::fs::read(owner_json).unwrap()).unwrap();
    assert_eq!(written["apis"][0]["calls"], 100_000);
    let audit = setup.get("/audit").await.expect(200).body;
    assert!(audit.to_string().contains("reports.send"), "{audit:#}");
    proc.assert_alive();
}
