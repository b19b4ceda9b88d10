! Fortran test library for source locations: a Fortran subroutine in the
! middle of a round trip R -> C (wfl_call) -> Fortran (wtest_fsub) ->
! C (wfl_callback) -> R.
! The subroutine has a name no other library exports: flib.f90's `fsub`
! (bind(C, name = "fsub")) is bound by the dynamic linker to glibc's C23
! fsub() in libm (glibc >= 2.35), so fl_call() never reaches the Fortran code.
subroutine wtest_fsub(n) bind(C, name = "wtest_fsub")
  use iso_c_binding
  implicit none
  integer(c_int), value :: n
  interface
    subroutine wfl_callback(n) bind(C, name = "wfl_callback")
      use iso_c_binding
      integer(c_int), value :: n
    end subroutine
  end interface
  call wfl_callback(n + 1) ! @line:fortran_call
end subroutine wtest_fsub
