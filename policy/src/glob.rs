//! The glob dialect of permission rules and hook patterns, written out because the contract
//! (`test-vectors.md`, `permission-policy`) fixes it exactly: `*` is any run of characters
//! *including* `/`, `?` is one character, `[…]`/`[!…]` are classes, `\` escapes, the whole text
//! must match, and case matters. Path-aware glob libraries treat `/` specially, so they differ.

use std::fmt;

/// Why a pattern is not a valid glob. `offset` is the byte offset in the pattern.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid glob {pattern:?} at byte {offset}: {problem}")]
pub struct GlobError {
    /// The pattern as given.
    pub pattern: String,
    /// Where the problem starts.
    pub offset: usize,
    /// What is wrong there.
    pub problem: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Literal(char),
    AnyOne,
    AnyRun,
    Class {
        negated: bool,
        items: Vec<ClassItem>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum ClassItem {
    One(char),
    Range(char, char),
}

impl ClassItem {
    fn contains(&self, c: char) -> bool {
        match *self {
            ClassItem::One(x) => x == c,
            ClassItem::Range(lo, hi) => lo <= c && c <= hi,
        }
    }
}

/// A compiled glob. Matching is linear in practice: consecutive `*` collapse and only the last
/// `*` is ever backtracked to, which is exact because `*` matches every character.
#[derive(Clone, PartialEq, Eq)]
pub struct Glob {
    source: String,
    tokens: Vec<Token>,
}

impl fmt::Debug for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Glob({:?})", self.source)
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

impl Glob {
    /// Compiles `pattern`; an unclosed class or a misplaced `**` is an error.
    pub fn new(pattern: &str) -> Result<Glob, GlobError> {
        let err = |offset: usize, problem: &'static str| GlobError {
            pattern: pattern.to_string(),
            offset,
            problem,
        };
        let chars: Vec<(usize, char)> = pattern.char_indices().collect();
        let mut tokens = Vec::new();
        let mut i = 0;
        while i < chars.len() {
            let (off, c) = chars[i];
            match c {
                '*' => {
                    if tokens.last() != Some(&Token::AnyRun) {
                        tokens.push(Token::AnyRun);
                    }
                    i += 1;
                }
                '?' => {
                    tokens.push(Token::AnyOne);
                    i += 1;
                }
                '\\' => {
                    let (_, next) = *chars
                        .get(i + 1)
                        .ok_or_else(|| err(off, "a trailing backslash escapes nothing"))?;
                    tokens.push(Token::Literal(next));
                    i += 2;
                }
                '[' => {
                    let (token, next_i) = parse_class(&chars, i).map_err(|(o, p)| err(o, p))?;
                    tokens.push(token);
                    i = next_i;
                }
                _ => {
                    tokens.push(Token::Literal(c));
                    i += 1;
                }
            }
        }
        Ok(Glob {
            source: pattern.to_string(),
            tokens,
        })
    }

    /// The pattern as given.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// True when `text` as a whole matches. Positions are byte offsets into `text`, advanced one
    /// character at a time, so matching allocates nothing.
    pub fn matches(&self, text: &str) -> bool {
        let toks = &self.tokens;
        let (mut t, mut p) = (0usize, 0usize);
        // Where to resume after the most recent `*`: (token after the star, text position).
        let mut resume: Option<(usize, usize)> = None;
        while let Some(c) = text[t..].chars().next() {
            if p < toks.len() {
                match &toks[p] {
                    Token::AnyRun => {
                        resume = Some((p + 1, t));
                        p += 1;
                        continue;
                    }
                    tok if single_matches(tok, c) => {
                        p += 1;
                        t += c.len_utf8();
                        continue;
                    }
                    _ => {}
                }
            }
            match resume {
                Some((rp, rt)) => {
                    // Let the star swallow one more character and retry.
                    let skipped = text[rt..]
                        .chars()
                        .next()
                        .expect("rt < t, so a character starts there");
                    let next = rt + skipped.len_utf8();
                    p = rp;
                    t = next;
                    resume = Some((rp, next));
                }
                None => return false,
            }
        }
        toks[p..].iter().all(|tok| *tok == Token::AnyRun)
    }
}

impl Glob {
    /// Whether *some* text for the holes makes `subject` match: each `None` in `subject` is a
    /// hole standing for any run of characters (possibly empty), each `Some(c)` one known
    /// character. Used for words only known at run time (`$CMD -rf /`): a deny pattern that could
    /// match them must not let the call through unasked. A set of reachable token positions is
    /// advanced over the subject, so this is linear in the subject times the pattern.
    pub fn could_match(&self, subject: &[Option<char>]) -> bool {
        let toks = &self.tokens;
        let n = toks.len();
        let mut cur = vec![false; n + 1];
        cur[0] = true;
        close_over_stars(toks, &mut cur);
        for item in subject {
            let mut next = vec![false; n + 1];
            match item {
                None => {
                    // A hole can be empty, or be exactly the characters every later token needs.
                    if let Some(first) = cur.iter().position(|&r| r) {
                        next[first..].iter_mut().for_each(|r| *r = true);
                    }
                }
                Some(c) => {
                    for p in (0..n).filter(|&p| cur[p]) {
                        match &toks[p] {
                            Token::AnyRun => next[p] = true,
                            tok if single_matches(tok, *c) => next[p + 1] = true,
                            _ => {}
                        }
                    }
                }
            }
            close_over_stars(toks, &mut next);
            if !next.iter().any(|&r| r) {
                return false;
            }
            cur = next;
        }
        cur[n]
    }
}

/// A `*` may match nothing: being before it means being after it too.
fn close_over_stars(toks: &[Token], set: &mut [bool]) {
    for p in 0..toks.len() {
        if set[p] && toks[p] == Token::AnyRun {
            set[p + 1] = true;
        }
    }
}

fn single_matches(tok: &Token, c: char) -> bool {
    match tok {
        Token::Literal(x) => *x == c,
        Token::AnyOne => true,
        Token::Class { negated, items } => items.iter().any(|it| it.contains(c)) != *negated,
        Token::AnyRun => false,
    }
}

/// Parses a class starting at `chars[start] == '['`. A `]` right after `[` or `[!` is a literal
/// member (POSIX), `-` first or last is literal, `\` escapes inside the class too.
fn parse_class(
    chars: &[(usize, char)],
    start: usize,
) -> Result<(Token, usize), (usize, &'static str)> {
    let open = chars[start].0;
    let mut i = start + 1;
    let negated = matches!(chars.get(i), Some((_, '!')));
    if negated {
        i += 1;
    }
    let mut items: Vec<ClassItem> = Vec::new();
    let mut first = true;
    loop {
        let Some(&(off, c)) = chars.get(i) else {
            return Err((open, "unclosed character class `[`"));
        };
        if c == ']' && !first {
            i += 1;
            break;
        }
        first = false;
        let lo = if c == '\\' {
            i += 1;
            match chars.get(i) {
                Some(&(_, e)) => e,
                None => return Err((off, "a trailing backslash escapes nothing")),
            }
        } else {
            c
        };
        i += 1;
        // A range needs a `-` followed by something other than the closing `]`.
        let is_range = matches!(chars.get(i), Some((_, '-')))
            && matches!(chars.get(i + 1), Some((_, n)) if *n != ']');
        if is_range {
            let (hi_off, mut hi) = chars[i + 1];
            i += 2;
            if hi == '\\' {
                match chars.get(i) {
                    Some(&(_, e)) => {
                        hi = e;
                        i += 1;
                    }
                    None => return Err((hi_off, "a trailing backslash escapes nothing")),
                }
            }
            if hi < lo {
                return Err((off, "character range is reversed (e.g. `[z-a]`)"));
            }
            items.push(ClassItem::Range(lo, hi));
        } else {
            items.push(ClassItem::One(lo));
        }
    }
    Ok((Token::Class { negated, items }, i))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, t: &str) -> bool {
        Glob::new(p).expect("valid test glob").matches(t)
    }

