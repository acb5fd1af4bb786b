//! Syntax highlighting of code blocks with syntect (pure-Rust `fancy-regex` engine). The syntax
//! and theme sets are loaded once, on the first highlighted block.

use std::sync::OnceLock;

use syntect::easy::HighlightLines;
use syntect::highlighting::{FontStyle, ThemeSet};
use syntect::parsing::{SyntaxReference, SyntaxSet};

use crate::style::{Color, Palette, Span, Style};

const FALLBACK_THEME: &str = "base16-ocean.dark";

fn syntaxes() -> &'static SyntaxSet {
    static SET: OnceLock<SyntaxSet> = OnceLock::new();
    SET.get_or_init(SyntaxSet::load_defaults_newlines)
}

fn themes() -> &'static ThemeSet {
    static SET: OnceLock<ThemeSet> = OnceLock::new();
    SET.get_or_init(ThemeSet::load_defaults)
}

pub(crate) fn preload() {
    let _ = (syntaxes(), themes());
}

/// Languages that syntect's default set lacks or names differently, mapped to the closest one
/// it has.
fn alias(token: &str) -> &str {
    match token {
        "ts" | "typescript" | "tsx" | "jsx" | "mjs" | "cjs" | "javascript" | "node" => "js",
        "shell" | "zsh" | "console" | "shellsession" | "sh" | "ksh" => "bash",
        "jsonc" | "json5" => "json",
        "yml" => "yaml",
        "golang" => "go",
        "py3" | "python3" => "py",
        "c++" | "hpp" | "cxx" => "cpp",
        "rs" => "rust",
        "text" | "txt" | "plain" | "plaintext" => "txt",
        other => other,
    }
}

/// The syntax for a fence's info string (`rust`, `rust,ignore`, `{.python}`), if syntect knows
/// it.
fn syntax_for(info: &str) -> Option<&'static SyntaxReference> {
    let token = info
        .split(|c: char| c.is_whitespace() || c == ',')
        .next()
        .unwrap_or("")
        .trim_start_matches(['{', '.'])
        .trim_end_matches('}')
        .to_ascii_lowercase();
    if token.is_empty() {
        return None;
    }
    let set = syntaxes();
    set.find_syntax_by_token(alias(&token))
        .or_else(|| set.find_syntax_by_token(&token))
}

/// Highlighted spans for each line (lines given without their `\n`), or `None` when the
/// language is unknown or syntect fails, so the caller shows the code plain.
pub(crate) fn highlight(
    lines: &[String],
    info: &str,
    theme_name: &str,
    palette: Palette,
) -> Option<Vec<Vec<Span>>> {
    let syntax = syntax_for(info)?;
    let set = themes();
    let theme = set
        .themes
        .get(theme_name)
        .or_else(|| set.themes.get(FALLBACK_THEME))?;
    let mut highlighter = HighlightLines::new(syntax, theme);
    let mut out = Vec::with_capacity(lines.len());
    let mut buf = String::new();
    for line in lines {
        buf.clear();
        buf.push_str(line);
        buf.push('\n');
        let regions = highlighter.highlight_line(&buf, syntaxes()).ok()?;
        let mut spans: Vec<Span> = Vec::with_capacity(regions.len());
        for (style, text) in regions {
            let text = text.strip_suffix('\n').unwrap_or(text);
            if text.is_empty() {
                continue;
            }
            let ours = convert(style, palette);
            match spans.last_mut() {
                Some(last) if last.style == ours => last.text.push_str(text),
                _ => spans.push(Span::new(text, ours)),
            }
        }
        out.push(spans);
    }
    Some(out)
}

fn convert(style: syntect::highlighting::Style, palette: Palette) -> Style {
    let c = style.foreground;
    let fg = match palette {
        Palette::TrueColor => Color::Rgb(c.r, c.g, c.b),
        Palette::Ansi16 => Color::nearest_named(c.r, c.g, c.b),
    };
    let mut ours = Style::new().fg(fg);
    ours.bold = style.font_style.contains(FontStyle::BOLD);
    ours.italic = style.font_style.contains(FontStyle::ITALIC);
    ours.underline = style.font_style.contains(FontStyle::UNDERLINE);
    ours
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_languages_and_aliases_resolve() {
        for info in [
            "rust",
            "rs",
            "Rust",
            "python",
            "py",
            "ts",
            "sh",
            "json",
            "diff",
            "rust,ignore",
            "{.python}",
        ] {
            assert!(syntax_for(info).is_some(), "{info}");
        }
        assert!(syntax_for("no-such-language").is_none());
        assert!(syntax_for("").is_none());
    }

    #[test]
    fn highlighting_keeps_the_text() {
        let lines = vec![
            "fn main() {".to_owned(),
            "    let x = \"s\";".to_owned(),
            "}".to_owned(),
        ];
        let spans = highlight(&lines, "rust", "base16-ocean.dark", Palette::TrueColor)
            .expect("rust is known");
        let text: Vec<String> = spans
            .iter()
            .map(|l| l.iter().map(|s| s.text.as_str()).collect())
            .collect();
        assert_eq!(text, lines);
        assert!(spans[0]
            .iter()
            .any(|s| matches!(s.style.fg, Some(Color::Rgb(..)))));
        let ansi =
            highlight(&lines, "rust", "nope", Palette::Ansi16).expect("falls back to a theme");
        assert!(ansi
            .iter()
            .flatten()
            .all(|s| !matches!(s.style.fg, Some(Color::Rgb(..)))));
    }
}
