//! The network allow-list: entry syntax, decisions on the name a client asked for, address
//! classification (IANA special-purpose registries, embedded IPv4 forms), literal exceptions, and
//! the scope narrowing rule.

use hanzo_policy::network::{
    admit_address, classify, decide, effective_allow_list, parse_entry, parse_host, require_tier_b,
    AllowList, Decision, DenyReason, EntryError, EntrySource, Host, HostError, ScopeEntries,
};
use proptest::prelude::*;
use std::net::IpAddr;

fn list(entries: &[&str]) -> AllowList {
    AllowList::parse(entries).expect("valid entries")
}

fn strings(entries: &[&str]) -> Vec<String> {
    entries.iter().map(|s| s.to_string()).collect()
}

fn allowed_by(l: &AllowList, host: &str, port: u16) -> Option<String> {
    match decide(l, host, port) {
        Decision::Allowed { rule } => Some(rule),
        Decision::Denied { .. } => None,
    }
}

#[test]
fn entries_parse_to_their_canonical_text() {
    for (entry, canonical) in [
        ("example.com", "example.com"),
        ("Example.COM.", "example.com"),
        ("  pypi.org ", "pypi.org"),
        ("*.Example.com", "*.example.com"),
        ("example.com:8443", "example.com:8443"),
        ("*.example.com:8443", "*.example.com:8443"),
        ("192.0.2.7", "192.0.2.7"),
        ("192.0.2.7:8080", "192.0.2.7:8080"),
        ("[2001:DB8::7]", "[2001:db8::7]"),
        ("[2001:db8::7]:8080", "[2001:db8::7]:8080"),
        ("2001:db8::7", "[2001:db8::7]"),
        ("[::ffff:127.0.0.1]:80", "127.0.0.1:80"),
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
    ] {
        let rule = parse_entry(entry).unwrap_or_else(|e| panic!("{entry:?}: {e}"));
        assert_eq!(rule.to_string(), canonical, "{entry:?}");
        assert_eq!(
            parse_entry(canonical).expect("canonical parses"),
            rule,
            "{canonical:?} round-trips"
        );
    }
}

type Expect = fn(&EntryError) -> bool;

#[test]
fn bad_entries_are_refused_with_the_reason() {
    let cases: &[(&str, Expect)] = &[
        ("https://example.com", |e| {
            matches!(e, EntryError::NotAHost(_))
        }),
        ("example.com/simple", |e| {
            matches!(e, EntryError::NotAHost(_))
        }),
        ("user@example.com", |e| matches!(e, EntryError::NotAHost(_))),
        ("*", |e| matches!(e, EntryError::Wildcard(_))),
        ("a.*.example.com", |e| matches!(e, EntryError::Wildcard(_))),
        ("*example.com", |e| matches!(e, EntryError::Wildcard(_))),
        ("*.192.0.2.1", |e| {
            matches!(e, EntryError::WildcardAddress(_))
        }),
        ("example.com:0", |e| matches!(e, EntryError::BadPort(_))),
        ("example.com:65536", |e| matches!(e, EntryError::BadPort(_))),
        ("example.com:+443", |e| matches!(e, EntryError::BadPort(_))),
        ("example.com:", |e| matches!(e, EntryError::BadPort(_))),
        ("bücher.example", |e| {
            matches!(
                e,
                EntryError::Host {
                    source: HostError::NonAscii(_),
                    ..
                }
            )
        }),
        ("exa mple.com", |e| {
            matches!(
                e,
                EntryError::Host {
                    source: HostError::BadCharacter { found: ' ', .. },
                    ..
                }
            )
        }),
        ("a..b", |e| {
            matches!(
                e,
                EntryError::Host {
                    source: HostError::EmptyLabel(_),
                    ..
                }
            )
        }),
        ("", |e| {
            matches!(
                e,
                EntryError::Host {
                    source: HostError::Empty,
                    ..
                }
            )
        }),
        ("127.1", |e| {
            matches!(
                e,
                EntryError::Host {
                    source: HostError::NumericName(_),
                    ..
                }
            )
        }),
        ("[fe80::1%eth0]", |e| {
            matches!(
                e,
                EntryError::Host {
                    source: HostError::BadIpv6(_),
                    ..
                }
            )
        }),
        ("[::1", |e| matches!(e, EntryError::NotAHost(_))),
        ("[::1]x", |e| matches!(e, EntryError::NotAHost(_))),
    ];
    for (entry, expected) in cases {
        let err = parse_entry(entry).expect_err(entry);
        assert!(expected(&err), "{entry:?}: unexpected {err:?}");
        assert!(!err.to_string().is_empty());
    }
    let long_label = format!("{}.com", "a".repeat(64));
    assert!(matches!(
        parse_entry(&long_label),
        Err(EntryError::Host {
            source: HostError::LabelTooLong(_),
            ..
        })
    ));
    let long_name = format!("{}com", "abcdefghi.".repeat(26));
    assert!(matches!(
        parse_entry(&long_name),
        Err(EntryError::Host {
            source: HostError::TooLong(_),
            ..
        })
    ));
}

