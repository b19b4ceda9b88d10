//! Separate debug files from debuginfod servers, by build-id: opt-in (the R
//! side turns it on), bounded in time, at most one fetch per build-id per
//! session, misses remembered, every file checked before use.
//!
//! The fetching itself is `libdebuginfod` (elfutils; Debian's
//! `libdebuginfod1`), opened with `dlopen` when first needed: it speaks
//! HTTPS (which the public servers require), honours `DEBUGINFOD_URLS`,
//! `DEBUGINFOD_TIMEOUT` and `DEBUGINFOD_CACHE_PATH`, and shares its cache
//! with gdb and the other clients. What to fetch, when to give up and what
//! to keep is decided here, behind [`Fetcher`], so it is tested without a
//! network.

/// A build-id as the hex digits debug files are named by.
pub use crate::debugfile::hex;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the environment says about debuginfod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Config {
    /// `DEBUGINFOD_URLS` (space-separated server URLs), as set.
    pub urls: String,
    /// Time one fetch may take: `DEBUGINFOD_TIMEOUT` seconds, else
    /// [`DEFAULT_TIMEOUT`].
    pub timeout: Duration,
    /// The client cache: `DEBUGINFOD_CACHE_PATH`, else
    /// `$HOME/.debuginfod_client_cache` where that directory exists (the
    /// old default, still used by libdebuginfod), else
    /// `$XDG_CACHE_HOME/debuginfod_client`, else
    /// `$HOME/.cache/debuginfod_client`.
    pub cache: Option<PathBuf>,
}

/// Default time one fetch may take (libdebuginfod's own default is 90 s:
/// far too long to hold up an error message).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);

impl Config {
    /// The configuration read through `var` (the environment, in use).
    pub(crate) fn from_vars(var: impl Fn(&str) -> Option<String>) -> Config {
        let set = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        let timeout = set("DEBUGINFOD_TIMEOUT")
            .and_then(|t| t.trim().parse::<u64>().ok())
            .filter(|&t| t > 0)
            .map_or(DEFAULT_TIMEOUT, Duration::from_secs);
        // libdebuginfod's order: the variable, then the old default
        // `~/.debuginfod_client_cache` if it exists, then the XDG cache.
        let legacy =
            set("HOME").map(|h| Path::new(&h).join(".debuginfod_client_cache")).filter(|p| p.is_dir());
        let cache = set("DEBUGINFOD_CACHE_PATH")
            .map(PathBuf::from)
            .or(legacy)
            .or_else(|| set("XDG_CACHE_HOME").map(|x| Path::new(&x).join("debuginfod_client")))
            .or_else(|| set("HOME").map(|h| Path::new(&h).join(".cache").join("debuginfod_client")));
        Config { urls: set("DEBUGINFOD_URLS").unwrap_or_default().trim().to_string(), timeout, cache }
    }

    pub(crate) fn from_env() -> Config {
        Config::from_vars(|name| std::env::var(name).ok())
    }

    pub(crate) fn has_servers(&self) -> bool {
        !self.urls.is_empty()
    }

    /// Time all fetches of one capture may take together: one fetch's
    /// timeout and a little more, so a capture with a dead or slow server
    /// still returns promptly.
    pub(crate) fn capture_budget(&self) -> Duration {
        self.timeout + Duration::from_secs(1)
    }
}

/// The outcome of one fetch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fetched {
    /// The file, in the client cache.
    File(PathBuf),
    /// Not found, not reachable, or too slow: why.
    Missing(String),
}

/// Fetches the debug file of a build-id, giving up after `timeout`.
pub trait Fetcher: Send {
    fn fetch(&mut self, build_id: &[u8], timeout: Duration) -> Fetched;
}

/// What this session knows about one build-id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Found(PathBuf),
    Missed(String),
    /// Fetched, but not the module's debug file (corrupt, or another
    /// build-id): removed from the cache and never used.
    Rejected(String),
}

/// The session's debuginfod state.
pub struct Debuginfod {
    fetcher: Box<dyn Fetcher>,
    tried: HashMap<Vec<u8>, Outcome>,
    /// The `DEBUGINFOD_URLS` the memory belongs to.
    urls: String,
    /// The end of the current capture's budget, set by its first fetch.
    deadline: Option<Instant>,
    /// Fetches started this session (a test hook).
    pub fetches: u64,
}

