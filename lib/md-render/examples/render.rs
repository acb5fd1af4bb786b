//! Renders a Markdown file (or stdin) to this terminal with ANSI escapes, or in the compact
//! golden form: `cargo run -p hanzo-md-render --example render -- [FILE] [--width N]
//! [--compact] [--no-color] [--chunk N]`. A way to look at the renderer's output; the UI does
//! the real mapping.

use std::io::{Read, Write};

use hanzo_md_render::{compact, Color, Line, MarkdownStream, RenderOptions};

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let mut file = None;
    let mut opts = RenderOptions::new(Some(80));
    let mut compact_form = false;
    let mut chunk = usize::MAX;
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--width" => opts.width = args.next().and_then(|w| w.parse().ok()),
            "--compact" => compact_form = true,
            "--no-color" => opts.color = false,
            "--chunk" => chunk = args.next().and_then(|w| w.parse().ok()).unwrap_or(64),
            _ => file = Some(arg),
        }
    }
    let mut text = String::new();
    match file {
        Some(path) => text = std::fs::read_to_string(path)?,
        None => {
            std::io::stdin().read_to_string(&mut text)?;
        }
    }
    let mut stream = MarkdownStream::new(opts);
    let mut lines = Vec::new();
    let bytes = text.as_bytes();
    for piece in bytes.chunks(chunk.max(1)) {
        lines.extend(stream.push_bytes(piece));
    }
    lines.extend(stream.finish());
    let mut out = std::io::stdout().lock();
    if compact_form {
        out.write_all(compact(&lines).as_bytes())?;
    } else {
        for line in &lines {
            writeln!(out, "{}", ansi(line))?;
        }
    }
    Ok(())
}

fn ansi(line: &Line) -> String {
    let mut s = String::new();
    for span in &line.spans {
        let st = span.style;
        let mut codes: Vec<String> = Vec::new();
        for (on, code) in [
            (st.bold, "1"),
            (st.dim, "2"),
            (st.italic, "3"),
            (st.underline, "4"),
            (st.reversed, "7"),
            (st.strikethrough, "9"),
        ] {
            if on {
                codes.push(code.to_owned());
            }
        }
        if let Some(fg) = st.fg {
            codes.push(match fg {
                Color::Rgb(r, g, b) => format!("38;2;{r};{g};{b}"),
                named => {
                    let all = [
                        Color::Black,
                        Color::Red,
                        Color::Green,
                        Color::Yellow,
                        Color::Blue,
                        Color::Magenta,
                        Color::Cyan,
                        Color::White,
                        Color::BrightBlack,
                        Color::BrightRed,
                        Color::BrightGreen,
                        Color::BrightYellow,
                        Color::BrightBlue,
                        Color::BrightMagenta,
                        Color::BrightCyan,
                        Color::BrightWhite,
                    ];
                    let i = all.iter().position(|c| *c == named).unwrap_or(7);
                    if i < 8 {
                        format!("{}", 30 + i)
                    } else {
                        format!("{}", 90 + i - 8)
                    }
                }
            });
        }
        if codes.is_empty() {
            s.push_str(&span.text);
        } else {
            s.push_str(&format!("\x1b[{}m{}\x1b[0m", codes.join(";"), span.text));
        }
    }
    s
}
