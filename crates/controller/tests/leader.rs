//! Leader election through a real `kube::Client` over the scripted API: the exact Lease
//! requests, optimistic concurrency (409 → follower), takeover of Leases that stayed unchanged
//! for their duration by the follower's own monotonic clock (whatever the leader's timestamps
//! say), supervision of leader-only tasks, and release on shutdown. Time is tokio's paused
//! clock plus an injected wall clock.

mod support;

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use http::Method;
use joiner_controller::leader::{run_elected, Clock, LeaderElector, LeaderError, LeaseConfig};
use k8s_openapi::jiff::Timestamp;
use serde_json::{json, Value};
use support::{mock_api, Recorded, Reply};
use tokio_util::sync::CancellationToken;

const NS: &str = "kube-system";
const NAME: &str = "joiner-leader-election";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases";
const LEASE: &str =
    "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/joiner-leader-election";
const T0: i64 = 1_700_000_000;

/// A wall clock the test moves.
fn clock() -> (Clock, Arc<AtomicI64>) {
    let secs = Arc::new(AtomicI64::new(T0));
    let s = secs.clone();
    let clock: Clock = Arc::new(move || {
        Timestamp::from_second(s.load(Ordering::SeqCst)).unwrap_or(Timestamp::UNIX_EPOCH)
    });
    (clock, secs)
}

fn rfc3339(secs: i64) -> String {
    Timestamp::from_second(secs)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string())
        .unwrap_or_default()
}

fn lease(holder: &str, renewed: i64, rv: u64) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": NAME, "namespace": NS, "resourceVersion": rv.to_string()},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 10,
                 "acquireTime": rfc3339(renewed), "renewTime": rfc3339(renewed),
                 "leaseTransitions": 3},
    })
}

/// A Lease store behaving like the API server: GET 404 when absent, POST 409 when present,
/// PUT 409 when the resourceVersion is stale; every write bumps the resourceVersion.
/// `conflict_puts` makes that many PUTs fail with 409 regardless (a racing writer).
fn lease_server(
    initial: Option<Value>,
    conflict_puts: usize,
) -> (
    impl FnMut(&Recorded) -> Reply + Send + 'static,
    Arc<Mutex<Option<Value>>>,
) {
    let stored = Arc::new(Mutex::new(initial));
    let state = stored.clone();
    let conflicts = AtomicUsize::new(conflict_puts);
    let handler = move |req: &Recorded| {
        let mut current = state.lock().expect("lease");
        let rv = |v: &Value| {
            v["metadata"]["resourceVersion"]
                .as_str()
                .and_then(|s| s.parse::<u64>().ok())
                .unwrap_or(0)
        };
        match (req.method.clone(), req.path.as_str()) {
            (Method::GET, LEASE) => match current.as_ref() {
                Some(v) => Reply::ok(v.clone()),
                None => Reply::not_found("leases \"joiner-leader-election\""),
            },
            (Method::POST, LEASES) => {
                if current.is_some() {
                    return Reply::error(409, "AlreadyExists", "lease exists");
                }
                let mut v = req.body.clone();
                v["metadata"]["resourceVersion"] = json!("1");
                *current = Some(v.clone());
                Reply::created(v)
            }
            (Method::PUT, LEASE) => {
                let have = current.as_ref().map(rv).unwrap_or(0);
                let sent = rv(&req.body);
                if conflicts.load(Ordering::SeqCst) > 0 || sent != have {
                    conflicts.fetch_sub(1, Ordering::SeqCst);
                    return Reply::error(409, "Conflict", "the object has been modified");
                }
                let mut v = req.body.clone();
                v["metadata"]["resourceVersion"] = json!((have + 1).to_string());
                *current = Some(v.clone());
                Reply::ok(v)
            }
            _ => Reply::not_found(&req.path),
        }
    };
    (handler, stored)
}

fn elector(client: &kube::Client, identity: &str, clock: &Clock) -> LeaderElector {
    LeaderElector::new(client.clone(), LeaseConfig::new(NS, NAME, identity))
        .with_clock(clock.clone())
}

fn holder(v: &Value) -> &str {
    v["spec"]["holderIdentity"].as_str().unwrap_or("<none>")
}

