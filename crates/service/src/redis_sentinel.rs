//! Finding the Redis master through Redis Sentinel (`rate_limit.redis_sentinels`,
//! `rate_limit.redis_sentinel_master`), and telling one master's data from another's.
//!
//! - **Which master**: the `redis` crate's Sentinel client asks the Sentinels in order for the
//!   master's address (`SENTINEL get-master-addr-by-name`) and confirms with `ROLE` that the
//!   server it names considers itself the master, so a Sentinel that has not seen a failover
//!   yet cannot send the node to a demoted server.
//! - **Whose data**: the master's replication id (`master_replid` of `INFO replication`).
//!   Redis replicates asynchronously, so a promoted replica may lack the master's last writes;
//!   a promotion always gives the new master a new replication id, and that id names the keys'
//!   budget counters ([`crate::governance::redis_counters`]), so after a failover every
//!   counter reopens from the ledger instead of trusting a copy that may be short.

use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::IntoConnectionInfo;

/// The Sentinels of one master (cheap to share; one resolution at a time).
pub(crate) struct SentinelTarget {
    client: tokio::sync::Mutex<SentinelClient>,
    /// The master's name, for logs.
    master: String,
}

impl std::fmt::Debug for SentinelTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SentinelTarget").field("master", &self.master).finish_non_exhaustive()
    }
}

impl SentinelTarget {
    /// The Sentinels at `sentinels` (`redis://[:password@]host:port` each) that watch
    /// `master`. The master is reached with the password, user and database number of
    /// `redis_url` (its host and port are not used).
    ///
    /// # Errors
    /// A message naming the address or URL that cannot be parsed.
    pub(crate) fn new(sentinels: &[String], master: &str, redis_url: &str) -> Result<Self, String> {
        let addresses = sentinels
            .iter()
            .map(|s| {
                s.as_str().into_connection_info().map_err(|e| {
                    let s = aigw_domain::redact::redact_url(s);
                    format!("rate_limit.redis_sentinels: {s}: {e}")
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        if addresses.is_empty() {
            return Err("rate_limit.redis_sentinels is empty".to_owned());
        }
        let settings = redis_url.into_connection_info().map_err(|e| {
            let url = aigw_domain::redact::redact_url(redis_url);
            format!("rate_limit.redis_url {url}: {e}")
        })?;
        let node = SentinelNodeConnectionInfo::default()
            .set_redis_connection_info(settings.redis_settings().clone());
        let client = SentinelClient::build(
            addresses,
            master.to_owned(),
            Some(node),
            SentinelServerType::Master,
        )
        .map_err(|e| format!("rate_limit.redis_sentinels: {e}"))?;
        Ok(Self { client: tokio::sync::Mutex::new(client), master: master.to_owned() })
    }

    /// The master's name in the Sentinels' configuration.
    pub(crate) fn master_name(&self) -> &str {
        &self.master
    }

    /// A client of the server the Sentinels name as the master, confirmed by its `ROLE`, and
    /// its address (`host:port`, for logs). Unbounded: the caller puts a timeout on it.
    ///
    /// # Errors
    /// No Sentinel answered, none knows the master, or the server named is not a master.
    pub(crate) async fn master(&self) -> Result<(redis::Client, String), String> {
        let client = self
            .client
            .lock()
            .await
            .async_get_client()
            .await
            .map_err(|e| format!("no master {:?} from the Sentinels: {e}", self.master))?;
        let address = client.get_connection_info().addr().to_string();
        Ok((client, address))
    }
}

/// The replication id of the server behind `conn`, checked to be a master.
///
/// # Errors
/// The server did not answer `INFO replication`, or it is not a master.
pub(crate) async fn replication_id<C: redis::aio::ConnectionLike>(
    conn: &mut C,
) -> Result<String, String> {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query_async(conn)
        .await
        .map_err(|e| format!("INFO replication: {e}"))?;
    parse_replication_id(&info)
}

/// `master_replid` of an `INFO replication` answer whose `role` is `master`.
fn parse_replication_id(info: &str) -> Result<String, String> {
    let field = |name: &str| {
        info.lines().find_map(|line| line.trim_end().strip_prefix(name)?.strip_prefix(':'))
    };
    match (field("role"), field("master_replid")) {
        (Some("master"), Some(id)) if !id.is_empty() => Ok(id.to_owned()),
        (Some("master"), _) => Err("INFO replication has no master_replid".to_owned()),
        (role, _) => Err(format!("the server is not a master (role {})", role.unwrap_or("?"))),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_replication_id_is_read_from_a_master_only() {
        let master = "# Replication\r\nrole:master\r\nconnected_slaves:1\r\n\
                      master_replid:5f3c0a\r\nmaster_replid2:0000\r\n";
        assert_eq!(parse_replication_id(master), Ok("5f3c0a".to_owned()));
        let replica = "# Replication\r\nrole:slave\r\nmaster_host:127.0.0.1\r\n\
                       master_replid:5f3c0a\r\n";
        assert!(parse_replication_id(replica).unwrap_err().contains("role slave"));
        assert!(parse_replication_id("role:master\r\n").is_err());
        assert!(parse_replication_id("").unwrap_err().contains("role ?"));
    }

    #[test]
    fn sentinel_addresses_are_urls() {
        let both = ["redis://127.0.0.1:26379".to_owned(), "redis://:pw@10.0.0.2:26379".to_owned()];
        let target = SentinelTarget::new(&both, "mymaster", "redis://:secret@ignored:6379/2");
        assert_eq!(target.map(|t| t.master_name().to_owned()), Ok("mymaster".to_owned()));
        assert!(SentinelTarget::new(&[], "mymaster", "redis://x").unwrap_err().contains("empty"));
        let bad = ["redis://[::1".to_owned()];
        assert!(SentinelTarget::new(&bad, "m", "redis://x").unwrap_err().contains("redis://"));
    }
}
