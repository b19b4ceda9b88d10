/* Offsets of the fields of R's RCNTXT (src/include/Defn.h) that winch reads,
 * as this platform's C compiler lays them out: everything after `cjmpbuf`
 * moves with sizeof(sigjmp_buf), so the offsets are taken from the compiler
 * rather than written down by hand.
 *
 * The prefix up to `cloenv` is the same from R 3.6 to 4.6. The byte-code
 * fields after it (`bcintactive`, `bcbody`, `bcpc`) are the same from R 4.0
 * on; R 4.4 added `relpc` right after `bcpc` and `bcframe` after `bcprottop`
 * (which moves `srcref`). Two mirrors describe the two layouts; the Rust side
 * picks one by R's version and validates what it reads against sys.frames()
 * and the C stack before trusting it. */
#include <setjmp.h>
#include <stddef.h>

#define WINCH_RCNTXT_PREFIX                                                    \
  void *nextcontext;                                                           \
  int callflag;                                                                \
  sigjmp_buf cjmpbuf;                                                          \
  int cstacktop;                                                               \
  int evaldepth;                                                               \
  void *promargs;                                                              \
  void *callfun;                                                               \
  void *sysparent;                                                             \
  void *call;                                                                  \
  void *cloenv;                                                                \
  void *conexit;                                                               \
  void (*cend)(void *);                                                        \
  void *cenddata;                                                              \
  void *vmax;                                                                  \
  int intsusp;                                                                 \
  int gcenabled;                                                               \
  int bcintactive;                                                             \
  void *bcbody;                                                                \
  void *bcpc;

/* R 4.0 to 4.3 */
struct winch_rcntxt_40 {
  WINCH_RCNTXT_PREFIX
  void *handlerstack;
  void *restartstack;
  void *prstack;
  void *nodestack;
  void *bcprottop;
  void *srcref;
};

/* R 4.4 to 4.6 */
struct winch_rcntxt_44 {
  WINCH_RCNTXT_PREFIX
  ptrdiff_t relpc;
  void *handlerstack;
  void *restartstack;
  void *prstack;
  void *nodestack;
  void *bcprottop;
  void *bcframe;
  void *srcref;
};

#define WINCH_LAYOUT(T, out, relpc)                                            \
  do {                                                                         \
    out[0] = offsetof(struct T, nextcontext);                                  \
    out[1] = offsetof(struct T, callflag);                                     \
    out[2] = offsetof(struct T, evaldepth);                                    \
    out[3] = offsetof(struct T, callfun);                                      \
    out[4] = offsetof(struct T, sysparent);                                    \
    out[5] = offsetof(struct T, call);                                         \
    out[6] = offsetof(struct T, cloenv);                                       \
    out[7] = offsetof(struct T, bcintactive);                                  \
    out[8] = offsetof(struct T, bcbody);                                       \
    out[9] = offsetof(struct T, bcpc);                                         \
    out[10] = (relpc);                                                         \
    out[11] = offsetof(struct T, srcref);                                      \
    out[12] = offsetof(struct T, srcref) + sizeof(void *);                     \
  } while (0)

/* out (13 values): nextcontext, callflag, evaldepth, callfun, sysparent,
 * call, cloenv, bcintactive, bcbody, bcpc, relpc (or (size_t) -1 where the
 * field does not exist), srcref, and the size of the part read.
 * `variant` 40 or 44; returns 0 for an unknown variant. */
int winch_rcontext_layout(int variant, size_t *out) {
  switch (variant) {
  case 40:
    WINCH_LAYOUT(winch_rcntxt_40, out, (size_t) -1);
    return 1;
  case 44:
    WINCH_LAYOUT(winch_rcntxt_44, out, offsetof(struct winch_rcntxt_44, relpc));
    return 1;
  default:
    return 0;
  }
}
