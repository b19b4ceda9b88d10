//! A module's DWARF, read only as far as the addresses looked up need it.
//!
//! `.debug_aranges` leads from an address to its compilation unit; only
//! that unit is parsed (its abbreviations, root and line program header),
//! its subprograms' ranges are read in one pass, and only the function
//! holding the address has its name and inlined calls read. Compressed
//! sections are inflated as far as the units read lie (see `sections`).
//! Units that `.debug_aranges` does not list (clang and rustc do not
//! write it) are found by reading every such unit's ranges once, the first
//! time an address is not found through it.
//!
//! What a lookup gives follows addr2line's reading of the same DWARF:
//! innermost inlined call first, each with the position of the call it
//! stands for, the physical function last.

mod functions;
mod lines;
mod sections;

use crate::fasthash::{FastMap, FastSet};
use functions::{Function, Functions, Name};
use gimli::{AttributeValue, DebugInfoOffset, DwLang, SectionId, UnitOffset, UnitRef};
pub use lines::{Lines, Location};
pub use sections::{Section, SectionData};
use std::sync::Arc;

pub type Reader = gimli::EndianReader<gimli::RunTimeEndian, SectionData>;

/// The sections a lookup reads; any other is left empty.
pub const READ: [SectionId; 10] = [
    SectionId::DebugAbbrev,
    SectionId::DebugAddr,
    SectionId::DebugAranges,
    SectionId::DebugInfo,
    SectionId::DebugLine,
    SectionId::DebugLineStr,
    SectionId::DebugRanges,
    SectionId::DebugRngLists,
    SectionId::DebugStr,
    SectionId::DebugStrOffsets,
];

/// The sections worth inflating lazily: the large ones read at offsets.
pub const LAZY: [SectionId; 3] = [SectionId::DebugInfo, SectionId::DebugAbbrev, SectionId::DebugLine];

/// One frame of a lookup.
#[derive(Clone, Debug)]
pub struct Frame {
    /// The name as written in the DWARF (mangled when it is a linkage name).
    pub name: Option<String>,
    pub lang: Option<DwLang>,
    /// The unit (its `.debug_info` offset) and DIE of the function or call.
    pub unit: usize,
    pub die: Option<UnitOffset>,
    pub location: Option<Location>,
}

struct UnitData {
    unit: gimli::Unit<Reader>,
    lang: Option<DwLang>,
    /// A partial unit (dwz): only read for what other units refer to.
    partial: bool,
    functions: Option<Functions>,
    lines: Option<Option<Lines>>,
    details: FastMap<usize, Option<Function>>,
}

/// Counts for the cache report and tests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Units parsed so far (a unit parsed again after a section grew counts
    /// again).
    pub units_parsed: usize,
    /// Units `.debug_aranges` lists.
    pub units_listed: usize,
    /// Whether every unit's ranges had to be read.
    pub scanned: bool,
}

pub struct LazyDwarf {
    sections: Vec<(SectionId, Section)>,
    endian: gimli::RunTimeEndian,
    dwarf: gimli::Dwarf<Reader>,
    sup: Option<Arc<gimli::Dwarf<Reader>>>,
    /// (begin, end, unit offset) from `.debug_aranges`, by begin.
    aranges: Vec<(u64, u64, usize)>,
    listed: FastSet<usize>,
    /// The same for the units `.debug_aranges` does not list, once read.
    others: Option<Vec<(u64, u64, usize)>>,
    /// Every unit's offset, once needed (references into other units).
    /// Unit starts found so far by walking the headers from the section's
    /// start, and where the walk goes on (None once it reached the end).
    starts: Vec<usize>,
    walk_next: Option<usize>,
    sup_starts: Option<Vec<usize>>,
    sup_units: FastMap<usize, Option<Box<gimli::Unit<Reader>>>>,
    units: FastMap<usize, Option<Box<UnitData>>>,
    counts: Counts,
}

