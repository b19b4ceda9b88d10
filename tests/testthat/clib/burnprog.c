/* A program that burns CPU time for argv[1] seconds of its own CPU time
 * in burn_spin() (under main()), then exits with status 7: what the
 * profile tests run with system2(). */
#include <stdlib.h>
#include <time.h>

__attribute__((noinline)) double burn_spin(double seconds)
{
    volatile double x = 0;
    clock_t end = clock() + (clock_t)(seconds * CLOCKS_PER_SEC);
    while (clock() < end)
        for (int i = 0; i < 100000; i++)
            x += i * 1e-9;
    return x;
}

int main(int argc, char **argv)
{
    burn_spin(argc > 1 ? atof(argv[1]) : 0.5);
    return 7;
}
