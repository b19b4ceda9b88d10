//! The functions of one unit: where each subprogram's code is, and, read
//! only for the functions looked up, its name and the tree of calls
//! inlined into it.

use super::Reader;
use gimli::Reader as _;
use gimli::{AttributeValue, UnitOffset, UnitRef};

/// Address ranges of the unit's subprograms, by start address.
pub struct Functions {
    ranges: Vec<(u64, u64, UnitOffset)>,
}

/// A subprogram read for a lookup.
pub struct Function {
    pub die: UnitOffset,
    /// Its name as written (linkage name first), or a reference to follow.
    pub name: Name,
    pub inlined: Vec<Inlined>,
}

/// A call inlined into a function (at any depth).
pub struct Inlined {
    pub die: UnitOffset,
    pub name: Name,
    /// The inlined call this one sits in (index into `inlined`).
    pub parent: Option<usize>,
    pub ranges: Vec<(u64, u64)>,
    pub call_file: Option<u64>,
    pub call_line: u32,
    pub call_column: u32,
}

/// A DIE's own name, or where to look for it.
#[derive(Clone)]
pub enum Name {
    Known(String),
    Follow(AttributeValue<Reader>),
    None,
}

/// The attributes of a DIE that say where its code is and what it is called.
#[derive(Default)]
struct Attrs {
    low: Option<u64>,
    high: Option<u64>,
    size: Option<u64>,
    ranges: Option<gimli::RangeListsOffset>,
    linkage: Option<String>,
    name: Option<String>,
    origin: Option<AttributeValue<Reader>>,
    call_file: Option<u64>,
    call_line: u32,
    call_column: u32,
}

impl Attrs {
    fn read(
        unit: UnitRef<'_, Reader>,
        entries: &mut gimli::EntriesRaw<'_, Reader>,
        abbrev: &gimli::Abbreviation,
        names: bool,
    ) -> Option<Attrs> {
        let mut a = Attrs::default();
        let text = |v| {
            unit.attr_string(v).ok().and_then(|r: Reader| r.to_string_lossy().ok().map(|s| s.into_owned()))
        };
        for spec in abbrev.attributes() {
            let attr = entries.read_attribute(*spec).ok()?;
            match (attr.name(), attr.value()) {
                (gimli::DW_AT_low_pc, AttributeValue::Addr(v)) => a.low = Some(v),
                (gimli::DW_AT_low_pc, AttributeValue::DebugAddrIndex(i)) => a.low = unit.address(i).ok(),
                (gimli::DW_AT_high_pc, AttributeValue::Addr(v)) => a.high = Some(v),
                (gimli::DW_AT_high_pc, AttributeValue::DebugAddrIndex(i)) => a.high = unit.address(i).ok(),
                (gimli::DW_AT_high_pc, AttributeValue::Udata(v)) => a.size = Some(v),
                (gimli::DW_AT_ranges, v) => a.ranges = unit.attr_ranges_offset(v).ok().flatten(),
                (gimli::DW_AT_linkage_name | gimli::DW_AT_MIPS_linkage_name, v) if names => {
                    a.linkage = a.linkage.or_else(|| text(v))
                }
                (gimli::DW_AT_name, v) if names => a.name = text(v),
                (gimli::DW_AT_abstract_origin | gimli::DW_AT_specification, v) if names => a.origin = Some(v),
                // DWARF 4 numbers files from 1: 0 is no file.
                (gimli::DW_AT_call_file, AttributeValue::FileIndex(f))
                    if f > 0 || unit.header.version() >= 5 =>
                {
                    a.call_file = Some(f)
                }
                (gimli::DW_AT_call_line, _) => a.call_line = attr.udata_value().unwrap_or(0) as u32,
                (gimli::DW_AT_call_column, _) => a.call_column = attr.udata_value().unwrap_or(0) as u32,
                _ => {}
            }
        }
        Some(a)
    }

    fn name(&mut self) -> Name {
        match (self.linkage.take(), self.name.take(), self.origin.take()) {
            (Some(l), _, _) => Name::Known(l),
            (None, Some(n), _) => Name::Known(n),
            (None, None, Some(o)) => Name::Follow(o),
            (None, None, None) => Name::None,
        }
    }

    /// Calls `f` with each non-empty address range.
    fn each_range(&self, unit: UnitRef<'_, Reader>, mut f: impl FnMut(u64, u64)) {
        if let Some(offset) = self.ranges {
            if let Ok(mut list) = unit.ranges(offset) {
                while let Ok(Some(r)) = list.next() {
                    if r.begin < r.end {
                        f(r.begin, r.end);
                    }
                }
            }
        } else if let Some(low) = self.low {
            let end = self.high.or_else(|| self.size.map(|s| low.wrapping_add(s)));
            if let Some(end) = end.filter(|&e| e > low) {
                f(low, end);
            }
        }
    }
}