#[test]
fn an_empty_list_allows_nothing() {
    let l = AllowList::none();
    assert!(l.is_empty());
    for (host, port) in [("example.com", 443), ("localhost", 80), ("127.0.0.1", 443)] {
        assert!(
            matches!(decide(&l, host, port), Decision::Denied { .. }),
            "{host}"
        );
    }
}

#[test]
fn names_match_case_insensitively_with_a_trailing_dot_and_default_ports() {
    let l = list(&["pypi.org", "files.pythonhosted.org:443"]);
    assert_eq!(allowed_by(&l, "pypi.org", 443).as_deref(), Some("pypi.org"));
    assert_eq!(allowed_by(&l, "PyPI.Org.", 80).as_deref(), Some("pypi.org"));
    assert_eq!(allowed_by(&l, "pypi.org", 8080), None);
    assert_eq!(
        allowed_by(&l, "files.pythonhosted.org", 443).as_deref(),
        Some("files.pythonhosted.org:443")
    );
    assert_eq!(allowed_by(&l, "files.pythonhosted.org", 80), None);
    assert_eq!(
        decide(&l, "evil.org", 443),
        Decision::Denied {
            reason: DenyReason::NotListed {
                host: "evil.org".into(),
                port: 443
            }
        }
    );
    // A listed name is not a prefix or suffix match.
    assert_eq!(allowed_by(&l, "pypi.org.evil.org", 443), None);
    assert_eq!(allowed_by(&l, "notpypi.org", 443), None);
    assert_eq!(allowed_by(&l, "www.pypi.org", 443), None);
}

#[test]
fn a_wildcard_allows_subdomains_only_not_the_apex() {
    let l = list(&["*.crates.io"]);
    assert_eq!(
        allowed_by(&l, "static.crates.io", 443).as_deref(),
        Some("*.crates.io")
    );
    assert_eq!(
        allowed_by(&l, "a.b.crates.io", 80).as_deref(),
        Some("*.crates.io")
    );
    assert_eq!(allowed_by(&l, "crates.io", 443), None);
    assert_eq!(allowed_by(&l, "evilcrates.io", 443), None);
    assert_eq!(allowed_by(&l, "crates.io.evil.com", 443), None);
}

#[test]
fn the_first_matching_entry_is_the_recorded_rule() {
    let l = list(&[
        "*.example.com:8443",
        "api.example.com:8443",
        "api.example.com",
    ]);
    assert_eq!(
        allowed_by(&l, "api.example.com", 8443).as_deref(),
        Some("*.example.com:8443")
    );
    assert_eq!(
        allowed_by(&l, "api.example.com", 443).as_deref(),
        Some("api.example.com")
    );
}

#[test]
fn ip_literals_are_denied_unless_named_literally() {
    let l = list(&["example.com", "192.0.2.7:8080", "[2001:db8::7]"]);
    assert!(matches!(
        decide(&l, "93.184.215.14", 443),
        Decision::Denied {
            reason: DenyReason::IpLiteral { .. }
        }
    ));
    assert_eq!(
        allowed_by(&l, "192.0.2.7", 8080).as_deref(),
        Some("192.0.2.7:8080")
    );
    assert_eq!(allowed_by(&l, "192.0.2.7", 443), None);
    for v6 in ["[2001:db8::7]", "2001:db8::7", "2001:0DB8:0::7"] {
        assert_eq!(
            allowed_by(&l, v6, 443).as_deref(),
            Some("[2001:db8::7]"),
            "{v6}"
        );
    }
    // An IPv4-mapped spelling of a literally named address is that address.
    assert_eq!(
        allowed_by(&l, "::ffff:192.0.2.7", 8080).as_deref(),
        Some("192.0.2.7:8080")
    );
    // Names that resolvers read as addresses are refused outright, whatever the list says.
    for sneaky in [
        "127.1",
        "0x7f.0.0.1",
        "2130706433",
        "017700000001",
        "1.2.3.04",
    ] {
        assert!(
            matches!(
                decide(&list(&["example.com"]), sneaky, 443),
                Decision::Denied {
                    reason: DenyReason::InvalidHost(HostError::NumericName(_))
                }
            ),
            "{sneaky}"
        );
    }
}

