//! Caches in front of `debuginfo`: one `ModuleInfo` per loaded module image
//! and one resolution per (module, address), so a repeated capture reads no
//! file and parses nothing.
//!
//! A module image is identified by path, load bias, build-id and the inode
//! of its mapping: a library unloaded and loaded again after a rebuild gets a
//! fresh entry instead of its predecessor's names.
//!
//! What reads a module's files is a parameter (`Loader`), so the caching
//! is tested without files.
//!
//! Two things come from the loaded image rather than the files: the start
//! of each frame's function (from `.eh_frame`, which stripping keeps) and,
//! through it, the names of R's registered native routines, given only to a
//! function that starts exactly at a registered address.

use crate::debuginfo::{self, ModuleInfo, Resolved, Status};
use crate::debuginfod::{Config, Debuginfod, Fetcher};
use crate::fasthash::{FastMap, FastSet};
use crate::modules::{MappedFile, Module, ModuleMap};
use crate::reentry::ReentryLock;
use crate::symbols::Source;
use crate::unwind::ehframe::EhTables;
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

/// Bytes the modules' names (symbol tables, DWARF, unwind tables) may hold
/// together; past it the least recently used modules are forgotten and
/// read again when next needed.
pub const CACHE_BUDGET: usize = 64 << 20;

/// What the caches hold is counted, not estimated: winch's allocator counts,
/// per thread, the bytes allocated and not yet freed, so the bytes that
/// reading a module's files (or resolving an address in it) leaves behind
/// are known exactly, including what the DWARF parsers keep.
pub(crate) mod heap {
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::cell::Cell;

    /// The system allocator, counting.
    pub(crate) struct Counting;

    thread_local! {
        static NET: Cell<isize> = const { Cell::new(0) };
    }

    #[global_allocator]
    static ALLOCATOR: Counting = Counting;

    /// The memory a request of `size` bytes takes from the C library's
    /// malloc: glibc adds an 8-byte header, rounds to 16 bytes and gives at
    /// least 32.
    pub(crate) fn chunk(size: usize) -> usize {
        (size.saturating_add(8 + 15) & !15).max(32)
    }

    fn add(delta: isize) {
        // A thread being torn down has no counter: nothing to count.
        let _ = NET.try_with(|n| n.set(n.get().wrapping_add(delta)));
    }

    // SAFETY: every call is passed to the system allocator unchanged; the
    // counting touches only a thread-local integer (const-initialized, with
    // no destructor: it never allocates).
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: the caller's contract, passed on.
            let p = unsafe { System.alloc(layout) };
            if !p.is_null() {
                add(chunk(layout.size()) as isize);
            }
            p
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            // SAFETY: the caller's contract, passed on.
            let p = unsafe { System.alloc_zeroed(layout) };
            if !p.is_null() {
                add(chunk(layout.size()) as isize);
            }
            p
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: the caller's contract, passed on.
            unsafe { System.dealloc(ptr, layout) };
            add(-(chunk(layout.size()) as isize));
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: the caller's contract, passed on.
            let p = unsafe { System.realloc(ptr, layout, new_size) };
            if !p.is_null() {
                add(chunk(new_size) as isize - chunk(layout.size()) as isize);
            }
            p
        }
    }

    /// Bytes this thread has allocated and not freed (freed by another
    /// thread counts there): only differences mean anything.
    pub(crate) fn net() -> isize {
        NET.try_with(|n| n.get()).unwrap_or(0)
    }

    /// Runs `f`; also returns the bytes it left allocated (negative if it
    /// freed more than it allocated).
    pub(crate) fn measure<T>(f: impl FnOnce() -> T) -> (T, isize) {
        let before = net();
        let out = f();
        (out, net().wrapping_sub(before))
    }

    /// Bytes of a hash map's table with `capacity` entries of `entry` bytes
    /// (hashbrown: buckets of 8/7 the capacity, a control byte each).
    pub(crate) fn table(capacity: usize, entry: usize) -> usize {
        if capacity == 0 {
            0
        } else {
            let buckets = (capacity * 8 / 7).next_power_of_two();
            chunk(buckets * (entry + 1) + 16)
        }
    }

    /// Bytes of an `Arc<str>` that `s` alone holds (shared ones are
    /// counted where they came from).
    pub(crate) fn unique_str(s: &Option<std::sync::Arc<str>>) -> usize {
        match s {
            Some(a) if std::sync::Arc::strong_count(a) == 1 => chunk(16 + a.len()),
            _ => 0,
        }
    }
}