impl LazyDwarf {
    /// `sections` as read from the file (those of [`READ`]); `sup` the
    /// supplementary (dwz) file's DWARF, read whole.
    pub fn new(
        sections: Vec<(SectionId, Section)>,
        sup: Option<gimli::Dwarf<Reader>>,
        endian: gimli::RunTimeEndian,
    ) -> LazyDwarf {
        let mut d = LazyDwarf {
            sections,
            endian,
            dwarf: readers(&[], endian, None),
            sup: sup.map(Arc::new),
            aranges: Vec::new(),
            listed: FastSet::default(),
            others: None,
            starts: Vec::new(),
            walk_next: Some(0),
            sup_starts: None,
            sup_units: FastMap::default(),
            units: FastMap::default(),
            counts: Counts::default(),
        };
        d.rebuild();
        let mut headers = d.dwarf.debug_aranges.headers();
        while let Ok(Some(h)) = headers.next() {
            let unit = h.debug_info_offset().0;
            let mut entries = h.entries();
            // A damaged entry is skipped, not the rest of the unit's (the
            // iterator ends itself after an error; the count is a guard).
            let mut errors = 0;
            loop {
                match entries.next() {
                    Ok(Some(e)) => {
                        let r = e.range();
                        if r.begin < r.end {
                            d.aranges.push((r.begin, r.end, unit));
                            // Listed only with a range: a unit whose entries
                            // were all lost is found by the scan.
                            d.listed.insert(unit);
                        }
                    }
                    Ok(None) => break,
                    Err(_) if errors < 64 => errors += 1,
                    Err(_) => break,
                }
            }
        }
        d.aranges.sort_unstable();
        d.counts.units_listed = d.listed.len();
        d
    }

    /// Whether the DWARF looks usable: `.debug_info` starts with a unit
    /// header of a known version that fits in the section (a damaged
    /// debug file is then passed over for the next candidate, as before).
    pub fn plausible(&mut self) -> bool {
        self.ensure(SectionId::DebugInfo, 12);
        let endian = self.endian;
        let Some(info) = self.section_mut(SectionId::DebugInfo) else { return false };
        let full = info.full_len();
        let b = info.data();
        match unit_extent(b, 0, endian) {
            Some((len, at)) => len <= full && matches!(word(b, at, 2, endian), Some(2..=5)),
            None => false,
        }
    }

    /// Heap bytes of the sections held (inflated and compressed).
    pub fn section_bytes(&self) -> usize {
        self.sections.iter().map(|(_, s)| s.held_bytes()).sum::<usize>()
            + self.sup.as_ref().map_or(0, |s| {
                use gimli::Section as _;
                READ.iter()
                    .map(|&id| match id {
                        SectionId::DebugInfo => s.debug_info.reader().len(),
                        SectionId::DebugStr => s.debug_str.reader().len(),
                        SectionId::DebugAbbrev => s.debug_abbrev.reader().len(),
                        SectionId::DebugLine => s.debug_line.reader().len(),
                        _ => 0,
                    })
                    .sum()
            })
    }

    pub fn counts(&self) -> Counts {
        self.counts
    }

    /// Remakes the readers over the sections' current bytes. Units parsed
    /// before point into older copies and are dropped.
    fn rebuild(&mut self) {
        self.dwarf = readers(&self.sections, self.endian, self.sup.clone());
        self.units.clear();
    }

    fn section_mut(&mut self, id: SectionId) -> Option<&mut Section> {
        self.sections.iter_mut().find(|(s, _)| *s == id).map(|(_, s)| s)
    }

    /// Makes at least `len` bytes of section `id` readable.
    fn ensure(&mut self, id: SectionId, len: usize) {
        if self.section_mut(id).is_some_and(|s| s.grow_to(len)) {
            self.rebuild();
        }
    }

    /// Grows the abbreviation and line sections that are not whole yet;
    /// whether any grew.
    fn grow_partial(&mut self) -> bool {
        let mut grew = false;
        for id in [SectionId::DebugAbbrev, SectionId::DebugLine] {
            if let Some(s) = self.section_mut(id) {
                let len = s.data().len();
                grew |= s.grow_to(len + 1);
            }
        }
        if grew {
            self.rebuild();
        }
        grew
    }

