//! The SSRF guard: which URLs a webhook may name and which addresses a
//! delivery may connect to.
//!
//! The rule: a webhook may only reach the public internet. Its URL must be
//! `https://host[:port][/path][?query]`, at most [`MAX_URL_LEN`] bytes, with
//! no `user:pass@`, no `#fragment`, no spaces, control characters or
//! backslashes. The host is a DNS name, a dotted IPv4 address or an IPv6
//! address in brackets; a host whose last label is a number (`2130706433`,
//! `127.1`, `0x7f.0.0.1`) must be a plain dotted IPv4 address, since HTTP
//! clients read those other forms as addresses too. An IP literal is
//! checked at once with [`check_address`]; a name is checked when the
//! delivery resolves it, with [`check_resolved`], and every address it
//! resolves to must pass (one private answer is enough to refuse). The names
//! `localhost`, `*.localhost`, `*.local`, `*.internal` (cloud-internal DNS,
//! such as `metadata.google.internal`) and `*.home.arpa` are refused by
//! name.
//!
//! Refused addresses: loopback, private, link-local (which holds the cloud
//! metadata server 169.254.169.254), carrier-grade NAT, "this network",
//! broadcast, multicast, documentation, benchmarking and other reserved
//! ranges, the unspecified address, IPv6 unique-local and everything outside
//! IPv6 global unicast (2000::/3). IPv4 embedded in IPv6 (`::ffff:a.b.c.d`,
//! NAT64 `64:ff9b::a.b.c.d`, 6to4 `2002:AABB:CCDD::`) is judged as the IPv4
//! address it carries.
//!
//! [`Policy::allow_loopback`], for local testing only, lets loopback
//! addresses (127/8, ::1) and the `localhost` names through, and plain
//! `http` to those hosts; nothing else changes.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The longest webhook URL accepted, in bytes.
pub const MAX_URL_LEN: usize = 2048;

/// What the guard lets through beyond the public internet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Policy {
    /// Allow loopback hosts (127/8, ::1, `localhost`), also over plain
    /// `http`: for local testing, never in production.
    pub allow_loopback: bool,
}

/// A URL's scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Https,
    /// Only for loopback hosts under [`Policy::allow_loopback`].
    Http,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Https => "https",
            Scheme::Http => "http",
        }
    }

    /// The port used when the URL names none.
    pub fn default_port(self) -> u16 {
        match self {
            Scheme::Https => 443,
            Scheme::Http => 80,
        }
    }
}

/// A URL's host: a lowercase DNS name (no trailing dot) or an IP literal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Host {
    Name(String),
    Ip(IpAddr),
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(name) => f.write_str(name),
            Host::Ip(IpAddr::V4(ip)) => write!(f, "{ip}"),
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]"),
        }
    }
}

/// Why an address is refused, in words that complete "… is …".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    Loopback,
    Private,
    LinkLocal,
    SharedNat,
    ThisNetwork,
    Unspecified,
    Broadcast,
    Multicast,
    Documentation,
    UniqueLocal,
    Reserved,
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Reason::Loopback => "a loopback address (to test with a receiver on this machine, start the platform with MAPI_WEBHOOKS_ALLOW_LOOPBACK=true)",
            Reason::Private => "a private address",
            Reason::LinkLocal => "a link-local address (the range of cloud metadata servers)",
            Reason::SharedNat => "a carrier-grade NAT address",
            Reason::ThisNetwork => "a \"this network\" address",
            Reason::Unspecified => "the unspecified address",
            Reason::Broadcast => "the broadcast address",
            Reason::Multicast => "a multicast address",
            Reason::Documentation => "a documentation address",
            Reason::UniqueLocal => "a unique-local (private IPv6) address",
            Reason::Reserved => "a reserved or special-purpose address",
        })
    }
}

/// What a person testing webhooks on their own machine needs to know.
const LOOPBACK_HINT: &str = "plain http reaches only a receiver on this machine, on a platform started \
     with MAPI_WEBHOOKS_ALLOW_LOOPBACK=true for local testing";