/// Reads what the symbolizer needs from a module's files, looking for
/// separate debug files under the given roots.
pub(crate) type Loader = Box<dyn Fn(&Module, &[PathBuf]) -> ModuleInfo + Send>;

pub struct Symbolizer {
    loader: Loader,
    roots: Vec<PathBuf>,
    /// Cache id of each module image read so far, and what was read.
    ids: HashMap<ModuleKey, u32>,
    infos: FastMap<u32, Box<ModuleInfo>>,
    /// Unwind tables of each module image, for function starts, and the
    /// bytes they hold.
    starts: FastMap<u32, (Option<EhTables>, usize)>,
    frames: FastMap<(u32, u64), Arc<[Resolved]>>,
    /// R's registered native routines: this process's, and those read
    /// from other processes (see `outside::registration`).
    registered: Routines,
    other_registered: Routines,
    /// debuginfod: the session's state (kept while turned off, so that
    /// misses stay remembered), whether it is on, and the modules still to
    /// try (their capture's time ran out before their turn).
    debuginfod: Option<Debuginfod>,
    debuginfod_on: bool,
    pending: FastSet<u32>,
    next_id: u32,
    /// The module map last seen (by serial) and, per module index in it,
    /// the module's cache id: the warm path hashes and copies no strings.
    map_seen: u64,
    by_index: Vec<Option<u32>>,
    /// This process's module map modules were last forgotten by.
    own_seen: u64,
    /// Files read so far (a test hook for "the second capture reads nothing").
    pub(crate) files_loaded: u64,
    /// The bytes modules may hold together ([`CACHE_BUDGET`]), when each
    /// was last used (a tick), and how many were forgotten for room.
    budget: usize,
    used: FastMap<u32, u64>,
    tick: u64,
    evicted: u64,
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
    /// Compilation units of its DWARF parsed so far, and those its
    /// `.debug_aranges` lists (None without DWARF).
    pub units_parsed: Option<usize>,
    pub units_listed: Option<usize>,
}

/// Cache figures for diagnostics and the memory report.
#[derive(Clone, Debug, Default)]
pub struct CacheStats {
    pub modules: usize,
    pub modules_with_dwarf: usize,
    pub addresses: usize,
    pub heap_bytes: usize,
    pub files_loaded: u64,
    /// Modules forgotten to stay within [`CACHE_BUDGET`].
    pub evicted: u64,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Symbolizer::new(Box::new(debuginfo::load), vec![PathBuf::from("/usr/lib/debug")])
    }
}

impl Symbolizer {
    pub(crate) fn new(loader: Loader, roots: Vec<PathBuf>) -> Symbolizer {
        Symbolizer {
            loader,
            roots,
            ids: HashMap::new(),
            infos: FastMap::default(),
            starts: FastMap::default(),
            frames: FastMap::default(),
            registered: Routines::default(),
            other_registered: Routines::default(),
            debuginfod: None,
            debuginfod_on: false,
            pending: FastSet::default(),
            next_id: 0,
            map_seen: 0,
            own_seen: 0,
            by_index: Vec::new(),
            files_loaded: 0,
            budget: CACHE_BUDGET,
            used: FastMap::default(),
            tick: 0,
            evicted: 0,
        }
    }

    /// Sets the bytes modules may hold together (tests).
    #[cfg(test)]
    pub(crate) fn set_budget(&mut self, bytes: usize) {
        self.budget = bytes;
    }

    /// Notes that module `id` was used now.
    fn touch(&mut self, id: u32) {
        self.tick += 1;
        self.used.insert(id, self.tick);
    }

    /// The bytes module `id` holds (its information and unwind tables).
    fn module_bytes(&self, id: u32) -> usize {
        self.infos.get(&id).map_or(0, |i| i.heap_bytes()) + self.starts.get(&id).map_or(0, |s| s.1)
    }

    /// Forgets the least recently used modules, never `keep`, until all
    /// hold at most the budget. A module forgotten is read again when it is
    /// next needed.
    fn evict_over_budget(&mut self, keep: u32) {
        let mut total: usize = self.infos.keys().map(|&id| self.module_bytes(id)).sum();
        while total > self.budget {
            let oldest = self
                .infos
                .keys()
                .filter(|&&id| id != keep)
                .min_by_key(|&&id| self.used.get(&id).copied().unwrap_or(0))
                .copied();
            let Some(id) = oldest else { break };
            total = total.saturating_sub(self.module_bytes(id));
            self.forget(id);
            self.evicted += 1;
        }
    }