#[test]
fn requested_names_that_are_not_plain_ascii_hosts_are_invalid() {
    let l = list(&["xn--bcher-kva.example", "example.com"]);
    assert_eq!(
        allowed_by(&l, "XN--BCHER-KVA.example", 443).as_deref(),
        Some("xn--bcher-kva.example")
    );
    for bad in [
        "bücher.example",
        "example.com\0.evil",
        "example.com%2f",
        "exa mple.com",
        "",
        ".",
        "example..com",
        "[::1",
        "fe80::1%lo",
    ] {
        assert!(
            matches!(
                decide(&l, bad, 443),
                Decision::Denied {
                    reason: DenyReason::InvalidHost(_)
                }
            ),
            "{bad:?}"
        );
    }
}

#[test]
fn hosts_normalise() {
    assert_eq!(
        parse_host("WWW.Example.com.").expect("name"),
        Host::Name("www.example.com".into())
    );
    assert_eq!(
        parse_host("[::FFFF:10.0.0.1]").expect("v6"),
        Host::Address("10.0.0.1".parse().expect("ip"))
    );
    assert_eq!(
        parse_host("10.0.0.1").expect("v4"),
        Host::Address("10.0.0.1".parse().expect("ip"))
    );
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap_or_else(|_| panic!("{s} is an address"))
}

#[test]
fn special_purpose_ipv4_addresses_are_not_public() {
    for (addr, block) in [
        ("0.0.0.0", "0.0.0.0/8"),
        ("0.1.2.3", "0.0.0.0/8"),
        ("10.1.2.3", "10.0.0.0/8"),
        ("100.64.0.1", "100.64.0.0/10"),
        ("100.127.255.254", "100.64.0.0/10"),
        ("127.0.0.1", "127.0.0.0/8"),
        ("127.255.255.255", "127.0.0.0/8"),
        ("169.254.169.254", "169.254.0.0/16"),
        ("172.16.0.1", "172.16.0.0/12"),
        ("172.31.255.255", "172.16.0.0/12"),
        ("192.0.0.8", "192.0.0.0/24"),
        ("192.0.2.1", "192.0.2.0/24"),
        ("192.88.99.1", "192.88.99.0/24"),
        ("192.168.1.1", "192.168.0.0/16"),
        ("198.18.0.1", "198.18.0.0/15"),
        ("198.19.255.255", "198.18.0.0/15"),
        ("198.51.100.1", "198.51.100.0/24"),
        ("203.0.113.1", "203.0.113.0/24"),
        ("224.0.0.1", "224.0.0.0/4"),
        ("239.255.255.250", "224.0.0.0/4"),
        ("240.0.0.1", "240.0.0.0/4"),
        ("255.255.255.255", "255.255.255.255/32"),
    ] {
        let why = classify(ip(addr)).unwrap_or_else(|| panic!("{addr} must not be public"));
        assert_eq!(why.range.block, block, "{addr}");
        assert!(why.embedded.is_none());
    }
    for public in [
        "1.1.1.1",
        "8.8.8.8",
        "93.184.215.14",
        "100.63.255.255",
        "100.128.0.0",
        "172.15.255.255",
        "172.32.0.0",
        "192.0.1.255",
        "192.31.196.1",
        "192.169.0.1",
        "198.17.255.255",
        "198.20.0.0",
        "223.255.255.255",
    ] {
        assert_eq!(classify(ip(public)), None, "{public} is public");
    }
}