/// Why a webhook URL or address is refused, and what to do instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error("webhook URL is {len} bytes long; it may be at most 2048")]
    TooLong { len: usize },
    #[error("webhook URL must not contain spaces, control characters or backslashes")]
    BadCharacter,
    #[error("webhook URL must start with https://")]
    MissingScheme,
    #[error("webhook URL must use https ({LOOPBACK_HINT})")]
    NotHttps,
    #[error("webhook URL must not contain a user name or password: remove the `user:pass@` part")]
    UserInfo,
    #[error("webhook URL must not contain a #fragment: receivers never see it")]
    Fragment,
    #[error("webhook URL must name a host, as in https://example.com/hook")]
    MissingHost,
    #[error(
        "webhook host `{host}` is not a valid DNS name, IPv4 address or bracketed IPv6 address \
         (write international names in punycode, IPv6 as https://[2001:db8::1]/)"
    )]
    BadHost { host: String },
    #[error("webhook host `{host}` ends in a number but is not a dotted IPv4 address: write it as a.b.c.d")]
    NumericHost { host: String },
    #[error("webhook URL port `{port}` must be a number from 1 to 65535")]
    BadPort { port: String },
    #[error("webhook host `{host}` is a local name: webhooks may only reach public internet hosts")]
    LocalName { host: String },
    #[error("webhook host {ip} is {reason}: webhooks may only reach public internet addresses")]
    Forbidden { ip: IpAddr, reason: Reason },
    #[error("webhook host resolved to no addresses: check its DNS records")]
    NoAddresses,
}

/// A webhook URL that passed the guard at creation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetUrl {
    scheme: Scheme,
    host: Host,
    port: Option<u16>,
    path_and_query: String,
    text: String,
}

impl TargetUrl {
    /// Parses and checks a webhook URL (see the module's rule).
    pub fn parse(text: &str, policy: &Policy) -> Result<TargetUrl, TargetError> {
        check_text(text)?;
        let (scheme, rest) = split_scheme(text, policy)?;
        let authority_end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(authority_end);
        if authority.contains('@') {
            return Err(TargetError::UserInfo);
        }
        let (host, port) = split_host_port(authority)?;
        let host = parse_host(host)?;
        check_host(&host, policy)?;
        if scheme == Scheme::Http && !is_loopback_host(&host) {
            return Err(TargetError::NotHttps);
        }
        let path_and_query = if path.starts_with('/') { path.to_owned() } else { format!("/{path}") };
        let text = match port {
            Some(port) => format!("{}://{host}:{port}{path_and_query}", scheme.as_str()),
            None => format!("{}://{host}{path_and_query}", scheme.as_str()),
        };
        Ok(TargetUrl { scheme, host, port, path_and_query, text })
    }

    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The host's IP address when the URL names one, so there is nothing to resolve.
    pub fn ip(&self) -> Option<IpAddr> {
        match self.host {
            Host::Ip(ip) => Some(ip),
            Host::Name(_) => None,
        }
    }

    /// The port to connect to: the URL's, or the scheme's default.
    pub fn port(&self) -> u16 {
        self.port.unwrap_or(self.scheme.default_port())
    }

    /// The path (at least `/`) and query, as written.
    pub fn path_and_query(&self) -> &str {
        &self.path_and_query
    }