    /// Forgets everything read of module `id`.
    fn forget(&mut self, id: u32) {
        self.ids.retain(|_, v| *v != id);
        self.infos.remove(&id);
        self.starts.remove(&id);
        self.pending.remove(&id);
        self.used.remove(&id);
        self.frames.retain(|(i, _), _| *i != id);
        for slot in self.by_index.iter_mut().filter(|s| **s == Some(id)) {
            *slot = None;
        }
    }

    /// Directories searched for separate debug files; changing them empties the cache.
    /// Sets the directories searched for debug files (the first
    /// `crate::debugfile::MAX_ROOTS` distinct ones).
    pub fn set_debug_roots(&mut self, roots: Vec<PathBuf>) {
        let roots = crate::debugfile::roots(roots);
        if roots != self.roots {
            self.roots = roots;
            self.clear();
        }
    }

    pub fn debug_roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Sets R's registered native routines (absolute address, name); a
    /// change forgets the resolutions made with the old table.
    pub fn set_registered(&mut self, routines: Vec<(usize, String)>) {
        let new = Routines::of(&crate::modules::current(), routines);
        if new != self.registered {
            self.registered = new;
            self.frames.clear();
        }
    }

    /// Adds the registered routines of another process whose modules are
    /// `map` (absolute address there, name): they name that process's
    /// frames only (a table is per module load: its path and bias).
    pub fn add_registered_in(&mut self, map: &ModuleMap, routines: Vec<(usize, String)>) {
        let new = Routines::of(map, routines);
        if new.0.iter().all(|(k, v)| self.other_registered.0.get(k) == Some(v)) {
            return;
        }
        if self.other_registered.0.len() + new.0.len() > MAX_OTHER_ROUTINES {
            self.other_registered.0.clear();
        }
        self.other_registered.0.extend(new.0);
        self.frames.clear();
    }

    /// Turns fetching from debuginfod servers on or off; `fetcher` is used
    /// from the first time it is turned on. Modules read before without
    /// DWARF are tried at their next use.
    pub fn set_debuginfod(&mut self, on: bool, fetcher: impl FnOnce() -> Box<dyn Fetcher>) {
        if on && self.debuginfod.is_none() {
            self.debuginfod = Some(Debuginfod::new(fetcher()));
        }
        if on && !self.debuginfod_on {
            self.pending = self.infos.iter().filter(|(_, i)| !i.has_dwarf()).map(|(&id, _)| id).collect();
        }
        if !on {
            self.pending.clear();
        }
        self.debuginfod_on = on;
    }

    /// The session's debuginfod state, if it was ever turned on.
    pub fn debuginfod(&self) -> Option<&Debuginfod> {
        self.debuginfod.as_ref()
    }

    /// A capture starts: fetches it needs get a time budget of their own.
    pub(crate) fn start_capture(&mut self) {
        if let Some(d) = self.debuginfod.as_mut() {
            d.start_capture();
        }
    }

    /// Whether module `index` of `map` was read with DWARF (None: not read).
    pub(crate) fn module_has_dwarf(&self, map: &ModuleMap, index: usize) -> Option<bool> {
        let id = self.ids.get(&ModuleKey::of(map.module(index)))?;
        Some(self.infos.get(id)?.has_dwarf())
    }