    #[test]
    fn star_matches_any_run_including_slash_and_empty() {
        assert!(m("mcp__*", "mcp__"));
        assert!(m("mcp__*", "mcp__git__status"));
        assert!(m("src/*", "src/a/b/c.rs"));
        assert!(m("src/**", "src/a/b/c.rs"));
        assert!(m("*", ""));
        assert!(!m("mcp__*", "mcp_"));
    }

    #[test]
    fn whole_name_and_case_sensitive() {
        assert!(!m("bash", "bash2"));
        assert!(!m("bash", "xbash"));
        assert!(!m("Bash", "bash"));
        assert!(m("bash", "bash"));
    }

    #[test]
    fn question_mark_is_exactly_one_char() {
        assert!(m("fs.?", "fs.w"));
        assert!(!m("fs.?", "fs."));
        assert!(!m("fs.?", "fs.wr"));
        assert!(m("?", "é"));
    }

    #[test]
    fn classes_ranges_negation_and_literal_bracket() {
        assert!(m("[abc]x", "bx"));
        assert!(!m("[abc]x", "dx"));
        assert!(m("[a-c]", "b"));
        assert!(!m("[!a-c]", "b"));
        assert!(m("[!a-c]", "z"));
        assert!(m("[]]", "]"));
        assert!(m("[!]]", "a"));
        assert!(!m("[!]]", "]"));
        assert!(m("[a-]", "-"));
        assert!(m("[\\]]", "]"));
    }

