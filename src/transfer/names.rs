//! Names a sender may ask the receiver to write. The receiver writes only below its
//! directory: a name is one path component of letters, digits and `._+-`, never hidden,
//! never `..`, never a path; anything else is refused before a byte is written.

/// Why `name` cannot be written, or None when it can.
pub fn name_problem(name: &str) -> Option<String> {
    if name.is_empty() {
        return Some("an empty name".into());
    }
    if name.len() > 200 {
        return Some(format!("a name of {} bytes (at most 200)", name.len()));
    }
    if name.starts_with('.') {
        return Some(format!(
            "{name:?} starts with '.' (hidden names, `.` and `..` are the receiver's own)"
        ));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._+-".contains(*c)))
    {
        return Some(format!(
            "{name:?} holds {c:?}: names are one path component of letters, digits and ._+-"
        ));
    }
    None
}

/// The receiver's own files beside a destination `name`: the partial copy and its manifest.
pub fn partial_name(name: &str) -> String {
    format!(".{name}.vdifrec-part")
}

pub fn manifest_name(name: &str) -> String {
    format!(".{name}.vdifrec-manifest")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_names_pass() {
        for good in ["kvn_scan1", "No0042.vdif", "r1_ky_no0001.00000007", "a+b-c"] {
            assert_eq!(name_problem(good), None, "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            ".hidden",
            "../etc/passwd",
            "/etc/passwd",
            "a/b",
            "a\\b",
            "a b",
            "a\0b",
            "scan\n",
            "ünï",
            &"x".repeat(201),
        ] {
            assert!(name_problem(bad).is_some(), "{bad:?}");
        }
        // The receiver's own names can never be asked for.
        assert!(name_problem(&partial_name("x")).is_some());
        assert!(name_problem(&manifest_name("x")).is_some());
    }
}