    /// Tries debuginfod for module `id` (`m`) when it is on and the module
    /// has a build-id but no DWARF. A file that is not the module's debug
    /// file is rejected.
    fn try_debuginfod(&mut self, id: u32, m: &Module) {
        self.pending.remove(&id);
        let (Some(d), true, Some(build_id)) =
            (self.debuginfod.as_mut(), self.debuginfod_on, m.build_id.as_deref())
        else {
            return;
        };
        let Some(info) = self.infos.get_mut(&id) else { return };
        if info.has_dwarf() || info.status != Status::Ok {
            return;
        }
        let config = Config::from_env();
        match d.debug_file(build_id, &config, std::time::Instant::now()) {
            Some(path) => {
                let (added, held) = heap::measure(|| {
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        debuginfo::add_debug_file(info, m, &path, Source::Debuginfod)
                    }))
                    .unwrap_or_else(|_| Err("internal error while reading the file".into()))
                });
                info.add_held(held);
                match added {
                    Ok(()) => self.frames.retain(|(i, _), _| *i != id),
                    Err(why) => d.reject(build_id, &config, &why),
                }
            }
            None if d.outcome(build_id).is_none() && config.has_servers() => {
                self.pending.insert(id);
            }
            None => {}
        }
    }

    #[cfg(test)]
    pub(crate) fn registered_count(&self) -> usize {
        self.registered.len()
    }

    pub(crate) fn clear(&mut self) {
        self.ids.clear();
        self.infos.clear();
        self.starts.clear();
        self.pending.clear();
        self.frames.clear();
        self.used.clear();
        self.map_seen = 0;
        self.own_seen = 0;
        self.by_index.clear();
    }

    /// Loads `m`'s files on first use; returns its cache id.
    fn ensure(&mut self, m: &Module) -> u32 {
        let key = ModuleKey::of(m);
        if let Some(&id) = self.ids.get(&key) {
            return id;
        }
        // A panic inside the file parsers (a bug they may have on a damaged
        // file) is remembered as an unreadable module, not retried.
        let (loader, roots) = (&self.loader, &self.roots);
        let (mut info, held) = heap::measure(|| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| loader(m, roots))).unwrap_or_else(|_| {
                debuginfo::ModuleInfo::unreadable(format!(
                    "{}: internal error while reading the file",
                    m.path
                ))
            })
        });
        info.add_held(held);
        self.files_loaded += 1;
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.ids.insert(key, id);
        self.infos.insert(id, Box::new(info));
        if self.debuginfod_on {
            self.try_debuginfod(id, m);
        }
        self.touch(id);
        self.evict_over_budget(id);
        id
    }

    /// Forgets modules that are no longer loaded.
    pub(crate) fn retain_loaded(&mut self, map: &ModuleMap) {
        let live: HashSet<ModuleKey> = map.modules().iter().map(ModuleKey::of).collect();
        let before = self.ids.len();
        self.ids.retain(|k, _| live.contains(k));
        if self.ids.len() != before {
            let kept: HashSet<u32> = self.ids.values().copied().collect();
            self.infos.retain(|id, _| kept.contains(id));
            self.starts.retain(|id, _| kept.contains(id));
            self.pending.retain(|id| kept.contains(id));
            self.frames.retain(|(id, _), _| kept.contains(id));
            self.used.retain(|id, _| kept.contains(id));
        }
    }

    /// The id of module `index` of `map` (its files read on first use).
    /// When `map` is a new one of this process's, modules no longer loaded
    /// are forgotten first.
    /// (Only when this process's map is new: another process's, a worker's
    /// read from outside, does not say what this one has loaded, and a
    /// profile naming samples of several processes in turn keeps the
    /// modules of each.)
    fn id_in(&mut self, map: &ModuleMap, index: usize) -> u32 {
        if map.serial() != self.map_seen {
            if !map.is_foreign() && map.serial() != self.own_seen {
                self.retain_loaded(map);
                self.own_seen = map.serial();
            }
            self.map_seen = map.serial();
            self.by_index = vec![None; map.modules().len()];
        }
        match self.by_index[index] {
            Some(id) => id,
            None => {
                let id = self.ensure(map.module(index));
                self.by_index[index] = Some(id);
                id
            }
        }
    }

    /// Resolves the file-relative address `probe` in module `index` of `map`.
    pub(crate) fn resolve_in(&mut self, map: &ModuleMap, index: usize, probe: u64) -> Arc<[Resolved]> {
        let id = self.id_in(map, index);
        if self.pending.contains(&id) {
            self.try_debuginfod(id, map.module(index));
        }
        if let Some(r) = self.frames.get(&(id, probe)) {
            return r.clone();
        }
        let info = self.infos.get_mut(&id).expect("a cached module");
        let (mut r, held) = heap::measure(|| resolve_guarded(info, probe));
        // What the resolution parsed stays with the module; the result
        // itself goes to the address cache.
        info.add_held(held - resolved_bytes(&r, r.capacity()) as isize);
        let module = map.module(index);
        let tables = &self
            .starts
            .entry(id)
            .or_insert_with(|| {
                let (tables, held) = heap::measure(|| {
                    if map.is_foreign() {
                        EhTables::of_file(module)
                    } else {
                        EhTables::of_loaded(module)
                    }
                });
                (tables, held.max(0) as usize)
            })
            .0;
        let start =
            tables.as_ref().and_then(|t| t.function_start((probe as usize).wrapping_add(module.bias)));
        name_registered(&mut r, module, start, &[&self.registered, &self.other_registered]);
        for f in r.iter_mut() {
            f.start = start.map(|s| s.wrapping_sub(module.bias) as u64);
        }
        let r: Arc<[Resolved]> = r.into();
        if self.frames.len() >= MAX_CACHED_ADDRESSES {
            self.frames.clear();
        }
        self.frames.insert((id, probe), r.clone());
        // Resolving parsed more of the module: it may be over budget now.
        self.touch(id);
        self.evict_over_budget(id);
        r
    }

    /// The symbol table of module `index` of `map` (read on first use), as
    /// a copy that shares the names.
    pub(crate) fn symbol_table(&mut self, map: &ModuleMap, index: usize) -> crate::symbols::SymbolTable {
        let id = self.id_in(map, index);
        self.infos[&id].symbols.clone()
    }

    pub fn module_stats(&self) -> Vec<ModuleStats> {
        let mut out: Vec<ModuleStats> = self
            .ids
            .iter()
            .map(|(k, id)| (k, &self.infos[id]))
            .map(|(k, info)| ModuleStats {
                path: k.path.clone(),
                symbols: info.symbols.len(),
                has_dwarf: info.has_dwarf(),
                heap_bytes: info.heap_bytes(),
                debug_file: info.debug_file.clone(),
                status: info.status.clone(),
                units_parsed: info.dwarf_counts().map(|c| c.units_parsed),
                units_listed: info.dwarf_counts().map(|c| c.units_listed),
            })
            .collect();
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out
    }

    pub fn stats(&self) -> CacheStats {
        use std::mem::size_of;
        // The address cache: its table, each resolution, and the names and
        // files it alone holds (those shared with a symbol table or the
        // registered routines are counted there).
        let frame_bytes = heap::table(self.frames.capacity(), size_of::<((u32, u64), Arc<[Resolved]>)>())
            + self
                .frames
                .values()
                .map(|r| {
                    heap::chunk(16 + r.len() * size_of::<Resolved>())
                        + r.iter()
                            .map(|f| heap::unique_str(&f.func) + heap::unique_str(&f.file))
                            .sum::<usize>()
                })
                .sum::<usize>();
        let start_bytes = heap::table(self.starts.capacity(), size_of::<(u32, (Option<EhTables>, usize))>())
            + self
                .starts
                .values()
                .map(|(t, held)| (*held).max(t.as_ref().map_or(0, |t| t.heap_bytes())))
                .sum::<usize>();
        let registered_bytes = self.registered.heap_bytes() + self.other_registered.heap_bytes();
        // The module index: keys, boxes, the small tables.
        let index_bytes = heap::table(self.ids.capacity(), size_of::<(ModuleKey, u32)>())
            + self
                .ids
                .keys()
                .map(|k| heap::chunk(k.path.len()) + k.build_id.as_ref().map_or(0, |b| heap::chunk(b.len())))
                .sum::<usize>()
            + heap::table(self.infos.capacity(), size_of::<(u32, Box<ModuleInfo>)>())
            + self.infos.len() * heap::chunk(size_of::<ModuleInfo>())
            + heap::table(self.pending.capacity(), size_of::<u32>())
            + heap::chunk(self.by_index.capacity() * size_of::<Option<u32>>());
        CacheStats {
            modules: self.infos.len(),
            modules_with_dwarf: self.infos.values().filter(|i| i.has_dwarf()).count(),
            addresses: self.frames.len(),
            heap_bytes: self.infos.values().map(|i| i.heap_bytes()).sum::<usize>()
                + frame_bytes
                + start_bytes
                + registered_bytes
                + index_bytes,
            files_loaded: self.files_loaded,
            evicted: self.evicted,
        }
    }
}

