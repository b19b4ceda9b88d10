//! Made-up code for tests: functions at made-up addresses with made-up
//! rules, standing in for a module's unwind tables.

use super::Modules;
use crate::modules::{Module, ModuleMap};
use crate::unwind::rules::{Context, Rule, Source};
use std::sync::Arc;

/// One made-up function: `[start, end)` and its rows `(start, end, rule)`.
#[derive(Clone, Debug)]
pub(crate) struct Function {
    pub start: usize,
    pub end: usize,
    pub rows: Vec<(usize, usize, Rule)>,
}

/// A module's made-up functions, sorted by address.
#[derive(Clone, Debug, Default)]
pub(crate) struct Made {
    pub functions: Vec<Function>,
}

impl Made {
    /// Functions of `size` bytes from `lo` to `hi`, each with one row:
    /// `rule` (its start set to the function's).
    pub(crate) fn uniform(lo: usize, hi: usize, size: usize, rule: Rule) -> Made {
        let functions = (lo..hi)
            .step_by(size)
            .map(|start| Function { start, end: start + size, rows: vec![(start, start + size, rule)] })
            .collect();
        Made { functions }
    }

    fn function(&self, addr: usize) -> Option<&Function> {
        let i = self.functions.partition_point(|f| f.start <= addr);
        self.functions.get(i.checked_sub(1)?).filter(|f| addr < f.end)
    }
}

fn with_start(rule: Rule, start: usize) -> Rule {
    match rule {
        Rule::Step { cfa, cfa_offset, ra_offset, bp, .. } => {
            Rule::Step { cfa, cfa_offset, ra_offset, bp, start }
        }
        Rule::Outermost { .. } => Rule::Outermost { start },
        other => other,
    }
}

impl Source for Made {
    fn rule(&self, _ctx: &mut Context, probe: usize) -> Rule {
        let Some(f) = self.function(probe) else { return Rule::Unsupported };
        f.rows
            .iter()
            .find(|&&(lo, hi, _)| lo <= probe && probe < hi)
            .map_or(Rule::Unsupported, |&(_, _, r)| with_start(r, f.start))
    }

    fn fde_key(&self, probe: usize) -> Option<usize> {
        self.function(probe).map(|f| f.start)
    }

    fn rows(
        &self,
        _ctx: &mut Context,
        fde: usize,
        mut each: impl FnMut(usize, usize, Rule),
    ) -> Option<(usize, usize)> {
        let f = self.functions.iter().find(|f| f.start == fde)?;
        for &(lo, hi, r) in &f.rows {
            each(lo, hi, with_start(r, f.start));
        }
        Some((f.start, f.end))
    }
}

impl Modules<Made> {
    /// Made-up modules, each with its made-up tables (if any); module
    /// `interpreter` (if any) is R's.
    pub(crate) fn synthetic(
        modules: Vec<(Module, Option<Made>)>,
        interpreter: Option<usize>,
    ) -> Modules<Made> {
        let (list, tables): (Vec<Module>, Vec<Option<Made>>) = modules.into_iter().unzip();
        let map = Arc::new(ModuleMap::new(list));
        let addr = interpreter.map_or(0, |m| map.module(m).segments[0].start);
        let tables = std::cell::RefCell::new(tables.into_iter());
        let loaded = crate::modules::Loaded { generation: (0, 0), exact: true, map };
        Modules::build(loaded, addr, |_| tables.borrow_mut().next().flatten())
    }
}
