/*
 * fuzz_input.h — what the libFuzzer targets share: the failure macro and the
 * reader that turns the input into operation bytes (missing bytes read as 0).
 * Define FUZZ_NAME (a string) before including it.
 */
#ifndef VMAP_FUZZ_INPUT_H
#define VMAP_FUZZ_INPUT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define FAIL(...)                                                                   \
	do {                                                                        \
		fprintf(stderr, FUZZ_NAME ": FAIL: " __VA_ARGS__);                  \
		fputc('\n', stderr);                                                \
		abort();                                                            \
	} while (0)

struct in {
	const uint8_t *d;
	size_t n, i;
};

static inline uint8_t u8(struct in *in)
{
	return in->i < in->n ? in->d[in->i++] : 0;
}

static inline uint32_t u24(struct in *in)
{
	uint32_t a = u8(in), b = u8(in), c = u8(in);
	return a | b << 8 | c << 16;
}

#endif
