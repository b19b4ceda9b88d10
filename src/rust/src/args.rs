//! Reading the arguments of `.Call` entry points: type-checked, never
//! allocating, each failure a `BadArgument` error naming the argument. The R
//! wrappers check what users pass; these checks guard the `.Call` boundary
//! itself.

use crate::rapi::{self, Sexp};
use winch_core::error::{Error, Result};

/// One argument of an entry point.
#[derive(Clone, Copy)]
pub struct Arg {
    sexp: Sexp,
    name: Name,
}

/// What an argument is called in errors: a name, or a column's name under
/// its table's (`table$column`).
#[derive(Clone, Copy)]
struct Name {
    first: &'static str,
    then: Option<&'static str>,
}

impl std::fmt::Display for Name {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.then {
            Some(then) => write!(f, "{}${then}", self.first),
            None => f.write_str(self.first),
        }
    }
}

impl Name {
    fn one(name: &'static str) -> Name {
        Name { first: name, then: None }
    }
}

impl Arg {
    pub fn new(sexp: Sexp, name: &'static str) -> Arg {
        Arg { sexp, name: Name::one(name) }
    }

    fn bad(&self, what: &str) -> Error {
        Error::BadArgument(format!("`{}` must be {what}", self.name))
    }

    /// The R type and length.
    fn shape(&self) -> (i32, usize) {
        // SAFETY: `sexp` is an R object passed by `.Call`; reading its type
        // and length does not allocate.
        unsafe { (rapi::TYPEOF(self.sexp), rapi::Rf_xlength(self.sexp).max(0) as usize) }
    }

    /// The names of a list's elements (`None` where unnamed or NA).
    pub fn field_names(&self) -> Result<Vec<Option<String>>> {
        let (kind, n) = self.shape();
        if kind != rapi::VECSXP {
            return Err(self.bad("a list"));
        }
        // SAFETY: the names attribute of a list is read without allocating;
        // it is NULL or a character vector.
        let names = unsafe { rapi::Rf_getAttrib(self.sexp, rapi::R_NamesSymbol) };
        let names = Arg { sexp: names, ..*self };
        if names.is_null() {
            return Ok(vec![None; n]);
        }
        let v = names.strings()?;
        if v.len() != n {
            return Err(self.bad("a list with one name per element"));
        }
        Ok(v)
    }

    /// The R object itself, for a result built from it within the same
    /// `.Call` (see `trace_rows`).
    pub fn sexp(&self) -> Sexp {
        self.sexp
    }

    /// Whether it is NULL.
    pub fn is_null(&self) -> bool {
        self.shape().0 == rapi::NILSXP
    }

    /// A single string (not NA).
    pub fn string(&self) -> Result<String> {
        match self.strings()?.as_slice() {
            [Some(s)] => Ok(s.clone()),
            _ => Err(self.bad("a single string")),
        }
    }

    /// A character vector (NA elements as None).
    pub fn strings(&self) -> Result<Vec<Option<String>>> {
        let (kind, n) = self.shape();
        if kind != rapi::STRSXP {
            return Err(self.bad("a character vector"));
        }
        Ok((0..n)
            .map(|i| {
                // SAFETY: `i` < length of a STRSXP; its elements are
                // CHARSXPs whose R_CHAR is NUL-terminated; no allocation.
                unsafe {
                    let c = rapi::STRING_ELT(self.sexp, i as isize);
                    (c != rapi::R_NaString)
                        .then(|| std::ffi::CStr::from_ptr(rapi::R_CHAR(c)).to_string_lossy().into_owned())
                }
            })
            .collect())
    }

    /// `TRUE` or `FALSE`.
    pub fn flag(&self) -> Result<bool> {
        let (kind, n) = self.shape();
        if kind != rapi::LGLSXP || n != 1 {
            return Err(self.bad("TRUE or FALSE"));
        }
        // SAFETY: a logical vector of length 1.
        match unsafe { *rapi::LOGICAL(self.sexp) } {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(self.bad("TRUE or FALSE")),
        }
    }

