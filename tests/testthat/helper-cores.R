# Core files read and damaged byte by byte for the tests of winch_dump(core =)
# (x86_64 ELF cores, as the kernel and gdb's gcore write them).

# Little-endian unsigned integers at byte `at` (0-based) of raw vector `raw`,
# as doubles (addresses fit: below 2^53).
core_u64 <- function(raw, at) {
  w <- readBin(raw[at + 1:8], "integer", n = 2L, size = 4L, endian = "little")
  w[w < 0] <- w[w < 0] + 2^32
  w[[1L]] + w[[2L]] * 2^32
}
core_u32 <- function(raw, at) {
  w <- readBin(raw[at + 1:4], "integer", n = 1L, size = 4L, endian = "little")
  if (w < 0) w + 2^32 else w
}
core_u16 <- function(raw, at) readBin(raw[at + 1:2], "integer", n = 1L, size = 2L, signed = FALSE, endian = "little")
core_u64_raw <- function(x) {
  half <- function(v) as.integer(if (v >= 2^31) v - 2^32 else v)
  writeBin(c(half(x %% 2^32), half(x %/% 2^32)), raw(), size = 4L, endian = "little")
}

core_read_at <- function(path, offset, n) {
  con <- file(path, "rb")
  on.exit(close(con))
  seek(con, offset)
  readBin(con, "raw", n)
}
core_write_at <- function(path, offset, bytes) {
  con <- file(path, "r+b")
  on.exit(close(con))
  seek(con, offset, rw = "write")
  writeBin(bytes, con)
}

# A core's program headers (type, offset, vaddr, filesz), its threads'
# registers (tid, rip, rsp, rbp: from NT_PRSTATUS) and its pid (NT_PRPSINFO).
core_layout <- function(path) {
  eh <- core_read_at(path, 0, 64)
  phnum <- core_u16(eh, 56)
  ph <- core_read_at(path, core_u64(eh, 32), 56 * phnum)
  at <- 56 * (seq_len(phnum) - 1L)
  field <- function(off, f = core_u64) vapply(at, function(a) f(ph, a + off), 0)
  ph <- data.frame(type = field(0, core_u32), offset = field(8), vaddr = field(16), filesz = field(32))
  note <- ph[ph$type == 4, ][1L, ]
  notes <- core_read_at(path, note$offset, note$filesz)
  threads <- NULL
  pid <- NA
  at <- 0
  while (at + 12 <= length(notes)) {
    namesz <- core_u32(notes, at)
    descsz <- core_u32(notes, at + 4)
    kind <- core_u32(notes, at + 8)
    d <- at + 12 + ceiling(namesz / 4) * 4
    if (kind == 1) { # NT_PRSTATUS: pr_pid at 32, user_regs_struct at 112
      reg <- function(i) core_u64(notes, d + 112 + 8 * i)
      threads <- rbind(threads, data.frame(tid = core_u32(notes, d + 32), rip = reg(16), rsp = reg(19), rbp = reg(4)))
    }
    if (kind == 3) pid <- core_u32(notes, d + 24) # NT_PRPSINFO: pr_pid
    at <- d + ceiling(descsz / 4) * 4
  }
  list(ph = ph, threads = threads, pid = pid)
}

# Where the main thread's stack is in the core file: bytes [from, to) from
# `below` bytes under its stack pointer to the end of its segment, the
# address of `from`, and the thread's registers.
core_main_stack <- function(path, below = 0) {
  l <- core_layout(path)
  main <- l$threads[l$threads$tid == l$pid, ][1L, ]
  seg <- l$ph[l$ph$type == 1 & l$ph$vaddr <= main$rsp & main$rsp < l$ph$vaddr + l$ph$filesz, ][1L, ]
  # (Once, under R CMD check on R 4.2, no stack was found in a core winch
  # had just read whole: say what the core held, to find why.)
  if (is.na(seg$offset)) {
    stop(sprintf(
      "no segment of core %s (%.0f bytes) holds the main thread's stack: pid %s; threads %s; %d load segments, %d notes segments",
      path, file.size(path), l$pid,
      paste(sprintf("%s sp=%s", l$threads$tid, format(l$threads$rsp, scientific = FALSE)), collapse = ", "),
      sum(l$ph$type == 1), sum(l$ph$type == 4)
    ))
  }
  addr <- max(main$rsp - below, seg$vaddr)
  addr <- addr - addr %% 16
  list(from = seg$offset + (addr - seg$vaddr), to = seg$offset + seg$filesz, addr = addr, main = main)
}

# Damaged copies of core file `path` (each a new temporary file, removed
# when `frame` ends).
damaged_core <- function(path, frame = parent.frame()) {
  out <- withr::local_tempfile(pattern = "damaged-core-", .local_envir = frame)
  file.copy(path, out)
  out
}
# Its first `share` of bytes, as a copy or download cut short leaves it.
core_cut <- function(path, share, frame = parent.frame()) {
  out <- withr::local_tempfile(pattern = "cut-core-", .local_envir = frame)
  writeBin(core_read_at(path, 0, floor(file.size(path) * share)), out)
  out
}
# The main thread's stack zeroed from just under its stack pointer up.
core_zeroed_stack <- function(path, frame = parent.frame()) {
  out <- damaged_core(path, frame)
  s <- core_main_stack(path, below = 128)
  core_write_at(out, s$from, raw(s$to - s$from))
  out
}
# The main thread's stack made to loop: every 16-byte slot holds its own
# address (a saved frame pointer pointing to itself) and the thread's
# instruction pointer (a return address to the same frame).
core_looping_stack <- function(path, frame = parent.frame()) {
  out <- damaged_core(path, frame)
  s <- core_main_stack(path)
  n <- (s$to - s$from) %/% 16
  slots <- s$addr + 16 * (seq_len(n) - 1L)
  core_write_at(out, s$from, unlist(lapply(slots, function(a) c(core_u64_raw(a), core_u64_raw(s$main$rip)))))
  out
}
# `flips` random bits of the main thread's stack (its first 64 KiB from the
# stack pointer) flipped, by seed.
core_bitflipped <- function(path, seed, flips = 16L, frame = parent.frame()) {
  out <- damaged_core(path, frame)
  s <- core_main_stack(path)
  withr::with_seed(seed, {
    at <- s$from + sample.int(min(65536, s$to - s$from), flips) - 1
    bit <- sample.int(8L, flips, replace = TRUE) - 1L
  })
  for (k in seq_along(at)) {
    b <- as.integer(core_read_at(out, at[[k]], 1L))
    core_write_at(out, at[[k]], as.raw(bitwXor(b, bitwShiftL(1L, bit[[k]]))))
  }
  out
}