impl Functions {
    /// One pass over the unit's DIEs, reading only the subprograms' ranges.
    pub fn parse(unit: UnitRef<'_, Reader>) -> Functions {
        let mut ranges = Vec::new();
        // Many subprograms sharing one long range list (damaged or hostile
        // DWARF) would make this quadratic: bounded by the unit's size.
        let budget = unit.header.length_including_self().max(1 << 12);
        if let Ok(mut entries) = unit.entries_raw(None) {
            while !entries.is_empty() {
                let die = entries.next_offset();
                let abbrev = match entries.read_abbreviation() {
                    Ok(Some(a)) => a,
                    Ok(None) => continue, // the end of a DIE's children
                    Err(_) => break,
                };
                if abbrev.tag() == gimli::DW_TAG_subprogram {
                    let Some(a) = Attrs::read(unit, &mut entries, abbrev, false) else { break };
                    a.each_range(unit, |b, e| ranges.push((b, e, die)));
                    if ranges.len() > budget {
                        break;
                    }
                } else if entries.skip_attributes(abbrev.attributes()).is_err() {
                    break;
                }
            }
        }
        ranges.sort_unstable_by_key(|r| r.0);
        Functions { ranges }
    }

    /// The subprogram whose code holds `probe`. Where several do (aliases
    /// of one assembler function), the one addr2line's search finds, so
    /// that names stay as they were.
    pub fn find(&self, probe: u64) -> Option<UnitOffset> {
        let i = self
            .ranges
            .binary_search_by(|r| {
                if probe < r.0 {
                    std::cmp::Ordering::Greater
                } else if probe >= r.1 {
                    std::cmp::Ordering::Less
                } else {
                    std::cmp::Ordering::Equal
                }
            })
            .ok()?;
        Some(self.ranges[i].2)
    }
}

impl Function {
    /// Reads the subprogram at `die` and the calls inlined into it (not
    /// those of subprograms nested in it).
    pub fn parse(unit: UnitRef<'_, Reader>, die: UnitOffset) -> Option<Function> {
        let mut entries = unit.entries_raw(Some(die)).ok()?;
        let depth = entries.next_depth();
        let abbrev = entries.read_abbreviation().ok()??;
        let name = Attrs::read(unit, &mut entries, abbrev, true)?.name();
        let mut inlined: Vec<Inlined> = Vec::new();
        let (mut total, budget) = (0usize, unit.header.length_including_self().max(1 << 12));
        // (depth, index) of the inlined calls enclosing the walk's position.
        let mut open: Vec<(isize, usize)> = Vec::new();
        loop {
            let d = entries.next_depth();
            if d <= depth || entries.is_empty() {
                break;
            }
            let offset = entries.next_offset();
            let Some(abbrev) = entries.read_abbreviation().ok()? else { continue };
            while open.last().is_some_and(|&(od, _)| od >= d) {
                open.pop();
            }
            match abbrev.tag() {
                gimli::DW_TAG_subprogram => {
                    // A nested function is a function of its own.
                    entries.skip_attributes(abbrev.attributes()).ok()?;
                    while entries.next_depth() > d && !entries.is_empty() {
                        if let Some(a) = entries.read_abbreviation().ok()? {
                            entries.skip_attributes(a.attributes()).ok()?;
                        }
                    }
                }
                gimli::DW_TAG_inlined_subroutine => {
                    let mut a = Attrs::read(unit, &mut entries, abbrev, true)?;
                    let mut ranges = Vec::new();
                    a.each_range(unit, |b, e| ranges.push((b, e)));
                    total += ranges.len();
                    if total > budget {
                        break;
                    }
                    inlined.push(Inlined {
                        die: offset,
                        name: a.name(),
                        parent: open.last().map(|&(_, i)| i),
                        ranges,
                        call_file: a.call_file,
                        call_line: a.call_line,
                        call_column: a.call_column,
                    });
                    open.push((d, inlined.len() - 1));
                }
                _ => entries.skip_attributes(abbrev.attributes()).ok()?,
            }
        }
        Some(Function { die, name, inlined })
    }

    /// The chain of inlined calls holding `probe`, outermost first.
    pub fn inlined_at(&self, probe: u64) -> Vec<&Inlined> {
        let mut chain: Vec<&Inlined> = Vec::new();
        let mut parent = None;
        while chain.len() < 256 {
            let next =
                self.inlined.iter().enumerate().find(|(_, i)| {
                    i.parent == parent && i.ranges.iter().any(|&(b, e)| b <= probe && probe < e)
                });
            match next {
                Some((index, i)) => {
                    chain.push(i);
                    parent = Some(index);
                }
                None => break,
            }
        }
        chain
    }
}

/// Reads the name of the DIE at `die`: its linkage name, else its name,
/// else what its abstract origin or specification leads to (the caller
/// follows that).
pub fn name_at(unit: UnitRef<'_, Reader>, die: UnitOffset) -> Name {
    let Ok(mut entries) = unit.entries_raw(Some(die)) else { return Name::None };
    let Ok(Some(abbrev)) = entries.read_abbreviation() else { return Name::None };
    match Attrs::read(unit, &mut entries, abbrev, true) {
        Some(mut a) => a.name(),
        None => Name::None,
    }
}
