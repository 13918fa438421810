//! The naming rules shared by locks, elections and registered names.

use crate::error::CoreError;

/// Longest resource name, in bytes.
pub const MAX_NAME_BYTES: usize = 256;

fn allowed(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"._-/@+=~".contains(&byte)
}

/// Checks a lock, election or registered name against API.md's rules: 1..=256 bytes
/// of `A-Z a-z 0-9 . _ - / @ + = ~`, not starting or ending with `/`, no `//`.
pub fn validate_name(name: &str) -> Result<(), CoreError> {
    let refuse = |reason: &str| {
        Err(CoreError::InvalidName {
            reason: reason.to_owned(),
        })
    };
    if name.is_empty() {
        return refuse("a name must not be empty");
    }
    if name.len() > MAX_NAME_BYTES {
        return refuse("a name must be at most 256 bytes");
    }
    if let Some(bad) = name.bytes().find(|byte| !allowed(*byte)) {
        let shown = if bad.is_ascii_graphic() {
            format!("'{}'", bad as char)
        } else {
            format!("byte 0x{bad:02x}")
        };
        return refuse(&format!(
            "{shown} is not allowed; use A-Z a-z 0-9 . _ - / @ + = ~"
        ));
    }
    if name.starts_with('/') || name.ends_with('/') {
        return refuse("a name must not start or end with '/'");
    }
    if name.contains("//") {
        return refuse("a name must not contain '//'");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_the_api_rules() {
        let long_ok = "a".repeat(256);
        let too_long = "a".repeat(257);
        let cases: &[(&str, bool)] = &[
            ("a", true),
            ("team-a/db/migrate", true),
            ("A.b_c-d/e@f+g=h~i", true),
            (&long_ok, true),
            ("", false),
            (&too_long, false),
            ("/lead", false),
            ("trail/", false),
            ("a//b", false),
            ("has space", false),
            ("colon:acquire", false),
            ("percent%2F", false),
            ("ünïcode", false),
            ("tab\t", false),
        ];
        for (name, ok) in cases {
            assert_eq!(validate_name(name).is_ok(), *ok, "{name:?}");
        }
    }
}
