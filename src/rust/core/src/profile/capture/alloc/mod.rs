//! Sampling allocations for the memory profile: the allocation functions
//! of every loaded module hooked ([`hook`]), one sample per so many bytes
//! allocated (the gaps drawn by [`poisson`](super::super::poisson)), and
//! the sampled blocks not yet freed ([`live`]). The samples' stacks are
//! taken as a CPU sample's are.

pub mod hook;
pub mod live;