#[test]
fn special_purpose_ipv6_addresses_are_not_public() {
    for (addr, block) in [
        ("::", "::/128"),
        ("::1", "::1/128"),
        ("::2", "::/8"),
        ("::127.0.0.1", "::/8"),
        ("::ffff:0:8.8.8.8", "::/8"),
        ("64:ff9b:1::1", "64:ff9b:1::/48"),
        ("100::1", "100::/64"),
        ("2001:2::1", "2001::/23"),
        ("2001:db8::1", "2001:db8::/32"),
        ("3fff::1", "3fff::/20"),
        ("5f00::1", "5f00::/16"),
        ("fc00::1", "fc00::/7"),
        ("fd12:3456::1", "fc00::/7"),
        ("fe80::1", "fe80::/10"),
        ("febf::1", "fe80::/10"),
        ("fec0::1", "fec0::/10"),
        ("ff02::1", "ff00::/8"),
        ("ff0e::1", "ff00::/8"),
        ("4000::1", "outside 2000::/3"),
        ("1000::1", "outside 2000::/3"),
        ("1::1", "::/8"),
    ] {
        let why = classify(ip(addr)).unwrap_or_else(|| panic!("{addr} must not be public"));
        assert_eq!(why.range.block, block, "{addr}");
    }
    for public in [
        "2606:4700:4700::1111",
        "2a00:1450:4001::200e",
        "2001:4860:4860::8888",
        "3ffe::1",
        "3fff:1000::1",
    ] {
        assert_eq!(classify(ip(public)), None, "{public} is public");
    }
}

#[test]
fn ipv6_forms_that_embed_ipv4_are_classified_by_the_embedded_address() {
    for (addr, form, v4block) in [
        (
            "::ffff:127.0.0.1",
            "IPv4-mapped (::ffff:0:0/96)",
            "127.0.0.0/8",
        ),
        (
            "::ffff:169.254.169.254",
            "IPv4-mapped (::ffff:0:0/96)",
            "169.254.0.0/16",
        ),
        ("64:ff9b::7f00:1", "NAT64 (64:ff9b::/96)", "127.0.0.0/8"),
        ("64:ff9b::a00:1", "NAT64 (64:ff9b::/96)", "10.0.0.0/8"),
        ("2002:7f00:1::1", "6to4 (2002::/16)", "127.0.0.0/8"),
        ("2002:c0a8:101::", "6to4 (2002::/16)", "192.168.0.0/16"),
        // Teredo: client 127.0.0.1 obfuscated (inverted) in the low 32 bits.
        (
            "2001:0:4136:e378:8000:63bf:80ff:fffe",
            "Teredo (2001::/32)",
            "127.0.0.0/8",
        ),
        // Teredo whose server address (bits 32–63) is private.
        (
            "2001:0:a00:1:8000:63bf:f7f7:f7f7",
            "Teredo (2001::/32)",
            "10.0.0.0/8",
        ),
    ] {
        let why = classify(ip(addr)).unwrap_or_else(|| panic!("{addr} must not be public"));
        assert_eq!(why.range.block, v4block, "{addr}");
        assert_eq!(why.embedded.map(|(f, _)| f), Some(form), "{addr}");
        assert!(why.to_string().contains(form), "{why}");
    }
    for public in [
        "::ffff:8.8.8.8",
        "64:ff9b::808:808",
        "2002:808:808::1",
        "2001:0:4136:e378:8000:63bf:f7f7:f7f7",
    ] {
        assert_eq!(
            classify(ip(public)),
            None,
            "{public} embeds a public address"
        );
    }
}

#[test]
fn a_non_public_address_is_admitted_only_when_named_literally() {
    let l = list(&["svc.test", "127.0.0.1:8443", "[::1]"]);
    assert_eq!(admit_address(&l, ip("93.184.215.14"), 443), Ok(None));
    assert_eq!(
        admit_address(&l, ip("127.0.0.1"), 8443).map(|r| r.map(ToString::to_string)),
        Ok(Some("127.0.0.1:8443".to_string()))
    );
    // The same address in its IPv4-mapped form is the same address.
    assert!(matches!(
        admit_address(&l, ip("::ffff:127.0.0.1"), 8443),
        Ok(Some(_))
    ));
    assert!(admit_address(&l, ip("127.0.0.1"), 443).is_err());
    assert!(admit_address(&l, ip("127.0.0.2"), 8443).is_err());
    assert!(matches!(admit_address(&l, ip("::1"), 80), Ok(Some(_))));
    let err = admit_address(&l, ip("169.254.169.254"), 80).expect_err("metadata");
    assert!(err.to_string().contains("link-local"), "{err}");
    // A NAT64 form is not the literal IPv4 address it embeds.
    assert!(admit_address(&l, ip("64:ff9b::7f00:1"), 8443).is_err());
}