    fn parse_unit(&mut self, offset: usize) -> Option<UnitData> {
        // The unit's own bytes first: its length, then all of it.
        self.ensure(SectionId::DebugInfo, offset.checked_add(12)?);
        let endian = self.endian;
        let info = self.section_mut(SectionId::DebugInfo)?.data();
        let (total, _) = unit_extent(info, offset, endian)?;
        self.ensure(SectionId::DebugInfo, offset.checked_add(total)?);
        // Its abbreviations and line program: grown until they parse.
        for _ in 0..64 {
            let header = self.dwarf.debug_info.header_from_offset(DebugInfoOffset(offset)).ok()?;
            if matches!(header.type_(), gimli::UnitType::Type { .. } | gimli::UnitType::SplitType { .. }) {
                return None;
            }
            match self.dwarf.unit(header) {
                Ok(unit) => {
                    self.counts.units_parsed += 1;
                    let mut entries = unit.entries();
                    let root = entries.next_dfs().ok().flatten();
                    let lang = root.and_then(|root| match root.attr_value(gimli::DW_AT_language) {
                        Some(AttributeValue::Language(l)) => Some(l),
                        _ => None,
                    });
                    // DWARF 4 has no unit types: the root's tag says it.
                    let partial = unit.header.type_() == gimli::UnitType::Partial
                        || root.is_some_and(|r| r.tag() == gimli::DW_TAG_partial_unit);
                    return Some(UnitData {
                        unit,
                        lang,
                        partial,
                        functions: None,
                        lines: None,
                        details: FastMap::default(),
                    });
                }
                Err(_) if self.grow_partial() => continue,
                Err(_) => return None,
            }
        }
        None
    }

    /// The parsed unit at `offset` (parsing it if needed).
    fn unit(&mut self, offset: usize) -> Option<&mut UnitData> {
        if !self.units.contains_key(&offset) {
            let data = self.parse_unit(offset).map(Box::new);
            self.units.insert(offset, data);
        }
        self.units.get_mut(&offset)?.as_deref_mut()
    }

    /// The units whose ranges hold `probe`: those `.debug_aranges` names,
    /// then (read once, when needed) the ones it does not list.
    fn candidates(&self, probe: u64, ranges: &[(u64, u64, usize)]) -> Vec<usize> {
        let upto = ranges.partition_point(|r| r.0 <= probe);
        let mut out: Vec<usize> = ranges[..upto].iter().filter(|r| probe < r.1).map(|r| r.2).collect();
        out.dedup();
        out
    }

    /// Reads the ranges every unit gives itself (`DW_AT_ranges` or its low
    /// and high addresses, else its line program's sequences), for the
    /// addresses `.debug_aranges` does not lead to. Partial units (dwz's)
    /// are skipped: they share their line programs with the units that
    /// include them and hold no code of their own.
    fn read_other_ranges(&mut self) {
        self.ensure(SectionId::DebugInfo, usize::MAX);
        let offsets = unit_starts(&self.dwarf);
        self.counts.scanned = true;
        // Damaged or hostile DWARF could make many units share one long
        // program or range list: each program is read once, and the
        // ranges kept are bounded by the sections' sizes.
        use gimli::Section as _;
        let budget =
            (self.dwarf.debug_info.reader().len() + self.dwarf.debug_line.reader().len()).max(1 << 16);
        let mut programs = FastSet::default();
        let mut others = Vec::new();
        for &offset in &offsets {
            if others.len() > budget {
                break;
            }
            // Read and let go: the unit is parsed again if an address needs it.
            let Some(data) = self.parse_unit(offset) else { continue };
            if data.partial {
                continue;
            }
            let unit = data.unit.unit_ref(&self.dwarf);
            let mut any = false;
            if let Ok(mut ranges) = unit.unit_ranges() {
                while let Ok(Some(r)) = ranges.next() {
                    if others.len() > budget {
                        break;
                    }
                    if r.begin < r.end {
                        others.push((r.begin, r.end, offset));
                        any = true;
                    }
                }
            }
            let program = unit.line_program.as_ref().map(|p| p.header().offset().0);
            if !any && program.is_some_and(|p| programs.insert(p)) {
                if let Some(lines) = Lines::parse(unit) {
                    others.extend(lines.ranges().take(budget).map(|(b, e)| (b, e, offset)));
                }
            }
        }
        others.sort_unstable();
        self.starts = offsets;
        self.walk_next = None;
        self.others = Some(others);
    }

