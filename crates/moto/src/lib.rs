//! A moto server for joiner's AWS tests.
//!
//! The AWS code is tested through the real SDK clients against moto's server (PyPI
//! `moto[server]`, installed by `./scripts/test`) rather than hand-written fakes, so the request
//! and response shapes are the SDK's own. Each test process starts one server on 127.0.0.1 at a
//! free port; [`MotoServer::session`] serialises the tests of a process on it and resets moto's
//! state before each one (`POST /moto-api/reset`), so no test sees another's resources.
//!
//! The server is a child `python3 -m moto.server` wrapped in a watchdog that exits when its
//! parent does, so a test process that ends (or crashes) never leaves a server behind.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_ec2::config::Credentials;

/// The region the harness configures unless a test asks for another.
pub const DEFAULT_REGION: &str = "us-east-1";

/// How long a cold `python3 -m moto.server` may take to answer; importing moto on a loaded
/// 2-core machine has been seen to take several seconds.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);

/// The Python that runs moto; `JOINER_PYTHON` overrides it.
fn python() -> String {
    std::env::var("JOINER_PYTHON").unwrap_or_else(|_| "python3".to_string())
}

/// Starts moto's server and exits when the parent process is gone (its parent id changes).
const WATCHDOG: &str = r#"
import os, sys, threading, time
parent = os.getppid()
def watch():
    while True:
        time.sleep(0.3)
        if os.getppid() != parent:
            os._exit(0)
threading.Thread(target=watch, daemon=True).start()
from moto.server import main
main(["-H", "127.0.0.1", "-p", sys.argv[1]])
"#;

/// Why the harness could not give a test a server.
#[derive(Debug, thiserror::Error)]
pub enum MotoError {
    /// python3 could not be started at all.
    #[error("cannot start `{python} -m moto.server`: {source}; install it with `pip install 'moto[server]'` (./scripts/test does)")]
    Spawn {
        /// The interpreter that was tried.
        python: String,
        /// The OS error.
        source: std::io::Error,
    },
    /// The server process ended before it answered.
    #[error(
        "moto server exited before answering ({status}); is moto[server] installed for {python}?"
    )]
    Exited {
        /// The interpreter that was tried.
        python: String,
        /// How the process ended.
        status: String,
    },
    /// The server did not answer in time.
    #[error("moto server on port {port} did not answer within {secs} s")]
    Timeout {
        /// The port it was started on.
        port: u16,
        /// The time waited.
        secs: u64,
    },
    /// A control request (reset) failed.
    #[error("moto control request {path} failed: {detail}")]
    Control {
        /// The moto-api path.
        path: &'static str,
        /// What went wrong.
        detail: String,
    },
}

/// A running moto server. Killed when dropped.
#[derive(Debug)]
pub struct MotoServer {
    child: Mutex<Child>,
    addr: SocketAddr,
}

/// A test's exclusive use of the process's moto server, with state reset at its start.
#[derive(Debug)]
pub struct MotoSession {
    server: &'static MotoServer,
    _exclusive: MutexGuard<'static, ()>,
}

impl MotoSession {
    /// The server of this session.
    pub fn server(&self) -> &'static MotoServer {
        self.server
    }

    /// `http://127.0.0.1:<port>`, the value for `AWS_ENDPOINT_URL`.
    pub fn endpoint(&self) -> String {
        self.server.endpoint()
    }

    /// An SDK configuration pointed at the server, with test credentials, in `region`.
    pub async fn sdk_config(&self, region: &str) -> SdkConfig {
        self.server.sdk_config(region).await
    }

    /// Drops every resource moto holds (the same reset a new session does).
    pub fn reset(&self) -> Result<(), MotoError> {
        self.server.reset()
    }
}

impl MotoServer {
    /// Starts a new server on a free port and waits until it answers.
    pub fn start() -> Result<Self, MotoError> {
        // The port is chosen by binding port 0 and releasing it; another process could take it in
        // between, so a failed start is retried on a fresh port.
        let mut last = None;
        for _ in 0..3 {
            match Self::start_once() {
                Ok(server) => return Ok(server),
                Err(err @ MotoError::Spawn { .. }) => return Err(err),
                Err(err) => last = Some(err),
            }
        }
        Err(last.unwrap_or(MotoError::Timeout {
            port: 0,
            secs: STARTUP_TIMEOUT.as_secs(),
        }))
    }

