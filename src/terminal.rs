//! Text from elsewhere made safe for a terminal line.
//!
//! Holders' commands and hosts, values and replies read from a store, and errors quoting
//! them come from other users and servers. A newline in one would split a line that
//! scripts read as one; an escape sequence would act on the operator's terminal. Every
//! human line dlock writes passes such text through [`escape`]: errors, warnings, `-v`
//! events, the waiting line and the `status` table. JSON output is left to serde, whose
//! escaping is already exact.
//!
//! [`escape`] only rewrites characters that act on a terminal, never a backslash, so it
//! may run twice on the same text (where a piece enters a line and again where the whole
//! line is printed) and still show each character once.

use std::borrow::Cow;
use std::fmt::Write;

/// `text` with every character that acts on a terminal shown escaped: `\n`, `\r`, `\t`,
/// `\0`, `\e` (ESC), `\x7f` and other C0 controls, `\u{85}` and other C1 controls, and
/// the Unicode line and paragraph separators and bidirectional controls (which reorder
/// what a terminal shows) as `\u{2028}`. Everything else, backslashes included, is kept.
pub fn escape(text: &str) -> Cow<'_, str> {
    if !text.chars().any(acts_on_terminal) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\0' => out.push_str("\\0"),
            '\x1b' => out.push_str("\\e"),
            c if (c as u32) < 0x80 && acts_on_terminal(c) => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if acts_on_terminal(c) => {
                let _ = write!(out, "\\u{{{:x}}}", c as u32);
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// C0 and C1 controls, DEL, and the invisible characters that move or reorder text:
/// line and paragraph separators, bidirectional marks, embeddings, overrides, isolates.
fn acts_on_terminal(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}' | '\u{2029}' | '\u{200e}' | '\u{200f}' | '\u{061c}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// Writes `dlock: MESSAGE` to stderr as one line, `MESSAGE` escaped (see [`escape`]).
/// A closed stderr is no reason to fail.
pub fn say(message: std::fmt::Arguments<'_>) {
    use std::io::Write as _;
    let line = message.to_string();
    let _ = writeln!(std::io::stderr().lock(), "dlock: {}", escape(&line));
}

/// `eprintln!` for dlock's own lines: `say!("warning: {e}")` prints `dlock: warning: …`
/// on one line, with anything from elsewhere in it escaped.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::terminal::say(format_args!($($arg)*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn controls_are_shown_escaped_and_nothing_else_changes() {
        assert!(matches!(escape("plain ünïcode \\n"), Cow::Borrowed(_)));
        assert_eq!(
            escape("sleep 20\n# second \x1b[31mred\r\t\0"),
            "sleep 20\\n# second \\e[31mred\\r\\t\\0"
        );
        assert_eq!(escape("a\x07b\x7f"), "a\\x07b\\x7f");
        assert_eq!(escape("c1 \u{85} \u{9b}"), "c1 \\u{85} \\u{9b}");
        assert_eq!(
            escape("ls\u{2028}x\u{2029}\u{202e}txt.exe\u{2066}"),
            "ls\\u{2028}x\\u{2029}\\u{202e}txt.exe\\u{2066}"
        );
    }

    #[test]
    fn escaping_twice_is_escaping_once() {
        let raw = "d\0\0\0 \x1b]0;title\x07 \u{2028}\n";
        let once = escape(raw).into_owned();
        assert_eq!(escape(&once), once);
        assert!(!once.chars().any(acts_on_terminal), "{once}");
    }
}