    /// An integer vector (NA elements as None).
    pub fn ints(&self) -> Result<Vec<Option<i32>>> {
        let (kind, n) = self.shape();
        if kind != rapi::INTSXP {
            return Err(self.bad("an integer vector"));
        }
        // SAFETY: an integer vector of length n; reading R's NA constant.
        let (p, na) = unsafe { (rapi::INTEGER(self.sexp), rapi::R_NaInt) };
        // SAFETY: `p` points to n ints.
        let v = unsafe { std::slice::from_raw_parts(p, n) };
        Ok(v.iter().map(|&x| (x != na).then_some(x)).collect())
    }

    /// A single integer (not NA).
    pub fn int(&self) -> Result<i32> {
        match self.ints()?.as_slice() {
            [Some(x)] => Ok(*x),
            _ => Err(self.bad("a single integer")),
        }
    }

    /// Non-negative integers (NA as None).
    pub fn indices(&self) -> Result<Vec<Option<usize>>> {
        self.ints()?
            .into_iter()
            .map(|x| match x {
                None => Ok(None),
                Some(k) => usize::try_from(k).map(Some).map_err(|_| self.bad("non-negative integers")),
            })
            .collect()
    }

    /// Non-negative integers, no NA.
    pub fn counts(&self) -> Result<Vec<usize>> {
        self.indices()?.into_iter().map(|x| x.ok_or_else(|| self.bad("integers without NA"))).collect()
    }

    /// A number (double or integer, not NA).
    pub fn number(&self) -> Result<f64> {
        let (kind, n) = self.shape();
        if n != 1 {
            return Err(self.bad("a single number"));
        }
        // SAFETY: a vector of length 1 of the type checked.
        let x = unsafe {
            match kind {
                rapi::REALSXP => *rapi::REAL(self.sexp),
                rapi::INTSXP if *rapi::INTEGER(self.sexp) != rapi::R_NaInt => {
                    *rapi::INTEGER(self.sexp) as f64
                }
                _ => f64::NAN,
            }
        };
        if x.is_nan() {
            return Err(self.bad("a single number"));
        }
        Ok(x)
    }

    /// A number (double or integer), where NA is allowed (read as NaN).
    pub fn number_or_nan(&self) -> Result<f64> {
        let (kind, n) = self.shape();
        if n != 1 || (kind != rapi::REALSXP && kind != rapi::INTSXP) {
            return Err(self.bad("a single number"));
        }
        // SAFETY: a vector of length 1 of the type checked.
        Ok(unsafe {
            match kind {
                rapi::REALSXP => *rapi::REAL(self.sexp),
                _ if *rapi::INTEGER(self.sexp) == rapi::R_NaInt => f64::NAN,
                _ => *rapi::INTEGER(self.sexp) as f64,
            }
        })
    }

    /// A double vector.
    pub fn doubles(&self) -> Result<Vec<f64>> {
        let (kind, n) = self.shape();
        if kind != rapi::REALSXP {
            return Err(self.bad("a double vector"));
        }
        // SAFETY: a double vector of length n.
        Ok(unsafe { std::slice::from_raw_parts(rapi::REAL(self.sexp), n) }.to_vec())
    }

    /// The elements of a list, as arguments named after this one.
    pub fn elements(&self) -> Result<Vec<Arg>> {
        let (kind, n) = self.shape();
        if kind != rapi::VECSXP {
            return Err(self.bad("a list"));
        }
        Ok((0..n)
            .map(|i| {
                // SAFETY: `i` < length of a list; reading elements does not
                // allocate.
                let sexp = unsafe { rapi::VECTOR_ELT(self.sexp, i as isize) };
                Arg { sexp, name: self.name }
            })
            .collect())
    }

