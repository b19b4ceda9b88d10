#!/bin/sh
# README command 1: install what is missing, build and install winch, and run
# the demo (a round trip R -> native -> R -> native -> R, traced).
set -e
. "$(dirname "$0")/env.sh"
cd "$ROOT"
sh tools/deps.sh
R CMD INSTALL --preclean .
Rscript -e 'demo("joint-trace", package = "winch", ask = FALSE, echo = FALSE)'
