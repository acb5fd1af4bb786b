//! Paths and `file:` URIs, and positions: the public API counts 1-based lines and columns in
//! characters (Unicode scalar values); a server counts 0-based lines and columns in the position
//! encoding it chose (UTF-16 code units unless it picked UTF-8 or UTF-32 from our offer).

use percent_encoding::{percent_decode_str, utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

/// Every byte is escaped except the unreserved characters of RFC 3986 and `/`.
const PATH_SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~')
    .remove(b'/');

/// `file://` URI of an absolute path.
pub fn path_to_uri(path: &Path) -> String {
    let bytes = path.as_os_str().as_bytes();
    // Percent-encoding works on `str`; a non-UTF-8 path is encoded byte by byte.
    let encoded: String = match std::str::from_utf8(bytes) {
        Ok(s) => utf8_percent_encode(s, PATH_SEGMENT).collect(),
        Err(_) => percent_encoding::percent_encode(bytes, PATH_SEGMENT).collect(),
    };
    format!("file://{encoded}")
}

/// The path of a `file:` URI (empty or `localhost` authority), `None` for anything else.
pub fn uri_to_path(uri: &str) -> Option<PathBuf> {
    let rest = strip_prefix_ignore_case(uri, "file://")?;
    let slash = rest.find('/')?;
    let (authority, path) = rest.split_at(slash);
    if !(authority.is_empty() || authority.eq_ignore_ascii_case("localhost")) {
        return None;
    }
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let bytes: Vec<u8> = percent_decode_str(path).collect();
    if bytes.contains(&0) {
        return None;
    }
    Some(PathBuf::from(OsString::from_vec(bytes)))
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// How a server counts columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Encoding {
    /// Columns count UTF-8 bytes.
    Utf8,
    /// Columns count UTF-16 code units (the protocol's default).
    #[default]
    Utf16,
    /// Columns count Unicode scalar values.
    Utf32,
}

impl Encoding {
    /// The encoding a server announced (`positionEncoding`); UTF-16 when absent or unknown,
    /// as the specification says.
    pub fn from_announced(name: Option<&str>) -> Self {
        match name {
            Some("utf-8") => Encoding::Utf8,
            Some("utf-32") => Encoding::Utf32,
            _ => Encoding::Utf16,
        }
    }

    #[allow(
        clippy::cast_possible_truncation,
        reason = "a char is at most 4 bytes, 2 UTF-16 units"
    )]
    fn width(self, c: char) -> u32 {
        match self {
            Encoding::Utf8 => c.len_utf8() as u32,
            Encoding::Utf16 => c.len_utf16() as u32,
            Encoding::Utf32 => 1,
        }
    }
}

/// Line `n` (0-based) of `text`, without its terminator; lines end at `\n`, `\r\n` or `\r`.
pub fn line(text: &str, n: u32) -> Option<&str> {
    let mut rest = text;
    for _ in 0..n {
        let end = rest.find(['\n', '\r'])?;
        let skip = if rest[end..].starts_with("\r\n") {
            2
        } else {
            1
        };
        rest = &rest[end + skip..];
    }
    let end = rest.find(['\n', '\r']).unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The server's column for a 0-based character column on `line_text`. Past the end of the line
/// each missing character counts one unit.
pub fn to_server_column(line_text: &str, chars: u32, enc: Encoding) -> u32 {
    let mut units = 0u32;
    let mut seen = 0u32;
    for c in line_text.chars() {
        if seen == chars {
            return units;
        }
        units = units.saturating_add(enc.width(c));
        seen += 1;
    }
    units.saturating_add(chars - seen)
}

/// The 0-based character column for the server's column on `line_text`. A column inside a
/// character (half a surrogate pair, the middle of a UTF-8 sequence) is that character's.
pub fn from_server_column(line_text: &str, units: u32, enc: Encoding) -> u32 {
    let mut used = 0u32;
    let mut chars = 0u32;
    for c in line_text.chars() {
        let w = enc.width(c);
        if used.saturating_add(w) > units {
            return chars;
        }
        used += w;
        chars += 1;
    }
    chars.saturating_add(units - used)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn uris_of_paths_escape_what_a_uri_cannot_hold() {
        assert_eq!(
            path_to_uri(Path::new("/tmp/a b/é#?.py")),
            "file:///tmp/a%20b/%C3%A9%23%3F.py"
        );
        assert_eq!(
            uri_to_path("file:///tmp/a%20b/%C3%A9%23%3F.py"),
            Some(PathBuf::from("/tmp/a b/é#?.py"))
        );
        assert_eq!(uri_to_path("FILE://localhost/x"), Some(PathBuf::from("/x")));
        assert_eq!(uri_to_path("file://host/x"), None);
        assert_eq!(uri_to_path("untitled:Untitled-1"), None);
        assert_eq!(uri_to_path("file:///a%00b"), None);
        assert_eq!(uri_to_path("file:///c%3A/x"), Some(PathBuf::from("/c:/x")));
    }

    #[test]
    fn lines_end_at_every_terminator() {
        let t = "a\nb\r\nc\rd";
        assert_eq!(line(t, 0), Some("a"));
        assert_eq!(line(t, 1), Some("b"));
        assert_eq!(line(t, 2), Some("c"));
        assert_eq!(line(t, 3), Some("d"));
        assert_eq!(line(t, 4), None);
        assert_eq!(line("x\n", 1), Some(""));
    }

    #[test]
    fn columns_convert_per_encoding() {
        let l = "a😀é=1";
        // chars: a(0) 😀(1) é(2) =(3)
        assert_eq!(to_server_column(l, 3, Encoding::Utf16), 1 + 2 + 1);
        assert_eq!(to_server_column(l, 3, Encoding::Utf8), 1 + 4 + 2);
        assert_eq!(to_server_column(l, 3, Encoding::Utf32), 3);
        assert_eq!(from_server_column(l, 4, Encoding::Utf16), 3);
        assert_eq!(from_server_column(l, 7, Encoding::Utf8), 3);
        // Inside the surrogate pair: the emoji's column.
        assert_eq!(from_server_column(l, 2, Encoding::Utf16), 1);
        // Past the end.
        assert_eq!(to_server_column("ab", 5, Encoding::Utf16), 5);
        assert_eq!(from_server_column("ab", 5, Encoding::Utf16), 5);
    }

    proptest! {
        #[test]
        fn paths_round_trip_through_uris(segs in proptest::collection::vec("[^/\u{0}]{1,12}", 1..5)) {
            let path = PathBuf::from(format!("/{}", segs.join("/")));
            let uri = path_to_uri(&path);
            prop_assert!(uri.parse::<lsp_types::Uri>().is_ok(), "{uri}");
            prop_assert_eq!(uri_to_path(&uri), Some(path));
        }

        #[test]
        fn columns_round_trip(l in "\\PC{0,20}", col in 0u32..25) {
            for enc in [Encoding::Utf8, Encoding::Utf16, Encoding::Utf32] {
                let units = to_server_column(&l, col, enc);
                prop_assert_eq!(from_server_column(&l, units, enc), col);
            }
        }
    }
}
