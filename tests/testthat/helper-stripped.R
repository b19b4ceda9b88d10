# Fixtures built as installed binaries are: hidden visibility, routines
# registered with R, stripped (tests of test-names-stripped.R and
# test-names-debuginfod.R).
# The unstripped copy is kept aside as `<dir>/unstripped.so`.

# Builds clib/stripped.c as library `name` (its R_init_<name> registers
# st_entry), keeps an unstripped copy, then runs `prepare(lib)` on the
# library file (strip it, add sections, ...) and loads it.
prepared_lib <- function(name, prepare) {
  lib <- build_fixture(
    name, "stripped.c",
    flags = "-g -O2 -fvisibility=hidden",
    prelude = sprintf("#define INIT_NAME R_init_%s", name)
  )
  lib$unstripped <- file.path(lib$dir, "unstripped.so")
  file.copy(lib$path, lib$unstripped)
  prepare(lib)
  load_fixture(lib)
}

stripped_lib <- function(name = "wtest_stripped") {
  prepared_lib(name, function(lib) run_tool("strip", c("--strip-all", shQuote(lib$path))))
}

# MiniDebugInfo as Fedora's builds make it (the recipe of gdb's manual): the
# function symbols that .dynsym lacks, in an ELF file of their own,
# xz-compressed into section .gnu_debugdata of the stripped library.
minidebug_lib <- function(name = "wtest_minidebug") {
  prepared_lib(name, function(lib) {
    script <- paste(
      "set -e",
      "nm -D \"$1\" --format=posix --defined-only | awk '{ print $1 }' | sort > dynsyms",
      "nm \"$1\" --format=posix --defined-only | awk '{ if ($2 == \"T\" || $2 == \"t\" || $2 == \"D\") print $1 }' | sort > funcsyms",
      "comm -13 dynsyms funcsyms > keep_symbols",
      "objcopy --only-keep-debug \"$1\" debug",
      "objcopy -S --remove-section .gdb_index --remove-section .comment --keep-symbols=keep_symbols debug mini_debuginfo",
      "strip --strip-all -R .comment \"$1\"",
      "xz mini_debuginfo",
      "objcopy --add-section .gnu_debugdata=mini_debuginfo.xz \"$1\"",
      sep = "\n"
    )
    writeLines(script, file.path(lib$dir, "minidebug.sh"))
    run_tool("sh", c("minidebug.sh", shQuote(lib$path)), wd = lib$dir)
  })
}

# Address of `symbol` in the symbol table of the ELF file `path` (nm), as a
# number; NA when it is not there.
nm_address <- function(path, symbol) {
  out <- run_tool("nm", shQuote(path))
  hit <- grep(paste0(" [TtWw] ", symbol, "$"), out, value = TRUE)
  if (length(hit) != 1L) {
    return(NA_real_)
  }
  as.numeric(paste0("0x", sub(" .*", "", hit)))
}

# The .Call routine `name` of a fixture whose DLL forces symbols.
routine <- function(lib, name) {
  getNativeSymbolInfo(name, PACKAGE = lib$dll)
}
