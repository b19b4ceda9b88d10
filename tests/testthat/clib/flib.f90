! Fortran test library: a Fortran subroutine in the middle of a round trip.
! R -> C (fl_call) -> Fortran (fsub) -> C (fl_callback) -> R
subroutine fsub(n) bind(C, name = "fsub")
  use iso_c_binding
  implicit none
  integer(c_int), value :: n
  interface
    subroutine fl_callback(n) bind(C, name = "fl_callback")
      use iso_c_binding
      integer(c_int), value :: n
    end subroutine
  end interface
  call fl_callback(n + 1) ! @line:fortran_call
end subroutine fsub
