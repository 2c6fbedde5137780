/* A stand-in for Windows's bcryptprimitives.dll for Wine 8 (Debian 12),
 * which lacks it. The Go runtime (1.22 and later) loads ProcessPrng from
 * it at start and stops if it is missing. Built by `make wine-test` with
 * mingw-w64 and copied into the test's private Wine prefix only; it is
 * never installed on a user's machine. ProcessPrng fills the buffer from
 * RtlGenRandom (advapi32's SystemFunction036), Wine's system generator. */
#include <windows.h>

BOOLEAN WINAPI SystemFunction036(PVOID buffer, ULONG length);

__declspec(dllexport) BOOL WINAPI ProcessPrng(PBYTE data, SIZE_T size)
{
	while (size > 0) {
		ULONG n = size > 0x40000000 ? 0x40000000 : (ULONG)size;
		if (!SystemFunction036(data, n))
			return FALSE;
		data += n;
		size -= n;
	}
	return TRUE;
}