#[tokio::test]
async fn an_absent_lease_is_created_with_us_as_holder() {
    let (handler, stored) = lease_server(None, 0);
    let (client, api) = mock_api(handler);
    let (clock, _) = clock();
    let mut me = elector(&client, "joiner-a_1", &clock);
    assert!(me.try_acquire_or_renew().await.expect("no API error"));

    let calls = api.calls();
    assert_eq!(
        calls,
        vec![("GET".into(), LEASE.into()), ("POST".into(), LEASES.into())]
    );
    let post = &api.writes()[0];
    assert_eq!(holder(&post.body), "joiner-a_1");
    assert_eq!(post.body["spec"]["leaseDurationSeconds"], json!(10));
    assert_eq!(post.body["spec"]["leaseTransitions"], json!(0));
    assert_eq!(post.body["metadata"]["name"], json!(NAME));
    assert!(post.body["spec"]["renewTime"]
        .as_str()
        .is_some_and(|t| t.starts_with("2023-11-14T22:13:20")));
    assert!(stored.lock().expect("lease").is_some());
}

#[tokio::test(start_paused = true)]
async fn an_expired_lease_is_taken_over_with_its_resource_version() {
    let (handler, _) = lease_server(Some(lease("joiner-b_2", T0 - 11, 7)), 0);
    let (client, api) = mock_api(handler);
    let (clock, _) = clock();
    let mut me = elector(&client, "joiner-a_1", &clock);
    // The renewTime says 11 s ago, but only this replica's own clock counts: first sight.
    assert!(!me.try_acquire_or_renew().await.expect("no API error"));
    // Unchanged for more than its 10 s duration: expired.
    tokio::time::advance(Duration::from_secs(11)).await;
    assert!(me.try_acquire_or_renew().await.expect("no API error"));

    let writes = api.writes();
    assert_eq!(writes.len(), 1);
    let put = &writes[0];
    assert!(put.is(Method::PUT, LEASE), "{put:?}");
    assert_eq!(put.body["metadata"]["resourceVersion"], json!("7"));
    assert_eq!(holder(&put.body), "joiner-a_1");
    assert_eq!(put.body["spec"]["leaseTransitions"], json!(4));
    assert_eq!(
        put.body["spec"]["acquireTime"],
        put.body["spec"]["renewTime"]
    );
}

#[tokio::test(start_paused = true)]
async fn a_fresh_lease_held_by_another_is_left_alone() {
    let (handler, stored) = lease_server(Some(lease("joiner-b_2", T0 - 9, 7)), 0);
    let (client, api) = mock_api(handler);
    let (clock, secs) = clock();
    let mut me = elector(&client, "joiner-a_1", &clock);
    assert!(!me.try_acquire_or_renew().await.expect("no API error"));
    // Unchanged for 9 s of our time: still valid.
    tokio::time::advance(Duration::from_secs(9)).await;
    assert!(!me.try_acquire_or_renew().await.expect("no API error"));
    assert!(api.writes().is_empty(), "{:?}", api.writes());

    // Two seconds later it has expired.
    tokio::time::advance(Duration::from_secs(2)).await;
    secs.fetch_add(11, Ordering::SeqCst);
    assert!(me.try_acquire_or_renew().await.expect("no API error"));
    let current = stored.lock().expect("lease").clone().expect("lease exists");
    assert_eq!(holder(&current), "joiner-a_1");
}

#[tokio::test(start_paused = true)]
async fn losing_the_race_for_an_expired_lease_leaves_us_follower() {
    let (handler, stored) = lease_server(Some(lease("joiner-b_2", T0 - 30, 7)), 1);
    let (client, api) = mock_api(handler);
    let (clock, _) = clock();
    let mut me = elector(&client, "joiner-a_1", &clock);
    assert!(!me.try_acquire_or_renew().await.expect("first sight"));
    tokio::time::advance(Duration::from_secs(11)).await;
    assert!(!me
        .try_acquire_or_renew()
        .await
        .expect("409 is not an error"));
    assert_eq!(api.writes().len(), 1);
    assert!(api.writes()[0].is(Method::PUT, LEASE));
    let current = stored.lock().expect("lease").clone().expect("lease exists");
    assert_eq!(
        holder(&current),
        "joiner-b_2",
        "the other writer's lease stands"
    );

    // Nothing to release: we never held it.
    me.release().await.expect("release");
    assert_eq!(api.writes().len(), 1);
}

