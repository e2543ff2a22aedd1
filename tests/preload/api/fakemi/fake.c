/* A libmimalloc.so.2 without mimalloc's functions: VMAPALLOC_BACKEND=mimalloc
 * must say in one line that it cannot use it and run with the default. */
int fake_mimalloc_marker(void);
int fake_mimalloc_marker(void)
{
	return 42;
}