    #[test]
    fn escapes_make_metacharacters_literal() {
        assert!(m("a\\*b", "a*b"));
        assert!(!m("a\\*b", "axb"));
        assert!(m("\\[x\\]", "[x]"));
        assert!(m("what\\?", "what?"));
        assert!(!m("what\\?", "whatx"));
    }

    #[test]
    fn backtracking_finds_later_matches() {
        assert!(m("*a*b", "xaxxab"));
        assert!(m("a*b*c", "abbbbc"));
        assert!(!m("a*b*c", "abbbb"));
        assert!(m("*.rs", "a.rs.rs"));
    }

    fn could(p: &str, subject: &str) -> bool {
        // `…` marks a hole.
        let s: Vec<Option<char>> = subject.chars().map(|c| (c != '…').then_some(c)).collect();
        Glob::new(p).expect("valid test glob").could_match(&s)
    }

    #[test]
    fn holes_could_be_anything() {
        assert!(could("rm *", "… -rf /"));
        assert!(could("rm -rf *", "… /"), "the hole could be `rm -rf`");
        assert!(could("git push*", "… -rf /"));
        assert!(!could("rm *", "echo …"));
        assert!(could("rm *", "r… x"));
        assert!(!could("rm", "rm x…"), "a known suffix cannot be removed");
        assert!(could("rm -rf [a-z]*", "rm -rf …"));
        assert!(could("a?c", "a…c"));
        assert!(!could("a?c", "abbc"));
        assert!(could("*", "…"));
        assert!(could("", "…"));
        assert!(!could("", "x"));
        // Without holes it is plain matching.
        for (p, t) in [
            ("rm *", "rm x"),
            ("a*b*c", "abbbbc"),
            ("x", "y"),
            ("[!a]", "a"),
        ] {
            assert_eq!(could(p, t), m(p, t), "{p} {t}");
        }
    }

    #[test]
    fn invalid_globs_are_errors_with_offsets() {
        let e = Glob::new("ab[cd").expect_err("unclosed");
        assert_eq!(e.offset, 2);
        assert!(e.to_string().contains("unclosed character class"));
        let e = Glob::new("ab\\").expect_err("trailing");
        assert_eq!(e.offset, 2);
        let e = Glob::new("[z-a]").expect_err("reversed");
        assert!(e.problem.contains("reversed"));
        assert!(Glob::new("[]").is_err());
        assert!(Glob::new("[!]").is_err());
    }
}
