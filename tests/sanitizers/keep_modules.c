/* Preloaded into sanitized test runs (Makefile, SAN_ENV): dlclose does nothing, so Open MPI's plugins stay
 * mapped until LeakSanitizer reports at exit. A leak allocated in an unloaded plugin has only unknown frames,
 * which no suppression can name; Open MPI 4.1 has no setting that keeps its plugins loaded. */
int dlclose(void *handle) {
  (void)handle;
  return 0;
}
