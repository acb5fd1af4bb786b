//! Shell command lines as a permission rule judges them.
//!
//! Two steps. [`split_simple_commands`] cuts a command line into simple commands, deliberately a
//! lexer and not a parser: separators are `;` `&&` `||` `|` `&` and newline outside quotes and
//! not escaped. Splitting too eagerly (say, at the `&` of `2>&1`) only makes a call need more
//! allow rules; it can never let an unlisted command through.
//!
//! Then [`analyze`] reads one simple command as the shell would run it, for deny rules: words
//! unquoted and unescaped (`\rm`, `"rm"`, `r''m`, `$'rm'`), redirections and leading assignments
//! dropped (`FOO=1 rm`, `2>/dev/null rm`), the program also by its base name (`/bin/rm`,
//! `./rm`), wrappers seen through (`env`, `command`, `exec`, `nice`, `nohup`, `time`, `builtin`,
//! `sudo`, `doas`, `timeout`, `xargs`, `find -exec`, …), and the scripts a command runs
//! (`sh -c '…'`, `eval …`, `trap '…'`, the bodies of `$(…)`, backticks and `<(…)`) returned for
//! judging in their turn. What cannot be known before the command runs — a variable, a
//! substitution's output, a glob or brace expansion, a shell reading its script from stdin — is
//! a [`Piece::Hole`]: a deny rule that *could* match such a reading makes the call prompt, never
//! allow.

/// Splits `command` into simple commands, each trimmed; empty pieces are dropped. A command with no
/// non-empty piece yields one empty simple command so it is still judged.
pub fn split_simple_commands(command: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut start = 0;
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in command.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match quote {
            Some('\'') => {
                if c == '\'' {
                    quote = None;
                }
            }
            Some(_) => match c {
                '\\' => escaped = true,
                '"' => quote = None,
                _ => {}
            },
            None => match c {
                '\\' => escaped = true,
                '\'' | '"' => quote = Some(c),
                ';' | '&' | '|' | '\n' => {
                    push_trimmed(&mut parts, &command[start..i]);
                    start = i + c.len_utf8();
                }
                _ => {}
            },
        }
    }
    push_trimmed(&mut parts, &command[start..]);
    if parts.is_empty() {
        parts.push("");
    }
    parts
}

fn push_trimmed<'a>(parts: &mut Vec<&'a str>, piece: &'a str) {
    let piece = piece.trim();
    if !piece.is_empty() {
        parts.push(piece);
    }
}

/// True when the simple command contains a command or process substitution (`$(`, a backtick,
/// `<(`, `>(`), whose output the argument glob cannot see. Checked on the raw text, quotes
/// included: inside double quotes they still run, and over-matching is the safe direction.
pub fn has_substitution(simple_command: &str) -> bool {
    simple_command.contains("$(")
        || simple_command.contains('`')
        || simple_command.contains("<(")
        || simple_command.contains(">(")
}

/// A piece of a normalised command: known text, or a hole for text only known at run time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    /// Text known when the rule is checked.
    Text(String),
    /// Any text at all (possibly empty, possibly several words).
    Hole,
}

/// One way the shell would run a simple command: its words, normalised, joined by one space.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reading {
    pieces: Vec<Piece>,
}

impl Reading {
    fn from_words(words: &[Word], first: Option<&str>) -> Reading {
        let mut pieces: Vec<Piece> = Vec::new();
        let mut push = |p: Piece| match (pieces.last_mut(), p) {
            (Some(Piece::Text(prev)), Piece::Text(t)) => prev.push_str(&t),
            (Some(Piece::Hole), Piece::Hole) => {}
            (_, p) => pieces.push(p),
        };
        let mut rest = words;
        if let Some(first) = first {
            push(Piece::Text(first.to_string()));
            rest = &words[1..];
        }
        for (i, w) in rest.iter().enumerate() {
            if i > 0 || first.is_some() {
                push(Piece::Text(" ".to_string()));
            }
            for part in &w.parts {
                match part {
                    Part::Lit { text, .. } => push(Piece::Text(text.clone())),
                    Part::Dynamic => push(Piece::Hole),
                }
            }
        }
        Reading { pieces }
    }

    fn hole() -> Reading {
        Reading {
            pieces: vec![Piece::Hole],
        }
    }

    fn with_trailing_hole(mut self) -> Reading {
        if self.pieces.last() != Some(&Piece::Hole) {
            self.pieces.push(Piece::Text(" ".to_string()));
            self.pieces.push(Piece::Hole);
        }
        self
    }

    /// The pieces, in order.
    pub fn pieces(&self) -> &[Piece] {
        &self.pieces
    }

    /// The text, when nothing in it is unknown.
    pub fn text(&self) -> Option<&str> {
        match self.pieces.as_slice() {
            [] => Some(""),
            [Piece::Text(t)] => Some(t),
            _ => None,
        }
    }

    /// Whether any part is only known at run time.
    pub fn has_hole(&self) -> bool {
        self.pieces.contains(&Piece::Hole)
    }

    /// For messages: holes shown as `…`.
    pub fn display(&self) -> String {
        self.pieces
            .iter()
            .map(|p| match p {
                Piece::Text(t) => t.as_str(),
                Piece::Hole => "…",
            })
            .collect()
    }
}

/// What the shell would run for one simple command.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Analysis {
    /// Normalised readings (without the raw text itself), deduplicated.
    pub readings: Vec<Reading>,
    /// Scripts this command runs (`sh -c`, `eval`, `trap`, substitution bodies), to be split
    /// and judged like a command line of their own.
    pub scripts: Vec<String>,
}

impl Analysis {
    fn add(&mut self, r: Reading) {
        if !self.readings.contains(&r) {
            self.readings.push(r);
        }
    }
}

/// How deep wrappers and nested scripts are followed; deeper is a hole.
pub const MAX_DEPTH: usize = 8;

/// Reads one simple command as the shell would (see the module documentation).
pub fn analyze(simple_command: &str) -> Analysis {
    if reads_as_written(simple_command) {
        return Analysis::default();
    }
    let mut out = Analysis::default();
    let tokens = lex(simple_command, &mut out.scripts);
    for segment in segments(&tokens) {
        command_readings(&segment, 0, &mut out);
    }
    out
}

