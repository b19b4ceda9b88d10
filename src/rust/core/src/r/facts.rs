//! The facts about the running R that every reader of R's process needs,
//! gathered once when winch loads (by the glue, from R's API) and handed,
//! whole or in slices, to joint traces, the profiler, throw capture and the
//! crash report.

use super::context::Chain;
use super::heap::Symbols;
use super::layout::{Layout, RVersion};
use crate::memory::{Live, Memory, Ranges};

/// Where R's context chain starts and how its records are laid out: the
/// slice of [`Facts`] every reader of the chain needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChainAt {
    /// The address of the variable `R_GlobalContext`.
    pub global_context: usize,
    pub layout: Layout,
}

impl ChainAt {
    /// The chain as it is now in `mem`, innermost first, at most `limit`
    /// records.
    pub fn read<'a, M: Memory + ?Sized>(&'a self, mem: &'a M, limit: usize) -> Chain<'a, M> {
        Chain::from_global(mem, &self.layout, self.global_context, limit)
    }
}

/// Where R's interpreter keeps what winch reads, in this process.
#[derive(Clone, Copy, Debug)]
pub struct Facts {
    /// The running R's version, and the layout of its context records.
    pub version: RVersion,
    pub layout: Layout,
    /// R's main thread (`pthread_self()` there): the only thread with a
    /// context chain.
    pub main_thread: usize,
    /// An address inside R's interpreter (libR, or the R executable), and
    /// one inside winch's own library.
    pub interpreter_addr: usize,
    pub own_addr: usize,
    /// The address of the variable `R_GlobalContext` (the innermost record).
    pub global_context: usize,
    /// The addresses of `R_CStackStart`, `R_CStackLimit`, `R_CStackDir`
    /// (0: unknown); read when they are needed, since code that embeds R or
    /// starts threads may change them.
    pub cstack_vars: [usize; 3],
    /// R's node stack, `[start, end)` (R >= 4.4 keeps byte-code calls'
    /// records there), allocated once at start-up and never freed.
    pub node_stack: Option<(usize, usize)>,
    /// The writable data of R's library (where R keeps its top-level
    /// context), up to four segments; `(0, 0)` for none.
    pub data: [(usize, usize); 4],
    /// Symbols that labels of R frames are made with.
    pub symbols: Symbols,
    /// R's `R_NilValue`, the variable `R_Srcref` (its address), its marker
    /// `R_InBCInterpreter` and the symbol `class`.
    pub nil: usize,
    pub srcref_var: usize,
    pub in_bc: usize,
    pub class_symbol: usize,
}

impl Facts {
    /// Where the context chain is.
    pub(crate) fn chain(&self) -> ChainAt {
        ChainAt { global_context: self.global_context, layout: self.layout }
    }

    /// The ranges where R's context records may be read in place from a
    /// signal handler, given the main thread's stack.
    pub(crate) fn ranges(&self, stack: (usize, usize)) -> Ranges {
        Ranges { stack, node_stack: self.node_stack.unwrap_or((0, 0)), data: self.data }
    }

    /// The data segments as a list.
    pub(crate) fn data_ranges(&self) -> Vec<(usize, usize)> {
        self.data.iter().copied().filter(|&(lo, hi)| lo < hi).collect()
    }

    /// The memory of the calling thread as a joint capture reads it, seen
    /// from address `here` in the caller's frame: R's node stack and R's
    /// writable data (`R_GlobalContext`, the top-level record) stay mapped
    /// while R runs, so they are read in place, as the live stack is.
    pub(crate) fn live_memory(&self, here: usize) -> Live {
        let mut always: Vec<(usize, usize)> = self.node_stack.into_iter().collect();
        always.extend(self.data_ranges());
        Live::new(here, always, Vec::new())
    }

    /// R's node stack in this process, given its end (R's
    /// `R_BCNodeStackEnd`; 0: none): the mapping that holds its last
    /// element, up to that end. R allocates the node stack once at start-up
    /// and never frees it, so this stays readable.
    pub fn node_stack_ending_at(end: usize) -> Option<(usize, usize)> {
        if end == 0 {
            return None;
        }
        let (start, map_end) = crate::memory::mapping_containing(end - 1)?;
        (end <= map_end).then_some((start, end))
    }

    /// The writable data segments (read and write) of the module of this
    /// process that holds `addr` (R's library), packed as [`Facts::data`]
    /// holds them; none if no module holds it.
    pub fn writable_data_of(addr: usize) -> [(usize, usize); 4] {
        let map = crate::modules::current();
        let ranges: Vec<(usize, usize)> = match map.module_of(addr) {
            Some(m) => map
                .module(m)
                .segments
                .iter()
                .filter(|s| s.read && s.write)
                .map(|s| (s.start, s.end))
                .collect(),
            None => Vec::new(),
        };
        Facts::pack_data(ranges)
    }

    /// The layout of writable data segments, packed into the fixed slots.
    pub(crate) fn pack_data(ranges: impl IntoIterator<Item = (usize, usize)>) -> [(usize, usize); 4] {
        let mut data = [(0, 0); 4];
        for (slot, range) in data.iter_mut().zip(ranges) {
            *slot = range;
        }
        data
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_segments_pack_into_four_slots() {
        let d = Facts::pack_data([(1, 2), (3, 4)]);
        assert_eq!(d, [(1, 2), (3, 4), (0, 0), (0, 0)]);
        let d = Facts::pack_data((0..6).map(|i| (i * 10, i * 10 + 5)));
        assert_eq!(d[3], (30, 35));
    }
}
