#' @keywords internal
#' @section Options:
#' * `winch.backend`: the unwinder used by default, `"auto"` (the default),
#'   `"cfi"`, `"libunwind"` or `"backtrace"`; see [winch_trace_back()].
#' * `winch.debug_dirs`: directories searched for separate debug files, as
#'   `<dir>/.build-id/xx/yyyy.debug` and for `.gnu_debuglink` targets
#'   (default `"/usr/lib/debug"`).
#' * `winch.use_contexts`: set to `FALSE` to place native frames without
#'   reading R's context chain (the fallback described in
#'   `vignette("winch")`), e.g. to compare.
#' * `rlang_trace_use_winch`: set to `TRUE` to have rlang's backtraces include
#'   native frames; see [winch_add_trace_back()].
"_PACKAGE"

## usethis namespace: start
#' @useDynLib winch, .registration = TRUE, .fixes = "C_"
#' @importFrom rlang abort
## usethis namespace: end
NULL
