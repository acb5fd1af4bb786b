//! Splitting a shell command line into the simple commands a permission rule judges one by one.
//!
//! Deliberately a lexer, not a shell parser: separators are `;` `&&` `||` `|` `&` and newline
//! outside quotes and not escaped. Splitting too eagerly (say, at the `&` of `2>&1`) only makes a
//! call need more allow rules; it can never let an unlisted command through.

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
}
