//! Property tests: the glob matcher agrees with a slow reference on generated patterns, and no
//! input — pattern, command line or settings text — makes the parsers panic.

use hanzo_policy::glob::Glob;
use hanzo_policy::permission::{Scope, ToolPattern};
use hanzo_policy::settings::parse_settings;
use hanzo_policy::shell::split_simple_commands;
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Tok {
    Lit(char),
    Star,
    One,
    Class(Vec<char>, bool),
}

fn tok() -> impl Strategy<Value = Tok> {
    let lit = prop::sample::select(vec!['a', 'b', '/', '*', '?', '[', ']', '\\', '!', '-']);
    prop_oneof![
        4 => lit.prop_map(Tok::Lit),
        2 => Just(Tok::Star),
        1 => Just(Tok::One),
        1 => (prop::collection::vec(prop::sample::select(vec!['a', 'b', '/']), 1..3), any::<bool>())
            .prop_map(|(cs, neg)| Tok::Class(cs, neg)),
    ]
}

/// Renders tokens as a pattern: literal metacharacters are escaped.
fn render(toks: &[Tok]) -> String {
    let mut s = String::new();
    for t in toks {
        match t {
            Tok::Lit(c) if "*?[]\\!-".contains(*c) => {
                s.push('\\');
                s.push(*c);
            }
            Tok::Lit(c) => s.push(*c),
            Tok::Star => s.push('*'),
            Tok::One => s.push('?'),
            Tok::Class(cs, neg) => {
                s.push('[');
                if *neg {
                    s.push('!');
                }
                s.extend(cs.iter());
                s.push(']');
            }
        }
    }
    s
}

/// Exponential but obviously correct.
fn reference(toks: &[Tok], text: &[char]) -> bool {
    match toks.split_first() {
        None => text.is_empty(),
        Some((Tok::Star, rest)) => (0..=text.len()).any(|i| reference(rest, &text[i..])),
        Some((t, rest)) => match text.split_first() {
            None => false,
            Some((c, tail)) => {
                let ok = match t {
                    Tok::Lit(l) => l == c,
                    Tok::One => true,
                    Tok::Class(cs, neg) => cs.contains(c) != *neg,
                    Tok::Star => unreachable!("handled above"),
                };
                ok && reference(rest, tail)
            }
        },
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn glob_agrees_with_reference(
        toks in prop::collection::vec(tok(), 0..7),
        text in prop::collection::vec(prop::sample::select(vec!['a', 'b', '/', '*', '?', '[', '!']), 0..9),
    ) {
        let pattern = render(&toks);
        let glob = Glob::new(&pattern).expect("rendered patterns are valid");
        let text_s: String = text.iter().collect();
        prop_assert_eq!(glob.matches(&text_s), reference(&toks, &text), "pattern {:?} text {:?}", pattern, text_s);
    }

    #[test]
    fn patterns_never_panic(p in "\\PC{0,24}") {
        let _ = Glob::new(&p).map(|g| g.matches("bash"));
        let _ = ToolPattern::parse(&p).map(|t| t.matches("bash", Some("ls")));
    }

    #[test]
    fn splitting_never_panics_and_parts_are_trimmed(c in "[a-z ;&|'\"\\\\\n$()`<>]{0,40}") {
        let parts = split_simple_commands(&c);
        prop_assert!(!parts.is_empty());
        for p in &parts {
            prop_assert_eq!(p.trim(), *p);
        }
        if parts.len() > 1 {
            prop_assert!(parts.iter().all(|p| !p.is_empty()));
        }
    }

    #[test]
    fn settings_parsing_never_panics(text in "\\PC{0,64}") {
        let _ = parse_settings(Scope::Project, "f", &text);
    }

    #[test]
    fn settings_shaped_json_never_panics(
        key in prop::sample::select(vec!["model", "permissions", "hooks", "mcp_servers", "sandbox", "api_key", "input_mode"]),
        value in prop_oneof![
            Just("null".to_string()), Just("1".to_string()), Just("\"x\"".to_string()),
            Just("[]".to_string()), Just("{}".to_string()), Just("[{}]".to_string()),
            Just("{\"a\": {}}".to_string()), Just("{\"a\": \"allow\"}".to_string()),
            Just("{\"a(\": \"deny\"}".to_string()), Just("[{\"event\": 1}]".to_string()),
        ],
    ) {
        let text = format!("{{\"{key}\": {value}}}");
        let _ = parse_settings(Scope::Local, "f", &text);
    }
}
