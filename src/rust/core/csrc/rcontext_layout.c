/* The stable prefix of R's RCNTXT (src/include/Defn.h, unchanged from R 3.6 to
 * 4.5). Only the fields up to `cloenv` are read. The offset of everything after
 * `cjmpbuf` depends on the platform's sigjmp_buf, which is why the offsets are
 * taken from the C compiler rather than written down by hand. They are still
 * validated at run time against sys.frames() before they are trusted. */
#include <setjmp.h>
#include <stddef.h>

struct winch_rcntxt_prefix {
  struct winch_rcntxt_prefix *nextcontext;
  int callflag;
  sigjmp_buf cjmpbuf;
  int cstacktop;
  int evaldepth;
  void *promargs;
  void *callfun;
  void *sysparent;
  void *call;
  void *cloenv;
};

/* out: nextcontext, callflag, evaldepth, callfun, sysparent, call, cloenv, size */
void winch_rcontext_layout(size_t *out) {
  out[0] = offsetof(struct winch_rcntxt_prefix, nextcontext);
  out[1] = offsetof(struct winch_rcntxt_prefix, callflag);
  out[2] = offsetof(struct winch_rcntxt_prefix, evaldepth);
  out[3] = offsetof(struct winch_rcntxt_prefix, callfun);
  out[4] = offsetof(struct winch_rcntxt_prefix, sysparent);
  out[5] = offsetof(struct winch_rcntxt_prefix, call);
  out[6] = offsetof(struct winch_rcntxt_prefix, cloenv);
  out[7] = sizeof(struct winch_rcntxt_prefix);
}