/// The common case, decided without lexing: no character the shell treats specially, single
/// spaces, and a first word that is a plain program name (not a path, an assignment, a wrapper,
/// a shell or a reserved word). Such a command reads exactly as written.
fn reads_as_written(s: &str) -> bool {
    let plain = s.bytes().all(|b| {
        b.is_ascii_alphanumeric()
            || matches!(
                b,
                b' ' | b'-' | b'_' | b'.' | b',' | b':' | b'+' | b'@' | b'%' | b'/' | b'='
            )
    });
    if !plain || s.contains("  ") || s.starts_with(' ') || s.ends_with(' ') {
        return false;
    }
    let first = s.split(' ').next().unwrap_or("");
    !first.contains(['/', '='])
        && !RESERVED.contains(&first)
        && !NOT_A_COMMAND.contains(&first)
        && !SHELLS.contains(&first)
        && !matches!(
            first,
            "function"
                | "eval"
                | "trap"
                | "su"
                | "runuser"
                | "script"
                | "watch"
                | "xargs"
                | "find"
                | "alias"
        )
        && !WRAPPERS.iter().any(|w| w.names.contains(&first))
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Lit {
        text: String,
        quoted: bool,
    },
    /// A variable, substitution, arithmetic, glob or brace expansion.
    Dynamic,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Word {
    parts: Vec<Part>,
}

impl Word {
    fn literal(&mut self, c: char, quoted: bool) {
        if let Some(Part::Lit { text, quoted: q }) = self.parts.last_mut() {
            if *q == quoted {
                text.push(c);
                return;
            }
        }
        self.parts.push(Part::Lit {
            text: c.to_string(),
            quoted,
        });
    }

    fn literal_str(&mut self, s: &str, quoted: bool) {
        for c in s.chars() {
            self.literal(c, quoted);
        }
        if s.is_empty() {
            // `''` is an empty word, not no word.
            self.parts.push(Part::Lit {
                text: String::new(),
                quoted,
            });
        }
    }

    fn dynamic(&mut self) {
        if self.parts.last() != Some(&Part::Dynamic) {
            self.parts.push(Part::Dynamic);
        }
    }

    /// The word's text when it has no dynamic part.
    fn static_text(&self) -> Option<String> {
        let mut s = String::new();
        for p in &self.parts {
            match p {
                Part::Lit { text, .. } => s.push_str(text),
                Part::Dynamic => return None,
            }
        }
        Some(s)
    }

    /// Unquoted digits only: the fd number before a redirection (`2>file`).
    fn is_fd_number(&self) -> bool {
        matches!(self.parts.as_slice(), [Part::Lit { text, quoted: false }]
            if !text.is_empty() && text.chars().all(|c| c.is_ascii_digit()))
    }

    /// `NAME=…` or `NAME+=…` with an unquoted name: an assignment, not a command.
    fn is_assignment(&self) -> bool {
        let Some(Part::Lit {
            text,
            quoted: false,
        }) = self.parts.first()
        else {
            return false;
        };
        let Some(eq) = text.find('=') else {
            return false;
        };
        let name = text[..eq].strip_suffix('+').unwrap_or(&text[..eq]);
        let mut chars = name.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Word(Word),
    /// `(` or `)`: a subshell, a function definition, a `case` pattern's end.
    Paren,
    /// A redirection operator; the next word is its target.
    Redirect,
}

/// Splits a simple command into words, parentheses and redirections, collecting the bodies of
/// substitutions into `scripts`.
fn lex(s: &str, scripts: &mut Vec<String>) -> Vec<Token> {
    let chars: Vec<char> = s.chars().collect();
    let mut tokens = Vec::new();
    let mut word = Word::default();
    let mut started = false;
    let mut i = 0;
    let end_word = |tokens: &mut Vec<Token>, word: &mut Word, started: &mut bool| {
        if *started {
            tokens.push(Token::Word(std::mem::take(word)));
            *started = false;
        }
    };
    while i < chars.len() {
        let c = chars[i];
        match c {
            c if c.is_whitespace() => {
                end_word(&mut tokens, &mut word, &mut started);
                i += 1;
            }
            '#' if !started => break,
            '\\' => {
                started = true;
                match chars.get(i + 1) {
                    Some('\n') => {}
                    Some(&n) => word.literal(n, true),
                    None => word.literal('\\', true),
                }
                i += 2;
            }
            '\'' => {
                started = true;
                let close = find_char(&chars, i + 1, '\'');
                let text: String = chars[i + 1..close].iter().collect();
                word.literal_str(&text, true);
                i = close + 1;
            }
            '"' => {
                started = true;
                i = lex_double_quoted(&chars, i + 1, &mut word, scripts);
            }
            '$' => {
                started = true;
                i = lex_dollar(&chars, i, &mut word, scripts);
            }
            '`' => {
                started = true;
                let (body, next) = backtick_body(&chars, i + 1);
                scripts.push(body);
                word.dynamic();
                i = next;
            }
            '<' | '>' if chars.get(i + 1) == Some(&'(') => {
                started = true;
                let close = matching_paren(&chars, i + 2);
                scripts.push(chars[i + 2..close.min(chars.len())].iter().collect());
                word.dynamic();
                i = close + 1;
            }
            '<' | '>' => {
                if word.is_fd_number() {
                    word = Word::default();
                    started = false;
                } else {
                    end_word(&mut tokens, &mut word, &mut started);
                }
                i += 1;
                while i < chars.len() && matches!(chars[i], '<' | '>' | '&' | '|' | '-') {
                    i += 1;
                }
                tokens.push(Token::Redirect);
            }
            '(' | ')' => {
                end_word(&mut tokens, &mut word, &mut started);
                tokens.push(Token::Paren);
                i += 1;
            }
            '*' | '?' => {
                started = true;
                word.dynamic();
                i += 1;
            }
            '[' if has_later_in_word(&chars, i + 1, ']') => {
                started = true;
                word.dynamic();
                i = find_char(&chars, i + 1, ']') + 1;
            }
            '{' if started || !next_is_blank(&chars, i + 1) => {
                // `{a,b}` and `{1..3}` expand to several words; `{}` and `{x}` stay literal.
                let close = find_in_word(&chars, i + 1, '}');
                let inner: String = chars[i + 1..close.min(chars.len())].iter().collect();
                started = true;
                if close < chars.len() && (inner.contains(',') || inner.contains("..")) {
                    word.dynamic();
                    i = close + 1;
                } else {
                    word.literal('{', false);
                    i += 1;
                }
            }
            c => {
                started = true;
                word.literal(c, false);
                i += 1;
            }
        }
    }
    end_word(&mut tokens, &mut word, &mut started);
    tokens
}

fn next_is_blank(chars: &[char], i: usize) -> bool {
    chars.get(i).is_none_or(|c| c.is_whitespace())
}

/// Index of `want` at or after `from`, or the end.
fn find_char(chars: &[char], from: usize, want: char) -> usize {
    (from..chars.len())
        .find(|&j| chars[j] == want)
        .unwrap_or(chars.len())
}

/// Index of `want` before the word ends (whitespace), or the end of input.
fn find_in_word(chars: &[char], from: usize, want: char) -> usize {
    for (j, &c) in chars.iter().enumerate().skip(from) {
        if c == want {
            return j;
        }
        if c.is_whitespace() {
            break;
        }
    }
    chars.len()
}

fn has_later_in_word(chars: &[char], from: usize, want: char) -> bool {
    find_in_word(chars, from, want) < chars.len()
}

/// After an opening `(`: the index of its matching `)` (nesting and quotes respected), or the
/// end of input.
fn matching_paren(chars: &[char], from: usize) -> usize {
    let mut depth = 1usize;
    let mut j = from;
    while j < chars.len() {
        match chars[j] {
            '\\' => j += 1,
            '\'' => j = find_char(chars, j + 1, '\''),
            '"' => {
                j += 1;
                while j < chars.len() && chars[j] != '"' {
                    if chars[j] == '\\' {
                        j += 1;
                    }
                    j += 1;
                }
            }
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return j;
                }
            }
            _ => {}
        }
        j += 1;
    }
    chars.len()
}