    /// The frames at `probe` (a file-relative address), innermost first.
    /// Empty when no unit describes the address.
    pub fn frames(&mut self, probe: u64) -> Vec<Frame> {
        let listed = self.candidates(probe, &self.aranges);
        for unit in listed {
            if let Some(frames) = self.frames_in(unit, probe) {
                return frames;
            }
        }
        if self.others.is_none() {
            self.read_other_ranges();
        }
        let tried = self.candidates(probe, &self.aranges);
        let others = self.candidates(probe, self.others.as_deref().unwrap_or_default());
        for unit in others.into_iter().filter(|u| !tried.contains(u)) {
            if let Some(frames) = self.frames_in(unit, probe) {
                return frames;
            }
        }
        Vec::new()
    }

    /// The frames at `probe` from unit `offset`; None if it knows neither
    /// a function nor a line there.
    fn frames_in(&mut self, offset: usize, probe: u64) -> Option<Vec<Frame>> {
        self.unit(offset)?;
        let (mut frames, names) = {
            let LazyDwarf { dwarf, units, .. } = self;
            let data = units.get_mut(&offset)?.as_deref_mut()?;
            let unit = data.unit.unit_ref(dwarf);
            let lang = data.lang;
            let die = data.functions.get_or_insert_with(|| Functions::parse(unit)).find(probe);
            let lines = data.lines.get_or_insert_with(|| Lines::parse(unit)).as_ref();
            let mut location = lines.and_then(|l| l.find(probe));
            let Some(die) = die else {
                let frame = Frame { name: None, lang, unit: offset, die: None, location: Some(location?) };
                return Some(vec![frame]);
            };
            let Some(function) = data.details.entry(die.0).or_insert_with(|| Function::parse(unit, die))
            else {
                let frame = Frame { name: None, lang, unit: offset, die: Some(die), location };
                return Some(vec![frame]);
            };
            let mut frames = Vec::new();
            let mut names = Vec::new();
            let chain = function.inlined_at(probe);
            let outer = chain.iter().rev().map(|i| (i.die, &i.name, Some(*i))).chain([(
                function.die,
                &function.name,
                None,
            )]);
            for (die, name, call) in outer {
                frames.push(Frame {
                    name: None,
                    lang,
                    unit: offset,
                    die: Some(die),
                    location: location.take(),
                });
                names.push(name.clone());
                // The next frame out is where this call is.
                if let Some(call) = call {
                    location = Some(Location {
                        file: call.call_file.and_then(|f| lines.and_then(|l| l.file(f))),
                        line: (call.call_line != 0).then_some(call.call_line),
                        column: (call.call_column != 0).then_some(call.call_column),
                    });
                }
            }
            (frames, names)
        };
        for (frame, name) in frames.iter_mut().zip(names) {
            frame.name = match name {
                Name::Known(n) => Some(n),
                Name::Follow(to) => self.follow(Place::Main(offset), to, 16),
                Name::None => None,
            };
        }
        Some(frames)
    }

    /// The name a reference leads to (abstract origins and specifications
    /// followed up to `limit` times, into other units and the
    /// supplementary file).
    fn follow(&mut self, from: Place, to: AttributeValue<Reader>, limit: usize) -> Option<String> {
        if limit == 0 {
            return None;
        }
        let (place, die) = match (from, to) {
            (_, AttributeValue::UnitRef(die)) => (from, die),
            (Place::Main(_), AttributeValue::DebugInfoRef(o)) => {
                let start = self.main_unit_of(o.0)?;
                (Place::Main(start), UnitOffset(o.0 - start))
            }
            (Place::Sup(_), AttributeValue::DebugInfoRef(o))
            | (Place::Main(_), AttributeValue::DebugInfoRefSup(o)) => {
                let start = self.sup_unit_of(o.0)?;
                (Place::Sup(start), UnitOffset(o.0 - start))
            }
            _ => return None,
        };
        let name = match place {
            Place::Main(offset) => {
                self.unit(offset)?;
                let LazyDwarf { dwarf, units, .. } = &*self;
                let data = units.get(&offset)?.as_deref()?;
                functions::name_at(data.unit.unit_ref(dwarf), die)
            }
            Place::Sup(offset) => {
                let sup = self.sup.clone()?;
                let unit = self.sup_units.entry(offset).or_insert_with(|| {
                    let header = sup.debug_info.header_from_offset(DebugInfoOffset(offset)).ok()?;
                    sup.unit(header).ok().map(Box::new)
                });
                functions::name_at(unit.as_deref()?.unit_ref(&sup), die)
            }
        };
        match name {
            Name::Known(n) => Some(n),
            Name::Follow(next) => self.follow(place, next, limit - 1),
            Name::None => None,
        }
    }

