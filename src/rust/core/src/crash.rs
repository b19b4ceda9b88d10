//! placeholder
pub fn refresh() {}
