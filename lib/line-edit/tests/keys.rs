//! Table-driven key tests: (mode, key sequence) → buffer, cursor, and for some the actions.
//!
//! Notation: each character is a key; `<…>` names one: `<Esc> <CR> <BS> <Del> <Left> <Right>
//! <Up> <Down> <Home> <End> <Tab> <lt>` (a literal `<`), `<C-x>` (Ctrl), `<M-x>` (Alt/Meta),
//! `<S-CR>` and `<M-CR>` (Shift/Alt-Enter), `<C-Left>`, `<M-BS>`, and `<wait:N>`, which advances
//! the injected clock by N ms (every key otherwise arrives 1 ms after the previous one, so
//! `d<wait:498>w` has `w` 499 ms after `d`, in time, and `d<wait:499>w` 500 ms after, too late).
//!
//! Vim cases start in Normal mode on an empty buffer (the harness presses Esc first; vim mode
//! itself starts in Insert). Cursors are (line, column in characters).

use std::time::{Duration, Instant};

use hanzo_line_edit::{Action, Editor, History, InputMode, Key, KeyCode};

fn parse(keys: &str) -> Vec<Result<Key, u64>> {
    let mut out = Vec::new();
    let mut rest = keys;
    while let Some(c) = rest.chars().next() {
        if c == '<' {
            let end = rest.find('>').expect("unclosed <…> in a key sequence");
            let name = &rest[1..end];
            rest = &rest[end + 1..];
            if let Some(ms) = name.strip_prefix("wait:") {
                out.push(Err(ms.parse().expect("wait:N takes milliseconds")));
                continue;
            }
            out.push(Ok(named(name)));
        } else {
            out.push(Ok(Key::char(c)));
            rest = &rest[c.len_utf8()..];
        }
    }
    out
}

fn named(name: &str) -> Key {
    let code = |n: &str| match n {
        "Esc" => KeyCode::Esc,
        "CR" | "Enter" => KeyCode::Enter,
        "BS" => KeyCode::Backspace,
        "Del" => KeyCode::Delete,
        "Left" => KeyCode::Left,
        "Right" => KeyCode::Right,
        "Up" => KeyCode::Up,
        "Down" => KeyCode::Down,
        "Home" => KeyCode::Home,
        "End" => KeyCode::End,
        "Tab" => KeyCode::Tab,
        "lt" => KeyCode::Char('<'),
        one if one.chars().count() == 1 => KeyCode::Char(one.chars().next().unwrap_or(' ')),
        other => panic!("unknown key name <{other}>"),
    };
    if let Some(k) = name.strip_prefix("C-") {
        Key::new(code(k)).with_ctrl()
    } else if let Some(k) = name.strip_prefix("M-").or_else(|| name.strip_prefix("A-")) {
        Key::new(code(k)).with_alt()
    } else if let Some(k) = name.strip_prefix("S-") {
        Key::new(code(k)).with_shift()
    } else {
        Key::new(code(name))
    }
}

struct Run {
    editor: Editor,
    actions: Vec<Action>,
}

fn run_with(mut editor: Editor, keys: &str) -> Run {
    let mut now = Instant::now();
    if editor.mode() == InputMode::Vim {
        editor.handle(Key::new(KeyCode::Esc), now);
    }
    let mut actions = Vec::new();
    for step in parse(keys) {
        match step {
            Ok(key) => {
                now += Duration::from_millis(1);
                let action = editor.handle(key, now);
                if action != Action::None {
                    actions.push(action);
                }
            }
            Err(ms) => now += Duration::from_millis(ms),
        }
    }
    Run { editor, actions }
}

fn run(mode: InputMode, keys: &str) -> Run {
    run_with(Editor::new(mode), keys)
}

use InputMode::{Default as D, Emacs as E, Vim as V};

