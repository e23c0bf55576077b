//! `joiner controller`'s command line: every flag is documented, bad values are usage errors.

use std::process::Command;

fn joiner(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(args)
        // The flags' environment variables must not leak in from the test's environment.
        .env_clear()
        .output()
        .expect("runs joiner")
}

#[test]
fn help_lists_every_flag_with_its_environment_variable() {
    let out = joiner(&["controller", "--help"]);
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    for (flag, env) in [
        ("--cluster-name", "CLUSTER_NAME"),
        ("--cluster-endpoint", "CLUSTER_ENDPOINT"),
        ("--cluster-ca-bundle", "CLUSTER_CA_BUNDLE"),
        ("--service-cidr", "SERVICE_CIDR"),
        ("--cluster-dns-ip", "CLUSTER_DNS_IP"),
        ("--region", "AWS_REGION"),
        ("--interruption-queue", "INTERRUPTION_QUEUE"),
        ("--batch-idle-duration", "BATCH_IDLE_DURATION"),
        ("--batch-max-duration", "BATCH_MAX_DURATION"),
        ("--log-level", "LOG_LEVEL"),
        ("--log-format", "LOG_FORMAT"),
        ("--metrics-port", "METRICS_PORT"),
        ("--health-port", "HEALTH_PROBE_PORT"),
        ("--leader-election-namespace", "LEADER_ELECTION_NAMESPACE"),
        ("--leader-election-name", "LEADER_ELECTION_NAME"),
        ("--kube-client-qps", "KUBE_CLIENT_QPS"),
        ("--kube-client-burst", "KUBE_CLIENT_BURST"),
        ("--kubernetes-version", "KUBERNETES_VERSION"),
        ("--ssm-prefix", "SSM_PREFIX"),
        ("--default-instance-profile", "DEFAULT_INSTANCE_PROFILE"),
    ] {
        assert!(help.contains(flag), "{flag} missing from:\n{help}");
        assert!(
            help.contains(&format!("[env: {env}=")),
            "{env} missing from:\n{help}"
        );
    }
    for default in [
        "[default: 1s]",
        "[default: 10s]",
        "[default: 8080]",
        "[default: 8081]",
        "[default: json]",
        "[default: joiner-leader-election]",
        "[default: 200]",
        "[default: 300]",
    ] {
        assert!(help.contains(default), "{default} missing from:\n{help}");
    }
    assert!(
        help.contains("iam/interruption-queue.yaml"),
        "the queue flag says where the queue comes from"
    );
}

#[test]
fn a_bad_duration_is_a_usage_error_naming_the_flag() {
    let out = joiner(&[
        "controller",
        "--cluster-name",
        "c",
        "--cluster-endpoint",
        "https://example",
        "--batch-idle-duration",
        "fast",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--batch-idle-duration"), "{stderr}");
    assert!(stderr.contains("fast"), "{stderr}");
}

#[test]
fn the_cluster_name_is_required() {
    let out = joiner(&["controller", "--cluster-endpoint", "https://example"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--cluster-name"));
}

#[test]
fn flags_come_from_the_environment_too() {
    // With every required value in the environment, parsing gets past the flags and the
    // controller fails on the bad log filter (exit 2) before touching any cluster.
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .arg("controller")
        .env_clear()
        .env("CLUSTER_NAME", "c")
        .env("CLUSTER_ENDPOINT", "https://example")
        .env("LOG_LEVEL", "joiner=notalevel")
        .output()
        .expect("runs joiner");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--log-level `joiner=notalevel`"),
        "{stderr}"
    );
}

/// A one-thread HTTP server answering every request with a Kubernetes 404 Status; returns
/// its address and the request lines it saw.
fn not_found_api() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let addr = listener.local_addr().expect("addr");
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clones"));
            loop {
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                    break;
                }
                // Skip the headers (GETs have no body).
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap_or(0) > 2 {
                    line.clear();
                }
                log.lock()
                    .expect("log")
                    .push(request_line.trim().to_string());
                let body = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","reason":"NotFound","code":404,"message":"not found"}"#;
                let reply = format!(
                    "HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
                    body.len()
                );
                if stream.write_all(reply.as_bytes()).is_err() {
                    break;
                }
            }
        }
    });
    (addr, seen)
}

