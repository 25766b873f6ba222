//! The CLI's error type: one human-readable sentence, printed as `engram: <message>`.

use std::fmt;
use std::io;

/// A failure to report to the user.
#[derive(Debug)]
pub struct CliError(String);

pub type Result<T> = std::result::Result<T, CliError>;

impl CliError {
    pub fn new(msg: impl Into<String>) -> CliError {
        CliError(msg.into())
    }
}

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Drop the " (os error N)" tails that `std::io::Error` appends.
fn strip_os_error(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(" (os error ") {
        out.push_str(&rest[..i]);
        let tail = &rest[i + " (os error ".len()..];
        let digits = tail
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(tail.len());
        if digits > 0 && tail[digits..].starts_with(')') {
            rest = &tail[digits + 1..];
        } else {
            out.push_str(" (os error ");
            rest = tail;
        }
    }
    out.push_str(rest);
    out
}

/// The description of an errno, without the "(os error N)" suffix.
pub fn strerror(errno: i32) -> String {
    strip_os_error(&io::Error::from_raw_os_error(errno).to_string())
}

/// A core error in words: its own explanation if it has one, else the errno's.
pub fn describe(e: &engram_core::Error) -> String {
    match e.message() {
        // A full pool is worth naming as such, whatever ran out.
        Some(m) if e.errno() == libc::ENOSPC && !m.contains("space") => {
            format!("{} ({})", strip_os_error(m), strerror(libc::ENOSPC))
        }
        Some(m) => strip_os_error(m),
        None => strerror(e.errno()),
    }
}

/// A local I/O error in words.
pub fn describe_io(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(n) => strerror(n),
        None => strip_os_error(&e.to_string()),
    }
}

/// Attach what was being done to an error.
pub trait Context<T> {
    fn context(self, what: impl fmt::Display) -> Result<T>;
}

impl<T> Context<T> for std::result::Result<T, engram_core::Error> {
    fn context(self, what: impl fmt::Display) -> Result<T> {
        self.map_err(|e| CliError(format!("{what}: {}", describe(&e))))
    }
}

impl<T> Context<T> for io::Result<T> {
    fn context(self, what: impl fmt::Display) -> Result<T> {
        self.map_err(|e| CliError(format!("{what}: {}", describe_io(&e))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strips_os_error_suffixes() {
        assert_eq!(
            strip_os_error("No such file or directory (os error 2)"),
            "No such file or directory"
        );
        assert_eq!(
            strip_os_error("a (os error 2): b (os error 11) c"),
            "a: b c"
        );
        assert_eq!(strip_os_error("odd (os error x)"), "odd (os error x)");
        assert_eq!(strerror(libc::ENOENT), "No such file or directory");
    }
}
