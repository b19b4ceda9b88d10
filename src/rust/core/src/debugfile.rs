//! Where a module's separate debug file may be: the rules of gdb and
//! elfutils, as a pure function of what the module says about itself. Which
//! candidate is really the module's debug file is checked when it is read
//! (build-id, or the CRC that `.gnu_debuglink` promises).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Debug directories searched at most (`winch.debug_dirs`): the first this
/// many distinct ones. Each is a few file lookups per module; more would
/// only make the first capture slow.
pub const MAX_ROOTS: usize = 64;

/// The directories to search: `dirs` without repeats, in order, at most
/// [`MAX_ROOTS`] of them.
pub fn roots(dirs: Vec<PathBuf>) -> Vec<PathBuf> {
    let mut seen = HashSet::new();
    dirs.into_iter().filter(|d| seen.insert(d.clone())).take(MAX_ROOTS).collect()
}

/// A place a separate debug file may be, and how to check it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub path: PathBuf,
    /// The CRC32 `.gnu_debuglink` promises, when found through it.
    pub crc: Option<u32>,
}

/// What a module says about its debug file.
#[derive(Clone, Copy, Debug)]
pub struct Hints<'a> {
    /// GNU build-id of the loaded image.
    pub build_id: Option<&'a [u8]>,
    /// `.gnu_debuglink`: file name and CRC32 of the debug file.
    pub debuglink: Option<(&'a str, u32)>,
    /// The path the module was loaded by.
    pub loaded: &'a Path,
    /// Where that path leads when it is a symlink (None otherwise).
    pub resolved: Option<&'a Path>,
}

/// Candidates in the order they are tried:
/// 1. `<root>/.build-id/xx/yyyy.debug` for each root (the build-id's first
///    byte, then the rest, in hex);
/// 2. for the debuglink name, next to the loaded path and next to the file
///    it resolves to: `<dir>/<name>`, `<dir>/.debug/<name>`,
///    `<root>/<dir>/<name>` for each root.
///
/// The module's own file is never a candidate, and no path appears twice.
pub fn candidates(hints: &Hints, roots: &[PathBuf]) -> Vec<Candidate> {
    let mut out: Vec<Candidate> = Vec::new();
    // Paths already listed (a set: linear in the number of roots).
    let mut seen: HashSet<PathBuf> = HashSet::new();
    if let Some(id) = hints.build_id.filter(|id| id.len() >= 2) {
        let (head, tail) = id.split_at(1);
        for root in roots {
            let path = root.join(".build-id").join(hex(head)).join(format!("{}.debug", hex(tail)));
            if seen.insert(path.clone()) {
                out.push(Candidate { path, crc: None });
            }
        }
    }
    if let Some((name, crc)) = hints.debuglink.filter(|(name, _)| is_plain_name(name)) {
        for lib in std::iter::once(hints.loaded).chain(hints.resolved) {
            let dir = lib.parent().unwrap_or(Path::new("/"));
            let mut paths = vec![dir.join(name), dir.join(".debug").join(name)];
            for root in roots {
                paths.push(root.join(dir.strip_prefix("/").unwrap_or(dir)).join(name));
            }
            for path in paths {
                let own = path == hints.loaded || Some(path.as_path()) == hints.resolved;
                if !own && seen.insert(path.clone()) {
                    out.push(Candidate { path, crc: Some(crc) });
                }
            }
        }
    }
    out
}

