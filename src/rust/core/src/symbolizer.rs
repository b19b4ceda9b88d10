//! Caches in front of `debuginfo`: one `ModuleInfo` per loaded module image
//! and one resolution per (module, address), so a repeated capture reads no
//! file and parses nothing.
//!
//! A module image is identified by path, load bias, build-id and the inode
//! of its mapping: a library unloaded and loaded again after a rebuild gets a
//! fresh entry instead of its predecessor's names.

use crate::debuginfo::{self, ModuleInfo, Resolved, Status};
use crate::modules::{MappedFile, Module, ModuleMap};
use crate::reentry::ReentryLock;
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct ModuleKey {
    path: String,
    bias: usize,
    build_id: Option<Vec<u8>>,
    mapped: Option<MappedFile>,
}

impl ModuleKey {
    fn of(m: &Module) -> ModuleKey {
        ModuleKey { path: m.path.clone(), bias: m.bias, build_id: m.build_id.clone(), mapped: m.mapped }
    }
}

/// Bound on cached address resolutions; past it the address cache restarts.
const MAX_CACHED_ADDRESSES: usize = 200_000;

pub struct Symbolizer {
    roots: Vec<PathBuf>,
    modules: HashMap<ModuleKey, (u32, Box<ModuleInfo>)>,
    frames: HashMap<(u32, u64), Arc<[Resolved]>>,
    next_id: u32,
    /// The module map last seen (by serial) and, per module index in it,
    /// its cache key and id: the warm path hashes no strings.
    map_seen: u64,
    by_index: Vec<Option<(u32, ModuleKey)>>,
    /// Files read so far (a test hook for "the second capture reads nothing").
    pub files_loaded: u64,
}

/// What the cache holds for one module.
#[derive(Clone, Debug)]
pub struct ModuleStats {
    pub path: String,
    pub symbols: usize,
    pub has_dwarf: bool,
    pub heap_bytes: usize,
    pub debug_file: Option<PathBuf>,
    pub status: Status,
}

/// Cache figures for diagnostics and the memory report.
#[derive(Clone, Debug, Default)]
pub struct CacheStats {
    pub modules: usize,
    pub modules_with_dwarf: usize,
    pub addresses: usize,
    pub heap_bytes: usize,
    pub files_loaded: u64,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Symbolizer::new(vec![PathBuf::from("/usr/lib/debug")])
    }
}

impl Symbolizer {
    pub fn new(roots: Vec<PathBuf>) -> Symbolizer {
        Symbolizer {
            roots,
            modules: HashMap::new(),
            frames: HashMap::new(),
            next_id: 0,
            map_seen: 0,
            by_index: Vec::new(),
            files_loaded: 0,
        }
    }

    /// Directories searched for separate debug files; changing them empties the cache.
    pub fn set_debug_roots(&mut self, roots: Vec<PathBuf>) {
        if roots != self.roots {
            self.roots = roots;
            self.clear();
        }
    }

    pub fn debug_roots(&self) -> &[PathBuf] {
        &self.roots
    }

    pub fn clear(&mut self) {
        self.modules.clear();
        self.frames.clear();
        self.map_seen = 0;
        self.by_index.clear();
    }

