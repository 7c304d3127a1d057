//! Values written into SQL text, for the messages that carry several statements (PostgreSQL's
//! simple query, which has no parameters) and so save the fence its round trips.

use fence_core::{Domain, FenceError, FencingToken};

use crate::error::corrupt;

/// `text` as an SQL string literal: an escape string (`E'…'`), so it reads the same whatever
/// `standard_conforming_strings` is. A NUL, which would end the message's text early, is
/// refused (domains and op ids have no control characters: this is the last line of defence).
pub(crate) fn text(domain: &Domain, text: &str) -> Result<String, FenceError> {
    if text.contains('\0') {
        return Err(corrupt(domain, "a NUL in a value sent as SQL text"));
    }
    let mut literal = String::with_capacity(text.len() + 3);
    literal.push_str("E'");
    for c in text.chars() {
        match c {
            '\'' => literal.push_str("''"),
            '\\' => literal.push_str("\\\\"),
            c => literal.push(c),
        }
    }
    literal.push('\'');
    Ok(literal)
}

/// A token as an exact `numeric` (PostgreSQL has no unsigned 64-bit type), or `NULL`.
pub(crate) fn token(token: Option<FencingToken>) -> String {
    match token {
        Some(token) => format!("{token}::numeric"),
        None => "NULL::numeric".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_and_backslashes_are_escaped_and_a_nul_is_refused() {
        let d = Domain::new("d").unwrap_or_else(|e| unreachable!("{e}"));
        let literal = |value| text(&d, value).unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(literal("it's a \\ test"), r"E'it''s a \\ test'");
        assert_eq!(literal(""), "E''");
        assert!(text(&d, "a\0b").is_err());
        assert_eq!(
            token(FencingToken::new(u64::MAX).ok()),
            "18446744073709551615::numeric"
        );
        assert_eq!(token(None), "NULL::numeric");
    }
}