    /// The start of the unit of this file holding `.debug_info` offset `at`.
    /// The headers are walked only as far as `at` (a reference into a dwz
    /// partial unit or, with LTO, another unit): a compressed section is
    /// inflated no further than that.
    fn main_unit_of(&mut self, at: usize) -> Option<usize> {
        let endian = self.endian;
        while let Some(next) = self.walk_next.filter(|&n| n <= at) {
            self.ensure(SectionId::DebugInfo, next.saturating_add(12));
            let info = self.section_mut(SectionId::DebugInfo)?;
            let full = info.full_len();
            match unit_extent(info.data(), next, endian) {
                Some((len, _)) => {
                    self.starts.push(next);
                    self.walk_next = next.checked_add(len).filter(|&end| end < full);
                }
                None => self.walk_next = None,
            }
        }
        containing(&self.starts, at)
    }

    /// The same in the supplementary file.
    fn sup_unit_of(&mut self, at: usize) -> Option<usize> {
        if self.sup_starts.is_none() {
            self.sup_starts = Some(unit_starts(self.sup.as_deref()?));
        }
        containing(self.sup_starts.as_deref()?, at)
    }

    /// Calls `f` with the parsed unit at `offset` (for the scopes of C++
    /// names).
    pub fn with_unit<T>(&mut self, offset: usize, f: impl FnOnce(UnitRef<'_, Reader>) -> T) -> Option<T> {
        self.unit(offset)?;
        let data = self.units.get(&offset)?.as_deref()?;
        Some(f(data.unit.unit_ref(&self.dwarf)))
    }
}

/// The `n`-byte word (4 or 8) at `at` of `data`.
fn word(data: &[u8], at: usize, n: usize, endian: gimli::RunTimeEndian) -> Option<u64> {
    let b = data.get(at..at.checked_add(n)?)?;
    let mut w = [0u8; 8];
    if endian == gimli::RunTimeEndian::Little {
        w[..n].copy_from_slice(b);
        Some(u64::from_le_bytes(w))
    } else {
        w[8 - n..].copy_from_slice(b);
        Some(u64::from_be_bytes(w))
    }
}

/// The length (initial length field included) of the unit at `at` of
/// `.debug_info`, and where its header goes on after that field.
fn unit_extent(info: &[u8], at: usize, endian: gimli::RunTimeEndian) -> Option<(usize, usize)> {
    let (len, rest) = match word(info, at, 4, endian)? {
        0xffff_ffff => (word(info, at.checked_add(4)?, 8, endian)?.checked_add(12)?, 12),
        n => (n + 4, 4),
    };
    Some((usize::try_from(len).ok()?, at.checked_add(rest)?))
}

/// Readers over the sections' current bytes.
fn readers(
    sections: &[(SectionId, Section)],
    endian: gimli::RunTimeEndian,
    sup: Option<Arc<gimli::Dwarf<Reader>>>,
) -> gimli::Dwarf<Reader> {
    let reader = |id: SectionId| {
        let data = sections
            .iter()
            .find(|(s, _)| *s == id)
            .map_or_else(SectionData::empty, |(_, s)| s.data().clone());
        Ok::<Reader, std::convert::Infallible>(gimli::EndianReader::new(data, endian))
    };
    let Ok(mut dwarf) = gimli::Dwarf::load(reader);
    dwarf.sup = sup;
    dwarf
}

/// Where a DIE is: a unit of this file or of the supplementary file.
#[derive(Clone, Copy)]
enum Place {
    Main(usize),
    Sup(usize),
}

fn unit_starts(dwarf: &gimli::Dwarf<Reader>) -> Vec<usize> {
    let mut out = Vec::new();
    let mut headers = dwarf.units();
    while let Ok(Some(h)) = headers.next() {
        if let Some(o) = h.debug_info_offset() {
            out.push(o.0);
        }
    }
    out.sort_unstable();
    out
}

/// The last start at or before `at`.
fn containing(starts: &[usize], at: usize) -> Option<usize> {
    let i = starts.partition_point(|&s| s <= at).checked_sub(1)?;
    Some(starts[i])
}

#[cfg(all(test, target_os = "linux"))]
mod tests;
