//! Bounded echo of outside input: a value quoted back in an error, a log line or a warning is
//! cut at [`ECHO_LIMIT`] characters and says how long it really was, so a megabyte sent in a
//! request cannot become a megabyte in the log.
//!
//! In: outside text: a value, or a library's message that may quote one. Out: the text cut at
//! [`ECHO_LIMIT`] characters (a whole message at 2,000), then `…(N bytes)`: plain ([`bounded`]),
//! quoted ([`quoted`]) or as a message ([`bounded_message`]).

/// Characters of an outside value that are echoed.
pub const ECHO_LIMIT: usize = 120;

/// `value` cut to [`ECHO_LIMIT`] characters, then `…(N bytes)` when it was longer.
pub fn bounded(value: &str) -> String {
    match value.char_indices().nth(ECHO_LIMIT) {
        None => value.to_string(),
        Some((cut, _)) => format!("{}…({} bytes)", &value[..cut], value.len()),
    }
}

/// `value` in double quotes with escapes (as `{:?}` prints it), bounded.
pub fn quoted(value: &str) -> String {
    match value.char_indices().nth(ECHO_LIMIT) {
        None => format!("{value:?}"),
        Some((cut, _)) => format!("{:?}…({} bytes)", &value[..cut], value.len()),
    }
}

/// A message that may quote outside input, bounded as a whole: messages built by libraries
/// (serde's "invalid value: string \"...\"") quote what they were given in full.
pub fn bounded_message(message: &str) -> String {
    const MESSAGE_LIMIT: usize = 2_000;
    match message.char_indices().nth(MESSAGE_LIMIT) {
        None => message.to_string(),
        Some((cut, _)) => format!("{}…({} bytes)", &message[..cut], message.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_cut_and_say_their_length() {
        assert_eq!(bounded("short"), "short");
        let long = "é".repeat(1_000);
        let b = bounded(&long);
        assert!(b.starts_with(&"é".repeat(ECHO_LIMIT)));
        assert!(b.ends_with("…(2000 bytes)"), "{b}");
        assert_eq!(quoted("a\"b"), "\"a\\\"b\"");
        assert!(quoted(&"x".repeat(500)).ends_with("…(500 bytes)"));
        assert!(bounded_message(&"y".repeat(100_000)).len() < 2_100);
    }
}