    fn start_once() -> Result<Self, MotoError> {
        let port = free_port().map_err(|source| MotoError::Spawn {
            python: python(),
            source,
        })?;
        let python = python();
        let child = Command::new(&python)
            .arg("-c")
            .arg(WATCHDOG)
            .arg(port.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|source| MotoError::Spawn {
                python: python.clone(),
                source,
            })?;
        let server = MotoServer {
            child: Mutex::new(child),
            addr: SocketAddr::from(([127, 0, 0, 1], port)),
        };
        let started = Instant::now();
        loop {
            if server.reset().is_ok() {
                return Ok(server);
            }
            if let Some(status) = server.exit_status() {
                return Err(MotoError::Exited { python, status });
            }
            if started.elapsed() > STARTUP_TIMEOUT {
                return Err(MotoError::Timeout {
                    port,
                    secs: STARTUP_TIMEOUT.as_secs(),
                });
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The process-wide server, started on first use, held exclusively by the returned session
    /// and reset before it is handed out.
    pub fn session() -> Result<MotoSession, MotoError> {
        static SERVER: OnceLock<Result<MotoServer, String>> = OnceLock::new();
        static EXCLUSIVE: Mutex<()> = Mutex::new(());
        let exclusive = EXCLUSIVE
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let server = match SERVER.get_or_init(|| MotoServer::start().map_err(|e| e.to_string())) {
            Ok(server) => server,
            Err(detail) => {
                return Err(MotoError::Control {
                    path: "(start)",
                    detail: detail.clone(),
                })
            }
        };
        server.reset()?;
        Ok(MotoSession {
            server,
            _exclusive: exclusive,
        })
    }

    /// `http://127.0.0.1:<port>`, the value for `AWS_ENDPOINT_URL`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// An SDK configuration pointed at the server, with test credentials, in `region`.
    pub async fn sdk_config(&self, region: &str) -> SdkConfig {
        aws_config::defaults(BehaviorVersion::latest())
            .endpoint_url(self.endpoint())
            .region(Region::new(region.to_string()))
            .credentials_provider(Credentials::new("testing", "testing", None, None, "moto"))
            .load()
            .await
    }

    /// Drops every resource moto holds.
    pub fn reset(&self) -> Result<(), MotoError> {
        self.post("/moto-api/reset")
    }

    fn post(&self, path: &'static str) -> Result<(), MotoError> {
        let fail = |detail: String| MotoError::Control { path, detail };
        let mut stream = TcpStream::connect_timeout(&self.addr, Duration::from_secs(2))
            .map_err(|e| fail(e.to_string()))?;
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| fail(e.to_string()))?;
        let request = format!(
            "POST {path} HTTP/1.1\r\nHost: {}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.addr
        );
        stream
            .write_all(request.as_bytes())
            .map_err(|e| fail(e.to_string()))?;
        let mut response = String::new();
        stream
            .read_to_string(&mut response)
            .map_err(|e| fail(e.to_string()))?;
        let status = response.lines().next().unwrap_or_default();
        if status.split_whitespace().nth(1) == Some("200") {
            Ok(())
        } else {
            Err(fail(format!("answered `{status}`")))
        }
    }

    fn exit_status(&self) -> Option<String> {
        let mut child = self.child.lock().unwrap_or_else(|p| p.into_inner());
        match child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        }
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let child = self.child.get_mut().unwrap_or_else(|p| p.into_inner());
        let _ = child.kill();
        let _ = child.wait();
    }
}

fn free_port() -> std::io::Result<u16> {
    let listener = TcpListener::bind(("127.0.0.1", 0))?;
    Ok(listener.local_addr()?.port())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_session_serves_the_ec2_api_and_reset_drops_state() {
        let moto = MotoServer::session().expect("moto server");
        let ec2 = aws_sdk_ec2::Client::new(&moto.sdk_config(DEFAULT_REGION).await);
        let vpc = ec2
            .create_vpc()
            .cidr_block("10.9.0.0/16")
            .send()
            .await
            .expect("create vpc");
        let id = vpc
            .vpc()
            .and_then(|v| v.vpc_id())
            .expect("vpc id")
            .to_string();
        let listed = |out: aws_sdk_ec2::operation::describe_vpcs::DescribeVpcsOutput| {
            out.vpcs().iter().any(|v| v.vpc_id() == Some(id.as_str()))
        };
        assert!(listed(ec2.describe_vpcs().send().await.expect("describe")));
        moto.reset().expect("reset");
        assert!(!listed(ec2.describe_vpcs().send().await.expect("describe")));
    }
}
