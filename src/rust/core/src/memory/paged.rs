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
    pages: RefCell<HashMap<usize, Page>>,
}

/// A page read (None: it could not be read whole), and whether a read has
/// asked for it (a page prefetched may not be).
struct Page {
    bytes: Option<Box<[u8]>>,
    used: bool,
}

impl<M: Memory> Paged<M> {
    pub fn new(inner: M) -> Paged<M> {
        Paged { inner, pages: RefCell::new(HashMap::new()) }
    }

    /// Reads the pages at `pages` not read yet, all in one go (a source
    /// that reads scattered ranges at once makes one system call of them):
    /// a reader that will likely ask for them (the pages the last reading
    /// of the same process touched) saves a call per page. A page that
    /// cannot be read is left to be read when asked for.
    pub fn prefetch(&self, pages: &[usize]) {
        let mut cache = self.pages.borrow_mut();
        let mut want: Vec<(usize, usize)> =
            pages.iter().filter(|&&p| p % PAGE == 0 && !cache.contains_key(&p)).map(|&p| (p, PAGE)).collect();
        want.truncate(MAX_PAGES.saturating_sub(cache.len()));
        if want.is_empty() {
            return;
        }
        let mut bytes = vec![0u8; want.len() * PAGE];
        let mut ok = vec![false; want.len()];
        self.inner.read_scattered(&want, &mut bytes, &mut ok);
        for (i, &(page, _)) in want.iter().enumerate() {
            if ok[i] {
                cache.insert(page, Page { bytes: Some(bytes[i * PAGE..(i + 1) * PAGE].into()), used: false });
            }
        }
    }

    /// The pages read whole that reads asked for (for the next
    /// [`prefetch`](Paged::prefetch)).
    pub fn pages(&self) -> Vec<usize> {
        self.pages.borrow().iter().filter(|(_, b)| b.used && b.bytes.is_some()).map(|(&p, _)| p).collect()
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
            pages.insert(page, Page { bytes: ok.then_some(bytes), used: true });
        }
        match pages.get_mut(&page) {
            Some(Page { bytes: Some(bytes), used }) => {
                *used = true;
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

    /// Counts reads, and scattered reads apart.
    struct Scattered(Image, Cell<usize>, Cell<usize>);

    impl Memory for Scattered {
        fn read(&self, addr: usize, buf: &mut [u8]) -> bool {
            self.1.set(self.1.get() + 1);
            self.0.read(addr, buf)
        }

        fn read_scattered(&self, ranges: &[(usize, usize)], buf: &mut [u8], ok: &mut [bool]) {
            self.2.set(self.2.get() + 1);
            crate::memory::read_each(&self.0, ranges, buf, ok)
        }
    }

    #[test]
    fn pages_prefetched_in_one_go_are_not_read_again() {
        let mut img = Image::new();
        img.put(0x10000, (0..3 * PAGE).map(|i| (i % 249) as u8).collect());
        let p = Paged::new(Scattered(img, Cell::new(0), Cell::new(0)));
        let mut buf = [0u8; 8];
        assert!(p.read(0x10008, &mut buf));
        assert_eq!(p.pages(), vec![0x10000]);
        // Pages the last reading touched, one not readable, one already
        // read and one not a page's start (ignored).
        let last = [0x11000, 0x12000, 0x50000, 0x10000, 0x12008];
        p.prefetch(&last);
        assert_eq!((p.inner.1.get(), p.inner.2.get()), (1, 1), "one scattered read");
        assert_eq!(p.pages(), vec![0x10000], "prefetched pages not asked for are not the reading's");
        assert!(p.read(0x12ff8, &mut buf));
        let want: Vec<u8> = (0x2ff8..0x3000).map(|i| (i % 249) as u8).collect();
        assert_eq!(&buf[..], &want[..]);
        assert!(p.read(0x11000, &mut buf));
        assert_eq!(p.inner.1.get(), 1, "prefetched pages are not read again");
        // The unreadable page is read (and refused) when asked for.
        assert!(!p.read(0x50000, &mut buf));
        let mut got = p.pages();
        got.sort();
        assert_eq!(got, vec![0x10000, 0x11000, 0x12000]);
        let q = Paged::new(Scattered(Image::new(), Cell::new(0), Cell::new(0)));
        q.prefetch(&[]);
        assert_eq!(q.inner.2.get(), 0, "nothing to read, no call");
    }
}
