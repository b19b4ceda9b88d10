//! Memory read a page at a time, each page once: for readers that make many
//! small reads of memory that does not change while they read (another
//! process stopped for a moment; this process's loaded images, whose
//! dynamic sections and relocation tables the GOT readers walk entry by
//! entry), where each read of the source is a system call.

use super::Memory;
use std::cell::RefCell;
use std::collections::HashMap;

const PAGE: usize = 4096;
/// Pages kept at most (past it, reads go straight to the source).
const MAX_PAGES: usize = 4096;

/// `inner` read through a cache of whole pages. A page that cannot be read
/// whole (the end of a mapping inside it, a source that checks exact
/// ranges) is read as asked, uncached.
pub struct Paged<M: Memory> {
    inner: M,
    pages: RefCell<HashMap<usize, Option<Box<[u8]>>>>,
}

impl<M: Memory> Paged<M> {
    pub fn new(inner: M) -> Paged<M> {
        Paged { inner, pages: RefCell::new(HashMap::new()) }
    }

    /// Copies `buf.len()` bytes at `addr`, all inside page `page`.
    fn read_in_page(&self, page: usize, addr: usize, buf: &mut [u8]) -> bool {
        let mut pages = self.pages.borrow_mut();
        if !pages.contains_key(&page) {
            if pages.len() >= MAX_PAGES {
                return self.inner.read(addr, buf);
            }
            let mut bytes = vec![0u8; PAGE].into_boxed_slice();
            let ok = self.inner.read(page, &mut bytes);
            pages.insert(page, ok.then_some(bytes));
        }
        match pages.get(&page) {
            Some(Some(bytes)) => {
                buf.copy_from_slice(&bytes[addr - page..addr - page + buf.len()]);
                true
            }
            _ => self.inner.read(addr, buf),
        }
    }
}

impl<M: Memory> Memory for Paged<M> {
    /// Straight to the source: scattered ranges rarely share pages.
    fn read_scattered(&self, ranges: &[(usize, usize)], buf: &mut [u8], ok: &mut [bool]) {
        self.inner.read_scattered(ranges, buf, ok)
    }

    fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
        if addr.checked_add(buf.len()).is_none() {
            return false;
        }
        if buf.len() > PAGE {
            return self.inner.read(addr, buf);
        }
        // Page by page (a read may cross a page's end).
        let mut at = addr;
        let mut got = 0;
        while got < buf.len() {
            let page = at & !(PAGE - 1);
            let n = (page + PAGE - at).min(buf.len() - got);
            if !self.read_in_page(page, at, &mut buf[got..got + n]) {
                return false;
            }
            got += n;
            at += n;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::{Counted, Image};
    use std::cell::Cell;

    #[test]
    fn pages_are_read_once_and_reads_cross_their_ends() {
        let mut img = Image::new();
        img.put(0x10000, (0..2 * PAGE).map(|i| (i % 251) as u8).collect());
        img.put(0x20000, vec![7; 100]); // less than a page
        let p = Paged::new(Counted(img, Cell::new(0)));
        let mut buf = [0u8; 16];
        assert!(p.read(0x10ff8, &mut buf));
        let want: Vec<u8> = (0xff8..0x1008).map(|i| (i % 251) as u8).collect();
        assert_eq!(&buf[..], &want[..]);
        assert!(p.read(0x10010, &mut buf[..8]));
        assert_eq!(p.inner.1.get(), 2, "two pages, read once each");
        // A page not readable whole: the bytes asked for, read as asked.
        assert!(p.read(0x20010, &mut buf[..8]));
        assert_eq!(buf[..8], [7; 8]);
        assert!(!p.read(0x30000, &mut buf[..8]), "unreadable");
    }
}
