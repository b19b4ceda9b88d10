//! Symbol tables with exact containment and demangling.
//!
//! A frame is named only when its address lies inside a symbol's extent
//! (`start <= addr < start + size`). Symbols without a size cannot contain
//! anything and are dropped: naming an address after the nearest preceding
//! symbol is how stripped libraries end up with wrong names.

use std::sync::Arc;

/// Where a frame's name came from, in order of trust.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    /// DWARF of the module or of a local separate debug file.
    Dwarf,
    /// DWARF of a debug file fetched from a debuginfod server.
    Debuginfod,
    /// `.symtab` (of the module or of its debug file).
    Symtab,
    /// `.dynsym`.
    Dynsym,
    /// The xz-compressed `.symtab` in `.gnu_debugdata` (MiniDebugInfo).
    MiniDebugInfo,
    /// R's table of registered native routines: only for a function that
    /// starts exactly at a registered address.
    Registration,
}

impl Source {
    pub fn name(self) -> &'static str {
        match self {
            Source::Dwarf => "dwarf",
            Source::Debuginfod => "debuginfod",
            Source::Symtab => "symtab",
            Source::Dynsym => "dynsym",
            Source::MiniDebugInfo => "minidebuginfo",
            Source::Registration => "registration",
        }
    }
}

/// Symbol ranks: a table's base plus the binding (0 global, 1 weak, 2
/// local), so aliases prefer `.symtab` over `.dynsym` over MiniDebugInfo.
pub const RANK_SYMTAB: u8 = 0;
pub const RANK_DYNSYM: u8 = 4;
pub const RANK_MINIDEBUGINFO: u8 = 8;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Symbol {
    /// Start, as a virtual address in the file.
    pub start: u64,
    pub size: u64,
    /// Demangled name.
    pub name: Arc<str>,
    /// Preference among aliases at the same address: lower wins.
    pub rank: u8,
}

impl Symbol {
    /// The table the symbol came from (see the `RANK_*` constants).
    pub fn source(&self) -> Source {
        match self.rank {
            r if r < RANK_DYNSYM => Source::Symtab,
            r if r < RANK_MINIDEBUGINFO => Source::Dynsym,
            _ => Source::MiniDebugInfo,
        }
    }

    pub fn contains(&self, addr: u64) -> bool {
        self.start <= addr && addr - self.start < self.size
    }
}

/// Sorted symbols with a prefix maximum of their ends for containment lookups.
#[derive(Clone, Debug, Default)]
pub struct SymbolTable {
    syms: Vec<Symbol>,
    max_end: Vec<u64>,
}

impl SymbolTable {
    pub fn new(mut syms: Vec<Symbol>) -> SymbolTable {
        syms.retain(|s| s.size > 0 && s.start.checked_add(s.size).is_some());
        // By start, and among equal starts the largest first, so that the
        // last candidate a lookup meets is the innermost (smallest) one. (The
        // key is total: entries it cannot order are the same entry, so an
        // unstable sort gives the same table.)
        syms.sort_unstable_by(|a, b| {
            (a.start, std::cmp::Reverse(a.size), a.rank, &a.name).cmp(&(
                b.start,
                std::cmp::Reverse(b.size),
                b.rank,
                &b.name,
            ))
        });
        // Aliases (same start and size): keep the preferred one.
        syms.dedup_by(|later, kept| later.start == kept.start && later.size == kept.size);
        let mut max_end = Vec::with_capacity(syms.len());
        let mut m = 0u64;
        for s in &syms {
            m = m.max(s.start + s.size);
            max_end.push(m);
        }
        SymbolTable { syms, max_end }
    }

    pub fn len(&self) -> usize {
        self.syms.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.syms.is_empty()
    }

    /// The innermost symbol containing `addr`, if any.
    pub fn lookup(&self, addr: u64) -> Option<&Symbol> {
        let mut i = self.syms.partition_point(|s| s.start <= addr);
        while i > 0 {
            i -= 1;
            if self.max_end[i] <= addr {
                return None;
            }
            if self.syms[i].contains(addr) {
                return Some(&self.syms[i]);
            }
        }
        None
    }

    /// Approximate heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.syms.iter().map(|s| s.name.len() + 16).sum::<usize>()
            + self.syms.capacity() * std::mem::size_of::<Symbol>()
            + self.max_end.capacity() * 8
    }

    pub fn iter(&self) -> impl Iterator<Item = &Symbol> {
        self.syms.iter()
    }
}

