//! GitHub's secret-scanning public keys: the `[secret_scanning]` settings, the keys document
//! (`{"public_keys": [{"key_identifier", "key", "is_current"}]}`, each `key` an ECDSA P-256
//! public key in PEM), where it is read from (a file, or a URL fetched with reqwest), and the
//! node's cache of it.
//!
//! The cache is reloaded when older than `keys_refresh_secs`, and once more when a report
//! names a key id it does not hold (GitHub rotates its keys), but at most once per
//! [`MIN_RELOAD_INTERVAL`]: a stream of made-up key ids cannot make aigw fetch without bound.
//! A reload that fails keeps the keys already held (and is logged); with none held, the
//! report is answered 503.

use p256::ecdsa::VerifyingKey;
use p256::pkcs8::DecodePublicKey;
use serde::Deserialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Where GitHub publishes the keys that sign its secret-scanning reports.
pub const GITHUB_KEYS_URL: &str = "https://api.github.com/meta/public_keys/secret_scanning";

/// Largest keys document read, in bytes.
pub const MAX_KEYS_DOCUMENT_BYTES: usize = 1024 * 1024;

/// The shortest time between two reloads of the keys, however many unknown key ids arrive.
pub const MIN_RELOAD_INTERVAL: Duration = Duration::from_secs(10);

/// `[secret_scanning]`: the endpoint for GitHub's secret-scanning partner program
/// (`POST /api/v1/secret-scanning/github`) and the keys its reports are verified with.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SecretScanningConfig {
    /// Whether the endpoint exists (default `false`: it answers 404 like any unknown path).
    pub enabled: bool,
    /// A keys document on disk (GitHub's format), read instead of fetching one. Default: none.
    pub github_keys_file: Option<PathBuf>,
    /// Where to fetch the keys document (http or https; no redirect is followed). Default:
    /// none, which means [`GITHUB_KEYS_URL`] unless `github_keys_file` is set. Setting both
    /// is a configuration error.
    pub github_keys_url: Option<String>,
    /// Seconds the keys are used before they are read again (default 3600, at least 1).
    pub keys_refresh_secs: u64,
    /// Seconds a fetch of the keys document may take, connection included (default 5, at
    /// least 1).
    pub keys_fetch_timeout_secs: u64,
}

impl Default for SecretScanningConfig {
    fn default() -> Self {
        Self {
            enabled: false,
            github_keys_file: None,
            github_keys_url: None,
            keys_refresh_secs: 3600,
            keys_fetch_timeout_secs: 5,
        }
    }
}

/// Why the keys could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeysError {
    /// The configuration names no usable source (both a file and a URL, or a URL that is not
    /// http(s)).
    #[error("secret_scanning: {0}")]
    Config(String),
    /// The document could not be read or fetched, or holds no usable key, and no keys are
    /// held from before.
    #[error("GitHub's secret-scanning keys are unavailable: {0}")]
    Unavailable(String),
    /// No key has this identifier, even after a reload.
    #[error("unknown key identifier")]
    UnknownKeyId,
}

#[derive(Debug, Clone)]
enum Source {
    File(PathBuf),
    Url(String),
}

#[derive(Debug, Default)]
struct Held {
    keys: HashMap<String, VerifyingKey>,
    /// When `keys` were loaded.
    loaded_at: Option<Instant>,
    /// When a load was last tried (successful or not).
    tried_at: Option<Instant>,
}

#[derive(Debug)]
struct Inner {
    source: Source,
    refresh: Duration,
    timeout: Duration,
    client: reqwest::Client,
    held: tokio::sync::Mutex<Held>,
}

/// The cache of GitHub's public keys, by `key_identifier`. Cloning is cheap (shared).
#[derive(Debug, Clone)]
pub struct GithubKeys {
    inner: Arc<Inner>,
}