    /// The URL with its scheme and host in lowercase.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl fmt::Display for TargetUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Refuses an address a webhook may not reach (see the module's rule).
pub fn check_address(ip: IpAddr, policy: &Policy) -> Result<(), TargetError> {
    match reason_for(ip) {
        None => Ok(()),
        Some(Reason::Loopback) if policy.allow_loopback => Ok(()),
        Some(reason) => Err(TargetError::Forbidden { ip, reason }),
    }
}

/// Refuses a resolved host if any of its addresses is refused, or if it
/// has none. Connect only to addresses from this same list.
pub fn check_resolved(addrs: &[IpAddr], policy: &Policy) -> Result<(), TargetError> {
    if addrs.is_empty() {
        return Err(TargetError::NoAddresses);
    }
    addrs.iter().try_for_each(|ip| check_address(*ip, policy))
}

fn check_text(text: &str) -> Result<(), TargetError> {
    if text.len() > MAX_URL_LEN {
        return Err(TargetError::TooLong { len: text.len() });
    }
    if text.chars().any(|c| c.is_whitespace() || c.is_control() || c == '\\') {
        return Err(TargetError::BadCharacter);
    }
    if text.contains('#') {
        return Err(TargetError::Fragment);
    }
    Ok(())
}

/// Splits `scheme://rest`; `http` only under `allow_loopback` (its host is
/// checked later).
fn split_scheme<'a>(text: &'a str, policy: &Policy) -> Result<(Scheme, &'a str), TargetError> {
    let (scheme, rest) = text.split_once("://").ok_or(TargetError::MissingScheme)?;
    if scheme.eq_ignore_ascii_case("https") {
        Ok((Scheme::Https, rest))
    } else if scheme.eq_ignore_ascii_case("http") && policy.allow_loopback {
        Ok((Scheme::Http, rest))
    } else {
        Err(TargetError::NotHttps)
    }
}

/// Splits `host[:port]` or `[v6][:port]`; the host comes back with its brackets.
fn split_host_port(authority: &str) -> Result<(&str, Option<u16>), TargetError> {
    let (host, port) = if authority.starts_with('[') {
        let close = authority.find(']').ok_or_else(|| bad_host(authority))?;
        let (host, after) = authority.split_at(close + 1);
        match after.strip_prefix(':') {
            Some(port) => (host, Some(port)),
            None if after.is_empty() => (host, None),
            None => return Err(bad_host(authority)),
        }
    } else if authority.matches(':').count() > 1 {
        return Err(bad_host(authority));
    } else {
        match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return Err(TargetError::MissingHost);
    }
    Ok((host, port.map(parse_port).transpose()?))
}

fn parse_port(text: &str) -> Result<u16, TargetError> {
    let digits = !text.is_empty() && text.len() <= 5 && text.bytes().all(|b| b.is_ascii_digit());
    match text.parse::<u16>() {
        Ok(port) if digits && port != 0 => Ok(port),
        _ => Err(TargetError::BadPort { port: text.to_owned() }),
    }
}

fn parse_host(text: &str) -> Result<Host, TargetError> {
    if let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
        return inner.parse::<Ipv6Addr>().map(|ip| Host::Ip(IpAddr::V6(ip))).map_err(|_| bad_host(text));
    }
    let name = text.to_ascii_lowercase();
    let name = name.strip_suffix('.').unwrap_or(&name);
    let last = name.rsplit('.').next().unwrap_or(name);
    if !last.is_empty() && (last.bytes().all(|b| b.is_ascii_digit()) || last.starts_with("0x")) {
        let ip = name.parse::<Ipv4Addr>().map_err(|_| TargetError::NumericHost { host: text.to_owned() })?;
        return Ok(Host::Ip(IpAddr::V4(ip)));
    }
    if !is_dns_name(name) {
        return Err(bad_host(text));
    }
    Ok(Host::Name(name.to_owned()))
}