/// Demangles Rust (legacy and v0) and C++ (Itanium) symbol names; other names
/// are returned unchanged.
pub fn demangle(name: &str) -> String {
    if is_rust_symbol(name) {
        if let Ok(d) = rustc_demangle::try_demangle(name) {
            return format!("{d:#}");
        }
    }
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            let opts = cpp_demangle::DemangleOptions::default();
            if let Ok(d) = sym.demangle_with_options(&opts) {
                return d;
            }
        }
    }
    name.to_string()
}

/// Rust v0 symbols start with `_R`; legacy ones are Itanium-shaped but end in
/// a 16-hex-digit hash component (`17h0123456789abcdefE`).
fn is_rust_symbol(name: &str) -> bool {
    if name.starts_with("_R") {
        return true;
    }
    if !name.starts_with("_ZN") {
        return false;
    }
    let base = name.split('.').next().unwrap_or(name);
    let b = base.as_bytes();
    b.len() > 20
        && b[b.len() - 1] == b'E'
        && &b[b.len() - 20..b.len() - 17] == b"17h"
        && b[b.len() - 17..b.len() - 1].iter().all(|c| c.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(start: u64, size: u64, name: &str, rank: u8) -> Symbol {
        Symbol { start, size, name: name.into(), rank }
    }

    #[test]
    fn containment_not_nearest() {
        let t = SymbolTable::new(vec![sym(0x100, 0x10, "exported", 0), sym(0x200, 0x20, "other", 0)]);
        assert_eq!(t.lookup(0x100).unwrap().name.as_ref(), "exported");
        assert_eq!(t.lookup(0x10f).unwrap().name.as_ref(), "exported");
        // Just past the end of `exported`: a hidden function; no name.
        assert!(t.lookup(0x110).is_none());
        assert!(t.lookup(0x1ff).is_none());
        assert!(t.lookup(0xff).is_none());
        assert!(t.lookup(0x220).is_none());
    }

    #[test]
    fn sizeless_symbols_are_ignored() {
        let t = SymbolTable::new(vec![sym(0x100, 0, "label", 0)]);
        assert!(t.lookup(0x100).is_none());
        assert!(t.is_empty());
    }

    #[test]
    fn nested_and_alias_symbols() {
        let t = SymbolTable::new(vec![
            sym(0x100, 0x100, "outer", 0),
            sym(0x140, 0x10, "inner", 0),
            sym(0x300, 0x10, "weak_alias", 1),
            sym(0x300, 0x10, "strong", 0),
            sym(0x400, 0x100, "big_same_start", 0),
            sym(0x400, 0x10, "small_same_start", 0),
        ]);
        assert_eq!(t.lookup(0x145).unwrap().name.as_ref(), "inner");
        // After the inner symbol ends, the outer one still contains the address.
        assert_eq!(t.lookup(0x150).unwrap().name.as_ref(), "outer");
        assert_eq!(t.lookup(0x305).unwrap().name.as_ref(), "strong");
        // Same start: the smaller symbol is the innermost.
        assert_eq!(t.lookup(0x405).unwrap().name.as_ref(), "small_same_start");
        assert_eq!(t.lookup(0x415).unwrap().name.as_ref(), "big_same_start");
        assert_eq!(t.len(), 5);
    }

    #[test]
    fn lookup_near_address_space_end() {
        let t = SymbolTable::new(vec![
            sym(u64::MAX - 0x10, 0x8, "high", 0),
            sym(u64::MAX - 4, 0x100, "wraps", 0),
        ]);
        assert_eq!(t.lookup(u64::MAX - 0xc).unwrap().name.as_ref(), "high");
        assert!(t.lookup(u64::MAX).is_none());
    }

    #[test]
    fn demangles_cpp_and_rust() {
        assert_eq!(demangle("_ZN5outer5inner3fooEi"), "outer::inner::foo(int)");
        assert_eq!(demangle("_Z3addii"), "add(int, int)");
        assert_eq!(
            demangle("_ZN10winch_core7symbols8demangle17h0123456789abcdefE"),
            "winch_core::symbols::demangle"
        );
        assert_eq!(demangle("_RNvCs15kBYyAo9fc_7mycrate7example"), "mycrate::example");
        assert_eq!(demangle("Rf_eval"), "Rf_eval");
        assert_eq!(demangle("_Znotvalid"), "_Znotvalid");
    }
}