impl GithubKeys {
    /// A cache reading the source `config` names. Nothing is read until a key is asked for.
    ///
    /// # Errors
    /// [`KeysError::Config`] when both `github_keys_file` and `github_keys_url` are set, or
    /// the URL is not http(s); the HTTP client cannot be built.
    pub fn new(config: &SecretScanningConfig) -> Result<Self, KeysError> {
        let source = match (&config.github_keys_file, &config.github_keys_url) {
            (Some(_), Some(_)) => {
                return Err(KeysError::Config(
                    "set github_keys_file or github_keys_url, not both".to_owned(),
                ))
            }
            (Some(file), None) => Source::File(file.clone()),
            (None, url) => {
                let url = url.clone().unwrap_or_else(|| GITHUB_KEYS_URL.to_owned());
                if !(url.starts_with("https://") || url.starts_with("http://")) {
                    return Err(KeysError::Config(format!(
                        "github_keys_url must be an http(s) URL, got {:?}",
                        aigw_domain::redact::redact_url(&url)
                    )));
                }
                Source::Url(url)
            }
        };
        let timeout = Duration::from_secs(config.keys_fetch_timeout_secs.max(1));
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            // api.github.com refuses requests without a User-Agent.
            .user_agent(concat!("aigw/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| KeysError::Config(format!("HTTP client: {e}")))?;
        Ok(Self {
            inner: Arc::new(Inner {
                source,
                refresh: Duration::from_secs(config.keys_refresh_secs.max(1)),
                timeout,
                client,
                held: tokio::sync::Mutex::new(Held::default()),
            }),
        })
    }

    /// The key with identifier `id`, from the cache, reloading it when stale or when `id` is
    /// unknown (see the module documentation).
    ///
    /// # Errors
    /// [`KeysError::UnknownKeyId`] when no key has `id`; [`KeysError::Unavailable`] when no
    /// keys could be loaded at all.
    pub async fn key(&self, id: &str) -> Result<VerifyingKey, KeysError> {
        let mut held = self.inner.held.lock().await;
        let stale = held.loaded_at.is_none_or(|at| at.elapsed() >= self.inner.refresh);
        let mut reloaded = false;
        if stale && self.may_reload(&held) {
            self.reload(&mut held).await;
            reloaded = true;
        }
        if held.loaded_at.is_none() {
            return Err(KeysError::Unavailable(
                "no keys document has been loaded yet; see the log".to_owned(),
            ));
        }
        if let Some(key) = held.keys.get(id) {
            return Ok(*key);
        }
        if !reloaded && self.may_reload(&held) {
            self.reload(&mut held).await;
        }
        held.keys.get(id).copied().ok_or(KeysError::UnknownKeyId)
    }

    fn may_reload(&self, held: &Held) -> bool {
        held.tried_at.is_none_or(|at| at.elapsed() >= MIN_RELOAD_INTERVAL)
    }

    /// Loads the document into `held`; on failure keeps what `held` has and logs why.
    async fn reload(&self, held: &mut Held) {
        held.tried_at = Some(Instant::now());
        match self.load().await {
            Ok(keys) => {
                tracing::info!(keys = keys.len(), "GitHub's secret-scanning keys loaded");
                held.keys = keys;
                held.loaded_at = Some(Instant::now());
            }
            Err(e) => {
                tracing::warn!(error = %e, kept = held.keys.len(), "GitHub's secret-scanning keys could not be loaded");
            }
        }
    }

    async fn load(&self) -> Result<HashMap<String, VerifyingKey>, KeysError> {
        let bytes = match &self.inner.source {
            Source::File(path) => {
                let read = tokio::fs::read(path).await.map_err(|e| {
                    KeysError::Unavailable(format!("reading {}: {e}", path.display()))
                })?;
                if read.len() > MAX_KEYS_DOCUMENT_BYTES {
                    return Err(KeysError::Unavailable(format!(
                        "{} is larger than {MAX_KEYS_DOCUMENT_BYTES} bytes",
                        path.display()
                    )));
                }
                read
            }
            Source::Url(url) => self.fetch(url).await?,
        };
        parse_keys_document(&bytes)
    }

    async fn fetch(&self, url: &str) -> Result<Vec<u8>, KeysError> {
        let shown = aigw_domain::redact::redact_url(url);
        let fail = |what: String| KeysError::Unavailable(format!("fetching {shown}: {what}"));
        let work = async {
            let mut response =
                self.inner.client.get(url).send().await.map_err(|e| fail(e.to_string()))?;
            if !response.status().is_success() {
                return Err(fail(format!("status {}", response.status())));
            }
            let mut body = Vec::new();
            while let Some(chunk) = response.chunk().await.map_err(|e| fail(e.to_string()))? {
                if body.len() + chunk.len() > MAX_KEYS_DOCUMENT_BYTES {
                    return Err(fail(format!("larger than {MAX_KEYS_DOCUMENT_BYTES} bytes")));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(body)
        };
        // The client's timeout bounds each request; this bounds the whole body too.
        tokio::time::timeout(self.inner.timeout, work)
            .await
            .map_err(|_| fail(format!("no answer within {} s", self.inner.timeout.as_secs())))?
    }
}

#[derive(Deserialize)]
struct KeysDocument {
    public_keys: Vec<DocumentKey>,
}

#[derive(Deserialize)]
struct DocumentKey {
    key_identifier: String,
    key: String,
}

/// The keys of a keys document, by identifier. A key that is not a P-256 public key in PEM
/// (SPKI) is skipped and logged.
///
/// # Errors
/// [`KeysError::Unavailable`] when the document is not of GitHub's shape or holds no usable
/// key.
pub fn parse_keys_document(bytes: &[u8]) -> Result<HashMap<String, VerifyingKey>, KeysError> {
    let document: KeysDocument = serde_json::from_slice(bytes).map_err(|e| {
        KeysError::Unavailable(format!("not a keys document ({{\"public_keys\": [...]}}): {e}"))
    })?;
    let mut keys = HashMap::new();
    for entry in document.public_keys {
        match VerifyingKey::from_public_key_pem(entry.key.trim()) {
            Ok(key) => {
                keys.insert(entry.key_identifier, key);
            }
            Err(e) => tracing::warn!(
                key_identifier = %entry.key_identifier.chars().take(128).collect::<String>(),
                error = %e,
                "a key of the secret-scanning keys document is not a P-256 public key; skipped"
            ),
        }
    }
    if keys.is_empty() {
        return Err(KeysError::Unavailable("the document holds no P-256 public key".to_owned()));
    }
    Ok(keys)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// The key of GitHub's documentation sample.
    const SAMPLE_PEM: &str = "-----BEGIN PUBLIC KEY-----\nMFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE9MJJHnMfn2+H4xL4YaPDA4RpJqUq\nkCmRCBnYERxZanmcpzQSXs1X/AljlKkbJ8qpVIW4clayyef9gWhFbNHWAA==\n-----END PUBLIC KEY-----\n";

    #[test]
    fn a_document_of_githubs_shape_parses_and_bad_keys_are_skipped() {
        let doc = serde_json::json!({"public_keys": [
            {"key_identifier": "good", "key": SAMPLE_PEM, "is_current": true},
            {"key_identifier": "bad", "key": "not a key", "is_current": false},
        ]});
        let keys = parse_keys_document(doc.to_string().as_bytes()).unwrap();
        assert_eq!(keys.keys().collect::<Vec<_>>(), vec!["good"]);
        for bad in [
            &b"[]"[..],
            b"{\"public_keys\": []}",
            b"{\"public_keys\": [{\"key_identifier\": \"x\", \"key\": \"y\"}]}",
        ] {
            assert!(matches!(parse_keys_document(bad), Err(KeysError::Unavailable(_))));
        }
    }

    #[test]
    fn sources_are_checked_at_construction() {
        let both = SecretScanningConfig {
            github_keys_file: Some("keys.json".into()),
            github_keys_url: Some("https://example.com/keys".into()),
            ..Default::default()
        };
        assert!(matches!(GithubKeys::new(&both), Err(KeysError::Config(_))));
        let ftp = SecretScanningConfig {
            github_keys_url: Some("ftp://example.com/keys".into()),
            ..Default::default()
        };
        assert!(matches!(GithubKeys::new(&ftp), Err(KeysError::Config(_))));
        assert!(GithubKeys::new(&SecretScanningConfig::default()).is_ok());
    }
}