/// (mode, keys, text, cursor)
const CASES: &[(InputMode, &str, &str, (usize, usize))] = &[
    // ---- vim: insert-mode entries
    (V, "ihello<Esc>", "hello", (0, 4)),
    (V, "ihello<Esc>0iX<Esc>", "Xhello", (0, 0)),
    (V, "iabc<Esc>0ax<Esc>", "axbc", (0, 1)),
    (V, "i  abc<Esc>Ix<Esc>", "  xabc", (0, 2)),
    (V, "iabc<Esc>0Ax<Esc>", "abcx", (0, 3)),
    (V, "ione<Esc>otwo<Esc>", "one\ntwo", (1, 2)),
    (V, "ione<Esc>Otwo<Esc>", "two\none", (0, 2)),
    // ---- motions h l 0 $ ^ with counts
    (V, "iabcdef<Esc>0lll", "abcdef", (0, 3)),
    (V, "iabcdef<Esc>0l3l", "abcdef", (0, 4)),
    (V, "iabcdef<Esc>0lllhh", "abcdef", (0, 1)),
    (V, "iabcdef<Esc>0100l", "abcdef", (0, 5)),
    (V, "iabcdef<Esc>0$", "abcdef", (0, 5)),
    (V, "i   abc<Esc>0^", "   abc", (0, 3)),
    (V, "iabc<Esc>$0", "abc", (0, 0)),
    // ---- w b e (and W B E) with counts
    (V, "ione two three<Esc>0w", "one two three", (0, 4)),
    (V, "ione two three<Esc>03w", "one two three", (0, 12)),
    (V, "ione two three<Esc>02w", "one two three", (0, 8)),
    (V, "ifoo.bar baz<Esc>0w", "foo.bar baz", (0, 3)),
    (V, "ifoo.bar baz<Esc>0W", "foo.bar baz", (0, 8)),
    (V, "ione two three<Esc>$b", "one two three", (0, 8)),
    (V, "ione two three<Esc>$2b", "one two three", (0, 4)),
    (V, "ifoo.bar baz<Esc>$B", "foo.bar baz", (0, 8)),
    (V, "ifoo.bar baz<Esc>$BB", "foo.bar baz", (0, 0)),
    (V, "ione two three<Esc>0e", "one two three", (0, 2)),
    (V, "ione two three<Esc>0ee", "one two three", (0, 6)),
    (V, "ifoo.bar baz<Esc>0E", "foo.bar baz", (0, 6)),
    (V, "ione<S-CR>two<Esc>ggw", "one\ntwo", (1, 0)),
    // ---- j k gg G with counts and kept column
    (
        V,
        "ione<S-CR>two<S-CR>three<Esc>gg",
        "one\ntwo\nthree",
        (0, 0),
    ),
    (
        V,
        "ione<S-CR>two<S-CR>three<Esc>ggG",
        "one\ntwo\nthree",
        (2, 0),
    ),
    (
        V,
        "ione<S-CR>two<S-CR>three<Esc>gg2G",
        "one\ntwo\nthree",
        (1, 0),
    ),
    (
        V,
        "ione<S-CR>two<S-CR>three<Esc>3gg",
        "one\ntwo\nthree",
        (2, 0),
    ),
    (
        V,
        "ione<S-CR>two<S-CR>three<Esc>ggj",
        "one\ntwo\nthree",
        (1, 0),
    ),
    (
        V,
        "ione<S-CR>two<S-CR>three<Esc>gg2j",
        "one\ntwo\nthree",
        (2, 0),
    ),
    (
        V,
        "ione<S-CR>two<S-CR>three<Esc>k",
        "one\ntwo\nthree",
        (1, 2),
    ),
    (
        V,
        "ilong line<S-CR>ab<S-CR>long line<Esc>ggllllllljj",
        "long line\nab\nlong line",
        (2, 7),
    ),
    // ---- f t F T ; ,
    (V, "ia,b,c,d<Esc>0f,", "a,b,c,d", (0, 1)),
    (V, "ia,b,c,d<Esc>02f,", "a,b,c,d", (0, 3)),
    (V, "ia,b,c,d<Esc>0t,", "a,b,c,d", (0, 0)),
    (V, "ia,b,c,d<Esc>0tc", "a,b,c,d", (0, 3)),
    (V, "ia,b,c,d<Esc>$F,", "a,b,c,d", (0, 5)),
    (V, "ia,b,c,d<Esc>$T,", "a,b,c,d", (0, 6)),
    (V, "ia,b,c,d<Esc>0f,;;", "a,b,c,d", (0, 5)),
    (V, "ia,b,c,d<Esc>0f,;;,", "a,b,c,d", (0, 3)),
    (V, "ia,b,c,d<Esc>0fz", "a,b,c,d", (0, 0)),
    // ---- d with motions
    (V, "ihello world<Esc>0dw", "world", (0, 0)),
    (V, "ione two three<Esc>0d2w", "three", (0, 0)),
    (V, "ione two three<Esc>02dw", "three", (0, 0)),
    (V, "ione two<S-CR>three<Esc>ggwdw", "one \nthree", (0, 3)),
    (V, "ihello world<Esc>0de", " world", (0, 0)),
    (V, "ihello world<Esc>$db", "hello d", (0, 6)),
    (V, "ihello world<Esc>0wd$", "hello ", (0, 5)),
    (V, "ihello world<Esc>0wD", "hello ", (0, 5)),
    (V, "ihello world<Esc>0d0", "hello world", (0, 0)),
    (V, "ihello world<Esc>$d0", "d", (0, 0)),
    (V, "i   abc<Esc>$d^", "   c", (0, 3)),
    (V, "ia,b,c<Esc>0dt,", ",b,c", (0, 0)),
    (V, "ia,b,c<Esc>0df,", "b,c", (0, 0)),
    (V, "ia,b,c<Esc>02df,", "c", (0, 0)),
    (V, "ia,b,c<Esc>$dF,", "a,bc", (0, 3)),
    (V, "iabcdef<Esc>0ld2l", "adef", (0, 1)),
    (V, "iabcdef<Esc>$dh", "abcdf", (0, 4)),
    // ---- dd, counts, dj dk dG dgg
    (V, "ione<S-CR>two<S-CR>three<Esc>ggdd", "two\nthree", (0, 0)),
    (V, "ione<S-CR>two<S-CR>three<Esc>dd", "one\ntwo", (1, 0)),
    (V, "ione<S-CR>two<S-CR>three<Esc>gg2dd", "three", (0, 0)),
    (V, "ione<S-CR>two<S-CR>three<Esc>ggdj", "three", (0, 0)),
    (V, "ione<S-CR>two<S-CR>three<Esc>dk", "one", (0, 0)),
    (V, "ione<S-CR>two<S-CR>three<Esc>ggjdG", "one", (0, 0)),
    (V, "ione<S-CR>two<S-CR>three<Esc>kdgg", "three", (0, 0)),
    (V, "ionly<Esc>dd", "", (0, 0)),
    (V, "i  indented<S-CR>next<Esc>dd", "  indented", (0, 2)),
    // ---- c with motions: cw is ce, cc keeps the line
    (V, "ihello world<Esc>0cwbye<Esc>", "bye world", (0, 2)),
    (V, "ione two three<Esc>0c2wX<Esc>", "X three", (0, 0)),
    (V, "ihello world<Esc>0lcwX<Esc>", "hX world", (0, 1)),
    (V, "ihello world<Esc>0ceX<Esc>", "X world", (0, 0)),
    (V, "ihello world<Esc>0wc$there<Esc>", "hello there", (0, 10)),
    (V, "ihello world<Esc>0wCthere<Esc>", "hello there", (0, 10)),
    (V, "ione<S-CR>two<Esc>ccnew<Esc>", "one\nnew", (1, 2)),
    (V, "ione<S-CR>two<Esc>kSnew<Esc>", "new\ntwo", (0, 2)),
    (V, "iabc<Esc>0sX<Esc>", "Xbc", (0, 0)),
    (V, "iabc<Esc>0cbX<Esc>", "abc", (0, 0)),
    (V, "iabc<Esc>0dh", "abc", (0, 0)),
    (V, "ione<S-CR>two<Esc>dj", "one\ntwo", (1, 2)),
    (V, "ione<S-CR>two<Esc>ggdk", "one\ntwo", (0, 0)),
    (V, "ione<S-CR>two<S-CR>three<Esc>ggd5j", "", (0, 0)),
    // ---- text objects
    (
        V,
        "isay \"hello there\" now<Esc>0fhci\"bye<Esc>",
        "say \"bye\" now",
        (0, 7),
    ),
    (
        V,
        "isay \"hello there\" now<Esc>0ci\"bye<Esc>",
        "say \"bye\" now",
        (0, 7),
    ),
    (
        V,
        "isay \"hello there\" now<Esc>0fhca\"X<Esc>",
        "say Xnow",
        (0, 4),
    ),
    (V, "isay \"hello\" now<Esc>0fhda\"", "say now", (0, 4)),
    (
        V,
        "isay 'hi there' now<Esc>0fhci'X<Esc>",
        "say 'X' now",
        (0, 5),
    ),
    (
        V,
        "icall(a, (b), c)<Esc>0fbci(X<Esc>",
        "call(a, (X), c)",
        (0, 9),
    ),
    (V, "icall(a, (b), c)<Esc>0f,di(", "call()", (0, 5)),
    (V, "icall(a, (b), c)<Esc>0f,da(", "call", (0, 3)),
    (V, "icall(a, (b), c)<Esc>0f,dib", "call()", (0, 5)),
    (V, "ix = [1, 2]<Esc>0f1ci[9<Esc>", "x = [9]", (0, 5)),
    (
        V,
        "ifn f() {<S-CR>body<S-CR>}<Esc>kdi{",
        "fn f() {\n}",
        (1, 0),
    ),
    (V, "ifn f() { body }<Esc>0fbdi{", "fn f() {}", (0, 8)),
    (V, "ione two three<Esc>0wdiw", "one  three", (0, 4)),
    (V, "ione two three<Esc>0wdaw", "one three", (0, 4)),
    (V, "ione two three<Esc>0wciwX<Esc>", "one X three", (0, 4)),
    (V, "ifoo.bar baz<Esc>0diW", " baz", (0, 0)),
    // ---- x X y p P
    (V, "iabc<Esc>0x", "bc", (0, 0)),
    (V, "iabcdef<Esc>03x", "def", (0, 0)),
    (V, "iabc<Esc>$X", "ac", (0, 1)),
    (V, "iabc<Esc>0xp", "bac", (0, 1)),
    (V, "iabc<Esc>0xP", "abc", (0, 0)),
    (V, "ihello world<Esc>0ywP", "hello hello world", (0, 5)),
    (V, "ihello world<Esc>0yw$p", "hello worldhello ", (0, 16)),
    (V, "ione<S-CR>two<Esc>ggyyp", "one\none\ntwo", (1, 0)),
    (V, "ione<S-CR>two<Esc>yyP", "one\ntwo\ntwo", (1, 0)),
    (V, "ione<S-CR>two<Esc>ggYjp", "one\ntwo\none", (2, 0)),
    (V, "ione<S-CR>two<Esc>ggdd p", "two\none", (1, 0)),
    (V, "iab<Esc>0yl3p", "aaaab", (0, 3)),
    (V, "ione<S-CR>two<Esc>gg2yyGp", "one\ntwo\none\ntwo", (2, 0)),
    // ---- undo and redo
    (V, "ihello<Esc>0dwu", "hello", (0, 0)),
    (V, "ihello<Esc>0xxuu", "hello", (0, 0)),
    (V, "ihello<Esc>0xxuu<C-r>", "ello", (0, 0)),
    (V, "ione<Esc>otwo<Esc>u", "one", (0, 2)),
    // ---- visual
    (V, "ihello world<Esc>0vlld", "lo world", (0, 0)),
    (V, "ihello world<Esc>0vey$p", "hello worldhello", (0, 15)),
    (
        V,
        "ihello world<Esc>0wvecthere<Esc>",
        "hello there",
        (0, 10),
    ),
    (V, "ione<S-CR>two<S-CR>three<Esc>ggvjd", "wo\nthree", (0, 0)),
    (
        V,
        "ione<S-CR>two<S-CR>three<Esc>ggjVd",
        "one\nthree",
        (1, 0),
    ),
    (
        V,
        "ione<S-CR>two<S-CR>three<Esc>ggVjy2jp",
        "one\ntwo\nthree\none\ntwo",
        (3, 0),
    ),
    (V, "ihello world<Esc>0vllohd", "lo world", (0, 0)),
    (V, "ihello world<Esc>0wviwd", "hello ", (0, 5)),
    (V, "ihello world<Esc>0vl<Esc>x", "hllo world", (0, 1)),
    (V, "iab cd<Esc>0yiwwviwp", "ab ab", (0, 4)),
    // ---- the 500 ms pending-operator timeout (injected clock)
    (V, "ihello world<Esc>0d<wait:400>w", "world", (0, 0)),
    (V, "ihello world<Esc>0d<wait:498>w", "world", (0, 0)),
    (V, "ihello world<Esc>0d<wait:499>w", "hello world", (0, 6)),
    (V, "ihello world<Esc>0d<wait:600>w", "hello world", (0, 6)),
    (V, "ione<S-CR>two<Esc>d<wait:600>d", "one\ntwo", (1, 2)),
    (V, "ione<S-CR>two<Esc>d<wait:300>d", "one", (0, 0)),
    (V, "ione<S-CR>two<Esc>g<wait:600>g", "one\ntwo", (1, 2)),
    (V, "ione<S-CR>two<Esc>g<wait:100>g", "one\ntwo", (0, 0)),
    (V, "iabcdef<Esc>0l3<wait:600>x", "acdef", (0, 1)),
    (V, "iabcdef<Esc>0l3x", "aef", (0, 1)),
    (V, "iabcdef<Esc>0d3<wait:200>l", "def", (0, 0)),
    (V, "ia,b<Esc>0df<wait:600>,", "a,b", (0, 0)),
    (V, "isay \"x\"<Esc>0ci<wait:600>\"", "say \"x\"", (0, 0)),
    // ---- command line that leaves the text alone
    (V, "ihello<Esc>:set<CR>", "hello", (0, 4)),
    (V, "ihello<Esc>:nope<CR>", "hello", (0, 4)),
    (V, "ihello<Esc>:<Esc>x", "hell", (0, 3)),
    (V, "ihello<Esc>:s<BS><BS>x", "hell", (0, 3)),
    (V, "ione<S-CR>two<Esc>:1<CR>", "one\ntwo", (0, 0)),
    // ---- vim insert-mode editing keys
    (V, "ione two<C-w>x<Esc>", "one x", (0, 4)),
    (V, "ione<S-CR>two<C-u>x<Esc>", "one\nx", (1, 0)),
    (V, "iabc<Left><BS>x<Esc>", "axc", (0, 1)),
    (V, "ia\\<CR>b<Esc>", "a\nb", (1, 0)),
    // ---- default mode
    (D, "hello", "hello", (0, 5)),
    (D, "hello<Left><Left>X", "helXlo", (0, 4)),
    (D, "hello<Home>X", "Xhello", (0, 1)),
    (D, "hello<Home><End>X", "helloX", (0, 6)),
    (D, "hello<BS><BS>", "hel", (0, 3)),
    (D, "hello<Home><Del>", "ello", (0, 0)),
    (D, "one<S-CR>two", "one\ntwo", (1, 3)),
    (D, "one<M-CR>two", "one\ntwo", (1, 3)),
    (D, "one<C-j>two", "one\ntwo", (1, 3)),
    (D, "one\\<CR>two", "one\ntwo", (1, 3)),
    (D, "one<S-CR>two<Up>", "one\ntwo", (0, 3)),
    (D, "one<S-CR>two<Up><Down>", "one\ntwo", (1, 3)),
    (D, "one<S-CR>two<Home><BS>", "onetwo", (0, 3)),
    (D, "one two<C-Left>X", "one Xtwo", (0, 5)),
    (D, "one two<Home><C-Right>X", "oneX two", (0, 4)),
    (D, "one<S-CR>two<Up><Right>", "one\ntwo", (1, 0)),
    (D, "héllo 日本<Left>x", "héllo 日x本", (0, 8)),
    // ---- emacs mode
    (E, "hello<C-a>X", "Xhello", (0, 1)),
    (E, "hello<C-a><C-e>X", "helloX", (0, 6)),
    (E, "hello world<C-a><C-f><C-f><C-k>", "he", (0, 2)),
    (E, "hello world<C-u>", "", (0, 0)),
    (E, "hello world<C-b><C-b><C-u>", "ld", (0, 0)),
    (E, "hello big world<C-w>", "hello big ", (0, 10)),
    (E, "hello big world<C-w><C-w>", "hello ", (0, 6)),
    (
        E,
        "hello big world<C-w><C-w><C-y>",
        "hello big world",
        (0, 15),
    ),
    (
        E,
        "hello world<C-a><C-k><C-y><C-y>",
        "hello worldhello world",
        (0, 22),
    ),
    (E, "one two<M-b>X", "one Xtwo", (0, 5)),
    (E, "one two<C-a><M-f>X", "oneX two", (0, 4)),
    (E, "one-two three<C-a><M-f><M-f>X", "one-twoX three", (0, 8)),
    (E, "abc<C-a><C-d>", "bc", (0, 0)),
    (E, "abc<C-h>", "ab", (0, 2)),
    (E, "one<S-CR>two<C-a><C-h>", "onetwo", (0, 3)),
    (E, "one<S-CR>two<C-p><C-e><C-k>", "onetwo", (0, 3)),
    (E, "one two<C-w>x<C-w><M-y>", "one ", (0, 4)),
    (
        E,
        "one two three<M-BS><M-BS><C-y>",
        "one two three",
        (0, 13),
    ),
    (E, "one two<C-a><M-d>", " two", (0, 0)),
    (E, "hello<C-_>", "", (0, 0)),
];