/// Up to 253 bytes of labels of 1 to 63 letters, digits, `-` or `_`, no
/// label starting or ending with `-`.
fn is_dns_name(name: &str) -> bool {
    let label_ok = |label: &str| {
        (1..=63).contains(&label.len())
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    name.len() <= 253 && name.split('.').all(label_ok)
}

fn check_host(host: &Host, policy: &Policy) -> Result<(), TargetError> {
    match host {
        Host::Ip(ip) => check_address(*ip, policy),
        Host::Name(name) if is_localhost(name) && policy.allow_loopback => Ok(()),
        Host::Name(name) if is_localhost(name) || is_local_name(name) => {
            Err(TargetError::LocalName { host: name.clone() })
        }
        Host::Name(_) => Ok(()),
    }
}

fn is_localhost(name: &str) -> bool {
    name == "localhost" || name.ends_with(".localhost")
}

/// Names that only resolve inside a network: mDNS, cloud-internal DNS, home networks.
fn is_local_name(name: &str) -> bool {
    ["local", "internal", "home.arpa"]
        .iter()
        .any(|suffix| name == *suffix || name.strip_suffix(suffix).is_some_and(|head| head.ends_with('.')))
}

fn is_loopback_host(host: &Host) -> bool {
    match host {
        Host::Ip(ip) => reason_for(*ip) == Some(Reason::Loopback),
        Host::Name(name) => is_localhost(name),
    }
}

fn bad_host(text: &str) -> TargetError {
    TargetError::BadHost { host: text.to_owned() }
}

fn reason_for(ip: IpAddr) -> Option<Reason> {
    match ip {
        IpAddr::V4(ip) => reason_v4(ip),
        IpAddr::V6(ip) => reason_v6(ip),
    }
}

/// Whether `ip` lies in `base/len`.
fn in_v4(ip: Ipv4Addr, base: [u8; 4], len: u32) -> bool {
    let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
    u32::from(ip) & mask == u32::from(Ipv4Addr::from(base)) & mask
}

const V4_RANGES: [([u8; 4], u32, Reason); 17] = [
    ([0, 0, 0, 0], 32, Reason::Unspecified),
    ([0, 0, 0, 0], 8, Reason::ThisNetwork),
    ([10, 0, 0, 0], 8, Reason::Private),
    ([100, 64, 0, 0], 10, Reason::SharedNat),
    ([127, 0, 0, 0], 8, Reason::Loopback),
    ([169, 254, 0, 0], 16, Reason::LinkLocal),
    ([172, 16, 0, 0], 12, Reason::Private),
    ([192, 0, 0, 0], 24, Reason::Reserved),
    ([192, 0, 2, 0], 24, Reason::Documentation),
    ([192, 88, 99, 0], 24, Reason::Reserved),
    ([192, 168, 0, 0], 16, Reason::Private),
    ([198, 18, 0, 0], 15, Reason::Reserved),
    ([198, 51, 100, 0], 24, Reason::Documentation),
    ([203, 0, 113, 0], 24, Reason::Documentation),
    ([224, 0, 0, 0], 4, Reason::Multicast),
    ([255, 255, 255, 255], 32, Reason::Broadcast),
    ([240, 0, 0, 0], 4, Reason::Reserved),
];

/// The first matching row of [`V4_RANGES`] (more specific rows come first).
fn reason_v4(ip: Ipv4Addr) -> Option<Reason> {
    V4_RANGES.iter().find(|(base, len, _)| in_v4(ip, *base, *len)).map(|(_, _, reason)| *reason)
}

/// Whether `ip` lies in `base/len`.
fn in_v6(ip: Ipv6Addr, base: u128, len: u32) -> bool {
    let mask = u128::MAX.checked_shl(128 - len).unwrap_or(0);
    u128::from(ip) & mask == base & mask
}

fn reason_v6(ip: Ipv6Addr) -> Option<Reason> {
    if let Some(v4) = embedded_v4(ip) {
        return reason_v4(v4);
    }
    let rows: [(u128, u32, Reason); 9] = [
        (0, 128, Reason::Unspecified),
        (1, 128, Reason::Loopback),
        (0xfc00 << 112, 7, Reason::UniqueLocal),
        (0xfe80 << 112, 10, Reason::LinkLocal),
        (0xff00 << 112, 8, Reason::Multicast),
        (0x2001_0db8 << 96, 32, Reason::Documentation),
        (0x3fff << 112, 20, Reason::Documentation),
        // Teredo tunnels (2001::/32) and benchmarking (2001:2::/48).
        (0x2001 << 112, 32, Reason::Reserved),
        (0x2001_0002 << 96, 48, Reason::Reserved),
    ];
    let found = rows.iter().find(|(base, len, _)| in_v6(ip, *base, *len)).map(|(_, _, reason)| *reason);
    // Outside global unicast (2000::/3) nothing is a public internet address.
    found.or_else(|| (!in_v6(ip, 0x2000 << 112, 3)).then_some(Reason::Reserved))
}

/// The IPv4 address carried by an IPv4-mapped (::ffff:0:0/96), NAT64
/// (64:ff9b::/96) or 6to4 (2002::/16) address.
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let bits = u128::from(ip);
    let low32 = Ipv4Addr::from((bits & 0xffff_ffff) as u32);
    if in_v6(ip, 0xffff << 32, 96) || in_v6(ip, 0x0064_ff9b << 96, 96) {
        Some(low32)
    } else if in_v6(ip, 0x2002 << 112, 16) {
        Some(Ipv4Addr::from(((bits >> 80) & 0xffff_ffff) as u32))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPEN: Policy = Policy { allow_loopback: false };
    const LOOPBACK: Policy = Policy { allow_loopback: true };

    fn ip(text: &str) -> IpAddr {
        text.parse().expect("test address")
    }

    /// Every refused range at its edges, and public neighbours just outside.
    const ADDRESSES: &[(&str, Option<Reason>)] = &[
        ("127.0.0.1", Some(Reason::Loopback)),
        ("127.255.255.254", Some(Reason::Loopback)),
        ("10.0.0.5", Some(Reason::Private)),
        ("10.255.255.255", Some(Reason::Private)),
        ("172.16.0.1", Some(Reason::Private)),
        ("172.31.255.255", Some(Reason::Private)),
        ("192.168.0.1", Some(Reason::Private)),
        ("192.168.255.255", Some(Reason::Private)),
        ("169.254.169.254", Some(Reason::LinkLocal)),
        ("169.254.0.1", Some(Reason::LinkLocal)),
        ("100.64.0.1", Some(Reason::SharedNat)),
        ("100.127.255.255", Some(Reason::SharedNat)),
        ("0.0.0.0", Some(Reason::Unspecified)),
        ("0.1.2.3", Some(Reason::ThisNetwork)),
        ("255.255.255.255", Some(Reason::Broadcast)),
        ("224.0.0.1", Some(Reason::Multicast)),
        ("239.255.255.255", Some(Reason::Multicast)),
        ("192.0.2.1", Some(Reason::Documentation)),
        ("198.51.100.7", Some(Reason::Documentation)),
        ("203.0.113.9", Some(Reason::Documentation)),
        ("192.0.0.8", Some(Reason::Reserved)),
        ("198.18.0.1", Some(Reason::Reserved)),
        ("198.19.255.255", Some(Reason::Reserved)),
        ("240.0.0.1", Some(Reason::Reserved)),
        ("8.8.8.8", None),
        ("1.1.1.1", None),
        ("9.255.255.255", None),
        ("11.0.0.0", None),
        ("100.63.255.255", None),
        ("100.128.0.0", None),
        ("126.255.255.255", None),
        ("128.0.0.0", None),
        ("169.253.255.255", None),
        ("169.255.0.0", None),
        ("172.15.255.255", None),
        ("172.32.0.0", None),
        ("192.167.255.255", None),
        ("192.169.0.0", None),
        ("198.17.255.255", None),
        ("223.255.255.255", None),
        ("::1", Some(Reason::Loopback)),
        ("::", Some(Reason::Unspecified)),
        ("fc00::1", Some(Reason::UniqueLocal)),
        ("fdff:ffff::1", Some(Reason::UniqueLocal)),
        ("fe80::1", Some(Reason::LinkLocal)),
        ("febf::1", Some(Reason::LinkLocal)),
        ("fec0::1", Some(Reason::Reserved)),
        ("ff02::1", Some(Reason::Multicast)),
        ("ff0e::1", Some(Reason::Multicast)),
        ("2001:db8::1", Some(Reason::Documentation)),
        ("2001::1", Some(Reason::Reserved)),
        ("100::1", Some(Reason::Reserved)),
        ("::7f00:1", Some(Reason::Reserved)),
        ("::ffff:127.0.0.1", Some(Reason::Loopback)),
        ("::ffff:10.0.0.5", Some(Reason::Private)),
        ("::ffff:169.254.169.254", Some(Reason::LinkLocal)),
        ("::ffff:8.8.8.8", None),
        ("64:ff9b::10.1.2.3", Some(Reason::Private)),
        ("64:ff9b::192.168.1.1", Some(Reason::Private)),
        ("64:ff9b::169.254.169.254", Some(Reason::LinkLocal)),
        ("64:ff9b::8.8.8.8", None),
        ("2002:0a00:0005::1", Some(Reason::Private)),
        ("2002:0808:0808::1", None),
        ("2606:4700:4700::1111", None),
        ("2001:4860:4860::8888", None),
        ("2a00:1450:4001::1", None),
    ];

    #[test]
    fn every_range_is_judged() {
        for (text, reason) in ADDRESSES {
            let expected = reason.map(|reason| TargetError::Forbidden { ip: ip(text), reason });
            assert_eq!(check_address(ip(text), &OPEN).err(), expected, "{text}");
        }
    }

    #[test]
    fn allow_loopback_lets_only_loopback_through() {
        for (text, reason) in ADDRESSES {
            let allowed = matches!(reason, None | Some(Reason::Loopback));
            assert_eq!(check_address(ip(text), &LOOPBACK).is_ok(), allowed, "{text}");
        }
    }

    #[test]
    fn refusals_say_what_to_fix() {
        let err = check_address(ip("10.0.0.5"), &OPEN).expect_err("private");
        assert_eq!(
            err.to_string(),
            "webhook host 10.0.0.5 is a private address: webhooks may only reach public internet addresses"
        );
        let err = TargetUrl::parse("http://example.com/", &OPEN).expect_err("http");
        assert!(err.to_string().starts_with("webhook URL must use https ("), "{err}");
        assert!(err.to_string().contains("MAPI_WEBHOOKS_ALLOW_LOOPBACK=true"), "{err}");
        let err = check_address(ip("169.254.169.254"), &OPEN).expect_err("metadata");
        assert!(err.to_string().contains("metadata"), "{err}");
    }

    #[test]
    fn resolved_addresses_must_all_pass() {
        assert_eq!(check_resolved(&[], &OPEN), Err(TargetError::NoAddresses));
        assert_eq!(check_resolved(&[ip("8.8.8.8"), ip("2606:4700:4700::1111")], &OPEN), Ok(()));
        let mixed = [ip("8.8.8.8"), ip("10.1.2.3")];
        assert_eq!(
            check_resolved(&mixed, &OPEN),
            Err(TargetError::Forbidden { ip: ip("10.1.2.3"), reason: Reason::Private })
        );
        assert_eq!(check_resolved(&[ip("127.0.0.1"), ip("::1")], &LOOPBACK), Ok(()));
        assert!(check_resolved(&[ip("127.0.0.1"), ip("192.168.0.1")], &LOOPBACK).is_err());
        assert_eq!(check_resolved(&[], &LOOPBACK), Err(TargetError::NoAddresses));
    }

    fn parsed(url: &str, policy: &Policy) -> Result<String, TargetError> {
        TargetUrl::parse(url, policy).map(|target| target.as_str().to_owned())
    }

    fn ok(normalized: &str) -> Result<String, TargetError> {
        Ok(normalized.to_owned())
    }

    fn forbidden(text: &str, reason: Reason) -> Result<String, TargetError> {
        Err(TargetError::Forbidden { ip: ip(text), reason })
    }

    fn host_err(make: fn(String) -> TargetError, host: &str) -> Result<String, TargetError> {
        Err(make(host.to_owned()))
    }

    fn bad_port(port: &str) -> Result<String, TargetError> {
        Err(TargetError::BadPort { port: port.to_owned() })
    }

    #[test]
    fn urls_are_split_and_normalized() {
        let cases = [
            ("https://example.com/hook", ok("https://example.com/hook")),
            ("HTTPS://Example.COM", ok("https://example.com/")),
            ("https://example.com:8443/a?b=c", ok("https://example.com:8443/a?b=c")),
            ("https://example.com?x=1", ok("https://example.com/?x=1")),
            ("https://example.com./x", ok("https://example.com/x")),
            ("https://example.com/@x", ok("https://example.com/@x")),
            ("https://xn--bcher-kva.de/", ok("https://xn--bcher-kva.de/")),
            ("https://my_host.example.com/", ok("https://my_host.example.com/")),
            ("https://123.example.com/", ok("https://123.example.com/")),
            ("https://localhostfoo.com/", ok("https://localhostfoo.com/")),
            ("https://internal.example.com/", ok("https://internal.example.com/")),
            ("https://8.8.8.8/x", ok("https://8.8.8.8/x")),
            ("https://[2606:4700:4700::1111]:8443/x", ok("https://[2606:4700:4700::1111]:8443/x")),
            ("https://[2001:4860:4860:0:0:0:0:8888]/", ok("https://[2001:4860:4860::8888]/")),
        ];
        for (url, expected) in cases {
            assert_eq!(parsed(url, &OPEN), expected, "{url}");
        }
    }

    #[test]
    fn malformed_urls_are_refused() {
        let cases = [
            ("example.com/hook", Err(TargetError::MissingScheme)),
            ("ftp://example.com/", Err(TargetError::NotHttps)),
            ("http://example.com/", Err(TargetError::NotHttps)),
            ("https://user:pass@example.com/", Err(TargetError::UserInfo)),
            ("https://user@example.com/", Err(TargetError::UserInfo)),
            ("https://", Err(TargetError::MissingHost)),
            ("https:///path", Err(TargetError::MissingHost)),
            ("https://:443/", Err(TargetError::MissingHost)),
            ("https://?q", Err(TargetError::MissingHost)),
            ("https://example.com/#frag", Err(TargetError::Fragment)),
            ("https://exa mple.com/", Err(TargetError::BadCharacter)),
            ("https://example.com\\@evil.com/", Err(TargetError::BadCharacter)),
            ("https://example.com/\t", Err(TargetError::BadCharacter)),
            ("https://example.com:0/", bad_port("0")),
            ("https://example.com:65536/", bad_port("65536")),
            ("https://example.com:abc/", bad_port("abc")),
            ("https://example.com:/", bad_port("")),
            ("https://example.com:+443/", bad_port("+443")),
            ("https://example.com:000443/", bad_port("000443")),
            ("https://-bad.com/", host_err(|host| TargetError::BadHost { host }, "-bad.com")),
            ("https://a..b.com/", host_err(|host| TargetError::BadHost { host }, "a..b.com")),
            ("https://bücher.de/", host_err(|host| TargetError::BadHost { host }, "bücher.de")),
            ("https://fe80::1/", host_err(|host| TargetError::BadHost { host }, "fe80::1")),
            ("https://[::1/", host_err(|host| TargetError::BadHost { host }, "[::1")),
            ("https://[::1]x/", host_err(|host| TargetError::BadHost { host }, "[::1]x")),
            ("https://[fe80::1%25eth0]/", host_err(|host| TargetError::BadHost { host }, "[fe80::1%25eth0]")),
            ("https://[example.com]/", host_err(|host| TargetError::BadHost { host }, "[example.com]")),
        ];
        for (url, expected) in cases {
            assert_eq!(parsed(url, &OPEN), expected, "{url}");
        }
    }

    #[test]
    fn numbers_that_clients_read_as_addresses_must_be_dotted_quads() {
        for host in
            ["2130706433", "127.1", "0x7f.0.0.1", "0x7f000001", "010.0.0.1", "1.2.3.4.5", "example.123"]
        {
            let url = format!("https://{host}/");
            let expected = host_err(|host| TargetError::NumericHost { host }, host);
            assert_eq!(parsed(&url, &OPEN), expected, "{url}");
        }
    }

    #[test]
    fn forbidden_ip_literals_are_refused_at_parse() {
        let cases = [
            ("https://10.0.0.5/x", forbidden("10.0.0.5", Reason::Private)),
            ("https://169.254.169.254/latest/meta-data", forbidden("169.254.169.254", Reason::LinkLocal)),
            ("https://127.0.0.1/", forbidden("127.0.0.1", Reason::Loopback)),
            ("https://[::1]/x", forbidden("::1", Reason::Loopback)),
            ("https://[::ffff:10.0.0.5]/", forbidden("::ffff:10.0.0.5", Reason::Private)),
            ("https://[fd00::1]:8443/", forbidden("fd00::1", Reason::UniqueLocal)),
            ("https://0.0.0.0/", forbidden("0.0.0.0", Reason::Unspecified)),
        ];
        for (url, expected) in cases {
            assert_eq!(parsed(url, &OPEN), expected, "{url}");
        }
    }

    #[test]
    fn local_names_are_refused_unless_testing_on_loopback() {
        let local = |host: &str| host_err(|host| TargetError::LocalName { host }, host);
        let cases = [
            ("https://localhost/x", local("localhost"), ok("https://localhost/x")),
            ("https://LOCALHOST./x", local("localhost"), ok("https://localhost/x")),
            ("https://api.localhost/", local("api.localhost"), ok("https://api.localhost/")),
            ("http://localhost:8080/x", Err(TargetError::NotHttps), ok("http://localhost:8080/x")),
            ("http://127.0.0.1:9000/hook", Err(TargetError::NotHttps), ok("http://127.0.0.1:9000/hook")),
            ("http://[::1]:8080/", Err(TargetError::NotHttps), ok("http://[::1]:8080/")),
            ("https://[::1]/x", forbidden("::1", Reason::Loopback), ok("https://[::1]/x")),
            ("http://example.com/", Err(TargetError::NotHttps), Err(TargetError::NotHttps)),
            ("http://10.0.0.1/", Err(TargetError::NotHttps), forbidden("10.0.0.1", Reason::Private)),
            (
                "https://10.0.0.1/",
                forbidden("10.0.0.1", Reason::Private),
                forbidden("10.0.0.1", Reason::Private),
            ),
            (
                "https://metadata.google.internal/",
                local("metadata.google.internal"),
                local("metadata.google.internal"),
            ),
            ("https://printer.local/", local("printer.local"), local("printer.local")),
            ("https://router.home.arpa/", local("router.home.arpa"), local("router.home.arpa")),
        ];
        for (url, open, loopback) in cases {
            assert_eq!(parsed(url, &OPEN), open, "{url} refused in production");
            assert_eq!(parsed(url, &LOOPBACK), loopback, "{url} under allow_loopback");
        }
    }

    #[test]
    fn urls_are_at_most_2048_bytes() {
        let base = "https://example.com/";
        let longest = format!("{base}{}", "a".repeat(MAX_URL_LEN - base.len()));
        assert_eq!(parsed(&longest, &OPEN), Ok(longest.clone()));
        let over = format!("{longest}a");
        assert_eq!(parsed(&over, &OPEN), Err(TargetError::TooLong { len: 2049 }));
    }

    #[test]
    fn accessors_expose_what_a_client_needs() {
        let target = TargetUrl::parse("https://Hooks.Example.com/in?k=v", &OPEN).expect("valid");
        assert_eq!(target.scheme(), Scheme::Https);
        assert_eq!(target.host(), &Host::Name("hooks.example.com".to_owned()));
        assert_eq!((target.port(), target.ip()), (443, None));
        assert_eq!(target.path_and_query(), "/in?k=v");
        let literal = TargetUrl::parse("https://[2606:4700::1]:8443", &OPEN).expect("valid");
        assert_eq!((literal.port(), literal.ip()), (8443, Some(ip("2606:4700::1"))));
        assert_eq!(literal.to_string(), "https://[2606:4700::1]:8443/");
        let local = TargetUrl::parse("http://localhost", &LOOPBACK).expect("valid");
        assert_eq!((local.scheme(), local.port()), (Scheme::Http, 80));
    }
}
