//! Errors of the core, by kind: the R layer turns each kind into a condition
//! class (`winch_error_<kind>`), so callers can tell them apart without
//! reading messages.

use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Error {
    /// An argument is not acceptable.
    BadArgument(String),
    /// This platform or build cannot do what was asked.
    Unavailable(String),
    /// Only R's main thread can do this.
    WrongThread,
    /// Something winch needs is in use: its caches by this same thread
    /// (re-entry), a profile already running, R's own profiler.
    Busy(String),
    /// Memory that had to be read was not readable (R's context chain).
    Unreadable(String),
    /// What was read does not hold together (R's context chain against
    /// `sys.frames()`, contexts against the native stack).
    Inconsistent(String),
    /// Reading or writing a file failed (the system's reason in the text).
    Io(String),
    /// The system refused access (tracing another process).
    Permission(String),
    /// The process asked about does not exist (any more).
    NoProcess(String),
    /// A bug in winch (a caught panic).
    Internal(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    /// The condition class that stands for this kind, after `winch_error`.
    pub fn class(&self) -> &'static str {
        match self {
            Error::BadArgument(_) => "winch_error_bad_argument",
            Error::Unavailable(_) => "winch_error_unavailable",
            Error::WrongThread => "winch_error_wrong_thread",
            Error::Busy(_) => "winch_error_busy",
            Error::Unreadable(_) => "winch_error_unreadable",
            Error::Inconsistent(_) => "winch_error_inconsistent",
            Error::Io(_) => "winch_error_io",
            Error::Permission(_) => "winch_error_permission",
            Error::NoProcess(_) => "winch_error_no_process",
            Error::Internal(_) => "winch_error_internal",
        }
    }
}

impl Error {
    /// The error of the kind condition class `class` stands for (see
    /// [`class`](Error::class)), with message `msg` (a process of winch's
    /// sends errors as the two); None for a class that is no kind's.
    pub fn from_class(class: &str, msg: String) -> Option<Error> {
        Some(match class {
            "winch_error_bad_argument" => Error::BadArgument(msg),
            "winch_error_unavailable" => Error::Unavailable(msg),
            "winch_error_wrong_thread" => Error::WrongThread,
            "winch_error_busy" => Error::Busy(msg),
            "winch_error_unreadable" => Error::Unreadable(msg),
            "winch_error_inconsistent" => Error::Inconsistent(msg),
            "winch_error_io" => Error::Io(msg),
            "winch_error_permission" => Error::Permission(msg),
            "winch_error_no_process" => Error::NoProcess(msg),
            "winch_error_internal" => Error::Internal(msg),
            _ => return None,
        })
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::BadArgument(m)
            | Error::Unavailable(m)
            | Error::Unreadable(m)
            | Error::Inconsistent(m)
            | Error::Io(m)
            | Error::Permission(m)
            | Error::NoProcess(m)
            | Error::Busy(m) => f.write_str(m),
            Error::WrongThread => f.write_str("winch can only capture R's stack from R's main thread"),
            Error::Internal(m) => write!(f, "internal error in winch: {m}"),
        }
    }
}

impl std::error::Error for Error {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_has_its_own_class_and_a_message() {
        let all = [
            Error::BadArgument("b".into()),
            Error::Unavailable("u".into()),
            Error::WrongThread,
            Error::Busy("b".into()),
            Error::Unreadable("r".into()),
            Error::Inconsistent("i".into()),
            Error::Io("o".into()),
            Error::Permission("p".into()),
            Error::NoProcess("n".into()),
            Error::Internal("x".into()),
        ];
        let mut classes: Vec<&str> = all.iter().map(Error::class).collect();
        classes.sort();
        classes.dedup();
        assert_eq!(classes.len(), all.len());
        assert!(classes.iter().all(|c| c.starts_with("winch_error_")));
        assert!(all.iter().all(|e| !e.to_string().is_empty()));
        assert_eq!(Error::Internal("boom".into()).to_string(), "internal error in winch: boom");
        // Each class names its kind back.
        for e in &all {
            let msg = match e {
                Error::WrongThread => String::new(),
                Error::Internal(m) => m.clone(),
                other => other.to_string(),
            };
            assert_eq!(Error::from_class(e.class(), msg).as_ref(), Some(e));
        }
        assert_eq!(Error::from_class("winch_error_nonsense", "m".into()), None);
    }
}
