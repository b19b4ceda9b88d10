crash_report_rearm <- function() invisible()
crash_report_at_load <- function() invisible()
crash_report_off_at_unload <- function() invisible()
