/*
 * bcryptprimitives.dll with just ProcessPrng, for running Windows test
 * binaries under Debian 12's wine 8, whose bcryptprimitives.dll lacks it.
 * Rust's std (1.78 and later) imports ProcessPrng for its random seeds
 * (HashMap's keys); without it a test .exe exits at once (code 53).
 * Built by .ci/platforms.sh with mingw and put next to the test .exe, where
 * the loader finds it before wine's own. RtlGenRandom (SystemFunction036 in
 * advapi32) is the older call wine has; it fills at most 4 GiB per call.
 */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T len) {
    while (len > 0) {
        ULONG n = len > 0x80000000u ? 0x80000000u : (ULONG)len;
        if (!SystemFunction036(data, n))
            return FALSE;
        data += n;
        len -= n;
    }
    return TRUE;
}
