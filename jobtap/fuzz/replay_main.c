/************************************************************\
 * flux-quantum: run the fuzz target on files, without libFuzzer.
 *
 * Where clang's libFuzzer is missing, build_fuzz.py links this main
 * with gcc's ASan/UBSan instead: it replays the seed corpus and the
 * regressions (each file once), so they still run under sanitizers.
 *
 * SPDX-License-Identifier: LGPL-3.0
\************************************************************/

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput (const uint8_t *data, size_t size);

static int replay (const char *path)
{
    FILE *f = fopen (path, "rb");
    uint8_t *data = NULL;
    size_t size = 0;
    size_t n;
    uint8_t buf[4096];

    if (!f) {
        perror (path);
        return -1;
    }
    while ((n = fread (buf, 1, sizeof (buf), f)) > 0) {
        uint8_t *more = realloc (data, size + n);
        if (!more) {
            free (data);
            fclose (f);
            return -1;
        }
        data = more;
        for (size_t i = 0; i < n; i++)
            data[size + i] = buf[i];
        size += n;
    }
    fclose (f);
    LLVMFuzzerTestOneInput (data ? data : buf, size);
    free (data);
    return 0;
}

int main (int argc, char *argv[])
{
    int rc = 0;

    for (int i = 1; i < argc; i++) {
        if (replay (argv[i]) < 0)
            rc = 1;
    }
    printf ("replayed %d inputs\n", argc - 1);
    return rc;
}

/* vi: ts=4 sw=4 expandtab
 */