/// The bytes a fresh resolution holds itself: its vector and the names and
/// files allocated for it alone.
fn resolved_bytes(r: &[Resolved], capacity: usize) -> usize {
    heap::chunk(capacity * std::mem::size_of::<Resolved>())
        + r.iter().map(|f| heap::unique_str(&f.func) + heap::unique_str(&f.file)).sum::<usize>()
}

/// Registered routines, by the module load they are in (its bias) and
/// their absolute address, with the module's path and the name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Routines(HashMap<(usize, usize), (Arc<str>, Arc<str>)>);

/// Bound on the routines kept from other processes; past it the table
/// restarts.
const MAX_OTHER_ROUTINES: usize = 1_000_000;

impl Routines {
    /// The routines (absolute address, name) that lie in modules of `map`.
    fn of(map: &ModuleMap, routines: Vec<(usize, String)>) -> Routines {
        let mut paths: HashMap<usize, Arc<str>> = HashMap::new();
        let mut out = HashMap::new();
        for (addr, name) in routines.into_iter().filter(|(a, _)| *a != 0) {
            let Some(i) = map.module_of(addr) else { continue };
            let path = paths.entry(i).or_insert_with(|| Arc::from(map.module(i).path.as_str())).clone();
            out.insert((map.module(i).bias, addr), (path, Arc::from(name)));
        }
        Routines(out)
    }

    /// The name of the routine at `start` in `module`.
    fn get(&self, module: &Module, start: usize) -> Option<&Arc<str>> {
        self.0.get(&(module.bias, start)).filter(|(path, _)| **path == *module.path).map(|(_, name)| name)
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.len()
    }