impl Debuginfod {
    pub(crate) fn new(fetcher: Box<dyn Fetcher>) -> Debuginfod {
        Debuginfod { fetcher, tried: HashMap::new(), urls: String::new(), deadline: None, fetches: 0 }
    }

    /// A new capture starts: it gets a budget of its own.
    pub(crate) fn start_capture(&mut self) {
        self.deadline = None;
    }

    /// Every build-id tried this session and its outcome.
    pub fn tried(&self) -> impl Iterator<Item = (&[u8], &Outcome)> {
        self.tried.iter().map(|(k, v)| (k.as_slice(), v))
    }

    /// What is known about `build_id` this session, if anything.
    pub(crate) fn outcome(&self, build_id: &[u8]) -> Option<&Outcome> {
        self.tried.get(build_id)
    }

    /// The debug file of `build_id`: from this session's memory, or fetched
    /// (once per session) within the capture's budget. None when there is
    /// none, or no time is left (then a later capture may try).
    pub(crate) fn debug_file(&mut self, build_id: &[u8], config: &Config, now: Instant) -> Option<PathBuf> {
        if config.urls != self.urls {
            // Other servers: what the old ones said no longer holds.
            self.tried.clear();
            self.urls = config.urls.clone();
        }
        match self.tried.get(build_id) {
            Some(Outcome::Found(path)) => return Some(path.clone()),
            Some(_) => return None,
            None => {}
        }
        if !config.has_servers() || build_id.is_empty() {
            return None;
        }
        let deadline = *self.deadline.get_or_insert(now + config.capture_budget());
        let left = deadline.saturating_duration_since(now);
        if left < Duration::from_millis(100) {
            return None;
        }
        self.fetches += 1;
        let outcome = match self.fetcher.fetch(build_id, config.timeout.min(left)) {
            Fetched::File(path) => Outcome::Found(path),
            Fetched::Missing(why) => Outcome::Missed(why),
        };
        self.tried.insert(build_id.to_vec(), outcome.clone());
        match outcome {
            Outcome::Found(path) => Some(path),
            _ => None,
        }
    }

    /// The file fetched for `build_id` is not its debug file: it is never
    /// used, and removed from the client cache (only from there) so that no
    /// other client uses it either.
    pub(crate) fn reject(&mut self, build_id: &[u8], config: &Config, why: &str) {
        if let Some(Outcome::Found(path)) = self.tried.get(build_id) {
            if config.cache.as_ref().is_some_and(|c| path.starts_with(c)) {
                let _ = std::fs::remove_file(path);
            }
        }
        self.tried.insert(build_id.to_vec(), Outcome::Rejected(why.to_string()));
    }
}

/// The debug file of `build_id` under `cache`, as libdebuginfod stores it.
#[cfg(test)]
pub(crate) fn cache_path(cache: &Path, build_id: &[u8]) -> PathBuf {
    cache.join(crate::debugfile::hex(build_id)).join("debuginfo")
}

/// libdebuginfod, loaded with `dlopen` on first use.
#[cfg(target_os = "linux")]
pub mod client {
    use super::{Fetched, Fetcher};
    use std::ffi::{c_char, c_int, c_long, c_void, CStr};
    use std::path::PathBuf;
    use std::sync::OnceLock;
    use std::time::{Duration, Instant};

    type Client = c_void;
    type ProgressFn = unsafe extern "C" fn(*mut Client, c_long, c_long) -> c_int;

    /// The functions of libdebuginfod that winch uses.
    struct Api {
        begin: unsafe extern "C" fn() -> *mut Client,
        end: unsafe extern "C" fn(*mut Client),
        find_debuginfo: unsafe extern "C" fn(*mut Client, *const u8, c_int, *mut *mut c_char) -> c_int,
        set_progressfn: unsafe extern "C" fn(*mut Client, Option<ProgressFn>),
        set_user_data: unsafe extern "C" fn(*mut Client, *mut c_void),
        get_user_data: unsafe extern "C" fn(*const Client) -> *mut c_void,
    }

    static API: OnceLock<Result<Api, String>> = OnceLock::new();

    /// The library's name, as Debian's libdebuginfod1 installs it.
    pub(crate) const LIBRARY: &str = "libdebuginfod.so.1";