    /// The same object under another name (in the messages of errors).
    pub fn renamed(&self, name: &'static str) -> Arg {
        Arg { sexp: self.sexp, name: Name::one(name) }
    }

    /// The error for a list (this one) without the field at `path`.
    pub fn missing(&self, path: impl std::fmt::Display) -> Error {
        Error::BadArgument(format!("`{}` has no field `{path}`", self.name))
    }

    /// The element called `name` of this list (the first of that name),
    /// if there is one; an error if this is not a list.
    fn element(&self, name: &str) -> Result<Option<Sexp>> {
        let (kind, n) = self.shape();
        if kind != rapi::VECSXP {
            return Err(self.bad("a list"));
        }
        // SAFETY: a list: the names attribute of a vector is read without
        // allocating; it is NULL or a character vector.
        let names = unsafe { rapi::Rf_getAttrib(self.sexp, rapi::R_NamesSymbol) };
        // SAFETY: reading the type and length of an R object.
        let named = unsafe { rapi::TYPEOF(names) == rapi::STRSXP && rapi::Rf_xlength(names) as usize == n };
        let found = named
            .then(|| {
                (0..n).find(|&i| {
                    // SAFETY: `i` < length of a STRSXP; its elements are
                    // CHARSXPs whose R_CHAR is NUL-terminated.
                    unsafe {
                        let c = rapi::STRING_ELT(names, i as isize);
                        c != rapi::R_NaString
                            && std::ffi::CStr::from_ptr(rapi::R_CHAR(c)).to_bytes() == name.as_bytes()
                    }
                })
            })
            .flatten();
        // SAFETY: `i` < length of a list; reading an element does not
        // allocate.
        Ok(found.map(|i| unsafe { rapi::VECTOR_ELT(self.sexp, i as isize) }))
    }

    /// Field `name` of this list, if there is one; an error if this is not
    /// a list.
    pub fn find(&self, name: &'static str) -> Result<Option<Arg>> {
        Ok(self.element(name)?.map(|sexp| Arg { sexp, name: Name::one(name) }))
    }

    /// Column `column` of this list's table `table` (a list), if there is
    /// one, named `table$column`; an error if there is no table `table`
    /// (naming it as [`Arg::field`] does) or something is not a list.
    pub fn find_column(&self, table: &'static str, column: &'static str) -> Result<Option<Arg>> {
        let t = self.find(table)?.ok_or_else(|| self.missing(table))?;
        Ok(t.element(column)?.map(|sexp| Arg { sexp, name: Name { first: table, then: Some(column) } }))
    }

    /// The element of a named list at `path`: a name, or names joined by
    /// `$` for lists inside lists (`"functions$label"`), found by name (the
    /// first element of that name), whatever the order. The element is an
    /// argument named after its path; a missing one is a `BadArgument`
    /// error naming the path.
    pub fn field(&self, path: &'static str) -> Result<Arg> {
        let mut at = *self;
        let mut end = 0;
        for part in path.split('$') {
            end += part.len();
            let Some(sexp) = at.element(part)? else {
                return Err(self.missing(&path[..end]));
            };
            at = Arg { sexp, name: Name::one(&path[..end]) };
            end += 1; // the `$` before the next part
        }
        Ok(at)
    }

    /// The addresses of the elements of a list (for identity comparisons).
    /// (A list, or a pairlist as `sys.frames()` and `sys.calls()` return
    /// them, NULL when empty: no copy made by `as.list()` first.)
    /// For each element (a list's or a pairlist's), the head of the call it
    /// is, as `call_head_key()` in R/add_trace_back.R compares them:
    /// symbols (interned, so compared by address), `pkg::fn`/`pkg:::fn`,
    /// anything else as an inlined function; `<fn>`, rlang's stand-in
    /// for an inlined function, counts as one.
    pub fn call_heads(&self) -> Result<Vec<CallHead>> {
        let symbols = HeadSymbols {
            inlined: rapi::sym_addr(c"<fn>"),
            exported: rapi::sym_addr(c"::"),
            internal: rapi::sym_addr(c":::"),
        };
        Ok(self
            .element_addrs()?
            .into_iter()
            // SAFETY: each is an element of the live argument; reading
            // types, CAR/CDR and lengths does not allocate.
            .map(|x| unsafe { call_head(x as rapi::Sexp, &symbols) })
            .collect())
    }