#[test]
fn key_table() {
    assert!(CASES.len() >= 60, "the table covers at least 60 cases");
    let mut failures = Vec::new();
    for (mode, keys, text, cursor) in CASES {
        let r = run(*mode, keys);
        let got = (r.editor.text(), r.editor.cursor());
        if got != (text.to_string(), *cursor) {
            failures.push(format!(
                "{mode:?} {keys:?}: got {:?} at {:?}, want {:?} at {:?}",
                got.0, got.1, text, cursor
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases failed:\n{}",
        failures.len(),
        CASES.len(),
        failures.join("\n")
    );
}

#[test]
fn enter_submits_and_clears() {
    for mode in InputMode::ALL {
        let r = run(mode, if mode == V { "ihello<CR>" } else { "hello<CR>" });
        assert_eq!(r.actions, [Action::Submit("hello".into())], "{mode:?}");
        assert_eq!(r.editor.text(), "");
        assert_eq!(r.editor.history().entries(), ["hello"]);
    }
    let r = run(D, "<CR>   <CR>");
    assert!(r.actions.is_empty(), "blank input is not sent");
    let r = run(V, "ihello<Esc>:w<CR>");
    assert_eq!(r.actions, [Action::Submit("hello".into())]);
    assert_eq!(
        r.editor.mode_indicator(),
        "-- INSERT --",
        "back to Insert after sending"
    );
}

#[test]
fn quit_cancel_complete() {
    assert_eq!(run(V, ":q<CR>").actions, [Action::Quit]);
    assert_eq!(run(V, ":q!<CR>").actions, [Action::Quit]);
    assert_eq!(run(D, "<C-d>").actions, [Action::Quit]);
    assert_eq!(
        run(E, "x<C-d>").actions,
        Vec::<Action>::new(),
        "C-d on text deletes"
    );
    let r = run(D, "draft<C-c>");
    assert_eq!(
        (r.actions.as_slice(), r.editor.text()),
        (&[Action::Cancel][..], String::new())
    );
    let r = run(V, "idraft<C-c>");
    assert_eq!(r.actions, [Action::Cancel]);
    assert_eq!(
        (r.editor.text(), r.editor.mode_indicator()),
        ("draft".into(), "-- NORMAL --".into())
    );
    assert_eq!(run(D, "/he<Tab>").actions, [Action::Complete]);
    assert_eq!(run(V, "i/he<Tab>").actions, [Action::Complete]);
}

#[test]
fn ex_set_lists_shows_and_changes_the_mode() {
    let r = run(V, ":set<CR>");
    match r.actions.as_slice() {
        [Action::Message(m)] => assert!(m.contains("mode=vim"), "{m}"),
        other => panic!("{other:?}"),
    }
    let r = run(V, ":set mode?<CR>");
    assert_eq!(r.actions, [Action::Message("  mode=vim".into())]);
    let r = run(V, "ikeep<Esc>:set mode=emacs<CR><C-a>X");
    assert_eq!(r.actions, [Action::ModeChanged(E)]);
    assert_eq!((r.editor.mode(), r.editor.text()), (E, "Xkeep".into()));
    let r = run(V, ":set mode=nano<CR>");
    assert!(matches!(r.actions.as_slice(), [Action::Message(m)] if m.starts_with("E474")));
    let r = run(V, ":set colour=red<CR>");
    assert!(matches!(r.actions.as_slice(), [Action::Message(m)] if m.starts_with("E518")));
    let r = run(V, ":frobnicate<CR>");
    assert_eq!(
        r.actions,
        [Action::Message(
            "E492: Not an editor command: frobnicate".into()
        )]
    );
}

#[test]
fn mode_indicator_selection_and_pending_keys() {
    let mut e = Editor::new(V);
    let t = Instant::now();
    assert_eq!(e.mode_indicator(), "-- INSERT --");
    for c in "one two".chars() {
        e.handle(Key::char(c), t);
    }
    e.handle(Key::new(KeyCode::Esc), t);
    assert_eq!(e.mode_indicator(), "-- NORMAL --");
    e.handle(Key::char('0'), t);
    e.handle(Key::char('v'), t);
    e.handle(Key::char('e'), t);
    assert_eq!(e.mode_indicator(), "-- VISUAL --");
    let sel = e.selection().expect("a selection in visual mode");
    assert_eq!((sel.start, sel.end, sel.linewise), ((0, 0), (0, 3), false));
    e.handle(Key::char('V'), t);
    assert_eq!(e.mode_indicator(), "-- VISUAL LINE --");
    assert!(e.selection().is_some_and(|s| s.linewise));
    e.handle(Key::new(KeyCode::Esc), t);
    assert_eq!(e.selection(), None);
    e.handle(Key::char('2'), t);
    e.handle(Key::char('d'), t);
    assert_eq!(e.pending_keys(), "2d");
    assert!(!e.tick(t + Duration::from_millis(100)));
    assert_eq!(e.pending_keys(), "2d");
    assert!(
        e.tick(t + Duration::from_millis(500)),
        "the pending operator expires"
    );
    assert_eq!(e.pending_keys(), "");
    e.handle(Key::char(':'), t);
    e.handle(Key::char('w'), t);
    assert_eq!(e.mode_indicator(), ":w");
    assert_eq!(Editor::new(E).mode_indicator(), "");
}

#[test]
fn history_at_the_ends_of_the_buffer() {
    let mut h = History::new();
    h.push("first");
    h.push("second\nline");
    // Up past the top line recalls, down past the bottom comes back to the draft.
    let r = run_with(Editor::with_history(D, h.clone()), "draft<Up>");
    assert_eq!(r.editor.text(), "second\nline");
    let r = run_with(Editor::with_history(D, h.clone()), "draft<Up><Up>");
    assert_eq!(
        r.editor.text(),
        "second\nline",
        "Up moves within a recalled multi-line entry first"
    );
    assert_eq!(r.editor.cursor(), (0, 4));
    let r = run_with(Editor::with_history(D, h.clone()), "draft<Up><Up><Up>");
    assert_eq!(r.editor.text(), "first");
    let r = run_with(
        Editor::with_history(D, h.clone()),
        "draft<Up><Up><Up><Up><Down><Down><Down><Down>",
    );
    assert_eq!(r.editor.text(), "draft");
    let r = run_with(Editor::with_history(E, h.clone()), "x<C-p><C-p><C-p>");
    assert_eq!(r.editor.text(), "first");
    let r = run_with(Editor::with_history(E, h.clone()), "x<C-p><C-n><C-n>");
    assert_eq!(r.editor.text(), "x");
    let r = run_with(Editor::with_history(V, h.clone()), "k");
    assert_eq!(
        r.editor.text(),
        "second\nline",
        "k on the first line recalls"
    );
    let r = run_with(Editor::with_history(V, h.clone()), "kkkk");
    assert_eq!(r.editor.text(), "first");
    let r = run_with(Editor::with_history(V, h), "kkkjjj");
    assert_eq!(r.editor.text(), "");
    let r = run(D, "one<CR>two<CR><Up><Up><CR>");
    assert_eq!(
        r.actions,
        [
            Action::Submit("one".into()),
            Action::Submit("two".into()),
            Action::Submit("one".into())
        ]
    );
}

#[test]
fn pasted_text_is_cleaned() {
    let mut e = Editor::new(D);
    e.insert_str("a\r\nb\rc\x1b[31m\td\0");
    assert_eq!(e.text(), "a\nb\nc[31m\td");
    e.set_text("/help");
    assert_eq!((e.text(), e.cursor()), ("/help".into(), (0, 5)));
    assert_eq!(e.cursor_display_col(), 5);
    e.set_text("日本");
    assert_eq!(e.cursor_display_col(), 4);
}

#[test]
fn input_modes_parse() {
    assert_eq!("vim".parse::<InputMode>(), Ok(V));
    assert_eq!(" Emacs ".parse::<InputMode>(), Ok(E));
    assert_eq!("default".parse::<InputMode>(), Ok(D));
    let err = "nano".parse::<InputMode>().expect_err("nano is not a mode");
    assert!(err
        .to_string()
        .contains("\"default\", \"emacs\" or \"vim\""));
}

/// A case's keys in vim's `"\<…>"` string notation, or `None` for cases vim cannot judge:
/// `<wait:N>` (vim's operators do not time out), `:` commands and `<CR>` (they submit, quit or
/// message here), and the keys of other modes.
fn vim_notation(keys: &str) -> Option<String> {
    if keys.contains("<wait:") || keys.contains(':') || keys.contains("<CR>") {
        return None;
    }
    let mut out = String::new();
    let mut rest = keys;
    while let Some(c) = rest.chars().next() {
        if c == '<' {
            let end = rest.find('>')?;
            let name = &rest[1..end];
            rest = &rest[end + 1..];
            match name {
                // In Insert mode both are a line break.
                "S-CR" => out.push_str("\\<CR>"),
                "lt" => out.push('<'),
                _ => {
                    out.push_str("\\<");
                    out.push_str(name);
                    out.push('>');
                }
            }
        } else {
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                _ => out.push(c),
            }
            rest = &rest[c.len_utf8()..];
        }
    }
    Some(out)
}

/// The vim-mode table is checked against the real vim (`scripts/setup.sh` installs it): each
/// case is typed into a fresh buffer in one headless vim, and the buffer and cursor it ends with
/// must be the table's.
#[test]
fn vim_cases_agree_with_real_vim() {
    let vim = std::process::Command::new("vim").arg("--version").output();
    assert!(
        vim.is_ok_and(|o| o.status.success()),
        "vim is not installed: run ./scripts/setup.sh (the vim-mode table is checked against it)"
    );
    let cases: Vec<(&str, String, &str, (usize, usize))> = CASES
        .iter()
        .filter(|(mode, ..)| *mode == V)
        .filter_map(|(_, keys, text, cursor)| Some((*keys, vim_notation(keys)?, *text, *cursor)))
        .collect();
    assert!(
        cases.len() >= 100,
        "most vim cases are checkable ({})",
        cases.len()
    );
    let dir = tempfile::tempdir().expect("a temporary directory");
    let out = dir.path().join("out.jsonl");
    let mut script = String::from(
        "set nocompatible noesckeys backspace=indent,eol,start\nlet s:out = []\nlet s:cases = [\n",
    );
    for (_, notation, ..) in &cases {
        script.push_str(&format!("\\ \"{notation}\",\n"));
    }
    script.push_str(&format!(
        "\\ ]\nfor s:k in s:cases\n  enew!\n  call setreg('\"', '')\n  call feedkeys(\"\\<Esc>\" . s:k, 'tx')\n  \
         call add(s:out, json_encode([getline(1, '$'), line('.') - 1, charcol('.') - 1]))\nendfor\n\
         call writefile(s:out, '{}')\nqa!\n",
        out.display()
    ));
    let script_path = dir.path().join("cases.vim");
    std::fs::write(&script_path, script).expect("script written");
    let status = std::process::Command::new("vim")
        .args(["-u", "NONE", "-N", "-i", "NONE", "-n", "--not-a-term", "-S"])
        .arg(&script_path)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .expect("vim runs");
    assert!(status.success(), "vim exited with {status}");
    let results = std::fs::read_to_string(&out).expect("vim wrote its results");
    let results: Vec<&str> = results.lines().collect();
    assert_eq!(results.len(), cases.len(), "one result per case");
    let mut differ = Vec::new();
    for ((keys, _, text, cursor), line) in cases.iter().zip(results) {
        let (lines, l, c): (Vec<String>, usize, usize) =
            serde_json::from_str(line).expect("vim's JSON result");
        let got = (lines.join("\n"), (l, c));
        if got != (text.to_string(), *cursor) {
            differ.push(format!("{keys:?}: vim {got:?}, table {:?}", (text, cursor)));
        }
    }
    assert!(
        differ.is_empty(),
        "the table differs from vim:\n{}",
        differ.join("\n")
    );
}

#[test]
fn huge_counts_do_not_stall() {
    // 99999 × 99999 words, and pasting a register 99999 times, finish at once and stay bounded.
    let r = run(V, "ione two three<Esc>099999d99999w");
    assert_eq!(r.editor.text(), "");
    let r = run(V, "iabcdefghij<Esc>0y$99999p");
    assert!(r.editor.text().chars().count() <= (1 << 20) + 10);
    let r = run(V, "ione two<Esc>99999b99999e99999x");
    assert!(r.editor.text().len() < 10);
}
