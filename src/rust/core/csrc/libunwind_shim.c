/* Local unwinding with the system libunwind.
 *
 * libunwind's API names (unw_getcontext, unw_step, ...) are macros that expand to
 * architecture-specific symbols, and unw_getcontext must run in the frame being
 * unwound, so the whole walk lives here in C and Rust only sees plain arrays. */
#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include <stdint.h>
#include <stddef.h>

/* Fills ip[], sp[] (and start[] when non-NULL: the start of each frame's
 * procedure from its unwind info, 0 if unknown) for up to `max` frames,
 * innermost first. Frame 0 is this function. Returns the number of frames;
 * *status is 0 when the outermost frame was reached, 1 when the buffer filled
 * up, and a negative libunwind error code when unwinding failed. */
int winch_unw_capture(uintptr_t *ip, uintptr_t *sp, uintptr_t *start,
                      unsigned char *signal, int max, int *status) {
  unw_context_t uc;
  unw_cursor_t cursor;
  int n = 0;

  if (unw_getcontext(&uc) != 0) {
    *status = -10000;
    return 0;
  }
  if (unw_init_local(&cursor, &uc) != 0) {
    *status = -10001;
    return 0;
  }
  for (;;) {
    unw_word_t vip = 0, vsp = 0;
    int step;
    if (n >= max) {
      *status = 1;
      return n;
    }
    if (unw_get_reg(&cursor, UNW_REG_IP, &vip) != 0 ||
        unw_get_reg(&cursor, UNW_REG_SP, &vsp) != 0) {
      *status = -10002;
      return n;
    }
    ip[n] = (uintptr_t) vip;
    sp[n] = (uintptr_t) vsp;
    signal[n] = unw_is_signal_frame(&cursor) > 0;
    if (start != NULL) {
      unw_proc_info_t pi;
      start[n] = unw_get_proc_info(&cursor, &pi) == 0 ? (uintptr_t) pi.start_ip : 0;
    }
    n++;
    step = unw_step(&cursor);
    if (step == 0) {
      *status = 0;
      return n;
    }
    if (step < 0) {
      *status = step;
      return n;
    }
  }
}