#[test]
fn workspace_scopes_only_narrow_the_user_scope() {
    let user = strings(&["*.example.com", "pypi.org", "crates.io:443", "192.0.2.7"]);
    let project = strings(&[
        "api.example.com",   // within *.example.com: kept
        "evil.com",          // not allowed by the user: ignored
        "pypi.org:8080",     // another port: ignored
        "crates.io",         // 80 is not allowed by the user: ignored
        "*.cdn.example.com", // within *.example.com: kept
        "example.com",       // the apex is not within *.example.com: ignored
        "192.0.2.7:443",     // kept
        "https://x.example.com",
    ]);
    let eff = effective_allow_list(&ScopeEntries {
        user: Some(&user),
        project: Some(&project),
        local: None,
        cli: &[],
        trusted: true,
    });
    assert_eq!(
        eff.list.entries(),
        ["api.example.com", "*.cdn.example.com", "192.0.2.7:443"]
    );
    assert!(eff
        .sources
        .iter()
        .all(|(_, scope)| *scope == EntrySource::Project));
    let ignored: Vec<&str> = eff.warnings.iter().map(|w| w.message.as_str()).collect();
    assert_eq!(ignored.len(), 5, "{ignored:#?}");
    for entry in ["evil.com", "pypi.org:8080", "crates.io", "example.com\""] {
        assert!(
            ignored
                .iter()
                .any(|m| m.contains(entry) && m.contains("can only narrow network access")),
            "{entry}: {ignored:#?}"
        );
    }
    assert!(ignored.iter().any(|m| m.contains("not a URL")));
    assert!(eff.warnings.iter().all(|w| w.scope == EntrySource::Project));
}

#[test]
fn a_project_entry_may_rely_on_several_user_entries_for_its_ports() {
    let user = strings(&["example.com:443", "example.com:80"]);
    let project = strings(&["example.com"]);
    let eff = effective_allow_list(&ScopeEntries {
        user: Some(&user),
        project: Some(&project),
        trusted: true,
        ..ScopeEntries::default()
    });
    assert_eq!(eff.list.entries(), ["example.com"]);
    assert!(eff.warnings.is_empty());
}

#[test]
fn the_local_scope_narrows_what_the_project_left() {
    let user = strings(&["*.example.com", "pypi.org"]);
    let project = strings(&["a.example.com", "b.example.com"]);
    let local = strings(&["a.example.com", "pypi.org"]);
    let eff = effective_allow_list(&ScopeEntries {
        user: Some(&user),
        project: Some(&project),
        local: Some(&local),
        cli: &[],
        trusted: true,
    });
    assert_eq!(eff.list.entries(), ["a.example.com"]);
    assert_eq!(eff.sources, [("a.example.com".into(), EntrySource::Local)]);
    assert_eq!(eff.warnings.len(), 1);
    assert_eq!(eff.warnings[0].scope, EntrySource::Local);
    assert!(eff.warnings[0].message.contains("pypi.org"));
}

#[test]
fn an_empty_workspace_list_turns_network_off_and_an_unset_one_keeps_the_user_list() {
    let user = strings(&["pypi.org"]);
    let empty: Vec<String> = Vec::new();
    let off = effective_allow_list(&ScopeEntries {
        user: Some(&user),
        project: Some(&empty),
        trusted: true,
        ..ScopeEntries::default()
    });
    assert!(off.list.is_empty());
    let kept = effective_allow_list(&ScopeEntries {
        user: Some(&user),
        trusted: true,
        ..ScopeEntries::default()
    });
    assert_eq!(kept.list.entries(), ["pypi.org"]);
    assert_eq!(kept.sources, [("pypi.org".into(), EntrySource::User)]);
}

#[test]
fn a_project_cannot_grant_itself_network() {
    let project = strings(&["evil.com", "*.evil.com"]);
    let eff = effective_allow_list(&ScopeEntries {
        user: None,
        project: Some(&project),
        trusted: true,
        ..ScopeEntries::default()
    });
    assert!(eff.list.is_empty());
    assert_eq!(eff.warnings.len(), 2);
}

