/* The C API from plain C, built with pkg-config's flags against the installed hostrt. */
#include <hostrt/hostrt.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  void *a = NULL, *b = NULL;
  if (hrtMallocHost(&a, 64) || hrtMallocHost(&b, 64)) {
    fprintf(stderr, "%s\n", hrtGetLastErrorMessage());
    return 1;
  }
  memset(a, 0x33, 64);
  if (hrtMemcpy(hrtDevicePtr(0), a, 64, hrtMemcpyHostToDevice) ||
      hrtMemcpy(b, hrtDevicePtr(0), 64, hrtMemcpyDeviceToHost)) {
    fprintf(stderr, "%s\n", hrtGetLastErrorMessage());
    return 1;
  }
  int ok = memcmp(a, b, 64) == 0;
  hrtFreeHost(a);
  hrtFreeHost(b);
  return ok ? 0 : 1;
}