#[tokio::test]
async fn api_errors_other_than_conflicts_are_reported_with_the_lease() {
    let (client, _api) = mock_api(|_| Reply::error(403, "Forbidden", "leases is forbidden"));
    let (clock, _) = clock();
    let mut me = elector(&client, "joiner-a_1", &clock);
    let err = me.try_acquire_or_renew().await.err();
    assert!(
        matches!(&err, Some(LeaderError::Api { action: "get", .. })),
        "{err:?}"
    );
    let text = err.map(|e| e.to_string()).unwrap_or_default();
    assert!(
        text.starts_with("Lease kube-system/joiner-leader-election: get:"),
        "{text}"
    );
}

/// A leader-only task that records that it ran and that it was stopped.
fn recording_task(
    started: Arc<AtomicUsize>,
    stopped: Arc<AtomicBool>,
) -> impl FnMut(CancellationToken) -> Vec<BoxFuture<'static, ()>> {
    move |term: CancellationToken| {
        let started = started.clone();
        let stopped = stopped.clone();
        vec![async move {
            started.fetch_add(1, Ordering::SeqCst);
            term.cancelled().await;
            stopped.store(true, Ordering::SeqCst);
        }
        .boxed()]
    }
}

#[tokio::test(start_paused = true)]
async fn the_leader_renews_runs_its_tasks_and_releases_on_shutdown() {
    let (handler, stored) = lease_server(None, 0);
    let (client, api) = mock_api(handler);
    let (clock, secs) = clock();
    let started = Arc::new(AtomicUsize::new(0));
    let stopped = Arc::new(AtomicBool::new(false));
    let stop = CancellationToken::new();
    let beats = Arc::new(Mutex::new(Vec::new()));
    let b = beats.clone();
    let run = tokio::spawn(run_elected(
        elector(&client, "joiner-a_1", &clock),
        stop.clone(),
        recording_task(started.clone(), stopped.clone()),
        move |leader| b.lock().expect("beats").push(leader),
    ));
    // Three renewals, 2 s apart.
    for _ in 0..3 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        secs.fetch_add(2, Ordering::SeqCst);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        started.load(Ordering::SeqCst),
        1,
        "the task runs once per term"
    );
    assert!(!stopped.load(Ordering::SeqCst));
    let renewals = api
        .writes()
        .iter()
        .filter(|w| w.is(Method::PUT, LEASE) && holder(&w.body) == "joiner-a_1")
        .count();
    assert_eq!(renewals, 3, "{:?}", api.calls());

    stop.cancel();
    let result = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("stops")
        .expect("joins");
    assert!(result.is_ok(), "{result:?}");
    assert!(
        stopped.load(Ordering::SeqCst),
        "the task's token was cancelled"
    );
    let last = api.writes().last().cloned().expect("a release");
    assert!(last.is(Method::PUT, LEASE));
    assert_eq!(holder(&last.body), "");
    assert_eq!(last.body["spec"]["leaseDurationSeconds"], json!(1));
    let current = stored.lock().expect("lease").clone().expect("lease exists");
    assert_eq!(holder(&current), "");
    assert!(beats.lock().expect("beats").iter().all(|l| *l));

    // A follower takes the released lease at its first attempt, with no waiting.
    let mut next = elector(&client, "joiner-b_2", &clock);
    assert!(next.try_acquire_or_renew().await.expect("no API error"));
}

