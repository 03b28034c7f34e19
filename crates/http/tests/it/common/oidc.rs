//! A real OpenID Connect provider for the single sign-on tests: `tests/oidc/provider.mjs`
//! (oauth2-mock-server from the npm registry; the test script installs it into
//! `tests/oidc/node_modules`) on a free loopback port. Who signs in is told per sign-in in the
//! authorize request's `login_hint` ([`OidcProvider::hint`]). Killed when dropped.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The provider process and its issuer URL.
pub struct OidcProvider {
    /// `http://127.0.0.1:<port>`.
    pub issuer: String,
    child: Child,
}

impl Drop for OidcProvider {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `tests/oidc/` of the workspace.
fn folder() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/oidc")
}

impl OidcProvider {
    /// Starts one, or returns `None` after a loud message when Node.js or the npm package is
    /// missing (a failure under `CI=true`).
    pub fn start() -> Option<Self> {
        let node = std::env::var("AIGW_TEST_NODE").unwrap_or_else(|_| "node".to_owned());
        let installed = folder().join("node_modules/oauth2-mock-server").exists();
        let node_runs = Command::new(&node)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !(installed && node_runs) {
            if std::env::var("CI").as_deref() == Ok("true") {
                panic!(
                    "CI=true but the OpenID Connect test provider cannot run (node: {node_runs}, \
                     tests/oidc/node_modules: {installed}): run scripts/test.sh"
                );
            }
            eprintln!(
                "\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\
                 !!! No OpenID Connect test provider: SKIPPING this single sign-on test. !!!\n\
                 !!! Run scripts/test.sh (npm ci in tests/oidc) or set AIGW_TEST_NODE.   !!!\n\
                 !!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n"
            );
            return None;
        }
        let mut child = Command::new(&node)
            .arg(folder().join("provider.mjs"))
            .current_dir(folder())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("starting the OpenID Connect test provider with {node}: {e}")
            });
        let stdout = child.stdout.take().unwrap();
        let (sender, receiver) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(issuer) = line.strip_prefix("issuer ") {
                    let _ = sender.send(issuer.to_owned());
                }
            }
        });
        let issuer = receiver
            .recv_timeout(Duration::from_secs(30))
            .unwrap_or_else(|_| panic!("the OpenID Connect test provider did not start in 30 s"));
        Some(Self { issuer, child })
    }

    /// The `login_hint` that makes the provider sign `claims` in (`sub`, `email`,
    /// `email_verified`, `name`, `groups`, `amr`; `userinfo`, the claims its userinfo
    /// endpoint adds to `sub`; and `tweak` to forge one part of the ID token: `issuer`,
    /// `audience`, `expired`, `nonce`, `kid`, or `alg-none` to send it unsigned).
    pub fn hint(claims: &serde_json::Value) -> String {
        use base64::Engine;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(claims.to_string())
    }
}