    fn heap_bytes(&self) -> usize {
        heap::table(self.0.capacity(), std::mem::size_of::<((usize, usize), (Arc<str>, Arc<str>))>())
            + self.0.values().map(|(_, n)| heap::chunk(16 + n.len())).sum::<usize>()
    }
}

/// Names the physical frame of `r` (its last entry) after the registered
/// routine whose address is `start`, the absolute start of its function in
/// `module`, when nothing else named it. An address inside a function is
/// never named after the entry point that called it: only an exact start
/// matches.
fn name_registered(r: &mut [Resolved], module: &Module, start: Option<usize>, tables: &[&Routines]) {
    let (Some(last), Some(start)) = (r.last_mut(), start) else { return };
    if last.func.is_none() {
        if let Some(name) = tables.iter().find_map(|t| t.get(module, start)) {
            last.func = Some(name.clone());
            last.source = Some(Source::Registration);
        }
    }
}

/// `info.resolve(probe)`, with a panic in the DWARF reader turned into "no
/// name".
fn resolve_guarded(info: &mut ModuleInfo, probe: u64) -> Vec<Resolved> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| info.resolve(probe)))
        .unwrap_or_else(|_| vec![Resolved::unnamed()])
}

static GLOBAL: ReentryLock<Option<Symbolizer>> = ReentryLock::new(None);

