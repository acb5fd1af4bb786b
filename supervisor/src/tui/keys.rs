//! crossterm key events → `hanzo_line_edit::Key`, as the line-edit crate's docs describe.

use crossterm::event::{KeyCode as CtKey, KeyEvent, KeyEventKind, KeyModifiers};
use hanzo_line_edit::{Key, KeyCode};

/// The line-edit key for a crossterm key event; `None` for releases and keys it has no use for.
pub fn to_key(ev: &KeyEvent) -> Option<Key> {
    if ev.kind == KeyEventKind::Release {
        return None;
    }
    let code = match ev.code {
        CtKey::Char(c) => KeyCode::Char(c),
        CtKey::Enter => KeyCode::Enter,
        CtKey::Esc => KeyCode::Esc,
        CtKey::Backspace => KeyCode::Backspace,
        CtKey::Delete => KeyCode::Delete,
        CtKey::Left => KeyCode::Left,
        CtKey::Right => KeyCode::Right,
        CtKey::Up => KeyCode::Up,
        CtKey::Down => KeyCode::Down,
        CtKey::Home => KeyCode::Home,
        CtKey::End => KeyCode::End,
        CtKey::PageUp => KeyCode::PageUp,
        CtKey::PageDown => KeyCode::PageDown,
        CtKey::Tab => KeyCode::Tab,
        CtKey::BackTab => KeyCode::BackTab,
        CtKey::Insert => KeyCode::Insert,
        _ => return None,
    };
    Some(Key {
        code,
        ctrl: ev.modifiers.contains(KeyModifiers::CONTROL),
        alt: ev.modifiers.contains(KeyModifiers::ALT),
        shift: ev.modifiers.contains(KeyModifiers::SHIFT),
    })
}

/// Whether the event is C-`c` (letter case ignored).
pub fn is_ctrl(ev: &KeyEvent, c: char) -> bool {
    ev.kind != KeyEventKind::Release
        && ev.modifiers.contains(KeyModifiers::CONTROL)
        && matches!(ev.code, CtKey::Char(k) if k.eq_ignore_ascii_case(&c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_map_with_their_modifiers_and_releases_are_dropped() {
        let ev = KeyEvent::new(CtKey::Char('a'), KeyModifiers::CONTROL);
        assert_eq!(to_key(&ev), Some(Key::ctrl('a')));
        assert!(is_ctrl(&ev, 'A'));
        let enter = KeyEvent::new(CtKey::Enter, KeyModifiers::SHIFT);
        assert_eq!(to_key(&enter), Some(Key::new(KeyCode::Enter).with_shift()));
        let mut release = KeyEvent::new(CtKey::Char('x'), KeyModifiers::NONE);
        release.kind = KeyEventKind::Release;
        assert_eq!(to_key(&release), None);
        assert_eq!(
            to_key(&KeyEvent::new(CtKey::F(5), KeyModifiers::NONE)),
            None
        );
    }
}