#[test]
fn missing_crds_stop_the_controller_with_how_to_install_them() {
    let (addr, seen) = not_found_api();
    let dir = std::env::temp_dir().join(format!("joiner-controller-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://{addr}\n\
             contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n\
             users:\n- name: u\n  user:\n    token: t\n"
        ),
    )
    .expect("writes kubeconfig");
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(["controller", "--log-format", "text"])
        .env_clear()
        .env("KUBECONFIG", &kubeconfig)
        .env("CLUSTER_NAME", "c")
        .env("CLUSTER_ENDPOINT", "https://example")
        .output()
        .expect("runs joiner");
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("joiner crds | kubectl apply -f -"),
        "{stderr}"
    );
    assert!(stderr.contains("provisioners.joiner.sh"), "{stderr}");
    let seen = seen.lock().expect("log").clone();
    assert!(
        seen.iter().any(|l| l.starts_with(
            "GET /apis/apiextensions.k8s.io/v1/customresourcedefinitions/provisioners.joiner.sh"
        )),
        "{seen:?}"
    );
}

#[test]
fn bad_values_are_usage_errors_naming_each_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .arg("controller")
        .env_clear()
        .env("CLUSTER_NAME", " ")
        .env("CLUSTER_ENDPOINT", "http://10.0.0.1")
        .env("CLUSTER_CA_BUNDLE", "bm90IGEgY2VydA==")
        .env("SERVICE_CIDR", "10.100.0.0/33")
        .env("CLUSTER_DNS_IP", "ten")
        .env("KUBE_CLIENT_QPS", "0")
        .env("KUBE_CLIENT_BURST", "0")
        .env("BATCH_IDLE_DURATION", "5s")
        .env("BATCH_MAX_DURATION", "1s")
        .env("METRICS_PORT", "9000")
        .env("HEALTH_PROBE_PORT", "9000")
        .output()
        .expect("runs joiner");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    for flag in [
        "--cluster-name (CLUSTER_NAME)",
        "--cluster-endpoint (CLUSTER_ENDPOINT): `http://10.0.0.1` is not an https URL",
        "--cluster-ca-bundle (CLUSTER_CA_BUNDLE): not a base64-encoded PEM",
        "--service-cidr (SERVICE_CIDR)",
        "--cluster-dns-ip (CLUSTER_DNS_IP)",
        "--kube-client-qps (KUBE_CLIENT_QPS)",
        "--kube-client-burst (KUBE_CLIENT_BURST)",
        "--batch-max-duration (BATCH_MAX_DURATION)",
        "--metrics-port and --health-port",
    ] {
        assert!(stderr.contains(flag), "{flag} missing from:\n{stderr}");
    }
}

#[test]
fn sigterm_stops_a_controller_whose_api_server_never_answers() {
    // An API server that accepts connections and never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("binds");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let dir = std::env::temp_dir().join(format!("joiner-sigterm-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let kubeconfig = dir.join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://{addr}\n\
             contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n\
             users:\n- name: u\n  user:\n    token: t\n"
        ),
    )
    .expect("writes kubeconfig");
    let mut child = Command::new(env!("CARGO_BIN_EXE_joiner"))
        .args(["controller", "--log-format", "text"])
        .env_clear()
        .env("KUBECONFIG", &kubeconfig)
        .env("CLUSTER_NAME", "c")
        .env("CLUSTER_ENDPOINT", "https://example")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("starts");
    // Give it time to install the signal handler and start waiting for the API.
    std::thread::sleep(std::time::Duration::from_secs(2));
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    // It must exit on its own well within a pod's grace period (30 s); a guard ends it
    // otherwise so the test reports instead of hanging.
    let mut status = None;
    for _ in 0..200 {
        if let Some(s) = child.try_wait().expect("wait") {
            status = Some(s);
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    if status.is_none() {
        let _ = child.kill();
    }
    let output = child.wait_with_output().expect("output");
    let _ = std::fs::remove_dir_all(&dir);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{stderr}");
    assert!(
        stderr.contains("waiting for the Kubernetes API server"),
        "it said what it waits for: {stderr}"
    );
}
