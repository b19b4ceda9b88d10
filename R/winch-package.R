#' @keywords internal
"_PACKAGE"

## usethis namespace: start
#' @useDynLib winch, .registration = TRUE, .fixes = "C_"
#' @importFrom rlang abort
## usethis namespace: end
NULL