#[tokio::test(start_paused = true)]
async fn a_follower_takes_over_within_15_s_of_the_leaders_death() {
    let (handler, stored) = lease_server(None, 0);
    let (client, _api) = mock_api(handler);
    let (clock, secs) = clock();
    // The leader acquires, then dies without releasing.
    let mut dead = elector(&client, "joiner-a_1", &clock);
    assert!(dead.try_acquire_or_renew().await.expect("acquires"));
    drop(dead);

    let started = Arc::new(AtomicUsize::new(0));
    let stopped = Arc::new(AtomicBool::new(false));
    let stop = CancellationToken::new();
    let run = tokio::spawn(run_elected(
        elector(&client, "joiner-b_2", &clock),
        stop.clone(),
        recording_task(started.clone(), stopped.clone()),
        |_| {},
    ));
    let mut waited = 0;
    while started.load(Ordering::SeqCst) == 0 && waited < 30 {
        tokio::time::sleep(Duration::from_secs(1)).await;
        secs.fetch_add(1, Ordering::SeqCst);
        waited += 1;
    }
    assert!(
        (10..=15).contains(&waited),
        "took over after {waited} s (must wait for expiry, then within 15 s)"
    );
    let current = stored.lock().expect("lease").clone().expect("lease exists");
    assert_eq!(holder(&current), "joiner-b_2");
    assert_eq!(current["spec"]["leaseTransitions"], json!(1));
    stop.cancel();
    let _ = run.await;
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_finds_another_holder_stops_its_tasks_and_reports_the_loss() {
    let (handler, stored) = lease_server(None, 0);
    let (client, _api) = mock_api(handler);
    let (clock, _) = clock();
    let started = Arc::new(AtomicUsize::new(0));
    let stopped = Arc::new(AtomicBool::new(false));
    let run = tokio::spawn(run_elected(
        elector(&client, "joiner-a_1", &clock),
        CancellationToken::new(),
        recording_task(started.clone(), stopped.clone()),
        |_| {},
    ));
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(started.load(Ordering::SeqCst), 1);
    // Someone overwrites the lease (an operator, or a replica with a skewed clock).
    {
        let mut current = stored.lock().expect("lease");
        let rv = current
            .as_ref()
            .and_then(|v| v["metadata"]["resourceVersion"].as_str())
            .unwrap_or("1")
            .parse::<u64>()
            .unwrap_or(1);
        let mut other = lease("intruder_9", T0, rv + 1);
        other["spec"]["leaseDurationSeconds"] = json!(3600);
        *current = Some(other);
    }
    let result = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("ends")
        .expect("joins");
    assert!(
        matches!(result, Err(LeaderError::Lost { .. })),
        "{result:?}"
    );
    assert!(stopped.load(Ordering::SeqCst));
    let current = stored.lock().expect("lease").clone().expect("lease exists");
    assert_eq!(
        holder(&current),
        "intruder_9",
        "a lost lease is not released"
    );
}

#[tokio::test(start_paused = true)]
async fn a_leader_that_cannot_renew_steps_down_before_its_lease_expires() {
    let (mut handler, _stored) = lease_server(None, 0);
    let failing = Arc::new(AtomicBool::new(false));
    let f = failing.clone();
    let (client, _api) = mock_api(move |r: &Recorded| {
        if f.load(Ordering::SeqCst) {
            Reply::error(500, "InternalError", "etcd unavailable")
        } else {
            handler(r)
        }
    });
    let (clock, _) = clock();
    let started = Arc::new(AtomicUsize::new(0));
    let stopped = Arc::new(AtomicBool::new(false));
    let run = tokio::spawn(run_elected(
        elector(&client, "joiner-a_1", &clock),
        CancellationToken::new(),
        recording_task(started.clone(), stopped.clone()),
        |_| {},
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(started.load(Ordering::SeqCst), 1);
    // The API fails from here on; the last successful renewal was the acquisition at ~0 s.
    failing.store(true, Ordering::SeqCst);
    let began = tokio::time::Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("ends")
        .expect("joins");
    let after = began.elapsed();
    assert!(
        matches!(result, Err(LeaderError::Lost { .. })),
        "{result:?}"
    );
    assert!(
        stopped.load(Ordering::SeqCst),
        "the tasks were told to stop"
    );
    assert!(
        after >= Duration::from_secs(6) && after < Duration::from_secs(10),
        "stepped down after {after:?}: must be before the 10 s lease expires"
    );
}

/// The renew deadline counts from when a renewal was sent, not from its reply: the others
/// count the Lease's duration from the renewTime written, so a slow reply must not stretch
/// this leader's term.
#[tokio::test(start_paused = true)]
async fn the_renew_deadline_counts_from_the_request_not_the_reply() {
    let (mut handler, _stored) = lease_server(None, 0);
    let puts = Arc::new(AtomicUsize::new(0));
    let p = puts.clone();
    let (client, _api) = mock_api(move |r: &Recorded| {
        if r.method != Method::PUT && p.load(Ordering::SeqCst) == 0 {
            return handler(r);
        }
        match p.fetch_add(1, Ordering::SeqCst) {
            // The first renewal (sent at ~2 s) succeeds, its reply arriving 3 s later.
            0 if r.method == Method::PUT => handler(r).after(Duration::from_secs(3)),
            // Then the API server hangs.
            _ => Reply::never(),
        }
    });
    let (clock, _) = clock();
    let started = Arc::new(AtomicUsize::new(0));
    let stopped = Arc::new(AtomicBool::new(false));
    let began = tokio::time::Instant::now();
    let run = tokio::spawn(run_elected(
        elector(&client, "joiner-a_1", &clock),
        CancellationToken::new(),
        recording_task(started.clone(), stopped.clone()),
        |_| {},
    ));
    let result = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("ends")
        .expect("joins");
    let after = began.elapsed();
    assert!(
        matches!(result, Err(LeaderError::Lost { .. })),
        "{result:?}"
    );
    // Renewed by the request at ~2 s: the term ends at ~2 + 7 s, not ~5 + 7 s.
    assert!(
        after >= Duration::from_secs(8) && after < Duration::from_millis(9500),
        "stepped down after {after:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn expiry_follows_the_followers_clock_not_the_leaders_timestamps() {
    // A leader whose wall clock runs an hour behind keeps renewing: its renewTime always
    // looks an hour old, yet the Lease changes every 2 s, so it is never taken over.
    let (handler, stored) = lease_server(Some(lease("joiner-b_2", T0 - 3600, 7)), 0);
    let (client, _api) = mock_api(handler);
    let (clock, _) = clock();
    let mut follower = elector(&client, "joiner-a_1", &clock);
    for round in 0..10u64 {
        assert!(
            !follower.try_acquire_or_renew().await.expect("no API error"),
            "round {round}"
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        let mut guard = stored.lock().expect("lease");
        if let Some(v) = guard.as_mut() {
            v["spec"]["renewTime"] = json!(rfc3339(T0 - 3600 + 2 * (round as i64 + 1)));
            v["metadata"]["resourceVersion"] = json!((8 + round).to_string());
        }
    }
    // A dead leader whose clock ran an hour ahead: its renewTime lies in the future, but the
    // Lease no longer changes, so it is taken over after 10 s of the follower's time.
    let (handler, _) = lease_server(Some(lease("joiner-c_3", T0 + 3600, 7)), 0);
    let (client, _api) = mock_api(handler);
    let mut follower = elector(&client, "joiner-a_1", &clock);
    assert!(!follower.try_acquire_or_renew().await.expect("first sight"));
    tokio::time::advance(Duration::from_secs(9)).await;
    assert!(!follower.try_acquire_or_renew().await.expect("still valid"));
    tokio::time::advance(Duration::from_secs(2)).await;
    assert!(follower.try_acquire_or_renew().await.expect("expired"));
}

#[tokio::test(start_paused = true)]
async fn a_leader_task_that_panics_makes_the_leader_step_down_and_stop_renewing() {
    let (handler, _stored) = lease_server(None, 0);
    let (client, api) = mock_api(handler);
    let (clock, _) = clock();
    let stop = CancellationToken::new();
    let survivor_stopped = Arc::new(AtomicBool::new(false));
    let s = survivor_stopped.clone();
    let tasks = move |term: CancellationToken| -> Vec<BoxFuture<'static, ()>> {
        let s = s.clone();
        vec![
            async move {
                term.cancelled().await;
                s.store(true, Ordering::SeqCst);
            }
            .boxed(),
            async {
                tokio::time::sleep(Duration::from_secs(3)).await;
                panic!("a reconciler bug");
            }
            .boxed(),
        ]
    };
    let run = tokio::spawn(run_elected(
        elector(&client, "joiner-a_1", &clock),
        stop.clone(),
        tasks,
        |_| {},
    ));
    let result = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("steps down")
        .expect("joins");
    match result {
        Err(LeaderError::TaskEnded { task, how, .. }) => {
            assert_eq!(task, 1);
            assert!(how.contains("panicked: a reconciler bug"), "{how}");
        }
        other => panic!("not a task failure: {other:?}"),
    }
    assert!(
        survivor_stopped.load(Ordering::SeqCst),
        "the other task was stopped"
    );
    // No zombie: nothing renews the Lease any more.
    let writes = api.writes().len();
    tokio::time::advance(Duration::from_secs(20)).await;
    tokio::task::yield_now().await;
    assert_eq!(api.writes().len(), writes);
}