    pub fn element_addrs(&self) -> Result<Vec<usize>> {
        let (kind, n) = self.shape();
        match kind {
            rapi::NILSXP => Ok(Vec::new()),
            rapi::VECSXP => Ok((0..n)
                .map(|i| {
                    // SAFETY: `i` < length of a list; reading elements does
                    // not allocate.
                    unsafe { rapi::VECTOR_ELT(self.sexp, i as isize) as usize }
                })
                .collect()),
            rapi::LISTSXP => {
                let mut out = Vec::with_capacity(n);
                let mut cell = self.sexp;
                // SAFETY: a pairlist of `n` cells (its length, counted by R),
                // each read with CAR and CDR, which do not allocate.
                unsafe {
                    while out.len() < n && rapi::TYPEOF(cell) == rapi::LISTSXP {
                        out.push(rapi::CAR(cell) as usize);
                        cell = rapi::CDR(cell);
                    }
                }
                Ok(out)
            }
            _ => Err(self.bad("a list")),
        }
    }

    /// The address an external pointer holds (R's `NativeSymbol` pointers
    /// hold a routine's address; the R side checks the class).
    pub fn external_addr(&self) -> Result<usize> {
        if self.shape().0 != rapi::EXTPTRSXP {
            return Err(self.bad("an external pointer"));
        }
        // SAFETY: an external pointer; reading its address does not allocate.
        Ok(unsafe { rapi::R_ExternalPtrAddr(self.sexp) } as usize)
    }
}

/// The head of a call, as compared when matching an rlang trace's rows to
/// the stack's frames (see [`Arg::call_heads`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CallHead {
    NotACall,
    Inlined,
    Symbol(usize),
    /// `pkg::fn` or `pkg:::fn` (`internal`), by the symbols' addresses.
    Namespaced {
        pkg: usize,
        fun: usize,
        internal: bool,
    },
}

/// The addresses of the symbols call heads are told apart by.
struct HeadSymbols {
    /// `<fn>`, rlang's stand-in for an inlined function.
    inlined: usize,
    /// `::`.
    exported: usize,
    /// `:::`.
    internal: usize,
}

/// # Safety
/// `x` is a live R object; R's main thread.
unsafe fn call_head(x: rapi::Sexp, symbols: &HeadSymbols) -> CallHead {
    // SAFETY: the caller's contract; only types, CAR/CDR and lengths are read.
    unsafe {
        if rapi::TYPEOF(x) != rapi::LANGSXP {
            return CallHead::NotACall;
        }
        let head = rapi::CAR(x);
        match rapi::TYPEOF(head) {
            rapi::SYMSXP if head as usize == symbols.inlined => CallHead::Inlined,
            rapi::SYMSXP => CallHead::Symbol(head as usize),
            rapi::LANGSXP if rapi::Rf_xlength(head) == 3 => {
                let op = rapi::CAR(head) as usize;
                let (pkg, fun) = (rapi::CAR(rapi::CDR(head)), rapi::CAR(rapi::CDR(rapi::CDR(head))));
                let plain = rapi::TYPEOF(pkg) == rapi::SYMSXP && rapi::TYPEOF(fun) == rapi::SYMSXP;
                if plain && (op == symbols.exported || op == symbols.internal) {
                    CallHead::Namespaced {
                        pkg: pkg as usize,
                        fun: fun as usize,
                        internal: op == symbols.internal,
                    }
                } else {
                    CallHead::Inlined
                }
            }
            _ => CallHead::Inlined,
        }
    }
}