/// A debuglink is a file name; anything with a directory in it (or empty)
/// would lead elsewhere and is ignored.
fn is_plain_name(name: &str) -> bool {
    !name.is_empty() && !name.contains('/') && name != "." && name != ".."
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(c: &[Candidate]) -> Vec<String> {
        c.iter().map(|c| c.path.display().to_string()).collect()
    }

    #[test]
    fn build_id_layout_under_each_root() {
        let id = [0xab, 0xcd, 0xef, 0x01];
        let hints = Hints {
            build_id: Some(&id),
            debuglink: None,
            loaded: Path::new("/usr/lib/libx.so"),
            resolved: None,
        };
        let roots = [PathBuf::from("/usr/lib/debug"), PathBuf::from("/opt/dbg")];
        let c = candidates(&hints, &roots);
        assert_eq!(
            paths(&c),
            ["/usr/lib/debug/.build-id/ab/cdef01.debug", "/opt/dbg/.build-id/ab/cdef01.debug"]
        );
        assert!(c.iter().all(|c| c.crc.is_none()));
        // A build-id too short to split gives nothing.
        let short = Hints { build_id: Some(&id[..1]), ..hints };
        assert!(candidates(&short, &roots).is_empty());
    }

    #[test]
    fn debuglink_next_to_the_library_and_its_symlink_target() {
        let hints = Hints {
            build_id: None,
            debuglink: Some(("libx.so.debug", 0x1234)),
            loaded: Path::new("/usr/lib/libx.so"),
            resolved: Some(Path::new("/opt/x/lib/libx.so.1.2")),
        };
        let c = candidates(&hints, &[PathBuf::from("/usr/lib/debug")]);
        assert_eq!(
            paths(&c),
            [
                "/usr/lib/libx.so.debug",
                "/usr/lib/.debug/libx.so.debug",
                "/usr/lib/debug/usr/lib/libx.so.debug",
                "/opt/x/lib/libx.so.debug",
                "/opt/x/lib/.debug/libx.so.debug",
                "/usr/lib/debug/opt/x/lib/libx.so.debug",
            ]
        );
        assert!(c.iter().all(|c| c.crc == Some(0x1234)));
    }

    #[test]
    fn build_id_first_then_debuglink_never_the_module_itself() {
        let id = [1, 2, 3];
        let hints = Hints {
            build_id: Some(&id),
            // A debuglink naming the library itself must not make it its own
            // debug file.
            debuglink: Some(("libx.so", 7)),
            loaded: Path::new("/lib/libx.so"),
            resolved: None,
        };
        let c = candidates(&hints, &[PathBuf::from("/dbg")]);
        assert_eq!(paths(&c), ["/dbg/.build-id/01/0203.debug", "/lib/.debug/libx.so", "/dbg/lib/libx.so"]);
        assert_eq!(c[0].crc, None);
        assert_eq!(c[1].crc, Some(7));
    }

    #[test]
    fn debuglinks_with_directories_are_ignored() {
        for bad in ["../etc/passwd", "a/b.debug", "", ".", ".."] {
            let hints = Hints {
                build_id: None,
                debuglink: Some((bad, 1)),
                loaded: Path::new("/lib/x.so"),
                resolved: None,
            };
            assert!(candidates(&hints, &[PathBuf::from("/dbg")]).is_empty(), "{bad}");
        }
    }

    #[test]
    fn no_duplicates_when_paths_coincide() {
        // With / as a root, root/dir/name is dir/name.
        let hints = Hints {
            build_id: None,
            debuglink: Some(("x.debug", 1)),
            loaded: Path::new("/lib/x.so"),
            resolved: None,
        };
        let c = candidates(&hints, &[PathBuf::from("/")]);
        assert_eq!(paths(&c), ["/lib/x.debug", "/lib/.debug/x.debug"]);
    }

    #[test]
    fn many_roots_are_linear_and_bounded() {
        // 10,000 directories (the same ones twice): listed once each, at
        // most MAX_ROOTS of them, and fast.
        let dirs: Vec<PathBuf> = (0..10_000).map(|i| PathBuf::from(format!("/d{}", i % 5_000))).collect();
        let r = roots(dirs);
        assert_eq!(r.len(), MAX_ROOTS);
        assert_eq!(r[1], PathBuf::from("/d1"));
        assert_eq!(
            roots(vec!["/a".into(), "/b".into(), "/a".into()]),
            vec![PathBuf::from("/a"), "/b".into()]
        );
        // candidates() itself stays linear with many roots.
        let id = [0xab, 0xcd];
        let hints = Hints {
            build_id: Some(&id),
            debuglink: Some(("libx.so.debug", 7)),
            loaded: Path::new("/usr/lib/libx.so"),
            resolved: None,
        };
        let many: Vec<PathBuf> = (0..20_000).map(|i| PathBuf::from(format!("/r{i}"))).collect();
        let t = std::time::Instant::now();
        let c = candidates(&hints, &many);
        assert_eq!(c.len(), 2 * 20_000 + 2);
        assert!(t.elapsed() < std::time::Duration::from_secs(5), "{:?}", t.elapsed());
    }
}