/// Runs `f` with the process-wide symbolizer, or returns None if this thread
/// is already using it (a capture re-entered from a signal handler, say).
pub fn with_global<T>(f: impl FnOnce(&mut Symbolizer) -> T) -> Option<T> {
    let mut guard = GLOBAL.lock()?;
    Some(f(guard.get_or_insert_with(Symbolizer::default)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::Symbol;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn module(path: &str, start: usize, ino: u64) -> Module {
        Module {
            mapped: Some(MappedFile { dev: 1, ino }),
            ..Module::synthetic(path, start, start + 0x1000, false)
        }
    }

    /// A symbolizer whose loader names one function per module, `<file>_f`
    /// covering offsets 0x100..0x200 (or panics for "/bad.so"), and counts
    /// its loads.
    fn counting() -> (Symbolizer, Arc<AtomicUsize>) {
        let loads = Arc::new(AtomicUsize::new(0));
        let counter = loads.clone();
        let loader: Loader = Box::new(move |m: &Module, _roots: &[PathBuf]| {
            counter.fetch_add(1, Ordering::SeqCst);
            assert!(m.path != "/bad.so", "a parser bug");
            let name = format!("{}_f{}", m.path.trim_start_matches('/'), m.mapped.map_or(0, |f| f.ino));
            ModuleInfo::from_symbols(vec![Symbol { start: 0x100, size: 0x100, name: name.into(), rank: 0 }])
        });
        (Symbolizer::new(loader, Vec::new()), loads)
    }

    fn name(r: &Arc<[Resolved]>) -> Option<&str> {
        r.last().and_then(|f| f.func.as_deref())
    }

    #[test]
    fn a_module_is_read_once_and_addresses_are_cached() {
        let (mut s, loads) = counting();
        let map = ModuleMap::new(vec![module("/a.so", 0x10000, 1), module("/b.so", 0x20000, 2)]);
        assert_eq!(name(&s.resolve_in(&map, 0, 0x150)), Some("a.so_f1"));
        assert_eq!(name(&s.resolve_in(&map, 0, 0x180)), Some("a.so_f1"));
        assert_eq!(name(&s.resolve_in(&map, 1, 0x150)), Some("b.so_f2"));
        assert_eq!(name(&s.resolve_in(&map, 1, 0x50)), None, "outside every symbol");
        assert_eq!(loads.load(Ordering::SeqCst), 2);
        assert_eq!(s.stats().files_loaded, 2);
        assert_eq!(s.stats().addresses, 4);
        // The same modules in a new map (another library was loaded): no
        // file is read again.
        let map2 = ModuleMap::new(vec![
            module("/a.so", 0x10000, 1),
            module("/c.so", 0x30000, 3),
            module("/b.so", 0x20000, 2),
        ]);
        assert_eq!(name(&s.resolve_in(&map2, 2, 0x150)), Some("b.so_f2"));
        assert_eq!(loads.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn an_unloaded_module_is_forgotten_and_a_rebuilt_one_is_read_afresh() {
        let (mut s, loads) = counting();
        let map = ModuleMap::new(vec![module("/a.so", 0x10000, 1), module("/b.so", 0x20000, 2)]);
        s.resolve_in(&map, 0, 0x150);
        s.resolve_in(&map, 1, 0x150);
        // b.so unloaded, then rebuilt and loaded again at the same path and
        // address (another inode): its names come from the new file.
        let map2 = ModuleMap::new(vec![module("/a.so", 0x10000, 1)]);
        s.resolve_in(&map2, 0, 0x150);
        assert_eq!(s.stats().modules, 1);
        let map3 = ModuleMap::new(vec![module("/a.so", 0x10000, 1), module("/b.so", 0x20000, 9)]);
        assert_eq!(name(&s.resolve_in(&map3, 1, 0x150)), Some("b.so_f9"));
        assert_eq!(loads.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn over_budget_the_least_recently_used_module_is_forgotten_and_read_again() {
        let (mut s, loads) = counting();
        let map = ModuleMap::new(vec![
            module("/a.so", 0x10000, 1),
            module("/b.so", 0x20000, 2),
            module("/c.so", 0x30000, 3),
        ]);
        // Room for about two modules' names.
        s.resolve_in(&map, 0, 0x150);
        let a = *s.infos.keys().next().unwrap();
        let one = s.module_bytes(a);
        assert!(one > 0);
        s.set_budget(one * 2 + one / 2);
        s.resolve_in(&map, 1, 0x150);
        assert_eq!((s.stats().modules, s.stats().evicted), (2, 0));
        // a.so is used again, so b.so is the least recently used when c.so
        // comes.
        s.resolve_in(&map, 0, 0x160);
        assert_eq!(name(&s.resolve_in(&map, 2, 0x150)), Some("c.so_f3"));
        assert_eq!((s.stats().modules, s.stats().evicted), (2, 1));
        assert_eq!(loads.load(Ordering::SeqCst), 3);
        // b.so is read again when needed, with the same names.
        assert_eq!(name(&s.resolve_in(&map, 1, 0x150)), Some("b.so_f2"));
        assert_eq!(loads.load(Ordering::SeqCst), 4);
        assert!(s.stats().modules <= 2);
        // A budget smaller than one module keeps the module in use.
        s.set_budget(1);
        assert_eq!(name(&s.resolve_in(&map, 0, 0x150)), Some("a.so_f1"));
        assert_eq!(s.stats().modules, 1);
    }

    #[test]
    fn a_loader_panic_is_remembered_as_unreadable() {
        let (mut s, loads) = counting();
        let map = ModuleMap::new(vec![module("/bad.so", 0x10000, 1)]);
        assert_eq!(name(&s.resolve_in(&map, 0, 0x150)), None);
        assert_eq!(name(&s.resolve_in(&map, 0, 0x160)), None);
        assert_eq!(loads.load(Ordering::SeqCst), 1, "not retried");
        assert!(matches!(s.module_stats()[0].status, Status::Unreadable(_)));
    }

    #[test]
    fn registered_names_only_at_an_exact_start() {
        let map = ModuleMap::new(vec![Module::synthetic("/lib/pkg.so", 0x4000, 0x8000, false)]);
        let m = map.module(0);
        let registered = Routines::of(&map, vec![(0x5000, "entry".into()), (0x9000, "elsewhere".into())]);
        assert_eq!(registered.len(), 1, "a routine outside every module is left out");
        let mut r = vec![Resolved::unnamed()];
        name_registered(&mut r, m, Some(0x5000), &[&registered]);
        assert_eq!(r[0].func.as_deref(), Some("entry"));
        assert_eq!(r[0].source, Some(Source::Registration));
        // A helper the entry point called (another start), or an address no
        // unwind entry covers: no name.
        for start in [Some(0x5100), None] {
            let mut r = vec![Resolved::unnamed()];
            name_registered(&mut r, m, start, &[&registered]);
            assert_eq!(r[0].func, None);
        }
        // A name from the symbol tables is kept.
        let mut r =
            vec![Resolved { func: Some("real".into()), source: Some(Source::Dynsym), ..Resolved::unnamed() }];
        name_registered(&mut r, m, Some(0x5000), &[&registered]);
        assert_eq!(r[0].func.as_deref(), Some("real"));
        // The same address in another process's load of another file (or
        // of the same file at another address): no name.
        for other in [
            Module::synthetic("/lib/other.so", 0x4000, 0x8000, false),
            Module::synthetic("/lib/pkg.so", 0x3000, 0x8000, false),
        ] {
            let mut r = vec![Resolved::unnamed()];
            name_registered(&mut r, &other, Some(0x5000), &[&registered]);
            assert_eq!(r[0].func, None);
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn live_frames_get_their_function_start_and_registered_names() {
        #[inline(never)]
        fn target(x: u64) -> u64 {
            std::hint::black_box(x).wrapping_add(7)
        }
        let f = target as fn(u64) -> u64 as usize;
        let _ = target(1);
        let map = crate::modules::current();
        let index = map.module_of(f).unwrap();
        let bias = map.module(index).bias;
        // Names from a loader that knows none, so registration can name it.
        let loader: Loader = Box::new(|_: &Module, _: &[PathBuf]| ModuleInfo::from_symbols(Vec::new()));
        let mut s = Symbolizer::new(loader, Vec::new());
        let probe = (f + 3 - bias) as u64;
        let r = s.resolve_in(&map, index, probe);
        assert_eq!(r.last().unwrap().start, Some((f - bias) as u64));
        assert_eq!(r.last().unwrap().func, None);
        s.set_registered(vec![(f + 1, "off_by_one".into())]);
        assert_eq!(s.resolve_in(&map, index, probe).last().unwrap().func, None);
        s.set_registered(vec![(f, "target_entry".into())]);
        assert_eq!(s.registered_count(), 1);
        let r = s.resolve_in(&map, index, probe);
        assert_eq!(r.last().unwrap().func.as_deref(), Some("target_entry"));
        assert_eq!(r.last().unwrap().source, Some(Source::Registration));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn the_figure_counts_what_is_held() {
        // The C library, with its separate debug file when one is installed
        // (Debian: libc6-dbg): a few of its functions resolved.
        let map = crate::modules::current();
        let fns = [
            libc::getpid as unsafe extern "C" fn() -> libc::pid_t as usize,
            libc::malloc as unsafe extern "C" fn(usize) -> *mut libc::c_void as usize,
            libc::free as unsafe extern "C" fn(*mut libc::c_void) as usize,
            libc::strlen as unsafe extern "C" fn(*const libc::c_char) -> usize as usize,
        ];
        let index = map.module_of(fns[0]).unwrap();
        let bias = map.module(index).bias;
        let before = heap::net();
        let mut s = Symbolizer::default();
        for f in fns {
            for off in [1, 5] {
                s.resolve_in(&map, index, (f + off - bias) as u64);
            }
        }
        let held = heap::net() - before;
        let counted = s.stats().heap_bytes as isize;
        let m = &s.module_stats()[0];
        eprintln!("held {held}, counted {counted}; DWARF: {} {:?}", m.has_dwarf, m.debug_file);
        assert!(
            (held - counted).abs() <= held / 20 + (32 << 10),
            "cache_info counts {counted} bytes, {held} are held"
        );
        // At least the symbol tables and sections it keeps.
        let info = s.infos.values().next().unwrap();
        assert!(info.heap_bytes() >= info.known_bytes());
        if let Some(c) = info.dwarf_counts() {
            // Only the units of the functions looked up were read (the C
            // library has thousands).
            assert!((1..=8).contains(&c.units_parsed), "{c:?}");
            assert!(info.heap_bytes() > info.dwarf_section_bytes(), "the parsed units count too");
        }
        // Dropped, the caches give back what they held.
        drop(s);
        let left = heap::net() - before;
        assert!(left.abs() < 32 << 10, "{left} bytes left after the caches were dropped");
    }

    #[test]
    fn the_counter_sees_allocations_and_frees() {
        let (v, held) = heap::measure(|| vec![0u8; 1000]);
        assert_eq!(held, heap::chunk(1000) as isize);
        let ((), freed) = heap::measure(|| drop(v));
        assert_eq!(freed, -held);
        let (mut v, _) = heap::measure(|| Vec::<u8>::with_capacity(10));
        let ((), grown) = heap::measure(|| v.reserve_exact(5000));
        assert_eq!(grown, (heap::chunk(5000) - heap::chunk(10)) as isize);
    }

    #[test]
    fn new_debug_roots_empty_the_cache() {
        let (mut s, loads) = counting();
        let map = ModuleMap::new(vec![module("/a.so", 0x10000, 1)]);
        s.resolve_in(&map, 0, 0x150);
        s.set_debug_roots(Vec::new());
        s.resolve_in(&map, 0, 0x150);
        assert_eq!(loads.load(Ordering::SeqCst), 1, "the same roots keep the cache");
        s.set_debug_roots(vec![PathBuf::from("/dbg")]);
        assert_eq!(s.debug_roots(), [PathBuf::from("/dbg")]);
        s.resolve_in(&map, 0, 0x150);
        assert_eq!(loads.load(Ordering::SeqCst), 2);
    }
}
