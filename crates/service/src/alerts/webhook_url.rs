//! Where a team's webhook may point. A webhook URL is set by a team's owner or admin and
//! called by the server, so by default it must be `https://` and reach only public addresses:
//! the URL's literal address is checked when it is set and before each delivery, and host
//! names resolve through [`PublicOnly`], which drops every address that is not public at
//! connection time (so a name that later resolves to `127.0.0.1` or `169.254.169.254` reaches
//! nothing). `alerts.webhook_allow_private` lifts both rules, for receivers inside the
//! operator's network.

use aigw_domain::FieldError;
use ipnet::IpNet;
use std::net::{IpAddr, SocketAddr};
use std::sync::LazyLock;

/// The longest URL accepted, in bytes.
const MAX_URL_BYTES: usize = 2048;

/// Networks that are not public (RFC 6890 and its updates): loopback, private, shared,
/// link-local, documentation, benchmarking, multicast, reserved and their IPv6 peers.
static NOT_PUBLIC: LazyLock<Vec<IpNet>> = LazyLock::new(|| {
    [
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.88.99.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "::/128",
        "::1/128",
        "::ffff:0:0/96",
        "64:ff9b::/96",
        "100::/64",
        "2001:db8::/32",
        "fc00::/7",
        "fe80::/10",
        "ff00::/8",
    ]
    .iter()
    .filter_map(|net| net.parse().ok())
    .collect()
});

/// Whether `ip` is a public address (an IPv4-mapped IPv6 address is judged as its IPv4).
pub fn is_public(ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    !NOT_PUBLIC.iter().any(|net| net.contains(&ip))
}

/// Checks a webhook URL: absolute `https://` (or `http://` with `allow_private`), a host, no
/// user or password, at most 2048 bytes, and a literal address only when public (or
/// `allow_private`).
///
/// # Errors
/// [`FieldError`] on `url` saying what is wrong.
pub fn check(raw: &str, allow_private: bool) -> Result<url::Url, FieldError> {
    let bad = |issue: &str| FieldError::new("url", issue);
    if raw.len() > MAX_URL_BYTES {
        return Err(bad("must be at most 2048 bytes"));
    }
    let url = url::Url::parse(raw).map_err(|_| bad("must be an absolute https:// URL"))?;
    match url.scheme() {
        "https" => {}
        "http" if allow_private => {}
        _ => return Err(bad("must be an https:// URL")),
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(bad("must not carry a user name or password"));
    }
    let literal = match url.host() {
        None => return Err(bad("must name a host")),
        Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
        Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
        Some(url::Host::Domain(_)) => None,
    };
    if literal.is_some_and(|ip| !allow_private && !is_public(ip)) {
        return Err(bad("must reach a public address"));
    }
    Ok(url)
}

/// A resolver that keeps only public addresses (see the module docs).
#[derive(Debug, Clone, Copy)]
pub struct PublicOnly;

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let found = tokio::net::lookup_host((host.as_str(), 0)).await?;
            let public: Vec<SocketAddr> = found.filter(|a| is_public(a.ip())).collect();
            if public.is_empty() {
                return Err(format!("{host} resolves to no public address").into());
            }
            Ok(Box::new(public.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn only_public_addresses_pass() {
        for ip in ["8.8.8.8", "1.1.1.1", "2606:4700::1111", "::ffff:8.8.8.8"] {
            assert!(is_public(ip.parse().unwrap()), "{ip}");
        }
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "172.20.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::",
        ] {
            assert!(!is_public(ip.parse().unwrap()), "{ip}");
        }
    }

    #[test]
    fn urls_are_checked() {
        assert!(check("https://hooks.example.com/aigw?x=1", false).is_ok());
        assert!(check("https://8.8.8.8/hook", false).is_ok());
        for bad in [
            "http://hooks.example.com/",
            "ftp://hooks.example.com/",
            "https://user:pw@hooks.example.com/",
            "https://127.0.0.1/",
            "https://[::1]/",
            "https://169.254.169.254/latest/meta-data",
            "/relative",
            "",
        ] {
            assert_eq!(check(bad, false).unwrap_err().field, "url", "{bad}");
        }
        assert!(check("http://127.0.0.1:9000/hook", true).is_ok());
        assert!(check(&format!("https://a.example/{}", "x".repeat(2048)), true).is_err());
    }
}