    fn api() -> Result<&'static Api, String> {
        API.get_or_init(load).as_ref().map_err(|e| e.clone())
    }

    /// Whether libdebuginfod can be loaded (or why not).
    pub fn available() -> Result<(), String> {
        api().map(|_| ())
    }

    fn load() -> Result<Api, String> {
        // SAFETY: dlopen with a constant NUL-terminated name; the handle is
        // never closed, so the symbols stay valid for the process's life.
        let handle =
            unsafe { libc::dlopen(c"libdebuginfod.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if handle.is_null() {
            return Err(format!("{LIBRARY} could not be loaded (Debian: install libdebuginfod1)"));
        }
        let sym = |name: &CStr| -> Result<*mut c_void, String> {
            // SAFETY: `handle` is a live handle and `name` NUL-terminated.
            let p = unsafe { libc::dlsym(handle, name.as_ptr()) };
            if p.is_null() {
                Err(format!("{LIBRARY} lacks {}", name.to_string_lossy()))
            } else {
                Ok(p)
            }
        };
        // SAFETY: each symbol is the libdebuginfod function of that name,
        // whose C signature (elfutils/debuginfod.h) the field's type spells.
        unsafe {
            Ok(Api {
                begin: std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> *mut Client>(sym(
                    c"debuginfod_begin",
                )?),
                end: std::mem::transmute::<*mut c_void, unsafe extern "C" fn(*mut Client)>(sym(
                    c"debuginfod_end",
                )?),
                find_debuginfo: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(*mut Client, *const u8, c_int, *mut *mut c_char) -> c_int,
                >(sym(c"debuginfod_find_debuginfo")?),
                set_progressfn: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(*mut Client, Option<ProgressFn>),
                >(sym(c"debuginfod_set_progressfn")?),
                set_user_data: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(*mut Client, *mut c_void),
                >(sym(c"debuginfod_set_user_data")?),
                get_user_data: std::mem::transmute::<
                    *mut c_void,
                    unsafe extern "C" fn(*const Client) -> *mut c_void,
                >(sym(c"debuginfod_get_user_data")?),
            })
        }
    }

    /// libdebuginfod's progress callback: a non-zero return cancels the
    /// transfer, once the fetch's deadline (the user data) has passed.
    unsafe extern "C" fn progress(client: *mut Client, _done: c_long, _total: c_long) -> c_int {
        let Ok(api) = api() else { return 1 };
        // SAFETY: `client` is the live client this callback was set on; its
        // user data is the `Instant` that `fetch` keeps alive meanwhile.
        let deadline = unsafe { (api.get_user_data)(client) } as *const Instant;
        if deadline.is_null() {
            return 1;
        }
        // SAFETY: as above.
        c_int::from(Instant::now() >= unsafe { *deadline })
    }

    /// Fetches through libdebuginfod.
    pub struct Libdebuginfod;

    impl Fetcher for Libdebuginfod {
        /// Fetches on a thread of its own and waits for it at most
        /// `timeout`. libdebuginfod calls the progress callback (which
        /// cancels at the deadline) only once a server has started to
        /// answer: a server that takes the connection and says nothing
        /// would hold the caller for libdebuginfod's own timeout (90 s by
        /// default). Such a fetch is left to finish or fail on its thread
        /// (whatever it writes goes to the client cache, checked before any
        /// use); the caller remembers the miss.
        fn fetch(&mut self, build_id: &[u8], timeout: Duration) -> Fetched {
            let api = match api() {
                Ok(api) => api,
                Err(why) => return Fetched::Missing(why),
            };
            let deadline = Instant::now() + timeout;
            let (tx, rx) = std::sync::mpsc::channel();
            let id = build_id.to_vec();
            let spawned = std::thread::Builder::new().name("winch-debuginfod".into()).spawn(move || {
                // Signals meant for R's main thread (the profiler's,
                // interrupts) never land on a fetch.
                crate::stack::block_signals();
                let _ = tx.send(fetch_now(api, &id, deadline));
            });
            if let Err(e) = spawned {
                return Fetched::Missing(format!("no thread for the fetch: {e}"));
            }
            // A little grace: a fetch the callback cancels at the deadline
            // reports that itself.
            match rx.recv_timeout(timeout + Duration::from_millis(50)) {
                Ok(fetched) => fetched,
                Err(_) => Fetched::Missing("timed out".into()),
            }
        }
    }

    /// One fetch through libdebuginfod, cancelled by the progress callback
    /// once `deadline` has passed.
    fn fetch_now(api: &Api, build_id: &[u8], deadline: Instant) -> Fetched {
        // SAFETY: the client is created, used and ended here; the user
        // data points to `deadline`, which outlives the client; `path` is
        // set by the library to a malloc'ed string (freed below) and the
        // descriptor returned is closed.
        unsafe {
            let client = (api.begin)();
            if client.is_null() {
                return Fetched::Missing("debuginfod_begin() failed".into());
            }
            (api.set_user_data)(client, &deadline as *const Instant as *mut c_void);
            (api.set_progressfn)(client, Some(progress));
            let mut path: *mut c_char = std::ptr::null_mut();
            let fd = (api.find_debuginfo)(client, build_id.as_ptr(), build_id.len() as c_int, &mut path);
            (api.end)(client);
            let file = (!path.is_null()).then(|| {
                let p = PathBuf::from(CStr::from_ptr(path).to_string_lossy().into_owned());
                libc::free(path as *mut c_void);
                p
            });
            if fd >= 0 {
                libc::close(fd);
            }
            match (fd >= 0, file) {
                (true, Some(p)) => Fetched::File(p),
                (true, None) => Fetched::Missing("no path returned".into()),
                (false, _) if Instant::now() >= deadline => Fetched::Missing("timed out".into()),
                (false, _) => Fetched::Missing(format!("{}", std::io::Error::from_raw_os_error(-fd))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| pairs.iter().find(|(k, _)| *k == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn configuration_from_the_environment() {
        let c = Config::from_vars(vars(&[("HOME", "/home/u")]));
        assert!(!c.has_servers());
        assert_eq!(c.timeout, DEFAULT_TIMEOUT);
        assert_eq!(c.cache, Some(PathBuf::from("/home/u/.cache/debuginfod_client")));
        let c = Config::from_vars(vars(&[
            ("HOME", "/home/u"),
            ("XDG_CACHE_HOME", "/xdg"),
            ("DEBUGINFOD_URLS", " https://a.example http://b.example "),
            ("DEBUGINFOD_TIMEOUT", "10"),
        ]));
        assert_eq!(c.urls, "https://a.example http://b.example");
        assert_eq!(c.timeout, Duration::from_secs(10));
        assert_eq!(c.cache, Some(PathBuf::from("/xdg/debuginfod_client")));
        assert_eq!(c.capture_budget(), Duration::from_secs(11));
        let c = Config::from_vars(vars(&[
            ("XDG_CACHE_HOME", "/xdg"),
            ("DEBUGINFOD_CACHE_PATH", "/c"),
            ("DEBUGINFOD_TIMEOUT", "soon"),
        ]));
        assert_eq!(c.cache, Some(PathBuf::from("/c")));
        assert_eq!(c.timeout, DEFAULT_TIMEOUT, "an unreadable timeout is the default");
        assert_eq!(cache_path(Path::new("/c"), &[0xab, 0x01]), PathBuf::from("/c/ab01/debuginfo"));
        // The old default, where it exists, comes before the XDG cache.
        let home = std::env::temp_dir().join(format!("winch-home-{}", std::process::id()));
        let legacy = home.join(".debuginfod_client_cache");
        std::fs::create_dir_all(&legacy).unwrap();
        let h = home.to_str().unwrap();
        let c = Config::from_vars(vars(&[("HOME", h), ("XDG_CACHE_HOME", "/xdg")]));
        assert_eq!(c.cache, Some(legacy.clone()));
        let c = Config::from_vars(vars(&[("HOME", h), ("DEBUGINFOD_CACHE_PATH", "/c")]));
        assert_eq!(c.cache, Some(PathBuf::from("/c")));
        let _ = std::fs::remove_dir_all(&home);
    }

    /// What a fake fetcher was asked: build-id and timeout.
    type Asked = Arc<Mutex<Vec<(Vec<u8>, Duration)>>>;

    /// A fetcher that answers from a table and records what it was asked,
    /// each fetch taking `cost` of the fake clock.
    struct Fake {
        files: HashMap<Vec<u8>, PathBuf>,
        asked: Asked,
    }

    impl Fetcher for Fake {
        fn fetch(&mut self, build_id: &[u8], timeout: Duration) -> Fetched {
            self.asked.lock().unwrap().push((build_id.to_vec(), timeout));
            match self.files.get(build_id) {
                Some(p) => Fetched::File(p.clone()),
                None => Fetched::Missing("404".into()),
            }
        }
    }

    fn fake(files: &[(&[u8], &str)]) -> (Debuginfod, Asked) {
        let asked = Arc::new(Mutex::new(Vec::new()));
        let files = files.iter().map(|(id, p)| (id.to_vec(), PathBuf::from(p))).collect();
        (Debuginfod::new(Box::new(Fake { files, asked: asked.clone() })), asked)
    }

    fn config(urls: &str) -> Config {
        Config { urls: urls.into(), timeout: Duration::from_secs(3), cache: Some(PathBuf::from("/cache")) }
    }

    #[test]
    fn one_fetch_per_build_id_and_misses_remembered() {
        let (mut d, asked) = fake(&[(b"\x01\x02", "/cache/0102/debuginfo")]);
        let c = config("http://127.0.0.1:1");
        let now = Instant::now();
        assert_eq!(d.debug_file(b"\x01\x02", &c, now), Some(PathBuf::from("/cache/0102/debuginfo")));
        assert_eq!(d.debug_file(b"\x01\x02", &c, now), Some(PathBuf::from("/cache/0102/debuginfo")));
        assert_eq!(d.debug_file(b"\x09", &c, now), None);
        d.start_capture();
        assert_eq!(d.debug_file(b"\x09", &c, now), None, "a miss is remembered");
        assert_eq!(asked.lock().unwrap().len(), 2);
        assert_eq!(d.fetches, 2);
        assert!(matches!(d.outcome(b"\x09"), Some(Outcome::Missed(_))));
        // Other servers: asked again.
        assert_eq!(d.debug_file(b"\x09", &config("http://127.0.0.1:2"), now), None);
        assert_eq!(asked.lock().unwrap().len(), 3);
    }

    #[test]
    fn nothing_is_fetched_without_servers_or_time() {
        let (mut d, asked) = fake(&[]);
        let now = Instant::now();
        assert_eq!(d.debug_file(b"\x01", &config(""), now), None);
        assert!(asked.lock().unwrap().is_empty(), "no URLs, no request");
        let c = config("http://x");
        // The first fetch of a capture starts its budget (timeout + 1 s);
        // fetches get what is left of it, and none starts once it is spent.
        d.debug_file(b"\x01", &c, now);
        d.debug_file(b"\x02", &c, now + Duration::from_millis(3500));
        d.debug_file(b"\x03", &c, now + Duration::from_millis(3950));
        assert_eq!(
            asked.lock().unwrap().iter().map(|(_, t)| *t).collect::<Vec<_>>(),
            vec![Duration::from_secs(3), Duration::from_millis(500)]
        );
        assert_eq!(d.outcome(b"\x03"), None, "not tried: a later capture may");
        d.start_capture();
        d.debug_file(b"\x03", &c, now + Duration::from_secs(10));
        assert_eq!(asked.lock().unwrap().len(), 3);
    }

    #[test]
    fn a_rejected_file_is_removed_from_the_cache_only() {
        let dir = std::env::temp_dir().join(format!("winch-debuginfod-{}", std::process::id()));
        let inside = cache_path(&dir, b"\x01");
        std::fs::create_dir_all(inside.parent().unwrap()).unwrap();
        std::fs::write(&inside, b"not elf").unwrap();
        let outside = dir.with_extension("elsewhere");
        std::fs::write(&outside, b"keep").unwrap();
        let (mut d, _) = fake(&[(b"\x01", inside.to_str().unwrap()), (b"\x02", outside.to_str().unwrap())]);
        let c = Config { cache: Some(dir.clone()), ..config("http://x") };
        let now = Instant::now();
        assert!(d.debug_file(b"\x01", &c, now).is_some());
        d.reject(b"\x01", &c, "not an ELF file");
        assert!(!inside.exists());
        assert_eq!(d.debug_file(b"\x01", &c, now), None, "never used again");
        assert!(d.debug_file(b"\x02", &c, now).is_some());
        d.reject(b"\x02", &c, "another build-id");
        assert!(outside.exists(), "a file outside the cache is left alone");
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_file(&outside);
    }
}
