//! Standard output that never panics: `out!` works like `println!`, but a closed pipe
//! (`engram ls POOL | head`) or a full disk does not abort the command halfway, which would
//! leave the pool not cleanly unmounted. The first failure is reported when the command ends.

use std::io::{self, ErrorKind, Write};
use std::sync::Mutex;

static FAILURE: Mutex<Option<io::Error>> = Mutex::new(None);

/// Write one line to standard output, remembering the first failure.
pub fn line(args: std::fmt::Arguments<'_>) {
    let mut failed = FAILURE.lock().unwrap_or_else(|e| e.into_inner());
    if failed.is_some() {
        return;
    }
    let mut out = io::stdout().lock();
    if let Err(e) = out
        .write_fmt(args)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
    {
        *failed = Some(e);
    }
}

/// How writing went: Ok, or Err(None) for a reader that went away (quietly a failure, like
/// a program killed by SIGPIPE), or Err(Some(message)).
pub fn status() -> Result<(), Option<String>> {
    match &*FAILURE.lock().unwrap_or_else(|e| e.into_inner()) {
        None => Ok(()),
        Some(e) if e.kind() == ErrorKind::BrokenPipe => Err(None),
        Some(e) => Err(Some(format!(
            "cannot write to standard output: {}",
            crate::error::describe_io(e)
        ))),
    }
}

/// `println!` that does not panic; see the module documentation.
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::line(format_args!($($arg)*))
    };
}