/// After an opening backtick: the body (with `\``, `\\` and `\$` unescaped) and the index after
/// the closing one.
fn backtick_body(chars: &[char], from: usize) -> (String, usize) {
    let mut body = String::new();
    let mut j = from;
    while j < chars.len() && chars[j] != '`' {
        if chars[j] == '\\' && matches!(chars.get(j + 1), Some('`' | '\\' | '$')) {
            j += 1;
        }
        body.push(chars[j]);
        j += 1;
    }
    (body, j + 1)
}

/// After an opening `"`: the quoted text into `word` (expansions are dynamic); returns the index
/// after the closing quote.
fn lex_double_quoted(
    chars: &[char],
    mut i: usize,
    word: &mut Word,
    scripts: &mut Vec<String>,
) -> usize {
    let mut any = false;
    while i < chars.len() && chars[i] != '"' {
        match chars[i] {
            '\\' if matches!(chars.get(i + 1), Some('$' | '`' | '"' | '\\' | '\n')) => {
                if chars[i + 1] != '\n' {
                    word.literal(chars[i + 1], true);
                }
                i += 2;
            }
            '$' => i = lex_dollar(chars, i, word, scripts),
            '`' => {
                let (body, next) = backtick_body(chars, i + 1);
                scripts.push(body);
                word.dynamic();
                i = next;
            }
            c => {
                word.literal(c, true);
                i += 1;
            }
        }
        any = true;
    }
    if !any {
        word.literal_str("", true);
    }
    i + 1
}