    /// Loads `m`'s files on first use; returns its cache id and key.
    fn ensure(&mut self, m: &Module) -> (u32, ModuleKey) {
        let key = ModuleKey::of(m);
        if let Some((id, _)) = self.modules.get(&key) {
            return (*id, key);
        }
        // A panic inside the file parsers (a bug they may have on a damaged
        // file) is remembered as an unreadable module, not retried.
        let roots = &self.roots;
        let info = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| debuginfo::load(m, roots)))
            .unwrap_or_else(|_| {
                debuginfo::ModuleInfo::unreadable(format!(
                    "{}: internal error while reading the file",
                    m.path
                ))
            });
        let info = Box::new(info);
        self.files_loaded += 1;
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.modules.insert(key.clone(), (id, info));
        (id, key)
    }

    /// What was learned from `m`'s files: status, whether DWARF was found,
    /// the separate debug file used, and notes on rejected candidates.
    pub fn module_status(&mut self, m: &Module) -> (Status, bool, Option<PathBuf>, Vec<String>) {
        let (_, key) = self.ensure(m);
        let info = &self.modules[&key].1;
        (info.status.clone(), info.has_dwarf(), info.debug_file.clone(), info.notes.clone())
    }

    /// Resolves a file-relative probe address in module `m`.
    pub fn resolve(&mut self, m: &Module, probe: u64) -> Arc<[Resolved]> {
        let (id, key) = self.ensure(m);
        if let Some(r) = self.frames.get(&(id, probe)) {
            return r.clone();
        }
        let r: Arc<[Resolved]> = resolve_guarded(&self.modules[&key].1, probe).into();
        if self.frames.len() >= MAX_CACHED_ADDRESSES {
            self.frames.clear();
        }
        self.frames.insert((id, probe), r.clone());
        r
    }

    /// Forgets modules that are no longer loaded.
    pub fn retain_loaded(&mut self, map: &ModuleMap) {
        let live: HashSet<ModuleKey> = map.modules().iter().map(ModuleKey::of).collect();
        let before = self.modules.len();
        self.modules.retain(|k, _| live.contains(k));
        if self.modules.len() != before {
            let ids: HashSet<u32> = self.modules.values().map(|(id, _)| *id).collect();
            self.frames.retain(|(id, _), _| ids.contains(id));
        }
    }

    /// Resolves `probe` in module `index` of `map`. When `map` is not the one
    /// seen last, modules no longer loaded are forgotten first.
    pub fn resolve_in(&mut self, map: &ModuleMap, index: usize, probe: u64) -> Arc<[Resolved]> {
        if map.serial() != self.map_seen {
            self.retain_loaded(map);
            self.map_seen = map.serial();
            self.by_index = vec![None; map.modules().len()];
        }
        let (id, key) = match &self.by_index[index] {
            Some(x) => x.clone(),
            None => {
                let x = self.ensure(map.module(index));
                self.by_index[index] = Some(x.clone());
                x
            }
        };
        if let Some(r) = self.frames.get(&(id, probe)) {
            return r.clone();
        }
        let r: Arc<[Resolved]> = match self.modules.get(&key) {
            Some((_, info)) => resolve_guarded(info, probe).into(),
            None => return self.resolve(map.module(index), probe),
        };
        if self.frames.len() >= MAX_CACHED_ADDRESSES {
            self.frames.clear();
        }
        self.frames.insert((id, probe), r.clone());
        r
    }

    pub fn module_stats(&self) -> Vec<ModuleStats> {
        let mut out: Vec<ModuleStats> = self
            .modules
            .iter()
            .map(|(k, (_, info))| ModuleStats {
                path: k.path.clone(),
                symbols: info.symbols.len(),
                has_dwarf: info.has_dwarf(),
                heap_bytes: info.heap_bytes(),
                debug_file: info.debug_file.clone(),
                status: info.status.clone(),
            })
            .collect();
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out
    }

    pub fn stats(&self) -> CacheStats {
        let frame_bytes: usize = self
            .frames
            .values()
            .map(|r| {
                48 + r
                    .iter()
                    .map(|f| std::mem::size_of::<Resolved>() + f.file.as_ref().map_or(0, |s| s.len()))
                    .sum::<usize>()
            })
            .sum();
        CacheStats {
            modules: self.modules.len(),
            modules_with_dwarf: self.modules.values().filter(|(_, i)| i.has_dwarf()).count(),
            addresses: self.frames.len(),
            heap_bytes: self.modules.values().map(|(_, i)| i.heap_bytes()).sum::<usize>() + frame_bytes,
            files_loaded: self.files_loaded,
        }
    }
}

/// `info.resolve(probe)`, with a panic in the DWARF reader turned into "no
/// name".
fn resolve_guarded(info: &ModuleInfo, probe: u64) -> Vec<Resolved> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| info.resolve(probe))).unwrap_or_else(|_| {
        vec![Resolved { func: None, file: None, line: None, column: None, inlined: false }]
    })
}

static GLOBAL: ReentryLock<Option<Symbolizer>> = ReentryLock::new(None);

/// Runs `f` with the process-wide symbolizer, or returns None if this thread
/// is already using it (a capture re-entered from a signal handler, say).
pub fn with_global<T>(f: impl FnOnce(&mut Symbolizer) -> T) -> Option<T> {
    let mut guard = GLOBAL.lock()?;
    Some(f(guard.get_or_insert_with(Symbolizer::default)))
}