#[test]
fn an_untrusted_workspace_gets_no_network_from_settings() {
    let user = strings(&["pypi.org"]);
    let project = strings(&["pypi.org"]);
    let eff = effective_allow_list(&ScopeEntries {
        user: Some(&user),
        project: Some(&project),
        local: None,
        cli: &[],
        trusted: false,
    });
    assert!(eff.list.is_empty());
    assert_eq!(eff.warnings.len(), 1);
    assert!(eff.warnings[0].message.contains("hanzo-dev trust"));
    // The flag for one invocation is the user's explicit decision and still applies.
    let cli = strings(&["crates.io"]);
    let eff = effective_allow_list(&ScopeEntries {
        user: Some(&user),
        project: None,
        local: None,
        cli: &cli,
        trusted: false,
    });
    assert_eq!(eff.list.entries(), ["crates.io"]);
    assert_eq!(eff.sources, [("crates.io".into(), EntrySource::Cli)]);
}

#[test]
fn cli_entries_add_for_one_invocation_without_duplicates() {
    let user = strings(&["pypi.org"]);
    let cli = strings(&["PyPI.org", "static.crates.io", "not a host"]);
    let eff = effective_allow_list(&ScopeEntries {
        user: Some(&user),
        cli: &cli,
        trusted: true,
        ..ScopeEntries::default()
    });
    assert_eq!(eff.list.entries(), ["pypi.org", "static.crates.io"]);
    assert_eq!(
        eff.sources,
        [
            ("pypi.org".into(), EntrySource::User),
            ("static.crates.io".into(), EntrySource::Cli)
        ]
    );
    assert_eq!(eff.warnings.len(), 1);
    assert_eq!(eff.warnings[0].scope, EntrySource::Cli);
}

#[test]
fn tier_a_with_network_asked_for_fails_closed_with_the_message() {
    let l = list(&["pypi.org", "*.crates.io"]);
    let err = require_tier_b(&l, Err("user namespaces do not work: EPERM".into()))
        .expect_err("tier A has no egress");
    let msg = err.to_string();
    assert!(msg.contains("pypi.org, *.crates.io"), "{msg}");
    assert!(msg.contains("tier B"), "{msg}");
    assert!(msg.contains("EPERM"), "{msg}");
    assert!(msg.contains("hanzo-dev doctor"), "{msg}");
    assert_eq!(require_tier_b(&l, Ok(())), Ok(()));
    assert_eq!(require_tier_b(&AllowList::none(), Err("no".into())), Ok(()));
}

proptest! {
    #[test]
    fn deciding_never_panics_and_normalising_is_idempotent(host in "\\PC{0,40}", port in any::<u16>()) {
        let l = list(&["*.example.com", "example.org", "127.0.0.1:8443"]);
        let _ = decide(&l, &host, port);
        if let Ok(h) = parse_host(&host) {
            let text = match &h {
                Host::Address(IpAddr::V6(a)) => format!("[{a}]"),
                other => other.to_string(),
            };
            prop_assert_eq!(parse_host(&text), Ok(h));
        }
    }

    #[test]
    fn entries_never_panic_and_canonical_text_round_trips(entry in "[a-z0-9.:*\\[\\]-]{0,30}") {
        if let Ok(rule) = parse_entry(&entry) {
            prop_assert_eq!(parse_entry(&rule.to_string()), Ok(rule));
        }
    }

    #[test]
    fn a_covered_project_entry_never_widens(
        host in "[a-c]{1,2}(\\.[a-c]{1,2}){0,2}",
        wild in any::<bool>(),
        port in prop::sample::select(vec![None, Some(80u16), Some(443), Some(8080)]),
        probe in "[a-c]{1,2}(\\.[a-c]{1,2}){0,3}",
        probe_port in prop::sample::select(vec![80u16, 443, 8080]),
    ) {
        let user = list(&["*.a", "b.b:8080", "c"]);
        let entry = format!("{}{}{}", if wild { "*." } else { "" }, host, port.map(|p| format!(":{p}")).unwrap_or_default());
        let rule = parse_entry(&entry).expect("generated entries parse");
        if user.covers(&rule) {
            let mut narrowed = AllowList::none();
            narrowed.push(rule);
            if matches!(decide(&narrowed, &probe, probe_port), Decision::Allowed { .. }) {
                prop_assert!(matches!(decide(&user, &probe, probe_port), Decision::Allowed { .. }),
                    "{} allows {}:{} which the user list does not", entry, probe, probe_port);
            }
        }
    }
}