/// At a `$`: a variable, `${…}`, `$(…)`, `$((…))`, `$'…'`, `$"…"`, or a literal `$`.
fn lex_dollar(chars: &[char], i: usize, word: &mut Word, scripts: &mut Vec<String>) -> usize {
    match chars.get(i + 1) {
        Some('(') if chars.get(i + 2) == Some(&'(') => {
            let close = matching_paren(chars, i + 2);
            let inner: String = chars[i + 3..close.min(chars.len())].iter().collect();
            collect_substitutions(&inner, scripts);
            word.dynamic();
            // `close` is the second of the two closing parentheses.
            close + 1
        }
        Some('(') => {
            let close = matching_paren(chars, i + 2);
            scripts.push(chars[i + 2..close.min(chars.len())].iter().collect());
            word.dynamic();
            close + 1
        }
        Some('{') => {
            let mut depth = 1usize;
            let mut j = i + 2;
            while j < chars.len() {
                match chars[j] {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            let inner: String = chars[i + 2..j.min(chars.len())].iter().collect();
            collect_substitutions(&inner, scripts);
            word.dynamic();
            j + 1
        }
        Some('\'') => {
            let (text, next) = ansi_c(chars, i + 2);
            word.literal_str(&text, true);
            next
        }
        Some('"') => lex_double_quoted(chars, i + 2, word, scripts),
        Some(c) if c.is_ascii_alphabetic() || *c == '_' => {
            let mut j = i + 1;
            while j < chars.len() && (chars[j].is_ascii_alphanumeric() || chars[j] == '_') {
                j += 1;
            }
            word.dynamic();
            j
        }
        Some(c) if c.is_ascii_digit() || matches!(c, '@' | '*' | '#' | '?' | '$' | '!' | '-') => {
            word.dynamic();
            i + 2
        }
        _ => {
            word.literal('$', false);
            i + 1
        }
    }
}

/// Substitutions inside `${…}` or `$((…))` still run their commands.
fn collect_substitutions(text: &str, scripts: &mut Vec<String>) {
    if has_substitution(text) {
        let mut w = Word::default();
        let chars: Vec<char> = text.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            i = match chars[i] {
                '$' => lex_dollar(&chars, i, &mut w, scripts),
                '`' => {
                    let (body, next) = backtick_body(&chars, i + 1);
                    scripts.push(body);
                    next
                }
                _ => i + 1,
            };
        }
    }
}

/// `$'…'` (ANSI-C quoting) from just after the opening quote: the decoded text and the index
/// after the closing quote.
fn ansi_c(chars: &[char], mut i: usize) -> (String, usize) {
    let mut out = String::new();
    while i < chars.len() && chars[i] != '\'' {
        if chars[i] != '\\' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        i += 1;
        let Some(&e) = chars.get(i) else { break };
        i += 1;
        let simple = match e {
            'a' => Some('\u{7}'),
            'b' => Some('\u{8}'),
            'e' | 'E' => Some('\u{1b}'),
            'f' => Some('\u{c}'),
            'n' => Some('\n'),
            'r' => Some('\r'),
            't' => Some('\t'),
            'v' => Some('\u{b}'),
            '\\' | '\'' | '"' | '?' => Some(e),
            _ => None,
        };
        if let Some(c) = simple {
            out.push(c);
            continue;
        }
        let (radix, max) = match e {
            'x' => (16, 2),
            'u' => (16, 4),
            'U' => (16, 8),
            '0'..='7' => {
                i -= 1;
                (8, 3)
            }
            'c' => {
                if let Some(&ctl) = chars.get(i) {
                    out.push(char::from((ctl as u32 & 0x1f) as u8));
                    i += 1;
                }
                continue;
            }
            other => {
                out.push('\\');
                out.push(other);
                continue;
            }
        };
        let start = i;
        while i < chars.len() && i - start < max && chars[i].is_digit(radix) {
            i += 1;
        }
        let digits: String = chars[start..i].iter().collect();
        match u32::from_str_radix(&digits, radix)
            .ok()
            .and_then(char::from_u32)
        {
            Some(c) => out.push(c),
            None => {
                out.push('\\');
                out.push(e);
            }
        }
    }
    (out, i + 1)
}

/// The token stream cut at parentheses, with redirections and their targets removed.
fn segments(tokens: &[Token]) -> Vec<Vec<Word>> {
    let mut out = vec![Vec::new()];
    let mut skip_target = false;
    for t in tokens {
        match t {
            Token::Paren => out.push(Vec::new()),
            Token::Redirect => skip_target = true,
            Token::Word(w) => {
                if std::mem::take(&mut skip_target) {
                    continue;
                }
                if let Some(seg) = out.last_mut() {
                    seg.push(w.clone());
                }
            }
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// Words that open or continue a compound command and may stand before a simple command.
const RESERVED: &[&str] = &[
    "!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "esac",
    "coproc",
];

/// Heads of constructs whose words are not a command (`for x in …`, `case … in`, `[[ … ]]`).
const NOT_A_COMMAND: &[&str] = &["for", "select", "case", "[[", "]]", "in"];

const SHELLS: &[&str] = &[
    "sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "yash", "posh", "fish", "rbash", "lksh",
];

/// Option syntax of a wrapper: short flags without and with an argument, long options with an
/// argument (a long option not listed takes none), and how many operands come before the
/// command.
struct Wrapper {
    names: &'static [&'static str],
    flags: &'static str,
    with_arg: &'static str,
    long_with_arg: &'static [&'static str],
    /// Long options without an argument; any other long option is unknown.
    long_flags: &'static [&'static str],
    operands: usize,
    /// Options after which there is no command (`command -v`, `sudo -l`).
    no_command: &'static str,
}

const WRAPPERS: &[Wrapper] = &[
    Wrapper {
        names: &["env"],
        flags: "i0v",
        with_arg: "uCSP",
        long_with_arg: &["unset", "chdir", "split-string"],
        long_flags: &[
            "ignore-environment",
            "null",
            "debug",
            "default-signal",
            "ignore-signal",
            "block-signal",
            "list-signal-handling",
        ],
        operands: 0,
        no_command: "",
    },
    Wrapper {
        names: &["command"],
        flags: "p",
        with_arg: "",
        long_with_arg: &[],
        long_flags: &[],
        operands: 0,
        no_command: "vV",
    },
    Wrapper {
        names: &["exec"],
        flags: "cl",
        with_arg: "a",
        long_with_arg: &[],
        long_flags: &[],
        operands: 0,
        no_command: "",
    },
    Wrapper {
        names: &["builtin", "nohup", "catchsegv", "fakeroot"],
        flags: "",
        with_arg: "",
        long_with_arg: &[],
        long_flags: &[],
        operands: 0,
        no_command: "",
    },
    Wrapper {
        names: &["nice"],
        flags: "",
        with_arg: "n",
        long_with_arg: &["adjustment"],
        long_flags: &[],
        operands: 0,
        no_command: "",
    },
    Wrapper {
        names: &["time"],
        flags: "apqv",
        with_arg: "fo",
        long_with_arg: &["format", "output"],
        long_flags: &["append", "verbose", "quiet", "portability"],
        operands: 0,
        no_command: "",
    },
    Wrapper {
        names: &["sudo"],
        flags: "ABbEHiKknPSsV",
        with_arg: "CDghpRrTtUu",
        long_with_arg: &[
            "chdir",
            "chroot",
            "close-from",
            "command-timeout",
            "group",
            "host",
            "other-user",
            "prompt",
            "role",
            "type",
            "user",
        ],
        long_flags: &[
            "askpass",
            "background",
            "bell",
            "preserve-env",
            "edit",
            "set-home",
            "login",
            "remove-timestamp",
            "reset-timestamp",
            "non-interactive",
            "preserve-groups",
            "stdin",
            "shell",
            "validate",
            "list",
        ],
        operands: 0,
        no_command: "elv",
    },
    Wrapper {
        names: &["doas"],
        flags: "ns",
        with_arg: "uC",
        long_with_arg: &[],
        long_flags: &[],
        operands: 0,
        no_command: "",
    },
    Wrapper {
        names: &["setsid"],
        flags: "cfw",
        with_arg: "",
        long_with_arg: &[],
        long_flags: &["ctty", "fork", "wait"],
        operands: 0,
        no_command: "",
    },
    Wrapper {
        names: &["timeout"],
        flags: "v",
        with_arg: "sk",
        long_with_arg: &["signal", "kill-after"],
        long_flags: &["foreground", "preserve-status", "verbose"],
        operands: 1,
        no_command: "",
    },
    Wrapper {
        names: &["stdbuf"],
        flags: "",
        with_arg: "ioe",
        long_with_arg: &["input", "output", "error"],
        long_flags: &[],
        operands: 0,
        no_command: "",
    },
    Wrapper {
        names: &["ionice"],
        flags: "t",
        with_arg: "cn",
        long_with_arg: &["class", "classdata"],
        long_flags: &["ignore"],
        operands: 0,
        no_command: "pPu",
    },
    Wrapper {
        names: &["chrt"],
        flags: "abdfiormRv",
        with_arg: "TPD",
        long_with_arg: &["sched-runtime", "sched-period", "sched-deadline"],
        long_flags: &[
            "all-tasks",
            "batch",
            "deadline",
            "fifo",
            "idle",
            "other",
            "rr",
            "reset-on-fork",
            "verbose",
        ],
        operands: 1,
        no_command: "p",
    },
    Wrapper {
        names: &["taskset"],
        flags: "ac",
        with_arg: "",
        long_with_arg: &[],
        long_flags: &["all-tasks", "cpu-list"],
        operands: 1,
        no_command: "p",
    },
    Wrapper {
        names: &["flock"],
        flags: "sxenuoFv",
        with_arg: "wEc",
        long_with_arg: &["timeout", "conflict-exit-code", "command"],
        long_flags: &[
            "shared",
            "exclusive",
            "nonblock",
            "nb",
            "unlock",
            "close",
            "no-fork",
            "verbose",
        ],
        operands: 1,
        no_command: "",
    },
    Wrapper {
        names: &["chroot"],
        flags: "",
        with_arg: "",
        long_with_arg: &["userspec", "groups"],
        long_flags: &["skip-chdir"],
        operands: 1,
        no_command: "",
    },
    Wrapper {
        names: &["strace", "ltrace"],
        flags: "fcCqtTvVxykrwzZdDFhiL",
        with_arg: "oepsuEaIOSPXbnA",
        long_with_arg: &["output", "expr", "attach", "string-limit", "user", "env"],
        long_flags: &["follow-forks", "summary-only", "quiet"],
        operands: 0,
        no_command: "",
    },
    Wrapper {
        names: &["busybox", "toybox"],
        flags: "",
        with_arg: "",
        long_with_arg: &[],
        long_flags: &[],
        operands: 0,
        no_command: "",
    },
    Wrapper {
        names: &["unshare"],
        flags: "mUuinpCTrfc",
        with_arg: "SGRwt",
        long_with_arg: &["setuid", "setgid", "root", "wd", "map-user", "map-group"],
        long_flags: &[
            "mount",
            "uts",
            "ipc",
            "net",
            "pid",
            "user",
            "cgroup",
            "time",
            "fork",
            "map-root-user",
            "map-current-user",
            "kill-child",
            "mount-proc",
        ],
        operands: 0,
        no_command: "",
    },
];

/// Where the command of a wrapper starts, or why it cannot be said.
enum Inner {
    At(usize),
    /// The wrapper runs nothing (`command -v`), or nothing follows.
    None,
    /// An option we do not know: its argument count is unknown, so is the command.
    Unknown,
    /// A script given to an option (`env -S`, `flock -c`): judge it as a command line.
    Script(usize),
    /// The same, attached to its option (`--split-string=…`, `-S…`): the script's text.
    InlineScript(String),
}

/// getopt-style scan of `args` (the words after the wrapper's name) per `w`.
fn wrapper_inner(w: &Wrapper, args: &[Word]) -> Inner {
    let mut i = 0;
    let mut operands = w.operands;
    while i < args.len() {
        let Some(a) = args[i].static_text() else {
            return if operands == 0 {
                Inner::At(i)
            } else {
                Inner::Unknown
            };
        };
        if a == "--" {
            i += 1;
            break;
        }
        if let Some(long) = a.strip_prefix("--") {
            let (name, inline) = match long.split_once('=') {
                Some((n, v)) => (n, Some(v)),
                None => (long, None),
            };
            let takes = w.long_with_arg.contains(&name);
            if !takes && !w.long_flags.contains(&name) && inline.is_none() {
                return Inner::Unknown;
            }
            if matches!(name, "split-string" | "command") {
                return match inline {
                    Some(script) => Inner::InlineScript(script.to_string()),
                    None => Inner::Script(i + 1),
                };
            }
            i += if takes && inline.is_none() { 2 } else { 1 };
            continue;
        }
        if let Some(short) = a.strip_prefix('-').filter(|s| !s.is_empty()) {
            // `nice -10`, `-n10`: numeric options.
            if short.chars().all(|c| c.is_ascii_digit()) {
                i += 1;
                continue;
            }
            let mut consumed_next = false;
            for (k, c) in short.char_indices() {
                if w.no_command.contains(c) {
                    return Inner::None;
                }
                if w.flags.contains(c) {
                    continue;
                }
                if w.with_arg.contains(c) {
                    let attached = &short[k + c.len_utf8()..];
                    if matches!(c, 'S' | 'c')
                        && (w.names.contains(&"env") || w.names.contains(&"flock"))
                    {
                        return if attached.is_empty() {
                            Inner::Script(i + 1)
                        } else {
                            Inner::InlineScript(attached.to_string())
                        };
                    }
                    consumed_next = attached.is_empty();
                    break;
                }
                return Inner::Unknown;
            }
            i += if consumed_next { 2 } else { 1 };
            continue;
        }
        if w.names.contains(&"env") && Word::is_assignment(&args[i]) {
            i += 1;
            continue;
        }
        if operands > 0 {
            operands -= 1;
            i += 1;
            continue;
        }
        return Inner::At(i);
    }
    if i < args.len() {
        Inner::At(i)
    } else {
        Inner::None
    }
}

/// The script a shell runs: `-c SCRIPT` (options may be clustered: `-ec`, `-lc`), `None` when
/// it runs a file, or `Some(None)` when it reads commands from stdin (unknowable).
fn shell_script(args: &[Word]) -> Option<Option<&Word>> {
    let mut i = 0;
    let mut dash_c = false;
    while i < args.len() {
        let Some(a) = args[i].static_text() else {
            break;
        };
        if a == "--" || a == "-" {
            i += 1;
            break;
        }
        if a.starts_with("--") {
            i += 1;
            continue;
        }
        if let Some(opts) = a.strip_prefix('-').or_else(|| a.strip_prefix('+')) {
            if opts.contains('c') {
                dash_c = true;
            }
            if opts.contains('s') {
                return Some(None);
            }
            // `-o OPTION` and `-O OPTION` take the next word.
            if opts.ends_with('o') || opts.ends_with('O') {
                i += 1;
            }
            i += 1;
            continue;
        }
        break;
    }
    match (dash_c, args.get(i)) {
        (true, Some(script)) => Some(Some(script)),
        (true, None) => None,
        (false, None) => Some(None),
        (false, Some(_)) => None,
    }
}

fn basename(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn script_or_hole(word: Option<&Word>, out: &mut Analysis) {
    match word.and_then(Word::static_text) {
        Some(script) => out.scripts.push(script),
        None => out.add(Reading::hole()),
    }
}

/// The readings of one command's words (a segment), wrappers followed to `MAX_DEPTH`.
fn command_readings(words: &[Word], depth: usize, out: &mut Analysis) {
    if depth > MAX_DEPTH {
        out.add(Reading::hole());
        return;
    }
    let mut words = words;
    loop {
        let Some(first) = words.first() else { return };
        let text = first.static_text();
        match text.as_deref() {
            Some(t) if RESERVED.contains(&t) => words = &words[1..],
            Some("function") => words = words.get(2..).unwrap_or(&[]),
            Some(t) if NOT_A_COMMAND.contains(&t) => return,
            _ if first.is_assignment() => words = &words[1..],
            _ => break,
        }
    }
    let Some(first) = words.first() else { return };
    let args = &words[1..];
    let Some(name) = first.static_text() else {
        // The program itself is only known at run time: anything could run.
        let mut r = Reading::from_words(words, None);
        if !matches!(r.pieces.first(), Some(Piece::Hole)) {
            r.pieces.insert(0, Piece::Hole);
        }
        out.add(r);
        return;
    };
    let base = basename(&name).to_string();
    out.add(Reading::from_words(words, Some(&name)));
    if base != name {
        out.add(Reading::from_words(words, Some(&base)));
    }
    if let Some(w) = WRAPPERS.iter().find(|w| w.names.contains(&base.as_str())) {
        match wrapper_inner(w, args) {
            Inner::At(i) => command_readings(&args[i..], depth + 1, out),
            Inner::Script(i) => script_or_hole(args.get(i), out),
            Inner::InlineScript(script) => out.scripts.push(script),
            Inner::Unknown => out.add(Reading::hole()),
            Inner::None => {}
        }
        return;
    }
    match base.as_str() {
        s if SHELLS.contains(&s) => {
            if let Some(script) = shell_script(args) {
                script_or_hole(script, out);
            }
        }
        "eval" => {
            let texts: Option<Vec<String>> = args.iter().map(Word::static_text).collect();
            match texts {
                Some(t) => out.scripts.push(t.join(" ")),
                None => out.add(Reading::hole()),
            }
        }
        "trap" => {
            // `trap` alone lists traps; `trap - SIG` resets one.
            let action = args.first();
            if action.is_some_and(|a| a.static_text().as_deref() != Some("-")) {
                script_or_hole(action, out);
            }
        }
        "su" | "runuser" | "script" => command_option_script(args, out),
        "alias" => {
            // `alias r=rm` makes a later `r …` run `rm …` (bash with `expand_aliases`, and
            // every POSIX shell that expands aliases when not interactive).
            for a in args {
                match a.static_text() {
                    Some(t) => {
                        if let Some((_, value)) = t.split_once('=') {
                            let mut nested = Analysis::default();
                            let tokens = lex(value, &mut nested.scripts);
                            for segment in segments(&tokens) {
                                command_readings(&segment, depth + 1, &mut nested);
                            }
                            for r in nested.readings {
                                out.add(r.with_trailing_hole());
                            }
                            out.scripts.extend(nested.scripts);
                        }
                    }
                    None => out.add(Reading::hole()),
                }
            }
        }
        "watch" => {
            let start = args
                .iter()
                .position(|a| !a.static_text().is_some_and(|t| t.starts_with('-')))
                .unwrap_or(args.len());
            // `-n SECONDS` takes an argument.
            let start = match args.get(start.wrapping_sub(1)).and_then(Word::static_text) {
                Some(t) if t == "-n" || t == "--interval" => start + 1,
                _ => start,
            };
            let texts: Option<Vec<String>> = args
                .get(start..)
                .unwrap_or(&[])
                .iter()
                .map(Word::static_text)
                .collect();
            match texts {
                Some(t) if !t.is_empty() => out.scripts.push(t.join(" ")),
                Some(_) => {}
                None => out.add(Reading::hole()),
            }
        }
        "xargs" => {
            let inner = xargs_command(args);
            match inner {
                Some(Some(i)) => {
                    let mut nested = Analysis::default();
                    command_readings(&args[i..], depth + 1, &mut nested);
                    for r in nested.readings {
                        out.add(r.with_trailing_hole());
                    }
                    out.scripts.extend(nested.scripts);
                }
                Some(None) => {}
                None => out.add(Reading::hole()),
            }
        }
        "find" => {
            let mut i = 0;
            while i < args.len() {
                let is_exec = matches!(
                    args[i].static_text().as_deref(),
                    Some("-exec" | "-execdir" | "-ok" | "-okdir")
                );
                if is_exec {
                    let start = i + 1;
                    let end = (start..args.len())
                        .find(|&j| matches!(args[j].static_text().as_deref(), Some(";" | "+")))
                        .unwrap_or(args.len());
                    command_readings(&args[start..end], depth + 1, out);
                    i = end;
                }
                i += 1;
            }
        }
        _ => {}
    }
}

/// The script of `su`/`runuser`/`script`: `-c SCRIPT`, clustered (`-qc SCRIPT`), attached
/// (`-cSCRIPT`) or long (`--command SCRIPT`, `--command=SCRIPT`). Reading a `c` inside another
/// option's attached argument as `-c` only ever adds a reading, so the scan is deliberately loose.
fn command_option_script(args: &[Word], out: &mut Analysis) {
    for (i, a) in args.iter().enumerate() {
        let Some(t) = a.static_text() else { continue };
        if t == "--command" {
            script_or_hole(args.get(i + 1), out);
        } else if let Some(inline) = t.strip_prefix("--command=") {
            out.scripts.push(inline.to_string());
        } else if let Some(short) = t.strip_prefix('-').filter(|s| !s.starts_with('-')) {
            if let Some(k) = short.find('c') {
                let attached = &short[k + 1..];
                if attached.is_empty() {
                    script_or_hole(args.get(i + 1), out);
                } else {
                    out.scripts.push(attached.to_string());
                }
            }
        }
    }
}

/// Where `xargs`'s command starts: `Some(Some(i))`, `Some(None)` when there is none (`echo`),
/// `None` when an option is not known.
fn xargs_command(args: &[Word]) -> Option<Option<usize>> {
    const FLAGS: &str = "0rtpxo";
    const WITH_ARG: &str = "adEILnPs";
    const OPTIONAL: &str = "iel";
    let mut i = 0;
    while i < args.len() {
        let a = args[i].static_text()?;
        if a == "--" {
            i += 1;
            break;
        }
        if let Some(long) = a.strip_prefix("--") {
            let takes = matches!(
                long,
                "arg-file"
                    | "delimiter"
                    | "eof"
                    | "replace"
                    | "max-lines"
                    | "max-args"
                    | "max-procs"
                    | "max-chars"
                    | "process-slot-var"
            );
            i += if takes { 2 } else { 1 };
            continue;
        }
        match a.strip_prefix('-').and_then(|s| s.chars().next()) {
            Some(c) if FLAGS.contains(c) || OPTIONAL.contains(c) => i += 1,
            Some(c) if WITH_ARG.contains(c) => i += if a.len() > 2 { 1 } else { 2 },
            Some(_) => return None,
            None => break,
        }
    }
    Some((i < args.len()).then_some(i))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_at_every_separator() {
        assert_eq!(
            split_simple_commands("a; b && c || d | e & f\ng"),
            vec!["a", "b", "c", "d", "e", "f", "g"]
        );
    }

    #[test]
    fn quotes_and_backslashes_protect_separators() {
        assert_eq!(
            split_simple_commands("echo 'a;b' && echo \"c && d\""),
            vec!["echo 'a;b'", "echo \"c && d\""]
        );
        assert_eq!(split_simple_commands("echo a\\;b"), vec!["echo a\\;b"]);
        assert_eq!(
            split_simple_commands("echo \"x\\\"; y\"; z"),
            vec!["echo \"x\\\"; y\"", "z"]
        );
        // Inside single quotes a backslash is an ordinary character.
        assert_eq!(
            split_simple_commands("echo 'a\\'; b"),
            vec!["echo 'a\\'", "b"]
        );
        assert_eq!(split_simple_commands("a \\\n b"), vec!["a \\\n b"]);
    }

    #[test]
    fn empty_pieces_dropped_but_never_zero_parts() {
        assert_eq!(split_simple_commands("  ls ;; "), vec!["ls"]);
        assert_eq!(split_simple_commands("sleep 1 &"), vec!["sleep 1"]);
        assert_eq!(split_simple_commands(""), vec![""]);
        assert_eq!(split_simple_commands(" ; "), vec![""]);
    }

    #[test]
    fn unterminated_quote_keeps_rest_together() {
        assert_eq!(split_simple_commands("echo 'a; b"), vec!["echo 'a; b"]);
    }

    #[test]
    fn substitutions_detected() {
        assert!(has_substitution("echo $(id)"));
        assert!(has_substitution("echo `id`"));
        assert!(has_substitution("diff <(a) b"));
        assert!(has_substitution("tee >(x)"));
        assert!(!has_substitution("echo $HOME (x)"));
    }

    /// The readings of `cmd` that are fully known, as text.
    fn texts(cmd: &str) -> Vec<String> {
        analyze(cmd)
            .readings
            .iter()
            .filter_map(|r| r.text().map(str::to_string))
            .collect()
    }

    fn holes(cmd: &str) -> Vec<String> {
        analyze(cmd)
            .readings
            .iter()
            .filter(|r| r.has_hole())
            .map(Reading::display)
            .collect()
    }

    #[test]
    fn quoting_and_escapes_are_removed() {
        for cmd in [
            "\\rm -rf x",
            "\"rm\" -rf x",
            "r''m -rf x",
            "'r'\"m\" -rf x",
            "$'rm' -rf x",
            "$'\\x72m' -rf x",
            "$'\\162m' -rf x",
            "$\"rm\" -rf x",
            "rm  -rf   x",
            "r\\\nm -rf x",
        ] {
            assert!(
                texts(cmd).contains(&"rm -rf x".to_string()),
                "{cmd}: {:?}",
                texts(cmd)
            );
        }
    }

    #[test]
    fn paths_assignments_and_redirections() {
        assert!(texts("/bin/rm -rf x").contains(&"rm -rf x".to_string()));
        assert!(texts("/bin/rm -rf x").contains(&"/bin/rm -rf x".to_string()));
        assert!(texts("../../usr/bin/rm x").contains(&"rm x".to_string()));
        assert_eq!(texts("FOO=1 BAR=\"a b\" rm x"), vec!["rm x"]);
        assert_eq!(texts("2>/dev/null rm x"), vec!["rm x"]);
        assert_eq!(texts("rm x >out 2>>err <in"), vec!["rm x"]);
        assert_eq!(
            texts("\"FOO\"=1"),
            vec!["FOO=1"],
            "a quoted name is a command"
        );
        assert!(texts("FOO=$(id)").is_empty());
        assert_eq!(analyze("FOO=$(rm -rf /)").scripts, vec!["rm -rf /"]);
    }

    #[test]
    fn wrappers_are_seen_through() {
        for cmd in [
            "env rm x",
            "env -i FOO=1 -u BAR rm x",
            "command rm x",
            "command -p rm x",
            "exec -a name rm x",
            "nice -n 10 rm x",
            "nice -10 rm x",
            "nohup rm x",
            "time -p rm x",
            "builtin rm x",
            "sudo -u root -E rm x",
            "sudo --user=root rm x",
            "sudo -- rm x",
            "doas -u root rm x",
            "timeout -s KILL 5 rm x",
            "stdbuf -oL rm x",
            "setsid -f rm x",
            "busybox rm x",
            "nice env nohup /bin/rm x",
            "( rm x )",
            "{ rm x",
            "if rm x",
            "then rm x",
            "! rm x",
            "f() { rm x",
            "function f { rm x",
            "a) rm x",
            "find . -name y -exec rm x {} ;",
        ] {
            let t = texts(cmd);
            assert!(
                t.iter().any(|r| r == "rm x" || r.starts_with("rm x ")),
                "{cmd}: {t:?}"
            );
        }
        assert!(!texts("command -v rm x").contains(&"rm x".to_string()));
        assert!(holes("sudo --frobnicate rm x").contains(&"…".to_string()));
    }

    #[test]
    fn scripts_of_shells_eval_trap_and_substitutions() {
        assert_eq!(analyze("sh -c 'rm -rf /'").scripts, vec!["rm -rf /"]);
        assert_eq!(analyze("bash -ec \"rm -rf /\" x").scripts, vec!["rm -rf /"]);
        assert_eq!(
            analyze("/bin/bash -o pipefail -c 'rm x'").scripts,
            vec!["rm x"]
        );
        assert_eq!(analyze("eval rm '-rf' /").scripts, vec!["rm -rf /"]);
        assert_eq!(analyze("trap 'rm -rf /' EXIT").scripts, vec!["rm -rf /"]);
        assert_eq!(analyze("env -S 'rm -rf /'").scripts, vec!["rm -rf /"]);
        assert_eq!(analyze("su -c 'rm x' root").scripts, vec!["rm x"]);
        assert_eq!(analyze("watch -n 1 rm x").scripts, vec!["rm x"]);
        assert_eq!(analyze("echo $(rm x)").scripts, vec!["rm x"]);
        assert_eq!(analyze("echo \"`rm x`\"").scripts, vec!["rm x"]);
        assert_eq!(analyze("cat <(rm x)").scripts, vec!["rm x"]);
        assert_eq!(analyze("echo ${a:-$(rm x)}").scripts, vec!["rm x"]);
        assert_eq!(analyze("echo $(( $(rm x) + 1 ))").scripts, vec!["rm x"]);
        assert_eq!(analyze("sudo sh -c 'rm x'").scripts, vec!["rm x"]);
        // Attached and long forms of a script option.
        assert_eq!(analyze("env --split-string='rm x'").scripts, vec!["rm x"]);
        assert_eq!(analyze("env '-Srm x'").scripts, vec!["rm x"]);
        assert_eq!(
            analyze("flock /tmp/l --command='rm x'").scripts,
            vec!["rm x"]
        );
        assert_eq!(analyze("script -qc 'rm x'").scripts, vec!["rm x"]);
        assert_eq!(analyze("script -q '-crm x'").scripts, vec!["rm x"]);
        assert_eq!(
            analyze("runuser -u u --command 'rm x'").scripts,
            vec!["rm x"]
        );
        assert_eq!(analyze("su root --command='rm x'").scripts, vec!["rm x"]);
    }

    #[test]
    fn coproc_and_aliases_are_seen_through() {
        assert!(texts("coproc rm x").contains(&"rm x".to_string()));
        // An alias value runs with whatever words follow the alias later.
        assert_eq!(holes("alias r=rm"), vec!["rm …"]);
        assert_eq!(
            holes("alias r='sudo rm -rf' ls=ls"),
            vec!["sudo rm -rf …", "rm -rf …", "ls …"]
        );
        assert!(holes("alias r=$x").contains(&"…".to_string()));
        assert!(holes("alias").is_empty());
        assert!(holes("alias r").is_empty());
    }

    #[test]
    fn unknowable_programs_are_holes() {
        assert_eq!(holes("$CMD -rf /"), vec!["… -rf /"]);
        assert_eq!(holes("${x} -rf /"), vec!["… -rf /"]);
        assert_eq!(holes("$(echo rm) -rf /"), vec!["… -rf /"]);
        // A glob in a path: a hole in front stands for whatever directory part it expands to.
        assert_eq!(holes("/bin/r? -rf /"), vec!["…/bin/r… -rf /"]);
        assert_eq!(holes("/bin/r[m] x"), vec!["…/bin/r… x"]);
        assert!(holes("{rm,-rf,/}").contains(&"…".to_string()));
        assert!(holes("eval $X").contains(&"…".to_string()));
        assert!(holes("sh -c \"$X\"").contains(&"…".to_string()));
        assert!(
            holes("sh").contains(&"…".to_string()),
            "a shell reading stdin runs anything"
        );
        assert!(holes("bash -s").contains(&"…".to_string()));
        assert_eq!(holes("xargs rm"), vec!["rm …"]);
        assert!(holes("sh script.sh").is_empty());
        assert!(holes("rm {}").is_empty(), "{{}} is literal");
        assert_eq!(texts("[ -f x ]"), vec!["[ -f x ]"]);
    }

    #[test]
    fn comments_and_oddities_never_panic() {
        assert_eq!(texts("ls # rm -rf /"), vec!["ls"]);
        for cmd in [
            "",
            "'",
            "\"",
            "$",
            "${",
            "$(",
            "$((",
            "`",
            "\\",
            "<(",
            ">",
            "2>",
            "((",
            "))",
            "{",
            "}",
            "$'\\x'",
            "$'\\u{zz}'",
            "$'\\c'",
            "[",
            "a[b",
            "echo $(",
            "${a:-$(}",
            "f() {",
            "sudo",
            "sudo -u",
            "env -S",
            "xargs -I",
            "find -exec",
            "timeout 5",
            "bash -c",
            "eval",
            "trap",
            "watch -n",
            "$'\\777'",
            "\u{0}",
        ] {
            let _ = analyze(cmd);
        }
    }

    #[test]
    fn plain_commands_take_the_short_way_and_agree_with_the_long_one() {
        for cmd in [
            "git status --short",
            "cargo test -p x",
            "ls -la src",
            "grep -rn foo .",
        ] {
            assert!(reads_as_written(cmd), "{cmd}");
            // What the full analysis finds is the command itself, nothing more.
            let mut full = Analysis::default();
            let tokens = lex(cmd, &mut full.scripts);
            for segment in segments(&tokens) {
                command_readings(&segment, 0, &mut full);
            }
            assert_eq!(full.readings.len(), 1, "{cmd}");
            assert_eq!(full.readings[0].text(), Some(cmd));
            assert!(full.scripts.is_empty());
        }
        for cmd in [
            "rm  -rf x",
            "/bin/rm x",
            "FOO=1 rm",
            "env rm",
            "sh -c x",
            "then rm",
            "rm $X",
            "rm 'x'",
            "rm *",
            "rm x > y",
            "eval rm",
        ] {
            assert!(!reads_as_written(cmd), "{cmd}");
        }
    }

    #[test]
    fn deep_nesting_becomes_a_hole() {
        let cmd = "nice ".repeat(20) + "rm x";
        assert!(holes(&cmd).contains(&"…".to_string()));
    }
}
