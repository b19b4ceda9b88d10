library(testthat)
library(winch)

test_check("winch")
